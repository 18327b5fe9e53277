"""Ops that reduce along dims: reductions, scans, pooling, normalization, softmax and losses."""

from __future__ import annotations

import math
from typing import Any

from roofscope.analyzers.cost.formulas.dtypes import BOOL, FLOAT32, INT64, DType, dtype_from_code
from roofscope.analyzers.cost.formulas.elementwise import _ew_rule
from roofscope.analyzers.cost.formulas.records import (TENSOR, Cost, MissingShapes, OpCall, TensorSpec, _bytes, _cost,
                                                       _outputs)
from roofscope.analyzers.cost.formulas.registry import register


def _acc(dt: DType | None) -> DType | None:
    """Accumulation dtype of statistics outputs (mean/rstd): fp32 for 16-bit floats."""
    return FLOAT32 if dt is not None and dt.kind == "float" and dt.itemsize < 4 else dt


def _dims(value: Any, ndim: int) -> list[int] | None:
    """Normalise a dim / dim-list argument; None = all dims, [] = all dims (sum/mean legacy)."""
    if value is None or value == []:
        return list(range(ndim))
    vals = value if isinstance(value, (list, tuple)) else [value]
    if not all(isinstance(v, int) for v in vals):
        return None
    return sorted({v % ndim for v in vals}) if ndim else []


# ---------------------------------------------------------------------------
# reductions (and pooling / scans, which the roofline treats the same way)

_REDUCTIONS: dict[str, tuple[int, str]] = {  # per input element, output dtype rule
    **dict.fromkeys(["sum", "nansum", "prod"], (1, "int64")),
    **dict.fromkeys(["mean", "nanmean", "amax", "amin", "max", "min", "aminmax"], (1, "same")),
    **dict.fromkeys(["argmax", "argmin", "count_nonzero"], (1, "idx")),
    **dict.fromkeys(["all", "any"], (1, "bool")),
    **dict.fromkeys(["norm", "linalg_vector_norm"], (2, "same")),
    **dict.fromkeys(["var", "std", "var_mean", "std_mean"], (3, "same")),
}
_TWO_OUTPUTS = {"var_mean", "std_mean", "aminmax"}


@register(*(f"aten::{n}" for n in _REDUCTIONS), category="reduction")
def _reduction(call: OpCall) -> Cost:
    base = call.name[len("aten::"):]
    tensors = [a for a in call.args if a.kind == TENSOR and not a.write_only]
    if base in ("max", "min") and len(tensors) == 2:  # max.other: elementwise maximum
        outs = _outputs(call, lambda: _ew_rule(call, ""))
        return _cost(call, max(o.numel for o in outs), outs)
    per, rule = _REDUCTIONS[base]
    x = call.need("self", 0)
    code = call.value("dtype")
    out_dt = dtype_from_code(code) or {
        "int64": INT64 if x.dtype and x.dtype.kind in ("bool", "int") else x.dtype,
        "same": x.dtype, "idx": INT64, "bool": BOOL}[rule]
    dim_arg = call.arg("dim", 1 if len(call.args) > 1 and call.args[1].kind != TENSOR else None)
    if dim_arg is None:
        dims: list[int] | None = list(range(len(x.shape)))
    else:
        dims = _dims(dim_arg.value, len(x.shape)) if dim_arg.known else None

    def rule_outs() -> list[TensorSpec]:
        if dims is None:
            raise MissingShapes("reduction dims")
        kept = tuple(n for i, n in enumerate(x.shape) if i not in dims)
        out = TensorSpec(kept, out_dt)
        if base in _TWO_OUTPUTS:
            return [out, out]
        if base in ("max", "min") and dim_arg is not None:  # max.dim: values + int64 indices
            return [out, out.like(dtype=INT64)]
        return [out]

    try:
        outs = _outputs(call, rule_outs)
    except MissingShapes:
        outs = []  # dims not recorded: count the input only (a lower bound, documented)
    return _cost(call, per * x.numel, outs)


@register("aten::cumsum", "aten::cumsum_", "aten::cumprod", "aten::cumprod_", category="reduction")
def _scan(call: OpCall) -> Cost:
    x = call.need("self", 0)
    out_dt = dtype_from_code(call.value("dtype", 2)) or (INT64 if x.dtype and x.dtype.kind != "float" else x.dtype)
    outs = _outputs(call, lambda: [x.like(dtype=out_dt)])
    return _cost(call, x.numel, outs)


def _window(call: OpCall, pos: int) -> list[int]:
    k = call.value("kernel_size", pos)
    n = len(call.need("self", 0 if pos == 1 else 1).shape) - 2
    if not isinstance(k, list) or not k:
        raise MissingShapes("kernel_size")
    return k * n if len(k) == 1 else k


def _pool_out(call: OpCall, x: TensorSpec, k: list[int]) -> tuple[int, ...] | None:
    """Pooling output shape (the conv rule with ceil_mode); None when a parameter is missing."""
    avg = "avg_pool" in call.name
    n = len(k)
    s, p = call.value("stride", 2, []), call.value("padding", 3, [0])
    d = [1] if avg else call.value("dilation", 4, [1])
    ceil = call.value("ceil_mode", 4 if avg else 5, False)
    if not all(isinstance(v, list) for v in (s, p, d)) or not isinstance(ceil, bool):
        return None
    s, p, d = (s or k), (p * n if len(p) == 1 else p), (d * n if len(d) == 1 else d)
    s = s * n if len(s) == 1 else s
    sp = []
    for i in range(n):
        span = x.shape[-n + i] + 2 * p[i] - d[i] * (k[i] - 1) - 1
        o = (span + (s[i] - 1 if ceil else 0)) // s[i] + 1
        if ceil and (o - 1) * s[i] >= x.shape[-n + i] + p[i]:
            o -= 1  # the last window must start inside the input
        sp.append(o)
    return x.shape[: len(x.shape) - n] + tuple(sp)


@register("aten::max_pool2d_with_indices", "aten::max_pool3d_with_indices", "aten::avg_pool2d",
          "aten::avg_pool3d", "aten::_adaptive_avg_pool2d", "aten::_adaptive_avg_pool3d",
          "aten::adaptive_max_pool2d", "aten::adaptive_max_pool3d", category="reduction")
def _pool(call: OpCall) -> Cost:
    x = call.need("self", 0)
    with_idx = "max_pool" in call.name
    if "adaptive" in call.name:
        size = call.value("output_size", 1)
        if not isinstance(size, list):
            raise MissingShapes("output_size")
        shape: tuple[int, ...] | None = x.shape[: len(x.shape) - len(size)] + tuple(size)
        flops = x.numel  # every input element lands in ~one window
    else:
        k = _window(call, 1)
        shape = _pool_out(call, x, k)
        if shape is None:
            raise MissingShapes("pooling parameters")
        flops = math.prod(shape) * math.prod(k)
    out = TensorSpec(shape, x.dtype)
    return _cost(call, flops, [out, out.like(dtype=INT64)] if with_idx else [out])


@register("aten::max_pool2d_with_indices_backward", "aten::max_pool3d_with_indices_backward",
          "aten::avg_pool2d_backward", "aten::avg_pool3d_backward", "aten::_adaptive_avg_pool2d_backward",
          "aten::_adaptive_avg_pool3d_backward", "aten::adaptive_max_pool2d_backward", category="reduction")
def _pool_backward(call: OpCall) -> Cost:
    go, x = call.need("grad_output", 0), call.need("self", 1)
    outs = _outputs(call, lambda: [x.like(dtype=go.dtype)])
    flops = go.numel * (math.prod(_window(call, 2)) if "avg_pool" in call.name and "adaptive" not in call.name else 1)
    return _cost(call, max(flops, x.numel if "adaptive_avg" in call.name else 0), outs)


# ---------------------------------------------------------------------------
# normalization: FLOPs per element of the normalized input


def _stats_shape(x: TensorSpec, n_norm: int) -> tuple[int, ...]:
    return x.shape[: len(x.shape) - n_norm] + (1,) * n_norm


def _mask(call: OpCall, name: str, pos: int, n: int) -> list[bool]:
    m = call.value(name, pos)
    return list(m) if isinstance(m, list) and len(m) == n else [True] * n


@register("aten::native_layer_norm", "aten::_fused_rms_norm", "aten::rms_norm", category="normalization")
def _layer_norm(call: OpCall) -> Cost:
    x, w = call.need("input", 0), call.tensor("weight", 2)
    rms = "rms" in call.name
    b = None if rms else call.tensor("bias", 3)
    ns = call.value("normalized_shape", 1)
    n_norm = len(ns) if isinstance(ns, list) else (len(w.shape) if w is not None else 1)
    # layer norm: mean 1 + variance 3 + normalize 2; rms norm: square-sum 2 + scale 1; affine 1 each
    per = (2 + 1 if rms else 6) + (w is not None) + (b is not None)
    stats = TensorSpec(_stats_shape(x, n_norm), _acc(x.dtype))
    outs = [x.like()] + ([] if call.name == "aten::rms_norm" else [stats] * (1 if rms else 2))
    return _cost(call, per * x.numel, outs)


@register("aten::native_layer_norm_backward", "aten::_fused_rms_norm_backward", category="normalization")
def _layer_norm_backward(call: OpCall) -> Cost:
    rms = "rms" in call.name
    x = call.need("input", 1)
    w = call.tensor("weight", 4 if rms else 5)
    mask = _mask(call, "output_mask", 5 if rms else 7, 2 if rms else 3)
    # dx: recompute xhat 2, dy*w 1, two row sums 3, combine 4 (rms: 7); dw 2; db 1
    per = (7 if rms else 10) * mask[0] + 2 * mask[1] * (w is not None) + (0 if rms else mask[2] * (w is not None))
    outs = ([x.like()] if mask[0] else []) + [w.like() for _ in mask[1:] if _ and w is not None]
    return _cost(call, per * x.numel, outs)


@register("aten::native_batch_norm", "aten::_native_batch_norm_legit", "aten::_native_batch_norm_legit_no_training",
          "aten::cudnn_batch_norm", "aten::miopen_batch_norm", "aten::_native_batch_norm_legit_functional",
          category="normalization")
def _batch_norm(call: OpCall) -> Cost:
    x, w, b = call.need("input", 0), call.tensor("weight", 1), call.tensor("bias", 2)
    no_stats = len(call.args) == 6  # _native_batch_norm_legit.no_stats
    training = (False if "no_training" in call.name
                else call.value("training", 3 if no_stats else 5, True) is not False)
    # stats 4 (training only) + normalize 2 + affine 1 each
    per = 4 * training + 2 + (w is not None) + (b is not None)
    c = (x.shape[1],) if len(x.shape) > 1 else (1,)
    outs = [x.like()] + ([TensorSpec(c, _acc(x.dtype))] * 2 if training else [])
    if training and not no_stats:  # running statistics are read-modify-written
        outs += [t for t in (call.tensor("running_mean", 3), call.tensor("running_var", 4)) if t is not None]
    return _cost(call, per * x.numel, outs)


@register("aten::native_batch_norm_backward", "aten::batch_norm_backward", "aten::cudnn_batch_norm_backward",
          "aten::miopen_batch_norm_backward", category="normalization")
def _batch_norm_backward(call: OpCall) -> Cost:
    cudnn = call.name.startswith(("aten::cudnn", "aten::miopen"))
    x, w = call.need("input", 0 if cudnn else 1), call.tensor("weight", 2)
    mask = [True] * 3 if cudnn else _mask(call, "output_mask", 9, 3)
    per = 10 * mask[0] + 2 * mask[1] + mask[2]
    outs = ([x.like()] if mask[0] else []) + [w.like() for m in mask[1:] if m and w is not None]
    return _cost(call, per * x.numel, outs)


@register("aten::native_group_norm", category="normalization")
def _group_norm(call: OpCall) -> Cost:
    x, w, b = call.need("input", 0), call.tensor("weight", 1), call.tensor("bias", 2)
    g = call.need_int("group", 6)
    per = 6 + (w is not None) + (b is not None)
    stats = TensorSpec((x.shape[0], g), _acc(x.dtype))
    return _cost(call, per * x.numel, [x.like(), stats, stats])


@register("aten::native_group_norm_backward", category="normalization")
def _group_norm_backward(call: OpCall) -> Cost:
    x, w = call.need("input", 1), call.tensor("weight", 4)
    mask = _mask(call, "output_mask", 9, 3)
    per = 10 * mask[0] + 2 * mask[1] + mask[2]
    outs = ([x.like()] if mask[0] else []) + [w.like() for m in mask[1:] if m and w is not None]
    return _cost(call, per * x.numel, outs)


# ---------------------------------------------------------------------------
# softmax and losses


@register("aten::_softmax", "aten::_log_softmax", category="softmax")
def _softmax(call: OpCall) -> Cost:
    x = call.need("self", 0)
    dt = FLOAT32 if call.value("half_to_float", 2) is True else x.dtype
    return _cost(call, 5 * x.numel, _outputs(call, lambda: [x.like(dtype=dt)]))  # max, sub, exp, sum, div/log


@register("aten::_softmax_backward_data", "aten::_log_softmax_backward_data", category="softmax")
def _softmax_backward(call: OpCall) -> Cost:
    g = call.need("grad_output", 0)
    dt = dtype_from_code(call.value("input_dtype", 3)) or g.dtype
    return _cost(call, 4 * g.numel, _outputs(call, lambda: [g.like(dtype=dt)]))


@register("aten::nll_loss_forward", "aten::nll_loss2d_forward", category="softmax")
def _nll_loss(call: OpCall) -> Cost:
    x, t, w = call.need("self", 0), call.need("target", 1), call.tensor("weight", 2)
    n = t.numel
    reduction = call.value("reduction", 3)
    out = TensorSpec(t.shape if reduction == 0 else (), x.dtype)
    # gather semantics: only the target column of each row is read (documented)
    reads = _bytes([t]) + n * (x.dtype.itemsize if x.dtype else math.nan) * (1 + (w is not None))
    return Cost(float(n * (1 + (w is not None))), reads + _bytes([out, TensorSpec((), x.dtype)]))


@register("aten::nll_loss_backward", "aten::nll_loss2d_backward", category="softmax")
def _nll_loss_backward(call: OpCall) -> Cost:
    go, x, t = call.need("grad_output", 0), call.need("self", 1), call.need("target", 2)
    w = call.tensor("weight", 3)
    # the zero fill of grad_input is a separate aten::zero_; this op scatters one value per row
    written = t.numel * (x.dtype.itemsize if x.dtype else math.nan)
    return Cost(float(t.numel), _bytes([go, t] + ([w] if w else [])) + written)
