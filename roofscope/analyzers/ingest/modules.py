"""Which ``nn.Module`` each op ran for, from the labels ``--modules`` records.

Forward ops sit inside the module's ``nn.Module: <name>`` annotation on their own
thread. Backward ops run later, on autograd's thread, outside any label; autograd
gives each backward node the *sequence number* of the forward op that created it,
so a backward op inherits the module of the forward op with the same number.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from roofscope.analyzers.ingest.linking import ancestor_where, enclosing, interval_parents, take
from roofscope.analyzers.ingest.names import per_name
from roofscope.analyzers.model.trace import MODULE_PREFIX, Trace

_BACKWARD_PREFIX = "autograd::engine::evaluate_function: "


def has_modules(trace: Trace) -> bool:
    a = trace.annotations
    return bool(len(a)) and bool(per_name(a["name"], lambda s: s.str.startswith(MODULE_PREFIX)).any())


def op_modules(trace: Trace) -> np.ndarray:
    """Qualified module name of every op (``""`` where none), as an object array."""
    ops, ann = trace.ops, trace.annotations
    result = np.full(len(ops), "", dtype=object)
    if not len(ops) or not has_modules(trace):
        return result
    labels = ann[ann["name"].astype(str).str.startswith(MODULE_PREFIX)]
    th, st, en = (labels[c].to_numpy() for c in ("thread", "ts_ns", "end_ns"))
    names = labels["name"].astype(str).str.slice(len(MODULE_PREFIX)).to_numpy(dtype=object)
    found = enclosing(th, st, en, interval_parents(th, st, en), ops["thread"].to_numpy(),
                      ops["ts_ns"].to_numpy(), ops["end_ns"].to_numpy())
    result[:] = take(names, found, "")

    # Backward: nearest evaluate_function ancestor -> its sequence number -> forward op's module.
    seq = ops["seq"].to_numpy(dtype=np.float64, na_value=np.nan)
    is_bwd = per_name(ops["name"], lambda s: s.str.startswith(_BACKWARD_PREFIX)) & ~np.isnan(seq)
    if not is_bwd.any():
        return result
    fwd = ~is_bwd & ~np.isnan(seq) & (result != "")
    # An outer composite op repeats its first child's number; both sit in the same
    # module label (labels enclose whole ops), so any of them gives the answer.
    fwd_module = pd.Series(result[fwd], index=seq[fwd].astype(np.int64))
    fwd_module = fwd_module[~fwd_module.index.duplicated()]
    unlabelled = np.flatnonzero(result == "")
    node = ancestor_where(ops["parent"].to_numpy(), unlabelled, is_bwd)
    ok = node >= 0
    lookup = fwd_module.reindex(seq[node[ok]].astype(np.int64)).fillna("").to_numpy(dtype=object)
    result[unlabelled[ok]] = lookup
    return result


def module_column(trace: Trace, op_index: np.ndarray) -> np.ndarray:
    """Module of each row whose op is ``op_index`` (-1: no op -> ``""``)."""
    return take(op_modules(trace), np.asarray(op_index, dtype=np.int64), "")
