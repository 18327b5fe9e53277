"""Op shapes the rules look at: GEMM dimensions and tensor sizes, from the trace's signatures.

Lookups go per signature (a few thousand), never per kernel.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from roofscope.analyzers.ingest.linking import take
from roofscope.analyzers.model.trace import INT64_MAX, Trace

# GEMM ops and how their inputs give (M, N, K); linear's weight is stored (N, K).
_GEMM_LAYOUT = {"aten::mm": "mm", "aten::addmm": "addmm", "aten::bmm": "mm", "aten::baddbmm": "addmm",
                "aten::matmul": "mm", "aten::linear": "linear", "aten::_scaled_mm": "mm", "aten::_int_mm": "mm"}


def gemm_mnk(name: str, dims: Any) -> tuple[int, int, int] | None:
    """(M, N, K) of a GEMM op call, batch and leading dims folded into M; None if unknown or past
    int64 (no tensor has such a dim: a Trace built in-process, which ingest did not check)."""
    layout = _GEMM_LAYOUT.get(name)
    if layout is None or not isinstance(dims, list):
        return None
    shapes = [d for d in dims if isinstance(d, list) and d]
    try:
        if layout == "mm":
            a, b = shapes[0], shapes[1]
        elif layout == "addmm":
            a, b = shapes[1], shapes[2]
        else:  # linear(input [..., K], weight [N, K])
            a, b = shapes[0], shapes[1][::-1]
        if layout != "linear" and (len(a) < 2 or len(b) < 2):
            return None
        mnk = math.prod(a[:-1]), int(b[-1]), int(a[-1])
    except (IndexError, TypeError, ValueError, OverflowError):
        return None
    return mnk if all(abs(x) <= INT64_MAX for x in mnk) else None


def op_dims(trace: Trace, ops: np.ndarray) -> list[Any]:
    """Input dims of each op row (None for -1 or no shapes)."""
    sig = np.where(ops >= 0, trace.ops["sig"].to_numpy()[np.maximum(ops, 0)], -1)
    table = trace.signatures["input_dims"].to_numpy(dtype=object)
    return [table[s] if s >= 0 else None for s in sig]


def first_numel(dims: Any) -> int | None:
    """Element count of an op's first tensor input (of the first tensor of a TensorList
    argument, whose dims are nested: ``[[[5, 128], [5, 128]], ...]``); None when unknown."""
    first = dims[0] if isinstance(dims, list) and dims else None
    while isinstance(first, list) and first and isinstance(first[0], list):
        first = first[0]
    if isinstance(first, list) and first and all(type(x) is int for x in first):
        return math.prod(first)
    return None


def gemm_table(trace: Trace, k: pd.DataFrame) -> pd.DataFrame:
    """GEMM kernels of ``k`` with their cost op's M, N, K (rows with unknown shapes dropped)."""
    g = k[k["category"] == "gemm"]
    if not len(g):
        return g.assign(m=[], n=[], kk=[])
    ops = g["cost_op"].to_numpy() if "cost_op" in g else g["op"].to_numpy()
    # take(): a replay-only trace has no ops at all (its GEMMs are costed from a capture's)
    names = take(trace.ops["name"].astype(str).to_numpy(dtype=object), ops, "")
    pairs = pd.DataFrame({"name": names, "sig": take(trace.ops["sig"].to_numpy(), ops, -1)})
    codes = pairs.groupby(["name", "sig"], sort=False).ngroup().to_numpy()
    table = trace.signatures["input_dims"].to_numpy(dtype=object)
    per_sig = [gemm_mnk(n, table[s]) if s >= 0 else None for n, s in pairs.drop_duplicates().itertuples(index=False)]
    arr = np.array([x or (-1, -1, -1) for x in per_sig], dtype=np.int64).reshape(-1, 3)[codes]
    out = g.assign(m=arr[:, 0], n=arr[:, 1], kk=arr[:, 2])
    return out[out["m"] >= 0]
