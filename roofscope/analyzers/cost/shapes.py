"""Output shapes of the copy ops whose result is not the input's shape, as pure functions of the
recorded shapes and arguments (no torch: costing a trace must not import it, ~1-3 s of CPU).

Each function states the rule ATen's shape function applies and refuses (``ValueError``) what
torch refuses on a real device, so that a signature torch could not have run is never costed.
tests/test_shape_rules.py checks every rule against torch's meta kernels where torch is installed.
"""

from __future__ import annotations

import math

from roofscope.analyzers.model.trace import INT64_MAX

Shape = tuple[int, ...]


def holdable(shape: Shape) -> Shape:
    """``shape``, or ValueError when no tensor has it: a dim or the element count past int64
    (torch refuses such a size; its FLOPs and bytes would pass any float's range)."""
    if not all(abs(d) <= INT64_MAX for d in shape) or abs(math.prod(shape)) > INT64_MAX:
        raise ValueError(f"shape {shape} past int64")
    return shape


def _int(value: object, what: str) -> int:
    """A recorded int, else ValueError: torch refuses floats, bools and None where it takes ints."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{what} is not an int: {value!r}")
    return value


def _ints(values: object, what: str) -> list[int]:
    """A recorded int list (Kineto's ``[2, 2]``), else ValueError."""
    if not isinstance(values, (list, tuple)):
        raise ValueError(f"{what} is not a list: {values!r}")
    return [_int(v, what) for v in values]


def wrap_dim(dim: object, ndim: int, *, scalar: bool = True) -> int:
    """``dim`` in ``[-ndim, ndim)`` as a non-negative index; a 0-d tensor accepts 0 and -1 where
    ``scalar`` (most ops; ``roll`` takes no dim of it)."""
    d = _int(dim, "dim")
    n = max(ndim, 1) if scalar else ndim
    if not -n <= d < n:
        raise ValueError(f"dim {d} out of range for {ndim} dims")
    return d % n


def repeat(shape: Shape, repeats: object) -> Shape:
    """``repeat``: ``shape`` padded with leading 1s to ``len(repeats)`` dims, times ``repeats``
    dim by dim. ``repeats`` may not be shorter than ``shape`` nor negative."""
    r = _ints(repeats, "repeats")
    if len(r) < len(shape) or any(v < 0 for v in r):
        raise ValueError(f"repeats {r} for shape {shape}")
    padded = (1,) * (len(r) - len(shape)) + tuple(shape)
    return holdable(tuple(s * v for s, v in zip(padded, r)))


def flip(shape: Shape, dims: object) -> Shape:
    """``flip``: ``shape`` unchanged; each of ``dims`` a valid dim, none twice."""
    d = [wrap_dim(v, len(shape)) for v in _ints(dims, "dims")]
    if len(set(d)) != len(d):
        raise ValueError(f"duplicate dims {dims}")
    return tuple(shape)


def roll(shape: Shape, shifts: object, dims: object) -> Shape:
    """``roll``: ``shape`` unchanged; one shift per dim of ``dims`` (valid dims, repeats allowed),
    or one shift and no dims (the flattened tensor)."""
    s = _ints(shifts, "shifts")
    d = _ints(dims, "dims")
    if not s or len(s) != max(len(d), 1):
        raise ValueError(f"shifts {s} and dims {d} do not align")
    for v in d:
        wrap_dim(v, len(shape), scalar=False)
    return tuple(shape)


def triangle(shape: Shape) -> Shape:
    """``tril`` / ``triu``: ``shape`` unchanged, at least 2 dims (the last two hold the matrices)."""
    if len(shape) < 2:
        raise ValueError(f"tril/triu of a {len(shape)}-d tensor")
    return tuple(shape)


def narrow(shape: Shape, dim: object, start: object, length: object) -> Shape:
    """``narrow_copy``: ``shape`` with ``shape[dim] = length``; ``start`` in ``[-size, size]``
    (negative counts from the end) and ``start + length <= size``."""
    if not shape:
        raise ValueError("narrow of a 0-d tensor")
    d = wrap_dim(dim, len(shape))
    first, n = _int(start, "start"), _int(length, "length")
    size = shape[d]
    if -size <= first < 0:
        first += size
    if n < 0 or not 0 <= first <= size or first + n > size:
        raise ValueError(f"narrow({d}, {start}, {length}) of size {size}")
    return (*shape[:d], n, *shape[d + 1:])


def _pad_pairs(shape: Shape, pad: list[int]) -> list[tuple[int, int, int]]:
    """(dim, before, after) per padded dim: ``pad`` lists the last dim's pair first."""
    return [(len(shape) - 1 - i, pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)]


def constant_pad(shape: Shape, pad: object) -> Shape:
    """``constant_pad_nd``: ``pad`` holds (before, after) pairs for the last dims, the last dim's
    first; each padded dim grows by its pair. Negative amounts crop, the before crop first: neither
    crop may exceed what is left of the dim."""
    p = _ints(pad, "pad")
    if len(p) % 2 or len(p) // 2 > len(shape):
        raise ValueError(f"pad {p} for shape {shape}")
    out = list(shape)
    for d, before, after in _pad_pairs(shape, p):
        size = shape[d]
        for amount in (before, after):
            if amount < 0:
                if size + amount < 0:
                    raise ValueError(f"pad {p} crops dim {d} of {shape} below 0")
                size += amount
        out[d] = size + max(before, 0) + max(after, 0)
    return holdable(tuple(out))


def edge_pad(shape: Shape, padding: object, n: int, *, reflect: bool) -> Shape:
    """``reflection_pad{n}d`` / ``replication_pad{n}d``: ``padding`` holds 2·n amounts, (before,
    after) of the last dim first; the input has n + 1 dims, or n + 2 with a batch dim, all but the
    batch non-empty. A reflection pad must be smaller than its dim; no output dim may be negative,
    and the 1-d output must be non-empty (for 2-d, one of its two dims)."""
    p = _ints(padding, "padding")
    if len(p) != 2 * n or len(shape) not in (n + 1, n + 2) or 0 in shape[len(shape) - n - 1:]:
        raise ValueError(f"padding {p} for shape {shape}")
    out = list(shape)
    for d, before, after in _pad_pairs(shape, p):
        if reflect and (before >= shape[d] or after >= shape[d]):
            raise ValueError(f"reflection padding {p} not below dim {d} of {shape}")
        out[d] = shape[d] + before + after
    grown = out[len(shape) - n:]
    if min(grown) < 0 or max(grown) < 1:
        raise ValueError(f"padding {p} leaves shape {shape} empty")
    return holdable(tuple(out))


def upsample(shape: Shape, n: int, output_size: object, scale_factors: object = None) -> Shape:
    """``upsample_*{n}d``: (batch, channels) then ``output_size``, or, given ``scale_factors``
    instead (the ``.vec`` overloads; exactly one of the two), ``int(size · factor)`` for each of
    the n spatial dims. The input has n + 2 dims; its spatial dims and the output's are positive."""
    if (output_size is None) == (scale_factors is None):
        raise ValueError("exactly one of output_size and scale_factors")
    if len(shape) != n + 2:
        raise ValueError(f"{n}-d upsampling of shape {shape}")
    if output_size is not None:
        size = _ints(output_size, "output_size")
    else:
        factors = scale_factors if isinstance(scale_factors, (list, tuple)) else []
        if len(factors) != n or not all(isinstance(f, (int, float)) and not isinstance(f, bool) and math.isfinite(f)
                                        for f in factors):
            raise ValueError(f"scale_factors {scale_factors!r} for {n} dims")
        size = [int(s * f) for s, f in zip(shape[2:], factors)]  # ATen: a double product, truncated
    if len(size) != n or min(shape[2:]) <= 0 or min(size) <= 0:
        raise ValueError(f"upsampling {shape} to {size}")
    return holdable((*shape[:2], *size))


__all__ = ["Shape", "holdable", "wrap_dim", "repeat", "flip", "roll", "triangle", "narrow", "constant_pad",
           "edge_pad", "upsample"]
