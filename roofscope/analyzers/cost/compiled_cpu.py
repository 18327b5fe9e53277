"""Inductor's C++ kernels on a CPU: the time a compiled graph spends in code no op records.

Under ``torch.compile`` on a CPU, Inductor fuses pointwise and reduction work into C++ kernels that
its wrapper calls directly: the profiler records them as no op of their own, only as the time the
graph's ``## Call CompiledFxGraph <hash> ##`` annotation spends outside the ops it does record (the
extern GEMMs, copies). A compiled MLP's profiled ops summed to 23.8 ms of a 39.6 ms step while the
analysis said "Cost coverage: 100.0%": the fused kernels' 15.8 ms were not listed at all.

:func:`fused_kernel_items` turns each call's own time into a work item of the CPU roofline. The
trace records neither the fused kernels' shapes nor their names (Inductor's
``config.cpp.enable_kernel_profile`` would name them, still without shapes), so the items carry no
cost: they count as uncosted (``compiled_no_metadata``) and the coverage says how much time that is.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from roofscope.analyzers.model.trace import Trace

GRAPH_CALL = "## Call CompiledFxGraph"
FUSED_NAME = "Inductor C++ kernels"


def fused_kernel_items(trace: Trace) -> pd.DataFrame:
    """One row per ``## Call CompiledFxGraph`` annotation with time outside its recorded ops:
    ``name`` (:data:`FUSED_NAME` and the graph's hash), ``op_name`` (the annotation), ``ts_ns`` and
    ``end_ns`` (the call's span), ``dur_ns`` (its own time: the span less its outermost ops on its
    thread), ``tid``, ``thread``."""
    ann = trace.annotations
    empty = pd.DataFrame({"name": pd.Series([], dtype=object), "op_name": pd.Series([], dtype=object),
                          "ts_ns": pd.Series([], dtype=np.int64), "end_ns": pd.Series([], dtype=np.int64),
                          "dur_ns": pd.Series([], dtype=np.int64), "tid": pd.Series([], dtype=object),
                          "thread": pd.Series([], dtype=np.int64)})
    if not len(ann):
        return empty
    calls = ann[ann["name"].astype(str).str.startswith(GRAPH_CALL).to_numpy()]
    if not len(calls):
        return empty
    ops = trace.ops
    thread, ts, end = (ops[c].to_numpy() for c in ("thread", "ts_ns", "end_ns"))
    parent = ops["parent"].to_numpy()
    rows = []
    for name, th, tid, t0, t1 in calls[["name", "thread", "tid", "ts_ns", "end_ns"]].itertuples(index=False):
        inside = (thread == th) & (ts >= t0) & (end <= t1)
        # the outermost ops inside: their parent, if any, lies outside the call
        top = inside & ~np.where(parent >= 0, inside[np.maximum(parent, 0)], False)
        own = int(t1 - t0) - int((end[top] - ts[top]).sum())
        if own > 0:
            graph = str(name)[len(GRAPH_CALL):].strip(" #")
            rows.append((f"{FUSED_NAME} ({graph[:12]})", str(name), int(t0), int(t1), own, tid, th))
    if not rows:
        return empty
    return pd.DataFrame(rows, columns=list(empty.columns))

