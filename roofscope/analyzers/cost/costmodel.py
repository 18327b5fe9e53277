"""Costs (FLOPs, compulsory bytes, precision, category) of each distinct op signature.

The trace layer collapses a million op events into a few thousand signatures; this
module parses each signature's recorded arguments (Kineto ``Input Dims`` / ``Input
type`` / ``Input Strides`` / ``Concrete Inputs``), binds them to the op's schema
(argument names, which arguments are written), and applies the formula registered in
:mod:`roofscope.analyzers.cost.formulas`.  Output shapes come from each formula's exact rule (padding,
repeat and upsampling from :mod:`roofscope.analyzers.cost.shapes`); schemas come from a table
shipped with roofscope (:mod:`.schemas`). Nothing here imports torch.  Results are cached per
signature.

A bad signature never aborts the analysis: it is reported as ``no_formula`` (formula
raised) or ``no_shapes`` (shapes or needed scalars not recorded), never invented.
"""

from __future__ import annotations

import logging
import math
from functools import lru_cache
from typing import Any

import pandas as pd

from roofscope.analyzers.cost import formulas as cf
from roofscope.analyzers.cost.schemas import Param, overloads
from roofscope.analyzers.cost.shapes import holdable

log = logging.getLogger(__name__)

COLUMNS = ["flops", "bytes", "dtype", "tensor_core", "category", "reason", "source", "estimate", "flops_lo",
           "flops_hi", "bytes_lo", "bytes_hi"]
_INPUT_COLUMNS = ("name", "input_dims", "input_types", "input_strides", "concrete_inputs")
_CACHE: dict[tuple, tuple] = {}
_CACHE_MAX = 200_000

Row = tuple[float, float, str, bool, str, str, str, str, float, float, float, float]
_NAN = math.nan
_EXACT = ("formula", "", _NAN, _NAN, _NAN, _NAN)  # source, estimate and bounds of a cost from its own formula
_NONE = ("none", "", _NAN, _NAN, _NAN, _NAN)


def signature_costs(signatures: pd.DataFrame) -> pd.DataFrame:
    """One row of costs per signature (same index); see docs/cost-model.md."""
    n = len(signatures)
    cols = [signatures[c].tolist() if c in signatures.columns else [None] * n for c in _INPUT_COLUMNS]
    rows = [cost_signature(*r) for r in zip(*cols)]
    out = pd.DataFrame.from_records(rows, columns=COLUMNS, index=signatures.index) if rows else \
        pd.DataFrame({c: [] for c in COLUMNS}, index=signatures.index)
    return out.astype({"flops": "float64", "bytes": "float64", "tensor_core": "bool", "flops_lo": "float64",
                       "flops_hi": "float64", "bytes_lo": "float64", "bytes_hi": "float64"})


def cost_signature(name: Any, dims: Any, types: Any, strides: Any = None, concrete: Any = None) -> Row:
    """Cost of one signature, cached on its frozen arguments."""
    try:
        key = (name, _freeze(dims), _freeze(types), _freeze(strides), _freeze(concrete))
        hash(key)
    except Exception:  # unhashable garbage: cost it uncached (it will be reported, not raised)
        return _compute(name, None, None, None, None)
    hit = _CACHE.get(key)
    if hit is None:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        hit = _CACHE[key] = _compute(*key)
    return hit


def _freeze(x: Any) -> Any:
    if x is None or isinstance(x, (str, int, float, bool)):
        return None if isinstance(x, float) and math.isnan(x) else x
    if hasattr(x, "tolist") and not isinstance(x, (list, tuple)):
        x = x.tolist()  # numpy arrays after a parquet round trip
    if isinstance(x, (list, tuple)):
        return tuple(_freeze(v) for v in x)
    return x


def _compute(name: Any, dims: Any, types: Any, strides: Any, concrete: Any) -> Row:
    formula = cf.lookup(name)
    prec = _type_precision(types)
    if formula is None:
        return (math.nan, math.nan, prec, False, "other", "no_formula", *_NONE)
    cat, tc = formula.category, formula.tensor_core
    if cat == "view":
        return (0.0, 0.0, prec, False, cat, "", *_EXACT)
    if not isinstance(dims, tuple) or not dims or not isinstance(types, tuple) or len(dims) != len(types):
        return (math.nan, math.nan, prec, tc, cat, "no_shapes", *_NONE)
    try:
        call = build_call(name, dims, types, strides, concrete)
        cost = formula.fn(call)
        flops, nbytes = float(cost.flops), float(cost.bytes)   # OverflowError past a float's range
    except cf.MissingShapes as e:
        log.debug("no shapes for %s: %s", name, e)
        return (math.nan, math.nan, prec, tc, cat, "no_shapes", *_NONE)
    except Exception as e:  # a formula bug, a malformed signature, no family fitting it: report, never raise
        log.debug("cost formula for %s failed on %r %r: %r", name, dims, types, e)
        return (math.nan, math.nan, prec, tc, cat, "no_formula", *_NONE)
    if math.isinf(flops) or math.isinf(nbytes):   # a scalar argument past a float's range (1e400)
        return (math.nan, math.nan, prec, tc, cat, "no_formula", *_NONE)
    return cost_row(cost, cf.first_float_precision(call.args), cat, tc)


def cost_row(cost: cf.Cost, precision: str, category: str, tensor_core: bool) -> Row:
    """A formula's Cost as a row of :data:`COLUMNS` (``precision``, ``category`` and ``tensor_core``:
    the formula's, where the cost does not override them)."""
    b = cost.bounds or (_NAN, _NAN, _NAN, _NAN)
    return (float(cost.flops), float(cost.bytes), cost.dtype if cost.dtype is not None else precision,
            tensor_core if cost.tensor_core is None else cost.tensor_core, cost.category or category, "",
            cost.source or "formula", cost.estimate, *map(float, b))


def missing_argument(name: Any, dims: Any, types: Any, concrete: Any = None) -> str:
    """What a ``no_shapes`` signature lacks, as its formula says (MissingShapes' message)."""
    formula = cf.lookup(name)
    dims, types, concrete = _freeze(dims), _freeze(types), _freeze(concrete)
    if formula is None:
        return ""
    if not isinstance(dims, tuple) or not dims or not isinstance(types, tuple) or len(dims) != len(types):
        return "no Input Dims recorded"
    try:
        formula.fn(build_call(name, dims, types, None, concrete))
    except cf.MissingShapes as e:
        return str(e)
    except Exception:
        return ""
    return ""


freeze = _freeze  # signatures' list values as the hashable tuples build_call takes


def _type_precision(types: Any) -> str:
    for t in types if isinstance(types, tuple) else ():
        dt = cf.parse_dtype(t) if isinstance(t, str) else None
        if dt is not None and dt.kind == "float":
            return dt.precision
    return ""


# ---------------------------------------------------------------------------
# parsing


def parse_concrete(s: str) -> tuple[bool, Any]:
    """Kineto ``Concrete Inputs`` entry -> (known, value). "" means not recorded."""
    s = s.strip()
    if not s:
        return False, None
    if s in ("True", "False"):
        return True, s == "True"
    if s == "None":
        return True, None
    if s[0] == "[" and s[-1] == "]":
        body = s[1:-1].strip()
        items = [parse_concrete(p) for p in body.split(",")] if body else []
        return (True, [v for _, v in items]) if all(k for k, _ in items) else (False, None)
    try:
        return True, int(s)
    except ValueError:
        pass
    try:
        return True, float(s)
    except ValueError:
        return True, s  # a string argument (e.g. an approximate= mode)


def _spec(shape: Any, dtype: cf.DType | None, strides: Any) -> cf.TensorSpec:
    shp = holdable(tuple(int(d) for d in shape))
    st = tuple(int(d) for d in strides) if isinstance(strides, tuple) and len(strides) == len(shp) else None
    return cf.TensorSpec(shp, dtype, st)


def _kind_code(t: str) -> str:
    return {"TensorList": "L", "GenericList": "G", "ScalarList": "SL", "Scalar": "S", "": "N"}.get(t, "T")


def build_call(name: str, dims: tuple, types: tuple, strides: Any = None, concrete: Any = None) -> cf.OpCall:
    """Parse one signature into an OpCall bound (when possible) to the op's schema."""
    has_concrete = isinstance(concrete, tuple) and len(concrete) == len(types)
    st = strides if isinstance(strides, tuple) and len(strides) == len(types) else None
    args: list[cf.Arg] = []
    for i, t in enumerate(types):
        d, s = dims[i], (st[i] if st else None)
        c = concrete[i] if has_concrete else None
        code = _kind_code(t)
        if code == "L":
            if d and not all(isinstance(x, tuple) for x in d):
                raise ValueError(f"malformed TensorList dims {d!r}")
            d = d or ()
            ss = s if isinstance(s, tuple) and len(s) == len(d) else (None,) * len(d)
            args.append(cf.Arg(cf.TENSORS, tensors=tuple(_spec(x, cf.TENSORLIST_DTYPE, y) for x, y in zip(d, ss))))
        elif code in ("S", "SL", "G"):
            known, val = parse_concrete(c) if isinstance(c, str) else (False, None)
            args.append(cf.Arg(cf.SCALAR, value=val, known=known))
        elif code == "N":
            args.append(cf.Arg(cf.NONE, known=has_concrete))  # old traces also leave int lists blank
        else:
            if d is None:
                raise cf.MissingShapes(f"arg {i}")
            args.append(cf.Arg(cf.TENSOR, tensor=_spec(d, cf.parse_dtype(t), s)))
    call = cf.OpCall(name, args)
    bound = _binding(name, tuple(_kind_code(t) for t in types)) if name.startswith("aten::") else None
    if bound is not None:
        call.bound = True
        for a, p in zip(args, bound):
            a.name, a.mutable, a.write_only = p.name, p.mutable, p.write_only
            if a.kind == cf.NONE and p.tensor_slot:
                a.known = True  # a tensor slot recorded without a dtype is an undefined tensor
    elif name.endswith("_") and args and args[0].kind in (cf.TENSOR, cf.TENSORS):
        args[0].mutable = True  # unbound in-place op: it writes self
    return call


# ---------------------------------------------------------------------------
# schema binding (from the shipped table: no torch import; see schemas.py)


@lru_cache(maxsize=8192)
def _binding(name: str, kinds: tuple[str, ...]) -> tuple[Param, ...] | None:
    """The params of the first overload whose arity and argument kinds match the recorded ones
    (strictly, else as older Kineto versions recorded them); None if none does."""
    candidates = [ps for _, ps in overloads(name) if len(ps) == len(kinds)]
    for attr in ("kinds", "loose"):
        for params in candidates:
            if all(k in getattr(p, attr) for k, p in zip(kinds, params)):
                return params
    return None


def clear_cache() -> None:
    _CACHE.clear()


__all__ = ["signature_costs", "cost_signature", "build_call", "parse_concrete", "clear_cache", "COLUMNS",
           "missing_argument", "freeze", "cost_row"]
