"""Kineto dtype strings -> :class:`DType`, and torch's type promotion (pure Python: no torch import)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import Any, Protocol


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


class Typed(Protocol):
    """What promotion reads of a tensor (records.TensorSpec): a structural type, as records.py imports this
    module."""
    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> DType | None: ...


def result_type(tensors: list[Typed], scalars: list[Any]) -> DType | None:
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
