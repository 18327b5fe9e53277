"""Elementwise ops (and dropout): FLOPs per output element from one table."""

from __future__ import annotations

from roofscope.analyzers.cost.formulas.dtypes import BOOL, FLOAT32, result_type
from roofscope.analyzers.cost.formulas.records import (SCALAR, TENSOR, Cost, MissingShapes, OpCall, TensorSpec, _cost,
                                                       _outputs, broadcast_shapes)
from roofscope.analyzers.cost.formulas.registry import register

# elementwise: FLOPs per output element (docs/cost-model.md has the same table)
# flags: "b" bool output, "f" int inputs give a float output, "s" output dtype = first tensor,
#        "w" first tensor (the condition) does not take part in type promotion

ELEMENTWISE: dict[str, tuple[int, str]] = {
    **dict.fromkeys(["add", "sub", "rsub", "mul", "floor_divide", "remainder", "fmod", "neg", "abs",
                     "sign", "sgn", "square", "maximum", "minimum", "fmax", "fmin", "clamp", "clamp_min",
                     "clamp_max", "clip", "relu", "threshold", "hardtanh", "floor", "ceil", "round",
                     "trunc", "frac", "nan_to_num", "pow", "float_power", "bitwise_and", "bitwise_or",
                     "bitwise_xor", "bitwise_not", "copysign"], (1, "")),
    **dict.fromkeys(["div", "true_divide", "reciprocal", "exp", "exp2", "expm1", "log", "log2", "log10",
                     "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "erf", "erfc", "erfinv",
                     "asin", "acos", "atan", "atan2", "sinh", "cosh", "asinh", "acosh", "atanh"], (1, "f")),
    **dict.fromkeys(["eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
                     "logical_not", "isnan", "isinf", "isfinite", "signbit"], (1, "b")),
    "where": (1, "w"), "masked_fill": (1, "s"),
    "sigmoid": (3, "f"), "silu": (4, ""), "gelu": (5, ""), "mish": (6, ""), "softplus": (4, ""),
    "elu": (3, ""), "selu": (4, ""), "celu": (3, ""), "leaky_relu": (2, ""), "hardsigmoid": (3, ""),
    "hardswish": (4, ""), "logit": (3, "f"),
    "addcmul": (3, ""), "addcdiv": (3, ""), "lerp": (3, ""),
    "threshold_backward": (1, "s"), "hardtanh_backward": (1, "s"), "leaky_relu_backward": (2, "s"),
    "sigmoid_backward": (3, "s"), "tanh_backward": (3, "s"), "elu_backward": (3, "s"),
    "silu_backward": (8, "s"), "gelu_backward": (11, "s"), "hardswish_backward": (5, "s"),
    "hardsigmoid_backward": (2, "s"), "softplus_backward": (5, "s"), "mish_backward": (10, "s"),
    "native_dropout_backward": (2, "s"),
}
# ops with no in-place variant in aten (backwards) or whose "_" form is a different op
_NO_INPLACE = {n for n in ELEMENTWISE if n.endswith("_backward")} | {"where"}


def _ew_rule(call: OpCall, flags: str) -> list[TensorSpec]:
    ins = [a.tensor for a in call.args if a.kind == TENSOR and not a.write_only]
    if not ins:
        raise MissingShapes("no tensor input")
    shape = broadcast_shapes(*(t.shape for t in ins))  # type: ignore[union-attr]
    if "s" in flags:
        dtype = ins[0].dtype  # type: ignore[union-attr]
    else:
        scalars = [a.value for a in call.args if a.kind == SCALAR and a.known]
        dtype = result_type(ins[1:] if "w" in flags else ins, scalars)  # type: ignore[arg-type]
    if "b" in flags:
        dtype = BOOL
    elif "f" in flags and dtype is not None and dtype.kind in ("bool", "int"):
        dtype = FLOAT32
    return [TensorSpec(shape, dtype)]


def _elementwise(call: OpCall) -> Cost:
    base = call.name[len("aten::"):]
    base = base[:-1] if base.endswith("_") and base[:-1] in ELEMENTWISE else base
    per, flags = ELEMENTWISE[base]
    if base == "gelu" and call.value("approximate", 1) == "tanh":
        per = 9
    outs = _outputs(call, lambda: _ew_rule(call, flags))
    return _cost(call, per * max((o.numel for o in outs), default=0), outs)


for _n in ELEMENTWISE:
    register(f"aten::{_n}", *([] if _n in _NO_INPLACE else [f"aten::{_n}_"]), category="elementwise")(_elementwise)


@register("aten::native_dropout", category="elementwise")
def _dropout(call: OpCall) -> Cost:
    x = call.need("input", 0)
    outs = [x.like(), x.like(dtype=BOOL)] if call.value("train", 2) is not False else [x.like()]
    return _cost(call, 2 * x.numel, outs)  # compare with the random draw, scale
