"""Per-op FLOP and compulsory-byte formulas, as pure functions of recorded shapes.

A formula receives an :class:`OpCall` (the parsed arguments of one op signature) and
returns a :class:`Cost`.  Formulas are registered by Kineto op name with
:func:`register`; :func:`lookup` also resolves the dynamic families (``triton_*``
Inductor kernels, ``aten::_foreach_*``).  See docs/cost-model.md for the per-element
FLOP counts and the bytes rule.

torch is imported lazily (only for ``torch.utils.flop_counter``), so importing this
module stays cheap for CLI commands that never cost anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache, reduce
from typing import Any, Callable

# ---------------------------------------------------------------------------
# dtypes


@dataclass(frozen=True)
class DType:
    name: str  # torch attribute name, e.g. "bfloat16"
    itemsize: int
    kind: str  # "bool" | "int" | "float" | "complex"
    precision: str  # roofline precision key; "" when the dtype is not a compute precision


# (Kineto "Input type" strings, torch name, itemsize, kind, precision, c10::ScalarType code)
_DTYPE_ROWS: list[tuple[tuple[str, ...], str, int, str, str, int | None]] = [
    (("float",), "float32", 4, "float", "fp32", 6),
    (("double",), "float64", 8, "float", "fp64", 7),
    (("c10::Half",), "float16", 2, "float", "fp16", 5),
    (("c10::BFloat16",), "bfloat16", 2, "float", "bf16", 15),
    (("c10::Float8_e5m2",), "float8_e5m2", 1, "float", "fp8", 23),
    (("c10::Float8_e4m3fn",), "float8_e4m3fn", 1, "float", "fp8", 24),
    (("c10::Float8_e5m2fnuz",), "float8_e5m2fnuz", 1, "float", "fp8", 25),
    (("c10::Float8_e4m3fnuz",), "float8_e4m3fnuz", 1, "float", "fp8", 26),
    (("c10::Float8_e8m0fnu",), "float8_e8m0fnu", 1, "float", "fp8", None),
    (("c10::Float4_e2m1fn_x2",), "float4_e2m1fn_x2", 1, "float", "", None),
    (("unsigned char",), "uint8", 1, "int", "", 0),
    (("signed char",), "int8", 1, "int", "int8", 1),
    (("short int", "short"), "int16", 2, "int", "", 2),
    (("int",), "int32", 4, "int", "", 3),
    (("long int", "long", "long long int", "int64_t"), "int64", 8, "int", "", 4),
    (("c10::complex<c10::Half>",), "complex32", 4, "complex", "", 8),
    (("c10::complex<float>",), "complex64", 8, "complex", "", 9),
    (("c10::complex<double>",), "complex128", 16, "complex", "", 10),
    (("bool",), "bool", 1, "bool", "", 11),
    (("short unsigned int", "unsigned short"), "uint16", 2, "int", "", 27),
    (("unsigned int",), "uint32", 4, "int", "", 28),
    (("long unsigned int", "unsigned long"), "uint64", 8, "int", "", 29),
]
DTYPES: dict[str, DType] = {}  # Kineto type string -> DType
DTYPE_BY_NAME: dict[str, DType] = {}  # torch name -> DType
SCALAR_TYPE_CODES: dict[int, DType] = {}  # ScalarType enum (Concrete Inputs of dtype args)
for _kin, _name, _size, _kind, _prec, _code in _DTYPE_ROWS:
    _dt = DType(_name, _size, _kind, _prec)
    DTYPE_BY_NAME[_name] = _dt
    DTYPES.update(dict.fromkeys(_kin, _dt))
    if _code is not None:
        SCALAR_TYPE_CODES[_code] = _dt
FLOAT32, INT64, BOOL = DTYPE_BY_NAME["float32"], DTYPE_BY_NAME["int64"], DTYPE_BY_NAME["bool"]
# Kineto records "TensorList" without element dtypes; optimizer state (the main user of
# tensor lists) is fp32 under AMP, so list elements are costed as fp32 (documented).
TENSORLIST_DTYPE = FLOAT32
_KIND_RANK = {"bool": 0, "int": 1, "float": 2, "complex": 3}
_KIND_DEFAULT = {"bool": BOOL, "int": INT64, "float": FLOAT32, "complex": DTYPE_BY_NAME["complex64"]}


def parse_dtype(type_str: str) -> DType | None:
    """Kineto ``Input type`` string -> DType (None for non-tensor or unknown strings)."""
    return DTYPES.get(type_str)


def dtype_from_code(code: Any) -> DType | None:
    return SCALAR_TYPE_CODES.get(code) if isinstance(code, int) and not isinstance(code, bool) else None


def promote_types(a: DType, b: DType) -> DType:
    """torch.promote_types for the dtypes we model (pure Python: no torch import)."""
    if a == b:
        return a
    ra, rb = _KIND_RANK[a.kind], _KIND_RANK[b.kind]
    if ra != rb:
        hi, lo = (a, b) if ra > rb else (b, a)
        if hi.kind == "complex" and lo.kind == "float" and 2 * lo.itemsize > hi.itemsize:
            return DTYPE_BY_NAME[f"complex{16 * lo.itemsize}"]  # float64 + complex64 -> complex128
        return hi
    if a.kind == "int":
        ua, ub = a.name.startswith("uint"), b.name.startswith("uint")
        if ua == ub:
            return a if a.itemsize >= b.itemsize else b
        u, s = (a, b) if ua else (b, a)
        if s.itemsize > u.itemsize:
            return s
        return {1: DTYPE_BY_NAME["int16"], 2: DTYPE_BY_NAME["int32"]}.get(u.itemsize, INT64)
    if a.itemsize != b.itemsize:
        return a if a.itemsize > b.itemsize else b
    # fp16 vs bf16 (and two fp8 flavours) meet in fp32
    return FLOAT32 if a.kind == "float" else a


# ---------------------------------------------------------------------------
# parsed op calls

TENSOR, TENSORS, SCALAR, NONE = "tensor", "tensors", "scalar", "none"
UNKNOWN: Any = object()  # sentinel: the trace did not record this scalar's value


class MissingShapes(Exception):
    """The formula needs a shape or scalar that the trace did not record."""


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: DType | None
    strides: tuple[int, ...] | None = None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def footprint(self) -> int:
        """Distinct elements addressed: broadcast (stride-0) dims are read once."""
        if self.strides is None or len(self.strides) != len(self.shape):
            return self.numel
        return math.prod(n for n, s in zip(self.shape, self.strides) if s != 0 or n == 0)

    @property
    def nbytes(self) -> float:
        return float(self.footprint * self.dtype.itemsize) if self.dtype else math.nan

    def like(self, shape: tuple[int, ...] | None = None, dtype: DType | None = None) -> TensorSpec:
        return TensorSpec(self.shape if shape is None else tuple(shape), dtype or self.dtype)


@dataclass
class Arg:
    kind: str  # TENSOR | TENSORS | SCALAR | NONE
    name: str = ""  # schema argument name when the signature was bound to a schema
    tensor: TensorSpec | None = None
    tensors: tuple[TensorSpec, ...] = ()
    value: Any = None
    known: bool = False  # value recorded (Concrete Inputs) or certainly None
    mutable: bool = False  # the op writes it (schema alias annotation, or trailing "_")
    write_only: bool = False  # out= argument: written, never read

    @property
    def specs(self) -> tuple[TensorSpec, ...]:
        if self.kind == TENSOR:
            return (self.tensor,)  # type: ignore[return-value]
        return self.tensors if self.kind == TENSORS else ()


@dataclass
class OpCall:
    name: str
    args: list[Arg]
    bound: bool = False  # argument names come from the op's schema
    # meta-tensor output inference, injected by costmodel (keeps this module torch-free)
    infer: Callable[[OpCall], list[TensorSpec] | None] | None = None
    _meta: Any = field(default=UNKNOWN, repr=False)

    def arg(self, name: str, pos: int | None = None) -> Arg | None:
        """By schema name when the call is bound (None if the overload lacks it), else by position."""
        if name and self.bound:
            return next((a for a in self.args if a.name == name), None)
        return self.args[pos] if pos is not None and pos < len(self.args) else None

    def tensor(self, name: str, pos: int | None = None) -> TensorSpec | None:
        a = self.arg(name, pos)
        return a.tensor if a is not None and a.kind == TENSOR else None

    def need(self, name: str, pos: int | None = None) -> TensorSpec:
        t = self.tensor(name, pos)
        if t is None:
            raise MissingShapes(name)
        return t

    def value(self, name: str, pos: int | None = None, default: Any = UNKNOWN) -> Any:
        a = self.arg(name, pos)
        if a is None or a.kind in (TENSOR, TENSORS) or not a.known:
            return default
        return a.value

    def reads(self) -> list[TensorSpec]:
        return [s for a in self.args if not a.write_only for s in a.specs]

    def meta(self) -> list[TensorSpec] | None:
        if self._meta is UNKNOWN:
            self._meta = self.infer(self) if self.infer else None
        return self._meta


@dataclass(frozen=True)
class Cost:
    flops: float
    bytes: float
    dtype: str | None = None  # precision override; None = first floating tensor input


@dataclass(frozen=True)
class Formula:
    fn: Callable[[OpCall], Cost]
    category: str
    tensor_core: bool


REGISTRY: dict[str, Formula] = {}
_TC_CATEGORIES = {"gemm", "conv", "attention"}


def register(*names: str, category: str) -> Callable[[Callable[[OpCall], Cost]], Callable[[OpCall], Cost]]:
    def deco(fn: Callable[[OpCall], Cost]) -> Callable[[OpCall], Cost]:
        for n in names:
            if n in REGISTRY:
                raise ValueError(f"duplicate cost formula for {n}")
            REGISTRY[n] = Formula(fn, category, category in _TC_CATEGORIES)
        return fn

    return deco


def lookup(name: Any) -> Formula | None:
    if not isinstance(name, str):
        return None
    f = REGISTRY.get(name)
    if f is not None:
        return f
    if name.startswith("triton_"):
        return _triton_formula(name)
    if name.startswith("aten::_foreach_"):
        base = name[len("aten::_foreach_"):].rstrip("_")
        if base in ELEMENTWISE or base in _FOREACH_SPECIAL:
            return Formula(_foreach, "optimizer", False)
    return None


# ---------------------------------------------------------------------------
# shared helpers


def _bytes(specs: list[TensorSpec] | tuple[TensorSpec, ...]) -> float:
    return float(sum(s.nbytes for s in specs))


def _cost(call: OpCall, flops: float, outs: list[TensorSpec], dtype: str | None = None) -> Cost:
    """The bytes rule: every tensor input read once + every output written once."""
    return Cost(float(flops), _bytes(call.reads()) + _bytes(outs), dtype)


def _outputs(call: OpCall, rule: Callable[[], list[TensorSpec]]) -> list[TensorSpec]:
    """What the op writes: out= args, else mutated args (in-place), else the rule's new tensors."""
    outs = [a for a in call.args if a.write_only]
    if outs:
        try:  # out= tensors are often recorded before being resized: trust the rule's shape
            return [r.like(dtype=a.tensor.dtype) for r, a in zip(rule(), outs)]  # type: ignore[union-attr]
        except MissingShapes:
            return [s for a in outs for s in a.specs]
    mutated = [s for a in call.args if a.mutable for s in a.specs]
    return mutated if mutated else rule()


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    out: list[int] = []
    for dims in zip(*(((1,) * (max(map(len, shapes)) - len(s)) + tuple(s)) for s in shapes)):
        sizes = set(dims) - {1}
        if len(sizes) > 1:
            raise ValueError(f"shapes {shapes} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def result_type(tensors: list[TensorSpec], scalars: list[Any]) -> DType | None:
    """torch's elementwise type promotion: dimensioned tensors > 0-dim tensors > Python scalars."""
    dimmed = [t.dtype for t in tensors if t.shape and t.dtype]
    zero = [t.dtype for t in tensors if not t.shape and t.dtype]
    res = reduce(promote_types, dimmed) if dimmed else None
    if zero:
        z = reduce(promote_types, zero)
        if res is None or _KIND_RANK[z.kind] > _KIND_RANK[res.kind]:
            res = z
    for v in scalars:
        kind = {bool: "bool", int: "int", float: "float", complex: "complex"}.get(type(v))
        if kind and (res is None or _KIND_RANK[kind] > _KIND_RANK[res.kind]):
            res = _KIND_DEFAULT[kind]
    return res


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


@lru_cache(maxsize=None)
def _flop_fn(op: str) -> Callable[..., int]:
    """FLOP formula from torch.utils.flop_counter (the reference gemm/conv/attention counts)."""
    import torch
    from torch.utils.flop_counter import flop_registry

    return flop_registry[getattr(torch.ops.aten, op)]


# ---------------------------------------------------------------------------
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
            metas = call.meta()
            if not metas:
                raise MissingShapes("pooling parameters")
            shape = metas[0].shape
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
# gemm / conv / attention (FLOPs from torch.utils.flop_counter)


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
        metas = call.meta()
        if not metas or transposed is UNKNOWN:
            raise MissingShapes("conv parameters")
        out = metas[0]
    else:
        out = TensorSpec(conv_out_shape(x.shape, w.shape, *args), x.dtype)
    flops = _flop_fn("convolution")(x.shape, w.shape, None, None, None, None, transposed, out_val=out.shape)
    return _cost(call, flops, _outputs(call, lambda: [out]))


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
    flops = _flop_fn("convolution_backward")(go.shape, x.shape, w.shape, None, None, None, None, transposed,
                                            None, None, mask, out_val=[x.shape, w.shape, None])
    return _cost(call, flops, outs)


# attention: forward?, is_causal position, layout ("bhsd" = SDPA, "bshd" = flash / mem-efficient
# internals), and for ops that accept packed varlen batches the (cum_seq_q, max_k) positions
_ATTN: dict[str, tuple[bool, int, str, tuple[int, int] | None]] = {
    "aten::_scaled_dot_product_flash_attention": (True, 4, "bhsd", None),
    "aten::_scaled_dot_product_efficient_attention": (True, 6, "bhsd", None),
    "aten::_scaled_dot_product_cudnn_attention": (True, 6, "bhsd", None),
    "aten::_scaled_dot_product_flash_attention_for_cpu": (True, 4, "bhsd", None),
    "aten::_scaled_dot_product_flash_attention_backward": (False, 11, "bhsd", None),
    "aten::_scaled_dot_product_efficient_attention_backward": (False, 11, "bhsd", None),
    "aten::_scaled_dot_product_cudnn_attention_backward": (False, 14, "bhsd", None),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": (False, 7, "bhsd", None),
    "aten::_cudnn_attention_forward": (True, 10, "bhsd", (4, 7)),
    "aten::_cudnn_attention_backward": (False, 14, "bhsd", (9, 12)),
    "aten::_flash_attention_forward": (True, 8, "bshd", (3, 6)),
    "aten::_flash_attention_backward": (False, 11, "bshd", (6, 9)),
    "aten::_efficient_attention_forward": (True, 9, "bshd", (4, 7)),  # custom_mask_type, not is_causal
    "aten::_efficient_attention_backward": (False, 14, "bshd", (6, 9)),
}


@register(*_ATTN, category="attention")
def _attention(call: OpCall) -> Cost:
    fwd, causal_pos, layout, varlen = _ATTN[call.name]
    off = 0 if fwd else 1
    q, k, v = (call.need("", off + i) for i in range(3))
    shapes = [q.shape, k.shape, v.shape] if fwd else [call.need("", 0).shape, q.shape, k.shape, v.shape]
    if varlen and call.tensor("", varlen[0]) is not None:  # packed (T, H, D) sequences
        max_k = call.value("", varlen[1])
        if not isinstance(max_k, int):
            raise MissingShapes("max_k")
        # every query row attends to at most max_k keys: an upper bound (documented)
        tq = [(1, s[-2], math.prod(s[:-2]), s[-1]) for s in shapes]
        tk = [(1, s[-2], max_k, s[-1]) for s in (k.shape, v.shape)]
        shapes = [tq[0], *tk] if fwd else [tq[0], tq[1], *tk]
    elif layout == "bshd":
        shapes = [(s[0], s[2], s[1], s[3]) for s in shapes]
    key = "_scaled_dot_product_flash_attention" + ("" if fwd else "_backward")
    flops = _flop_fn(key)(*shapes)
    flag = call.value("", causal_pos)
    # mem-efficient internals take custom_mask_type (1, 2 = causal from top-left / bottom-right)
    causal = flag in (1, 2) if call.name.startswith("aten::_efficient_attention") else flag is True
    if causal:
        flops *= 0.5  # only the lower triangle of the score matrix is computed (documented)
    if fwd:
        outs = [q.like(shape=q.shape[:-1] + v.shape[-1:])]
        if call.value("compute_log_sumexp", None) is not False:
            outs.append(TensorSpec(q.shape[:-1], FLOAT32))  # fp32 logsumexp
    else:
        outs = [q.like(), k.like(), v.like()]
    return _cost(call, flops, outs)


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
    g = call.value("group", 6)
    if not isinstance(g, int):
        raise MissingShapes("group")
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


# ---------------------------------------------------------------------------
# copies, gathers, fills


@register("aten::copy_", "aten::_copy_from", category="copy")
def _copy(call: OpCall) -> Cost:
    dst_pos, src_pos = (0, 1) if call.name == "aten::copy_" else (1, 0)
    dst = call.need("", dst_pos)
    src = call.tensor("", src_pos)
    return Cost(0.0, _bytes([src] if src else []) + dst.nbytes)  # dst is overwritten, never read


@register("aten::_to_copy", "aten::clone", "aten::contiguous", category="copy")
def _clone(call: OpCall) -> Cost:
    x = call.need("self", 0)
    if call.name == "aten::_to_copy":
        code = call.value("dtype", 1)
        if code is UNKNOWN:
            raise MissingShapes("dtype")
        dt = dtype_from_code(code) or x.dtype
    else:
        dt = x.dtype
    if call.name == "aten::contiguous" and x.strides is not None:
        fmt = call.value("memory_format", 1, 0)
        if x.strides == _dense_strides(x.shape, fmt if isinstance(fmt, int) else -1):
            return Cost(0.0, 0.0)  # already in that layout: returns self, launches nothing
    return _cost(call, 0, _outputs(call, lambda: [TensorSpec(x.shape, dt)]))


def _dense_strides(shape: tuple[int, ...], memory_format: int) -> tuple[int, ...] | None:
    """Strides of a dense tensor in MemoryFormat 0 (contiguous) / 2, 3 (channels_last[_3d])."""
    order = list(range(len(shape)))[::-1]  # innermost first
    if memory_format in (2, 3) and len(shape) == memory_format + 2:
        order = [1] + order[:-2] + [0]  # channels innermost, then spatial, then batch
    elif memory_format != 0:
        return None
    out, acc = [0] * len(shape), 1
    for d in order:
        out[d] = acc
        acc *= max(shape[d], 1)
    return tuple(out)


@register("aten::cat", "aten::stack", "aten::_cat", category="copy")
def _cat(call: OpCall) -> Cost:
    a = call.arg("tensors", 0)
    if a is None or a.kind != TENSORS or not a.tensors:
        raise MissingShapes("tensor list")
    dt = reduce(promote_types, [t.dtype for t in a.tensors if t.dtype]) if a.tensors[0].dtype else None
    out = TensorSpec((sum(t.numel for t in a.tensors),), dt)
    return _cost(call, 0, _outputs(call, lambda: [out]))


def _gathered(call: OpCall, src: TensorSpec, idx: TensorSpec, out: TensorSpec) -> Cost:
    # gather semantics: only the selected elements of the source are read (documented)
    outs = _outputs(call, lambda: [out])
    return Cost(0.0, idx.nbytes + out.numel * (src.dtype.itemsize if src.dtype else math.nan) + _bytes(outs))


@register("aten::index_select", category="copy")
def _index_select(call: OpCall) -> Cost:
    x, idx = call.need("self", 0), call.need("index", 2)
    dim = call.value("dim", 1, 0 if len(x.shape) <= 1 else UNKNOWN)
    if not isinstance(dim, int):
        raise MissingShapes("dim")
    shape = list(x.shape) or [1]
    shape[dim % len(shape)] = idx.numel
    return _gathered(call, x, idx, TensorSpec(tuple(shape), x.dtype))


@register("aten::gather", category="copy")
def _gather(call: OpCall) -> Cost:
    x, idx = call.need("self", 0), call.need("index", 2)
    return _gathered(call, x, idx, TensorSpec(idx.shape, x.dtype))


@register("aten::embedding", category="embedding")
def _embedding(call: OpCall) -> Cost:
    w, idx = call.need("weight", 0), call.need("indices", 1)
    return _gathered(call, w, idx, TensorSpec(idx.shape + w.shape[-1:], w.dtype))


@register("aten::embedding_dense_backward", category="embedding")
def _embedding_backward(call: OpCall) -> Cost:
    g = call.need("grad_output", 0)
    num = call.value("num_weights", 2)
    if not isinstance(num, int):
        raise MissingShapes("num_weights")
    # one add per gradient element, accumulated into the full [num_weights, D] table
    return _cost(call, g.numel, [TensorSpec((num, g.shape[-1]), g.dtype)])


@register("aten::fill_", "aten::zero_", category="copy")
def _fill(call: OpCall) -> Cost:
    x = call.need("self", 0)
    value = call.tensor("value", 1)
    return Cost(0.0, x.nbytes + (value.nbytes if value else 0.0))  # write only


def _touched(src: TensorSpec, dst: TensorSpec) -> float:
    return src.numel * (dst.dtype.itemsize if dst.dtype else math.nan)


@register("aten::scatter_add_", "aten::scatter_add", "aten::index_add_", "aten::index_add", "aten::scatter_",
          "aten::scatter", "aten::index_copy_", "aten::index_copy", "aten::scatter_reduce_",
          "aten::scatter_reduce", category="copy")
def _scatter(call: OpCall) -> Cost:
    x, idx = call.need("self", 0), call.need("index", 2)
    src = call.tensor("", 3)
    moved = src if src is not None else idx  # scatter_.value writes one scalar per index
    adds = "add" in call.name or "reduce" in call.name
    if call.name.endswith("_"):  # in place: only the touched elements of self move
        rw = _touched(moved, x) * (2 if adds else 1)
        return Cost(float(moved.numel * adds), _bytes(call.reads()) - x.nbytes + rw)
    return _cost(call, moved.numel * adds, [x.like()])  # functional: a full copy of self


@register("aten::repeat", "aten::roll", "aten::flip", "aten::tril", "aten::triu", "aten::constant_pad_nd",
          "aten::reflection_pad1d", "aten::reflection_pad2d", "aten::replication_pad2d", "aten::narrow_copy",
          category="copy")
def _copy_meta(call: OpCall) -> Cost:
    outs = call.meta()
    if not outs:
        raise MissingShapes("output")
    return _cost(call, 0, outs)


@register("aten::upsample_nearest1d", "aten::upsample_nearest2d", "aten::upsample_nearest3d",
          "aten::_upsample_nearest_exact2d", category="copy")
def _upsample_nearest(call: OpCall) -> Cost:
    outs = call.meta()
    if not outs:
        raise MissingShapes("upsample output")
    return _cost(call, 0, outs)


@register("aten::upsample_bilinear2d", "aten::upsample_linear1d", "aten::upsample_trilinear3d",
          "aten::upsample_bicubic2d", category="elementwise")
def _upsample_interp(call: OpCall) -> Cost:
    outs = call.meta()
    if not outs:
        raise MissingShapes("upsample output")
    taps = {"linear1d": 2, "bilinear2d": 4, "trilinear3d": 8, "bicubic2d": 16}[call.name.split("_", 1)[1]]
    return _cost(call, (2 * taps - 1) * outs[0].numel, outs)  # a multiply per tap plus the adds


# ---------------------------------------------------------------------------
# views and metadata: no kernel, no traffic

VIEW_OPS = [
    "view", "_unsafe_view", "_reshape_alias", "reshape", "view_as", "t", "t_", "transpose", "transpose_",
    "permute", "expand", "expand_as", "select", "slice", "narrow", "unsqueeze", "unsqueeze_", "squeeze",
    "squeeze_", "as_strided", "as_strided_", "detach", "detach_", "alias", "lift_fresh", "empty",
    "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize_", "resize_as_", "unbind",
    "split", "split_with_sizes", "chunk", "tensor_split", "unsafe_split", "unfold", "diagonal", "flatten",
    "unflatten", "movedim", "moveaxis", "swapaxes", "numpy_T", "real", "imag", "view_as_real",
    "view_as_complex", "resolve_conj", "resolve_neg", "conj", "_conj", "_neg_view", "set_", "record_stream",
    "broadcast_tensors", "broadcast_to", "_nested_view_from_buffer", "is_same_size", "_unsafe_split",
]


@register(*(f"aten::{n}" for n in VIEW_OPS), category="view")
def _view(call: OpCall) -> Cost:
    return Cost(0.0, 0.0)


# ---------------------------------------------------------------------------
# optimizer: _foreach_* (per list element, like the elementwise table) and fused Adam/SGD

_FOREACH_SPECIAL = {"norm", "max", "copy", "zero"}


def _foreach(call: OpCall) -> Cost:
    base = call.name[len("aten::_foreach_"):]
    inplace = base.endswith("_")
    base = base.rstrip("_")
    lists = [a for a in call.args if a.kind == TENSORS]
    if not lists or not lists[0].tensors:
        raise MissingShapes("tensor list")
    selfs = lists[0].tensors
    n = sum(t.numel for t in selfs)
    if base in ("norm", "max"):  # one 0-dim result per tensor
        per = 2 if base == "norm" else 1
        return _cost(call, per * n, [TensorSpec((), t.dtype) for t in selfs])
    if base == "copy":
        return Cost(0.0, _bytes(selfs) + _bytes(lists[1].tensors if len(lists) > 1 else ()))
    if base == "zero":
        return Cost(0.0, _bytes(selfs))
    per = ELEMENTWISE[base][0]
    outs = [s for a in call.args if a.mutable for s in a.specs] if inplace else [t.like() for t in selfs]
    return _cost(call, per * n, outs or list(selfs))


@register("aten::_fused_adam_", "aten::_fused_adamw_", "aten::_fused_adam", "aten::_fused_adamw",
          category="optimizer")
def _fused_adam(call: OpCall) -> Cost:
    params, grads, m, v, vmax, steps = (call.arg("", i) for i in range(6))
    if params is None or not params.tensors:
        raise MissingShapes("tensor list")
    n = sum(t.numel for t in params.tensors)
    amsgrad = bool(vmax and vmax.tensors)
    wd = call.value("weight_decay", 9, 0.0)
    unscale = call.tensor("grad_scale", 13) is not None
    # decay 1 (adamw) / 2 (adam: g += wd*p), m lerp 3, v update 4, denom sqrt+div+add 3, update 3
    per = 13 + (wd != 0) * (1 if "adamw" in call.name else 2) + amsgrad + unscale
    rw = params.tensors + m.tensors + v.tensors + (vmax.tensors if amsgrad else ())  # type: ignore[union-attr]
    total = 2 * _bytes(rw) + _bytes(grads.tensors) * (2 if unscale else 1)  # type: ignore[union-attr]
    total += _bytes(steps.tensors if steps else ()) + _bytes([t for a in call.args[6:] for t in a.specs])
    return Cost(float(per * n), total)


@register("aten::_fused_sgd_", "aten::_fused_sgd", category="optimizer")
def _fused_sgd(call: OpCall) -> Cost:
    params, grads, bufs = (call.arg("", i) for i in range(3))
    if params is None or not params.tensors:
        raise MissingShapes("tensor list")
    n = sum(t.numel for t in params.tensors)
    momentum = bool(bufs and bufs.tensors) and call.value("momentum", 4, 1.0) != 0
    wd = call.value("weight_decay", 3, 0.0) != 0
    per = 2 + 2 * wd + 2 * momentum  # update 2, decay 2, momentum 2
    total = 2 * _bytes(params.tensors) + _bytes(grads.tensors)  # type: ignore[union-attr]
    if momentum:
        total += 2 * _bytes(bufs.tensors)  # type: ignore[union-attr]
    return Cost(float(per * n), total + _bytes([t for a in call.args[3:] for t in a.specs]))


# ---------------------------------------------------------------------------
# Inductor Triton kernels (cpu_op events named after the kernel)


def _triton_formula(name: str) -> Formula:
    kind = name.split("_")[1] if name.count("_") >= 1 else ""
    if kind == "tem":
        cat = "attention" if "flex_attention" in name else "conv" if "convolution" in name else "gemm"
    else:
        cat = "reduction" if kind in ("red", "per") else "elementwise"
    return Formula(_triton, cat, cat in _TC_CATEGORIES)


def _triton(call: OpCall) -> Cost:
    # Inductor passes outputs as pointer args: each tensor arg is read or written once
    specs = [s for a in call.args for s in a.specs]
    if not specs:
        raise MissingShapes("no tensor args")
    tem = call.name.startswith("triton_tem")
    # 1 FLOP per element of the largest operand: an estimate; templates (gemm) get Inductor's kernel_flop
    return Cost(math.nan if tem else float(max(s.numel for s in specs)), _bytes(specs))


def first_float_precision(args: list[Arg]) -> str:
    """Default precision key: the first floating tensor input."""
    for a in args:
        for s in a.specs:
            if s.dtype is not None and s.dtype.kind == "float":
                return s.dtype.precision
    return ""


__all__ = [
    "DType", "DTYPES", "SCALAR_TYPE_CODES", "parse_dtype", "dtype_from_code", "promote_types", "TensorSpec",
    "Arg", "OpCall", "Cost", "Formula", "MissingShapes", "REGISTRY", "register", "lookup", "ELEMENTWISE",
    "VIEW_OPS", "broadcast_shapes", "result_type", "conv_out_shape", "first_float_precision", "UNKNOWN",
    "TENSOR", "TENSORS", "SCALAR", "NONE", "TENSORLIST_DTYPE",
]
