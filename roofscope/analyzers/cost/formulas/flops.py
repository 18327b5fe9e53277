"""GEMM and convolution FLOP counts as pure functions of shapes (attention: :mod:`.attention`).

The same counts as ``torch.utils.flop_counter`` (torch 2.13),
written here so that costing a trace imports no torch and does not change with the
installed torch; tests/test_costmodel_schemas.py checks them against torch's registry.
Each function takes the arguments torch's formula takes (shapes, and ``out_val`` for the
output shapes), so :func:`.matmul._flop_fn` hands them out by torch's op name.
"""
from __future__ import annotations

from math import prod
from typing import Any, Callable, Sequence

Shape = Sequence[int]


def mm(a: Shape, b: Shape, *_: Any, out_val: Any = None) -> int:
    (m, k), (k2, n) = a, b
    if k != k2:
        raise ValueError(f"mm: inner dimensions {k} and {k2} differ")
    return m * n * 2 * k


def bmm(a: Shape, b: Shape, *_: Any, out_val: Any = None) -> int:
    (bt, m, k), (bt2, k2, n) = a, b
    if bt != bt2 or k != k2:
        raise ValueError(f"bmm: shapes {a} and {b} do not multiply")
    return bt * m * n * 2 * k


def addmm(_c: Shape, a: Shape, b: Shape, *_: Any, out_val: Any = None) -> int:
    return mm(a, b)  # the bias add is not counted


def baddbmm(_c: Shape, a: Shape, b: Shape, *_: Any, out_val: Any = None) -> int:
    return bmm(a, b)


def conv_count(x: Shape, w: Shape, out: Shape, transposed: bool = False) -> int:
    """Multiply-adds ×2 over the output points (input points when transposed); bias not counted."""
    c_out, c_in, *filt = w
    return prod((x if transposed else out)[2:]) * prod(filt) * x[0] * c_out * c_in * 2


def convolution(x: Shape, w: Shape, _bias: Any, _stride: Any, _padding: Any, _dilation: Any, transposed: bool,
                *_: Any, out_val: Shape) -> int:
    return conv_count(x, w, out_val, transposed)


def convolution_backward(go: Shape, x: Shape, w: Shape, _bias: Any, _stride: Any, _padding: Any, _dilation: Any,
                         transposed: bool, _output_padding: Any, _groups: Any, mask: Sequence[bool],
                         *_: Any, out_val: Sequence[Shape]) -> int:
    def t(s: Shape) -> list[int]:
        return [s[1], s[0], *s[2:]]

    flops = 0
    if mask[0]:  # grad_input: the transposed convolution of grad_output with the weight
        flops += conv_count(go, w, out_val[0], not transposed)
    if mask[1]:  # grad_weight: a convolution of the input with grad_output
        a, b = (go, x) if transposed else (x, go)
        flops += conv_count(t(a), t(b), t(out_val[1]), False)
    return flops


# by the aten op name torch.utils.flop_counter registers each formula under
FLOP_FORMULAS: dict[str, Callable[..., int]] = {
    "mm": mm, "addmm": addmm, "bmm": bmm, "baddbmm": baddbmm, "_scaled_mm": mm,
    "convolution": convolution, "convolution_backward": convolution_backward,
}
