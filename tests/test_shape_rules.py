"""The pure-Python output shapes of formulas/shapes.py against torch's meta kernels: the same shape
where torch runs the op, a refusal (ValueError) where it refuses."""
from __future__ import annotations

import itertools
import warnings
from typing import Any, Callable

import pytest

from roofscope.analyzers.cost import shapes

torch = pytest.importorskip("torch")
aten = torch.ops.aten


def _meta(shape: tuple[int, ...]) -> Any:
    return torch.empty(shape, device="meta")


def _torch_shape(fn: Callable[[], Any]) -> tuple[int, ...] | None:
    """The meta kernel's output shape, None where torch refuses the call."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return tuple(fn().shape)
    except (RuntimeError, IndexError, TypeError, ValueError):
        return None


def _ours(fn: Callable[[], tuple[int, ...]]) -> tuple[int, ...] | None:
    try:
        return fn()
    except ValueError:
        return None


def _agree(ours: Callable[[], tuple[int, ...]], theirs: Callable[[], Any], case: Any) -> None:
    assert _ours(ours) == _torch_shape(theirs), case


SHAPES = [(), (5,), (3, 4), (0, 4), (2, 3, 4), (2, 1, 3, 4)]


def test_repeat() -> None:
    for shape in SHAPES:
        for repeats in ([], [2], [0, 3], [2, 1, 2], [1, 2, 3, 4], [-1, 2], [2, 2, 2, 2, 2]):
            _agree(lambda: shapes.repeat(shape, repeats), lambda: aten.repeat.default(_meta(shape), repeats),
                   (shape, repeats))


def test_roll_and_flip() -> None:
    for shape in SHAPES:
        for dims in ([], [0], [-1], [0, 1], [1, -2], [0, 0], [2], [-3], [3]):
            _agree(lambda: shapes.flip(shape, dims),
                   lambda: aten.flip.default(_meta(shape), dims), ("flip", shape, dims))
            for shifts in ([], [1], [1, 2], [-1, 0, 3]) if 0 not in shape else ():  # meta skips an empty one's checks
                _agree(lambda: shapes.roll(shape, shifts, dims), lambda: aten.roll.default(_meta(shape), shifts, dims),
                       ("roll", shape, shifts, dims))


def test_tril_triu() -> None:
    for shape in SHAPES:
        _agree(lambda: shapes.triangle(shape), lambda: aten.tril.default(_meta(shape), 1), shape)
        _agree(lambda: shapes.triangle(shape), lambda: aten.triu.default(_meta(shape), -1), shape)


def test_narrow_copy() -> None:
    for shape in SHAPES:
        for dim, start, length in itertools.product((0, 1, -1, 2, -3), (0, 1, 3, 4, 5, -1, -4, -5), (0, 1, 3, -1)):
            _agree(lambda: shapes.narrow(shape, dim, start, length),
                   lambda: aten.narrow_copy.default(_meta(shape), dim, start, length), (shape, dim, start, length))


def test_constant_pad_nd() -> None:
    amounts = (0, 1, 3, -1, -2, -3, -4)
    for shape in SHAPES:
        for pad in itertools.chain([[], [1], [1, 1, 1]], itertools.product(amounts, repeat=2),
                                   ([a, b, c, d] for a, b, c, d in itertools.product((0, 2, -1, -3), repeat=4)),
                                   [[1] * 6, [1] * 8, [1] * 10]):
            pad = list(pad)
            _agree(lambda: shapes.constant_pad(shape, pad), lambda: aten.constant_pad_nd.default(_meta(shape), pad, 0),
                   (shape, pad))


@pytest.mark.parametrize("op, n, reflect", [("reflection_pad1d", 1, True), ("reflection_pad2d", 2, True),
                                            ("replication_pad2d", 2, False)])
def test_reflection_and_replication_pad(op: str, n: int, reflect: bool) -> None:
    fn = getattr(aten, op).default
    # n + 1 or n + 2 dims (torch's meta kernels give odd shapes for others, which F.pad never passes)
    inputs = [(3,) + (4,) * n, (2, 3) + (4,) * n, (0, 3) + (4,) * n, (3,) + (0,) * n, (2, 0) + (4,) * n,
              (2, 3) + (1,) * n]
    amounts = (0, 1, 3, 4, -1, -2, -3, -4) if n == 1 else (0, 1, 3, 4, -1, -4)  # 4: a 4-wide dim's size
    for shape in inputs:
        for pad in itertools.chain(itertools.product(amounts, repeat=2 * n), [(1,) * (2 * n + 2)]):
            pad = list(pad)
            _agree(lambda: shapes.edge_pad(shape, pad, n, reflect=reflect), lambda: fn(_meta(shape), pad),
                   (op, shape, pad))


_NEAREST = [("upsample_nearest1d", 1), ("upsample_nearest2d", 2), ("upsample_nearest3d", 3),
            ("_upsample_nearest_exact2d", 2)]
_LINEAR = [("upsample_linear1d", 1), ("upsample_bilinear2d", 2), ("upsample_trilinear3d", 3),
           ("upsample_bicubic2d", 2)]


@pytest.mark.parametrize("op, n", _NEAREST + _LINEAR)
def test_upsample(op: str, n: int) -> None:
    packet = getattr(aten, op)
    linear = (op, n) in _LINEAR
    # batch >= 1: torch 2.13's meta kernel of nearest upsampling refuses an empty batch that the
    # device kernels take; the linear ones check nothing on meta, so only valid calls are compared.
    inputs = [(2, 3) + (4,) * n, (1, 1) + (7,) * n] + ([] if linear else [(2, 3) + (0,) * n, (3,) + (4,) * n])
    sizes = [[5] * n, [1] * n, [8] * n] + ([] if linear else [[0] * n, [5] * (n + 1)])
    factors = [[2.0] * n, [1.7] * n, [0.5] * n, [3] * n] + ([] if linear else [[0.1] * n, [2.0] * (n + 1)])
    extra = (False,) if linear else ()
    for shape in inputs:
        for size in sizes:
            _agree(lambda: shapes.upsample(shape, n, size), lambda: packet.default(_meta(shape), size, *extra),
                   (op, shape, size))
            _agree(lambda: shapes.upsample(shape, n, size, None), lambda: packet.vec(_meta(shape), size, *extra, None),
                   (op, "vec", shape, size))
        for f in factors:
            _agree(lambda: shapes.upsample(shape, n, None, f), lambda: packet.vec(_meta(shape), None, *extra, f),
                   (op, "vec", shape, f))
        if not linear:  # exactly one of output_size and scale_factors
            _agree(lambda: shapes.upsample(shape, n, None, None), lambda: packet.vec(_meta(shape), None, None),
                   (op, shape))
            _agree(lambda: shapes.upsample(shape, n, [5] * n, [2.0] * n),
                   lambda: packet.vec(_meta(shape), [5] * n, [2.0] * n), (op, shape))


def test_non_int_arguments_are_refused() -> None:
    # Kineto's Concrete Inputs can hold floats or None where torch takes ints: no shape, like torch
    with pytest.raises(ValueError):
        shapes.repeat((2,), [2.0])
    with pytest.raises(ValueError):
        shapes.constant_pad((2, 3), None)
    with pytest.raises(ValueError):
        shapes.narrow((5,), 0, 1.0, 2)
    with pytest.raises(ValueError):
        shapes.upsample((1, 1, 4), 1, None, [float("inf")])
