"""Matrix multiplies and convolutions: FLOPs as torch.utils.flop_counter counts them (pure functions
of shapes in :mod:`.flops`; no torch import). Attention lives in :mod:`.attention`."""

from __future__ import annotations

from typing import Any, Callable

from roofscope.analyzers.cost.formulas.dtypes import DTYPE_BY_NAME, DType, dtype_from_code
from roofscope.analyzers.cost.formulas.flops import FLOP_FORMULAS
from roofscope.analyzers.cost.formulas.records import (UNKNOWN, Cost, MissingShapes, OpCall, TensorSpec, _bytes, _cost,
                                                       _outputs)
from roofscope.analyzers.cost.formulas.registry import register


def _flop_fn(op: str) -> Callable[..., int]:
    """FLOP formula of torch.utils.flop_counter's aten op ``op`` (the reference gemm/conv counts)."""
    return FLOP_FORMULAS[op]


def _out_dtype(call: OpCall, a: TensorSpec, pos: int | None = None) -> DType | None:
    return dtype_from_code(call.value("out_dtype", pos)) or a.dtype


@register("aten::mm", "aten::_int_mm", category="gemm")
def _mm(call: OpCall) -> Cost:
    a, b = call.need("self", 0), call.need("mat2", 1)
    int_mm = call.name == "aten::_int_mm"
    dt = DTYPE_BY_NAME["int32"] if int_mm else _out_dtype(call, a, 2)
    outs = _outputs(call, lambda: [TensorSpec((a.shape[0], b.shape[1]), dt)])
    return _cost(call, _flop_fn("mm")(a.shape, b.shape), outs, dtype="int8" if int_mm else None)


@register("aten::addmm", "aten::addmm_", "aten::_addmm_activation", category="gemm")
def _addmm(call: OpCall) -> Cost:
    c, a, b = call.need("self", 0), call.need("mat1", 1), call.need("mat2", 2)
    outs = _outputs(call, lambda: [TensorSpec((a.shape[0], b.shape[1]), _out_dtype(call, a, 3))])
    return _cost(call, _flop_fn("addmm")(c.shape, a.shape, b.shape), outs)


@register("aten::bmm", category="gemm")
def _bmm(call: OpCall) -> Cost:
    a, b = call.need("self", 0), call.need("mat2", 1)
    outs = _outputs(call, lambda: [TensorSpec((a.shape[0], a.shape[1], b.shape[2]), _out_dtype(call, a, 2))])
    return _cost(call, _flop_fn("bmm")(a.shape, b.shape), outs)


@register("aten::baddbmm", "aten::baddbmm_", category="gemm")
def _baddbmm(call: OpCall) -> Cost:
    c, a, b = call.need("self", 0), call.need("batch1", 1), call.need("batch2", 2)
    outs = _outputs(call, lambda: [TensorSpec((a.shape[0], a.shape[1], b.shape[2]), _out_dtype(call, a, 3))])
    return _cost(call, _flop_fn("baddbmm")(c.shape, a.shape, b.shape), outs)


@register("aten::_scaled_mm", category="gemm")
def _scaled_mm(call: OpCall) -> Cost:
    a, b = call.need("self", 0), call.need("mat2", 1)
    outs = _outputs(call, lambda: [TensorSpec((a.shape[0], b.shape[1]), _out_dtype(call, a, 6))])
    return _cost(call, _flop_fn("_scaled_mm")(a.shape, b.shape, None, None), outs)


# per conv op: positions of x, w, stride, padding, dilation, transposed, output_padding, groups;
# a 1-tuple is a literal (the op has no such argument), "C" = depthwise (groups = channels)
_CONV_ARGS: dict[str, tuple[Any, ...]] = {
    "aten::convolution": (0, 1, 3, 4, 5, 6, 7, 8),
    "aten::_convolution": (0, 1, 3, 4, 5, 6, 7, 8),
    "aten::convolution_overrideable": (0, 1, 3, 4, 5, 6, 7, 8),
    "aten::cudnn_convolution": (0, 1, 3, 2, 4, (False,), ([0],), 5),
    "aten::cudnn_convolution_transpose": (0, 1, 4, 2, 5, (True,), 3, 6),
    "aten::mkldnn_convolution": (0, 1, 4, 3, 5, (False,), ([0],), 6),
    "aten::_conv_depthwise2d": (0, 1, 4, 5, 6, (False,), ([0],), "C"),
    "aten::conv_depthwise3d": (0, 1, 4, 5, 6, (False,), ([0],), "C"),
    "aten::_slow_conv2d_forward": (0, 1, 4, 5, ([1],), (False,), ([0],), (1,)),
    "aten::slow_conv3d_forward": (0, 1, 4, 5, ([1],), (False,), ([0],), (1,)),
    "aten::slow_conv_dilated2d": (0, 1, 4, 5, 6, (False,), ([0],), (1,)),
    "aten::slow_conv_transpose2d": (0, 1, 4, 5, 7, (True,), 6, (1,)),
}


def conv_out_shape(x: tuple[int, ...], w: tuple[int, ...], stride: list[int], padding: list[int],
                   dilation: list[int], transposed: bool, output_padding: list[int], groups: int) -> tuple[int, ...]:
    n = len(x) - 2

    def ex(v: list[int]) -> list[int]:
        return list(v) * n if len(v) == 1 else list(v)

    s, p, d, op = ex(stride), ex(padding), ex(dilation), ex(output_padding or [0])
    if transposed:
        sp = [(x[2 + i] - 1) * s[i] - 2 * p[i] + d[i] * (w[2 + i] - 1) + op[i] + 1 for i in range(n)]
        return (x[0], w[1] * groups, *sp)
    sp = [(x[2 + i] + 2 * p[i] - d[i] * (w[2 + i] - 1) - 1) // s[i] + 1 for i in range(n)]
    return (x[0], w[0], *sp)


@register(*_CONV_ARGS, category="conv")
def _conv(call: OpCall) -> Cost:
    ix, iw, i_s, i_p, i_d, i_t, i_op, i_g = _CONV_ARGS[call.name]
    x, w = call.need("", ix), call.need("", iw)

    def val(pos: Any) -> Any:
        return pos[0] if isinstance(pos, tuple) else x.shape[1] if pos == "C" else call.value("", pos)

    transposed = val(i_t)
    args = (val(i_s), val(i_p), val(i_d), transposed, val(i_op), val(i_g))
    if any(v is UNKNOWN for v in args):
        raise MissingShapes("conv parameters")
    out = TensorSpec(conv_out_shape(x.shape, w.shape, *args), x.dtype)
    flops = _flop_fn("convolution")(x.shape, w.shape, None, None, None, None, transposed, out_val=out.shape)
    cost = _cost(call, flops, _outputs(call, lambda: [out]))
    skipped = 1.0 - _input_read_share(x.shape, w.shape, out.shape, args) if transposed is False else 0.0
    return Cost(cost.flops, cost.bytes - skipped * _bytes([x]), cost.dtype,
                tensor_core=_cuda_cores(x.shape, w.shape, transposed))


# Channels per group below which a grouped convolution runs on CUDA cores: an MMA's K is 8 (fp16 /
# bf16) or more, so cuDNN and cuDNN-frontend pick direct kernels for depthwise convolutions (one
# channel per group) and thin groups. A Faster R-CNN (MobileNetV3) on an H100 put its depthwise
# backward at 182.8% of the tf32 tensor-core roof.
_MIN_TC_CHANNELS = 8


def _cuda_cores(x: tuple[int, ...], w: tuple[int, ...], transposed: Any) -> bool | None:
    """False for a grouped convolution too thin for tensor cores, else None (the formula's class)."""
    if transposed is not False or len(x) < 2 or len(w) < 2:
        return None
    return False if x[1] != w[1] and w[1] < _MIN_TC_CHANNELS else None


def _input_read_share(x: tuple[int, ...], w: tuple[int, ...], out: tuple[int, ...], args: tuple) -> float:
    """The share of the input a convolution reads: a filter narrower than its stride skips the rows
    and columns between its windows (a 1x1 stride-2 downsample reads a quarter of its input: an H100
    ResNet-50 ran one at 112% of a roof that counted all of it)."""
    stride, _, dilation = args[0], args[1], args[2]
    if stride is UNKNOWN or dilation is UNKNOWN:
        return 1.0
    n = len(x) - 2
    s = list(stride) * n if len(stride) == 1 else list(stride)
    d = list(dilation) * n if len(dilation) == 1 else list(dilation)
    share = 1.0
    for i in range(n):
        footprint = d[i] * (w[2 + i] - 1) + 1
        if footprint < s[i] and x[2 + i] > 0:
            share *= min(1.0, out[2 + i] * footprint / x[2 + i])
    return share


@register("aten::convolution_backward", category="conv")
def _conv_backward(call: OpCall) -> Cost:
    go, x, w = call.need("grad_output", 0), call.need("input", 1), call.need("weight", 2)
    transposed = call.value("transposed", 7)
    if transposed is UNKNOWN:  # old traces: recover it from the channel counts when unambiguous
        fwd, bwd = w.shape[0] == go.shape[1], w.shape[0] == x.shape[1]
        if fwd == bwd:
            raise MissingShapes("transposed")
        transposed = bwd
    mask = call.value("output_mask", 10)
    mask = list(mask) if isinstance(mask, list) and len(mask) == 3 else [True, True, True]
    has_bias = call.value("bias_sizes", 3) is not None
    outs = ([x.like()] if mask[0] else []) + ([w.like()] if mask[1] else [])
    if mask[2] and has_bias:
        outs.append(TensorSpec((go.shape[1],), w.dtype))
    bwd = _flop_fn("convolution_backward")
    flops = bwd(go.shape, x.shape, w.shape, None, None, None, None, transposed, None, None, mask,
                out_val=[x.shape, w.shape, None])
    groups = x.shape[1] // w.shape[1] if not transposed and w.shape[1] and x.shape[1] % w.shape[1] == 0 else 1
    if mask[1] and groups > 1:
        # torch.utils.flop_counter counts grad_weight as an ungrouped convolution: each output channel
        # only sees its group's C_in / groups input channels, so the true count is 1 / groups of it
        wgrad = bwd(go.shape, x.shape, w.shape, None, None, None, None, transposed, None, None,
                    [False, True, False], out_val=[x.shape, w.shape, None])
        flops -= wgrad * (groups - 1) / groups
    cost = _cost(call, flops, outs)
    return Cost(cost.flops, cost.bytes, cost.dtype, tensor_core=_cuda_cores(x.shape, w.shape, transposed))
