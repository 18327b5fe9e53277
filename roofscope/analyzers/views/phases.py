"""Training phases from the trace's structure: forward, backward, optimizer, data,
communication, other.

Regions are the user's own labels (``record_function``); phases are what the work *is*,
read from how PyTorch itself records it, so they hold for loops written by others:

* **communication**: collective ops (``c10d::``, ``nccl:``, ``record_param_comms``) and
  NCCL kernels.
* **data**: host-to-device copies and the ops under a ``DataLoader`` iteration span.
* **backward**: ops under ``autograd::engine::evaluate_function: ...`` (every backward node
  the autograd engine runs, on its device threads or, on CPUs, the calling thread) and
  anything else on an autograd engine thread.
* **optimizer**: the optimizer's *own* work: ops inside ``Optimizer.step#`` and
  ``Optimizer.zero_grad#`` spans that start after the last backward op inside the span
  ends, and multi-tensor (``_foreach_``) or fused optimizer ops anywhere outside backward
  (gradient clipping, ``zero_grad``). When a framework passes a closure to
  ``optimizer.step(closure)`` (Lightning), the closure's forward and backward run inside
  the span; they stay forward and backward.
* **forward**: the remaining ops of a step that start before its last backward op starts
  (the loss included; several micro-batches too), or all of them when the step has no
  backward (inference).
* **other**: what is left (logging, ``.item()``, work after the optimizer, ops outside steps).

A kernel takes its launching op's phase; a kernel launched outside any op takes its
launch thread's (an engine thread: backward), or its category's (NCCL, host-to-device copy).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from roofscope.analyzers.ingest.frames import steps_at
from roofscope.analyzers.ingest.linking import ancestor_where, enclosing, interval_parents, take
from roofscope.analyzers.ingest.names import per_name
from roofscope.analyzers.model.trace import Trace

PHASES = ("forward", "backward", "optimizer", "data", "communication", "other")

_EVALUATE = "autograd::engine::evaluate_function"
_COMM_OPS = r"^(?:c10d::|nccl:|record_param_comms|ProcessGroupNCCL|c10d_functional::|_c10d_functional::)"
# FSDP2 copies parameters in and out with _foreach_copy_: that is not optimizer work.
_OPTIMIZER_OPS = r"^aten::_foreach_(?!copy_)|^aten::_fused_(?:adam|adamw|sgd|adagrad)"
_OPTIMIZER_SPANS = ("Optimizer.step#", "Optimizer.zero_grad#")
_DATA_SPANS = ("enumerate(DataLoader)",)


def _spans_around(trace: Trace, prefixes: tuple[str, ...]) -> np.ndarray:
    """Per op: the row in ``trace.annotations`` of the innermost span on its thread whose
    name starts with one of ``prefixes`` and that contains it, or -1."""
    a, ops = trace.annotations, trace.ops
    if not len(a) or not len(ops):
        return np.full(len(ops), -1, dtype=np.int64)
    sel = np.flatnonzero(per_name(a["name"], lambda s: s.str.startswith(prefixes)))
    if not sel.size:
        return np.full(len(ops), -1, dtype=np.int64)
    th, st, en = (a[c].to_numpy()[sel] for c in ("thread", "ts_ns", "end_ns"))
    found = enclosing(th, st, en, interval_parents(th, st, en), ops["thread"].to_numpy(),
                      ops["ts_ns"].to_numpy(), ops["end_ns"].to_numpy())
    return np.where(found >= 0, sel[np.maximum(found, 0)], -1)


def op_phases(trace: Trace) -> np.ndarray:
    """Phase name of every row of ``trace.ops`` (see the module docstring)."""
    ops = trace.ops
    n = len(ops)
    out = np.full(n, "other", dtype=object)
    if not n:
        return out
    names = ops["name"]
    parent = ops["parent"].to_numpy()
    thread = ops["thread"].to_numpy()
    ts = ops["ts_ns"].to_numpy()

    evaluate = per_name(names, lambda s: s.str.startswith(_EVALUATE))
    backward = ancestor_where(parent, np.arange(n), evaluate) >= 0
    step_threads = _step_threads(trace)
    engine_threads = np.setdiff1d(np.unique(thread[evaluate]), step_threads)
    backward |= np.isin(thread, engine_threads)

    comm = per_name(names, lambda s: s.str.contains(_COMM_OPS, regex=True))
    data = _spans_around(trace, _DATA_SPANS) >= 0

    step = steps_at(trace.annotations, ts)
    # Per step: the start of its last backward op and the end of each optimizer span's closure.
    bw = pd.DataFrame({"step": step[backward], "ts": ts[backward]})
    last_bw_start = bw.groupby("step")["ts"].max()
    span = _spans_around(trace, _OPTIMIZER_SPANS)
    closure_end = _closure_ends(trace, span, backward)
    in_opt_span = span >= 0
    own_opt = in_opt_span & (ts >= take(closure_end, span, 0))
    named = per_name(names, lambda s: s.str.contains(_OPTIMIZER_OPS, regex=True))
    named = ancestor_where(parent, np.arange(n), named) >= 0  # the ops below a foreach op too
    optimizer = (own_opt | named) & ~backward

    before_last_bw = ts < last_bw_start.reindex(step).to_numpy(dtype=float)
    no_bw = ~np.isin(step, last_bw_start.index.to_numpy())
    forward = (step >= 0) & (before_last_bw | no_bw) & ~backward & ~optimizer

    # Later assignments win: the order is the priority, lowest first.
    out[forward] = "forward"
    out[optimizer] = "optimizer"
    out[backward] = "backward"
    out[data] = "data"
    out[comm] = "communication"
    # A child inherits a higher-priority parent's phase (the ops under a collective or a
    # DataLoader span are that phase even when their own names say nothing).
    strong = np.isin(out, ("communication", "data"))
    anc = ancestor_where(parent, np.arange(n), strong)
    out = np.where(anc >= 0, out[np.maximum(anc, 0)], out)
    return out


def _step_threads(trace: Trace) -> np.ndarray:
    a = trace.annotations
    if not len(a):
        return np.zeros(0, dtype=np.int64)
    return np.unique(a["thread"].to_numpy()[per_name(a["name"], lambda s: s.str.startswith("ProfilerStep#"))])


def _closure_ends(trace: Trace, span: np.ndarray, backward: np.ndarray) -> np.ndarray:
    """Per annotation row: the end of the last backward op that runs inside that optimizer
    span's time (on any thread: a closure's backward runs on the engine's threads), else the
    span's start (no closure: everything in the span is the optimizer's)."""
    a, ops = trace.annotations, trace.ops
    out = a["ts_ns"].to_numpy().copy() if len(a) else np.zeros(0, dtype=np.int64)
    spans = np.unique(span[span >= 0])
    if not spans.size or not backward.any():
        return out
    s0, s1 = a["ts_ns"].to_numpy()[spans], a["end_ns"].to_numpy()[spans]
    order = np.argsort(s0, kind="stable")
    s0, s1, spans = s0[order], s1[order], spans[order]
    bts, bend = ops["ts_ns"].to_numpy()[backward], ops["end_ns"].to_numpy()[backward]
    j = np.searchsorted(s0, bts, side="right") - 1
    inside = (j >= 0) & (bend <= s1[np.maximum(j, 0)])
    if inside.any():
        last = pd.Series(bend[inside]).groupby(spans[j[inside]]).max()
        out[last.index.to_numpy()] = last.to_numpy()
    return out


def kernel_phases(trace: Trace, kernels: pd.DataFrame, op_phase: np.ndarray | None = None) -> np.ndarray:
    """Phase of every row of ``kernels`` (GPU activities with ``op``/``launch``/``category``
    columns, or the CPU work items of a CPU-only trace)."""
    op_phase = op_phases(trace) if op_phase is None else op_phase
    out = take(op_phase, kernels["op"].to_numpy(), "other").astype(object)
    if "launch" in kernels and len(trace.runtime):
        unlinked = kernels["op"].to_numpy() < 0
        launch_thread = take(trace.runtime["thread"].to_numpy(), kernels["launch"].to_numpy(), -1)
        ops = trace.ops
        evaluate = per_name(ops["name"], lambda s: s.str.startswith(_EVALUATE))
        engine = np.setdiff1d(np.unique(ops["thread"].to_numpy()[evaluate]), _step_threads(trace))
        out[unlinked & np.isin(launch_thread, engine)] = "backward"
    names = kernels["name"]
    if "category" in kernels:
        out[(kernels["category"] == "communication").to_numpy()] = "communication"
        htod = ((kernels["category"] == "memcpy").to_numpy()
                & per_name(names, lambda s: s.str.contains("HtoD|Host -> Device")))
        out[htod] = "data"
    return out


def phase_table(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per phase of the placed ``kernels`` (index, in :data:`PHASES` order, phases without work left
    out): ``time_s`` (kernel time per step, or CPU op time on CPU-only traces), ``share`` of it,
    ``kernels`` per step, FLOPs and bytes per step, and the time per roofline class (``<class>_s``)."""
    k = kernels
    in_steps = k["step"] >= 0
    steps = max(1, int(k.loc[in_steps, "step"].nunique())) if in_steps.any() else 1
    k = k[in_steps] if in_steps.any() else k
    k = k[k["dur_s"].notna()]
    g = k.groupby("phase")
    t = pd.DataFrame({"time_s": g["dur_s"].sum() / steps, "kernels": g.size() / steps,
                      "flops": g["flops"].sum() / steps, "bytes": g["bytes"].sum() / steps})
    total = float(t["time_s"].sum())
    t["share"] = t["time_s"] / total if total > 0 else 0.0
    by_cls = k.groupby(["phase", "cls"])["dur_s"].sum().unstack("cls", fill_value=0.0) / steps
    for c in by_cls.columns:
        t[f"{c}_s"] = by_cls[c]
    return t.reindex([p for p in PHASES if p in t.index])


def phase_summary(t: pd.DataFrame) -> dict[str, dict[str, float]]:
    """A :func:`phase_table` as a JSON-ready dict (for summary.json)."""
    return {str(p): {c: float(v) for c, v in row.items()} for p, row in t.iterrows()}
