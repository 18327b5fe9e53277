"""GPU timeline of a trace: busy and idle time per step, idle gaps and their causes,
host-device synchronizations, copies by direction and the kernel-duration distribution.

Definitions (all times on the trace clock; GPU activity = ``kernel``, ``gpu_memcpy`` and
``gpu_memset`` rows; CUPTI counter ranges are not timed and are left out):

* **Window**: a step's ``[ts_ns, end_ns]`` from the step table passed in (``ProfilerStep#N``
  spans, or :func:`.metrics.step_table`'s, which measures them on the GPU). Without steps, one pseudo-step
  ``-1`` from the first activity's start to the last one's end. Activities are clipped to it.
* **busy**: length of the union of all activity intervals of a device, over all its streams,
  inside the window (overlapping streams count once); **idle** = wall - busy.
* **kernels**: activities (kernels, copies, memsets) starting in the window.
* **memcpy / memset**: summed time of copies / memsets inside the window.
* **comm**: union time of ``communication`` activities (NCCL); **comm exposed**: the part of it
  during which no other activity runs (= busy(all) - busy(non-communication)).
* **launch API**: summed duration of kernel/graph launch, ``cudaMemcpyAsync`` and
  ``cudaMemsetAsync`` runtime calls (and their HIP and driver-API twins: runtime_names.py)
  starting in the window (host time spent launching).
* **Gaps**: maximal idle intervals of a device inside a window. The leading one (window start to
  first activity) and the trailing one (last activity to window end) are ``edge``. An interior gap
  is judged by the activity that ends it (the first to start at the gap's end):
  ``host`` when its launch call ended after the gap began (the GPU ran dry waiting for the CPU),
  ``queued`` when it was launched before the gap began and the gap is shorter than 10 us (launch
  latency between queued work), ``other`` otherwise (cross-stream or event waits, syncs, or no
  launch event). ``after_sync`` marks gaps near a host sync: one ended during the gap or at most
  50 us before it began (a sync returns just after the GPU drains, so its bubble usually *contains*
  the sync's end; a gap right after it is the queue refilling).
* **Host syncs** (inside windows): runtime calls ``cudaStreamSynchronize`` (``stream_sync``),
  ``cudaDeviceSynchronize`` (``device_sync``), ``cudaEventSynchronize`` (``event_sync``),
  synchronous ``cudaMemcpy`` (``memcpy_sync``), and the HIP twins of each (``hipMemcpyWithStream``
  is ROCm's blocking copy); ops ``aten::item`` / ``aten::_local_scalar_dense``
  that reach the GPU (a runtime call or GPU activity below them: ``.item()`` of a CPU tensor is no
  sync) (``item``); ``aten::to`` / ``aten::_to_copy`` / ``aten::copy_`` that launched a DtoH copy
  (``dtoh_copy``). Nested ones count once, as the outermost op; runtime syncs inside a counted op
  belong to it. ``cudaStreamWaitEvent`` is a device-side wait, not a host sync.
* **Copies by direction** (``HtoD``, ``DtoH``, ``DtoD``, ``PtoP``, ``HtoH``, ``memset``, ``other``,
  from Kineto's names such as ``Memcpy HtoD (Pageable -> Device)``), over copies starting in a
  window: count, time, bytes (the kernels frame's ``bytes``: a DtoD copy counts its size twice, read
  and written), pageable count and time, and **exposed** time: copy time during which no kernel of
  the same device runs (kernels of the copy's own stream cannot run beside it).
* **Kernel durations** (``kernel`` rows starting in a window): percentiles and buckets;
  **launch overhead** per step = kernels in the step x launch latency (measured by
  ``roofscope microbench`` when known, else an assumed 5 us).

Several GPUs in one trace: each device is computed on its own; ``steps`` and ``overall`` carry
the sums over devices (wall included, so fractions are device-averaged) and ``overall``
gains ``per_device``. Host-side columns (launch API, syncs) count once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from roofscope.analyzers.ingest.linking import ancestor_where, take
from roofscope.analyzers.ingest.names import lookup, per_name
from roofscope.analyzers.ingest.runtime_names import HOST_SYNCS, LAUNCHES, copy_direction
from roofscope.analyzers.model.timeline import (DEVICE_COLUMNS, GAP_COLUMNS, GAP_KINDS, STEP_COLUMNS, SYNC_COLUMNS,
                                                SYNC_KINDS, Timeline)
from roofscope.analyzers.model.trace import DRAIN_LABEL, GPU_CATS, Trace

QUEUED_GAP_NS = 10_000
AFTER_SYNC_NS = 50_000
ASSUMED_LAUNCH_LATENCY_S = 5e-6
BUCKETS_US = (5.0, 20.0, 100.0, 1000.0)
BUCKET_LABELS = ("<5us", "5-20us", "20-100us", "100us-1ms", ">=1ms")
LAUNCH_APIS = LAUNCHES        # CUDA and HIP names (runtime_names.py)
RUNTIME_SYNCS = HOST_SYNCS
ITEM_OPS = frozenset({"aten::item", "aten::_local_scalar_dense"})
COPY_OPS = frozenset({"aten::to", "aten::_to_copy", "aten::copy_"})
_NO_LAUNCH = np.iinfo(np.int64).min


# ---------------------------------------------------------------------------------------------
# Interval machinery


def _split(a: np.ndarray, b: np.ndarray, w_ts: np.ndarray, w_end: np.ndarray) -> tuple[np.ndarray, ...]:
    """Every (interval, window) overlap: interval index, window index, clipped start and end.

    Windows must be sorted and disjoint. A zero-length interval belongs to the window holding it.
    """
    first = np.searchsorted(w_end, a, side="left")
    last = np.searchsorted(w_ts, np.maximum(b, a + 1), side="left") - 1
    reps = np.maximum(last - first + 1, 0)
    rows = np.repeat(np.arange(len(a)), reps)
    offset = np.arange(len(rows)) - np.repeat(np.cumsum(reps) - reps, reps)
    win = first[rows] + offset
    return rows, win, np.maximum(a[rows], w_ts[win]), np.minimum(b[rows], w_end[win])


def _union(win: np.ndarray, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, ...]:
    """Disjoint busy segments per window, in (window, start) order: window, start, end, and the
    index of the interval that opens each segment. Intervals must lie inside their window."""
    keep = np.flatnonzero(e > s)
    order = keep[np.lexsort((s[keep], win[keep]))]
    if not len(order):
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, empty
    w, st, en = win[order], s[order], e[order]
    reach = np.maximum.accumulate(en)
    # Earlier windows end before this one starts, so the running maximum only needs a forced
    # break where the window changes (windows may touch).
    new = np.ones(len(w), dtype=bool)
    new[1:] = (st[1:] > reach[:-1]) | (w[1:] != w[:-1])
    idx = np.flatnonzero(new)
    last = np.append(idx[1:] - 1, len(w) - 1)
    return w[idx], st[idx], reach[last], order[idx]


def _overlap(seg_s: np.ndarray, seg_e: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Length of each [a, b] covered by the sorted disjoint segments (prefix sums, no loop)."""
    if not len(seg_s):
        return np.zeros(len(a), dtype=np.int64)
    done = np.concatenate(([0], np.cumsum(seg_e - seg_s)))

    def covered(t: np.ndarray) -> np.ndarray:  # covered length before t
        i = np.searchsorted(seg_s, t, side="right")
        inside = np.clip(t - seg_s[np.maximum(i - 1, 0)], 0, (seg_e - seg_s)[np.maximum(i - 1, 0)])
        return done[np.maximum(i - 1, 0)] + np.where(i > 0, inside, 0)

    return covered(b) - covered(a)


def in_window(t: np.ndarray, w_ts: np.ndarray, w_end: np.ndarray) -> np.ndarray:
    """Index of the window holding each time (closed spans), or -1."""
    i = np.searchsorted(w_ts, t, side="right") - 1
    ok = (i >= 0) & (t <= w_end[np.maximum(i, 0)])
    return np.where(ok, i, -1)


def _by_window(t: np.ndarray, weights: np.ndarray, w_ts: np.ndarray, w_end: np.ndarray) -> np.ndarray:
    """Sum of ``weights`` of the events at times ``t`` per window."""
    w = in_window(t, w_ts, w_end)
    return np.bincount(w[w >= 0], weights=np.asarray(weights, dtype=np.float64)[w >= 0], minlength=len(w_ts))


# ---------------------------------------------------------------------------------------------
# Per device


@dataclass
class _Activities:
    """The timed GPU activities, as arrays; ``pos`` is the row position in the kernels frame."""

    pos: np.ndarray
    ts: np.ndarray
    end: np.ndarray
    device: np.ndarray
    kernel: np.ndarray
    memcpy: np.ndarray
    memset: np.ndarray
    comm: np.ndarray
    launch_end: np.ndarray


def _device_steps(act: _Activities, sel: np.ndarray, w_ts: np.ndarray, w_end: np.ndarray,
                  step_ids: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per-window columns and the idle gaps of one device's activities ``sel``."""
    n_w = len(w_ts)
    rows, win, cs, ce = _split(act.ts[sel], act.end[sel], w_ts, w_end)
    clipped = (ce - cs).astype(np.float64)
    src = sel[rows]

    def busy_of(mask: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        seg = _union(win[mask], cs[mask], ce[mask])
        return np.bincount(seg[0], weights=seg[2] - seg[1], minlength=n_w) / 1e9, seg

    busy, (seg_w, seg_s, seg_e, seg_first) = busy_of(np.ones(len(rows), dtype=bool))
    comm = act.comm[src]
    busy_nc, _ = busy_of(~comm)
    comm_s, _ = busy_of(comm)
    wall = (w_end - w_ts) / 1e9
    cols = {
        "wall_s": wall, "busy_s": busy, "idle_s": wall - busy,
        "kernels": _by_window(act.ts[sel], np.ones(len(sel)), w_ts, w_end).astype(np.int64),
        "memcpy_s": np.bincount(win, weights=clipped * act.memcpy[src], minlength=n_w) / 1e9,
        "memset_s": np.bincount(win, weights=clipped * act.memset[src], minlength=n_w) / 1e9,
        "comm_s": comm_s, "comm_exposed_s": busy - busy_nc,
    }
    gaps = _gaps(act, src[seg_first], seg_w, seg_s, seg_e, w_ts, w_end)
    dur = (gaps["end_ns"] - gaps["start_ns"]) / 1e9
    for kind in GAP_KINDS:
        cols[f"idle_{kind}_s"] = np.bincount(gaps["win"], weights=dur * (gaps["kind"] == kind), minlength=n_w)
    gaps["step"] = step_ids[gaps.pop("win")]
    return cols, gaps


def _gaps(act: _Activities, opener: np.ndarray, seg_w: np.ndarray, seg_s: np.ndarray, seg_e: np.ndarray,
          w_ts: np.ndarray, w_end: np.ndarray) -> dict[str, np.ndarray]:
    """Interior gaps between busy segments, plus the edge gaps of every window."""
    inner = np.flatnonzero(seg_w[1:] == seg_w[:-1])
    g_start, g_end, nxt = seg_e[inner], seg_s[inner + 1], opener[inner + 1]
    # The opener's launch call ended after the GPU went idle: it was waiting for the CPU.
    launch_end = act.launch_end[nxt]
    kind = np.where(launch_end == _NO_LAUNCH, "other",
                    np.where(launch_end > g_start, "host",
                             np.where(g_end - g_start < QUEUED_GAP_NS, "queued", "other"))).astype(object)
    head = np.flatnonzero(np.diff(seg_w, prepend=-1) != 0)   # first and last segment of each window
    tail = np.flatnonzero(np.diff(seg_w, append=len(w_ts)) != 0)
    empty = np.setdiff1d(np.arange(len(w_ts)), seg_w)
    none = np.full(len(tail) + len(empty), -1, dtype=np.int64)
    win = np.concatenate((seg_w[inner + 1], seg_w[head], seg_w[tail], empty))
    out = {
        "win": win,
        "start_ns": np.concatenate((g_start, w_ts[seg_w[head]], seg_e[tail], w_ts[empty])),
        "end_ns": np.concatenate((g_end, seg_s[head], w_end[seg_w[tail]], w_end[empty])),
        "next": np.concatenate((nxt, opener[head], none)),
        "kind": np.concatenate((kind, np.full(len(head) + len(none), "edge", dtype=object))),
    }
    keep = out["end_ns"] > out["start_ns"]
    return {k: v[keep] for k, v in out.items()}


# ---------------------------------------------------------------------------------------------
# Host syncs


def _syncs(trace: Trace, kernels: pd.DataFrame, act: _Activities, rt_role: np.ndarray, w_ts: np.ndarray,
           w_end: np.ndarray, step_ids: np.ndarray) -> pd.DataFrame:
    """Host-device synchronizations inside the windows (see the module docstring)."""
    ops, rt = trace.ops, trace.runtime
    parent = ops["parent"].to_numpy()
    op_kind = lookup(ops["name"], lambda n: "item" if n in ITEM_OPS else "copy" if n in COPY_OPS else "")
    is_item, is_copy = op_kind == "item", op_kind == "copy"
    rt_op = rt["op"].to_numpy()

    def outermost(start: np.ndarray, mask: np.ndarray) -> np.ndarray:
        found = ancestor_where(parent, start, mask)
        while True:
            up = ancestor_where(parent, take(parent, found, -1), mask)
            if not (up >= 0).any():
                return found
            found = np.where(up >= 0, up, found)

    # .item() syncs only when it reaches the GPU: a runtime call or GPU activity below it.
    k_op = kernels["op"].to_numpy()[act.pos]
    reach = outermost(np.concatenate((rt_op, k_op)), is_item)
    counted = np.zeros(len(ops), dtype=bool)
    counted[reach[reach >= 0]] = True
    kind = np.where(counted, "item", "").astype(object)
    copies = np.flatnonzero(act.memcpy)
    dtoh = copies[_directions(kernels["name"].iloc[act.pos[copies]]) == "DtoH"]
    copier = outermost(k_op[dtoh], is_copy)
    copier = copier[copier >= 0]  # none at all in a trace without CPU ops (CUDA activity only)
    copier = copier[~counted[copier]]
    kind[copier] = "dtoh_copy"
    counted[copier] = True
    # An op nested in another counted op is part of that one.
    rows = np.flatnonzero(counted)
    counted[rows[ancestor_where(parent, take(parent, rows, -1), counted) >= 0]] = False
    op_rows = np.flatnonzero(counted)
    covered = ancestor_where(parent, rt_op, counted) >= 0
    rt_rows = np.flatnonzero((rt_role != "") & (rt_role != "launch") & ~covered
                             & ~_in_drain(trace.annotations, rt["ts_ns"].to_numpy(), rt["end_ns"].to_numpy()))

    sync_op = np.concatenate((op_rows, rt_op[rt_rows])).astype(np.int64)
    ts = np.concatenate((ops["ts_ns"].to_numpy()[op_rows], rt["ts_ns"].to_numpy()[rt_rows])).astype(np.int64)
    end = np.concatenate((ops["end_ns"].to_numpy()[op_rows], rt["end_ns"].to_numpy()[rt_rows])).astype(np.int64)
    # The caller is the op that asked for the value: above every item/to/copy_ wrapper.
    caller = ancestor_where(parent, np.concatenate((take(parent, op_rows, -1), rt_op[rt_rows])).astype(np.int64),
                            op_kind == "")
    win = in_window(ts, w_ts, w_end)
    inside = win >= 0
    return pd.DataFrame({
        "step": step_ids[win[inside]],
        "kind": np.concatenate((kind[op_rows], rt_role[rt_rows]))[inside],
        "name": np.concatenate((_names_at(ops["name"], op_rows), _names_at(rt["name"], rt_rows)))[inside],
        "ts_ns": ts[inside], "end_ns": end[inside], "dur_s": (end - ts)[inside] / 1e9,
        "op": sync_op[inside], "op_name": _names_at(ops["name"], sync_op[inside]),
        "caller": _names_at(ops["name"], caller[inside]),
    }, columns=list(SYNC_COLUMNS)).sort_values("ts_ns", kind="stable").reset_index(drop=True)


def _in_drain(annotations: pd.DataFrame, ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Calls inside roofscope's own drain of the GPU where recording starts and ends: the
    profiler's sync, not the workload's."""
    d = annotations[annotations["name"].astype(str) == DRAIN_LABEL].sort_values("ts_ns") if len(annotations) \
        else annotations
    if not len(d):
        return np.zeros(len(ts), dtype=bool)
    i = np.searchsorted(d["ts_ns"].to_numpy(), ts, side="right") - 1
    return (i >= 0) & (end <= d["end_ns"].to_numpy()[np.maximum(i, 0)])


def _names_at(names: pd.Series, idx: np.ndarray) -> np.ndarray:
    """The names at rows ``idx`` ("" for -1)."""
    ok = idx >= 0
    out = np.full(len(idx), "", dtype=object)
    out[ok] = names.iloc[idx[ok]].astype(str).to_numpy(dtype=object)
    return out


# ---------------------------------------------------------------------------------------------
# Copies and kernel durations


def _directions(names: pd.Series) -> np.ndarray:
    return lookup(names, copy_direction)


def _runtime_role(name: str) -> str:
    """A runtime call's sync kind, "launch" for launch APIs, else ""."""
    return RUNTIME_SYNCS.get(name, "launch" if name in LAUNCH_APIS else "")


def _copies(kernels: pd.DataFrame, act: _Activities, scope: np.ndarray) -> dict[str, dict[str, Any]]:
    """Copies and memsets starting in a window, by direction."""
    sel = np.flatnonzero(scope & (act.memcpy | act.memset))
    if not len(sel):
        return {}
    exposed = np.zeros(len(sel), dtype=np.float64)
    for dev in np.unique(act.device[sel]):
        # Kernels of the copy's own stream never run beside it, so all of the device's kernels will do.
        on = np.flatnonzero((act.device == dev) & act.kernel)
        _, seg_s, seg_e, _ = _union(np.zeros(len(on), dtype=np.int64), act.ts[on], act.end[on])
        mine = act.device[sel] == dev
        a, b = act.ts[sel[mine]], act.end[sel[mine]]
        exposed[mine] = (b - a) - _overlap(seg_s, seg_e, a, b)
    rows = kernels.iloc[act.pos[sel]]
    df = pd.DataFrame({"direction": _directions(rows["name"]), "time_s": (act.end[sel] - act.ts[sel]) / 1e9,
                       "bytes": rows["bytes"].to_numpy(dtype=np.float64),
                       "pageable": per_name(rows["name"], lambda s: s.str.contains("Pageable")).astype(bool),
                       "exposed_time_s": exposed / 1e9})
    df["pageable_time_s"] = df["time_s"] * df["pageable"]
    g = df.groupby("direction").agg(count=("time_s", "size"), time_s=("time_s", "sum"), bytes=("bytes", "sum"),
                                    pageable_count=("pageable", "sum"), pageable_time_s=("pageable_time_s", "sum"),
                                    exposed_time_s=("exposed_time_s", "sum"))
    return {d: {c: (int(v) if c.endswith("count") else float(v)) for c, v in r.items()} for d, r in g.iterrows()}


def _distribution(dur_ns: np.ndarray, n_steps: int) -> dict[str, Any]:
    us = dur_ns / 1e3
    bucket = np.searchsorted(np.asarray(BUCKETS_US), us, side="right")
    counts = np.bincount(bucket, minlength=len(BUCKET_LABELS))
    times = np.bincount(bucket, weights=us / 1e6, minlength=len(BUCKET_LABELS))
    pct = np.percentile(us, [50, 90, 99]) if len(us) else np.zeros(3)
    return {"count": int(len(us)), "p50_us": float(pct[0]), "p90_us": float(pct[1]), "p99_us": float(pct[2]),
            "kernels_per_step": len(us) / n_steps if n_steps else 0.0,
            "buckets": {label: {"count": int(c), "time_s": float(t)}
                        for label, c, t in zip(BUCKET_LABELS, counts, times)}}


# ---------------------------------------------------------------------------------------------


def _activities(trace: Trace, kernels: pd.DataFrame, pos: np.ndarray) -> _Activities:
    cat = kernels["cat"].iloc[pos]
    ts = kernels["ts_ns"].to_numpy(dtype=np.int64)[pos]
    rt_end = trace.runtime["end_ns"].to_numpy(dtype=np.int64)
    return _Activities(
        pos=pos, ts=ts, end=ts + kernels["dur_ns"].to_numpy(dtype=np.int64)[pos],
        device=kernels["device"].fillna(-1).to_numpy(dtype=np.int64)[pos],
        kernel=(cat == "kernel").to_numpy(), memcpy=(cat == "gpu_memcpy").to_numpy(),
        memset=(cat == "gpu_memset").to_numpy(),
        comm=(kernels["category"].iloc[pos] == "communication").to_numpy(),
        launch_end=take(rt_end, kernels["launch"].to_numpy()[pos], _NO_LAUNCH).astype(np.int64))


def _windows(steps: pd.DataFrame, act: _Activities) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`step_windows`, or without steps one pseudo-step -1 over all the activities."""
    if not len(steps):
        return np.array([-1]), np.array([act.ts.min()]), np.array([act.end.max()])
    return step_windows(steps)


def step_windows(steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step numbers, starts and ends of the step table's windows, in time order."""
    s = steps.sort_values("ts_ns")
    w_ts = s["ts_ns"].to_numpy(dtype=np.int64)
    # Steps are sequential; should two spans overlap, the earlier ends where the later begins.
    w_end = np.minimum(s["end_ns"].to_numpy(dtype=np.int64), np.append(w_ts[1:], np.iinfo(np.int64).max))
    return s["step"].to_numpy(dtype=np.int64), w_ts, w_end


def _empty(launch_latency_s: float | None) -> Timeline:
    steps = pd.DataFrame({c: pd.Series([], dtype=np.int64 if c in ("ts_ns", "end_ns", "kernels", "sync_count")
                                       else float) for c in STEP_COLUMNS},
                         index=pd.Index([], dtype=np.int64, name="step"))
    gaps = pd.DataFrame({c: [] for c in GAP_COLUMNS})
    syncs = pd.DataFrame({c: [] for c in SYNC_COLUMNS})
    return Timeline(steps, gaps, syncs, _overall(steps, syncs, np.zeros(0), {}, launch_latency_s, {}))


def timeline(trace: Trace, kernels: pd.DataFrame, steps: pd.DataFrame,
             launch_latency_s: float | None = None) -> Timeline:
    """GPU timeline of ``trace``: ``kernels`` is the placed kernels frame, ``steps`` the step table
    (``step``, ``ts_ns``, ``end_ns``), ``launch_latency_s`` the measured launch latency or None."""
    # CPU-only analyses hold CPU ops (cat "cpu_op"); counter ranges have no real duration.
    gpu = kernels["cat"].isin(GPU_CATS).to_numpy(dtype=bool)
    if "timed" in kernels:
        gpu = gpu & kernels["timed"].to_numpy(dtype=bool)
    if not gpu.any():
        return _empty(launch_latency_s)
    act = _activities(trace, kernels, np.flatnonzero(gpu))
    step_ids, w_ts, w_end = _windows(steps, act)

    per_device: dict[int, pd.DataFrame] = {}
    gap_parts = []
    for dev in np.unique(act.device):  # one pass per GPU
        cols, g = _device_steps(act, np.flatnonzero(act.device == dev), w_ts, w_end, step_ids)
        per_device[int(dev)] = pd.DataFrame(cols, index=pd.Index(step_ids, name="step"))
        gap_parts.append(pd.DataFrame({**g, "device": np.full(len(g["step"]), dev)}))
    table = sum(per_device.values()).copy()
    table.insert(0, "end_ns", w_end)
    table.insert(0, "ts_ns", w_ts)

    rt = trace.runtime
    rt_role = lookup(rt["name"], _runtime_role)
    syncs = _syncs(trace, kernels, act, rt_role, w_ts, w_end, step_ids)
    gaps = _gap_frame(pd.concat(gap_parts, ignore_index=True), syncs, kernels, act)

    launch = rt_role == "launch"
    table["launch_api_s"] = _by_window(rt["ts_ns"].to_numpy()[launch], rt["dur_ns"].to_numpy()[launch] / 1e9,
                                       w_ts, w_end)
    sync_ts = syncs["ts_ns"].to_numpy(dtype=np.int64)
    table["sync_count"] = _by_window(sync_ts, np.ones(len(syncs)), w_ts, w_end).astype(np.int64)
    table["sync_s"] = _by_window(sync_ts, syncs["dur_s"].to_numpy(dtype=np.float64), w_ts, w_end)
    latency = launch_latency_s if launch_latency_s is not None else ASSUMED_LAUNCH_LATENCY_S
    table["launch_overhead_s"] = _by_window(act.ts, act.kernel * latency, w_ts, w_end)

    device_totals = ({d: _fractions(t[list(DEVICE_COLUMNS)].sum()) for d, t in per_device.items()}
                     if len(per_device) > 1 else {})
    scope = in_window(act.ts, w_ts, w_end) >= 0
    k_dur = (act.end - act.ts)[scope & act.kernel]
    overall = _overall(table, syncs, k_dur, _copies(kernels, act, scope), launch_latency_s, device_totals)
    return Timeline(table, gaps, syncs, overall, capture_steps(trace, table))


def _gap_frame(g: pd.DataFrame, syncs: pd.DataFrame, kernels: pd.DataFrame, act: _Activities) -> pd.DataFrame:
    nxt = g.pop("next").to_numpy()
    pos = take(act.pos, nxt, -1)
    g["next_kernel"] = take(kernels.index.to_numpy(), pos, -1)
    g["next_name"] = _names_at(kernels["name"], pos)
    g["dur_s"] = (g["end_ns"] - g["start_ns"]) / 1e9
    # A sync ended during the gap or shortly before it: the first sync end after (start - 50 us)
    # falls before the gap's end.
    ends = np.sort(syncs["end_ns"].to_numpy(dtype=np.int64))
    after = np.zeros(len(g), dtype=bool)
    if len(ends):
        j = np.searchsorted(ends, g["start_ns"].to_numpy() - AFTER_SYNC_NS, side="left")
        after = (j < len(ends)) & (ends[np.minimum(j, len(ends) - 1)] <= g["end_ns"].to_numpy())
    g["after_sync"] = after
    return g[list(GAP_COLUMNS)].sort_values(["start_ns", "device"], kind="stable").reset_index(drop=True)


def _fractions(t: pd.Series) -> dict[str, Any]:
    """Totals of the device columns with busy/idle/host-idle fractions of the wall time."""
    out = {c: (int(v) if c == "kernels" else float(v)) for c, v in t.items()}
    wall = out.get("wall_s", 0.0)
    out["busy_fraction"] = out["busy_s"] / wall if wall > 0 else 0.0
    out["idle_fraction"] = out["idle_s"] / wall if wall > 0 else 0.0
    out["host_idle_fraction"] = out["idle_host_s"] / wall if wall > 0 else 0.0
    return out


def _overall(table: pd.DataFrame, syncs: pd.DataFrame, k_dur: np.ndarray,
             copies: dict[str, dict[str, Any]], launch_latency_s: float | None,
             per_device: dict[int, dict[str, Any]]) -> dict[str, Any]:
    n = len(table)
    cols = [c for c in STEP_COLUMNS if c not in ("ts_ns", "end_ns")]
    totals = table[cols].sum() if n else pd.Series(0.0, index=cols)
    comm, exposed = float(totals["comm_s"]), float(totals["comm_exposed_s"])
    by_kind = syncs["kind"].value_counts() if len(syncs) else pd.Series(dtype=np.int64)
    total = {**_fractions(totals[list(DEVICE_COLUMNS)]),
             "launch_api_s": float(totals["launch_api_s"]), "sync_count": int(totals["sync_count"]),
             "sync_s": float(totals["sync_s"]), "launch_overhead_s": float(totals["launch_overhead_s"])}
    out: dict[str, Any] = {
        "steps": n,
        "total": total,
        "mean": {c: float(table[c].mean()) if n else 0.0 for c in cols},
        **{f: total[f] for f in ("busy_fraction", "idle_fraction", "host_idle_fraction")},
        "comm_overlap_share": (comm - exposed) / comm if comm > 0 else None,
        "distribution": _distribution(k_dur, n),
        "copies": copies,
        "syncs": {"count": int(len(syncs)), "time_s": float(syncs["dur_s"].sum()) if len(syncs) else 0.0,
                  "by_kind": {k: int(by_kind.get(k, 0)) for k in SYNC_KINDS}},
        "launch_latency_s": launch_latency_s if launch_latency_s is not None else ASSUMED_LAUNCH_LATENCY_S,
        "launch_latency_source": "measured" if launch_latency_s is not None else "assumed 5 us",
    }
    if per_device:
        out["per_device"] = per_device
    return out


def capture_steps(trace: Trace, steps: pd.DataFrame) -> list[int]:
    """Ids of the steps (``Timeline.steps``) whose window holds a CUDA-graph capture (a
    ``*StreamBeginCapture`` call), when other steps hold none: capturing is warm-up (Inductor's
    cudagraph trees record a graph the first time a shape runs), not the steady state, so the
    rules' terms and the inference figures leave them out. An HF ``generate()`` with a static
    cache on an H100 recorded Inductor's third graph in its first decode step: 43.5 ms with 40 ms
    of host-bound idle and two syncs of the recording, against 3.6-5.0 ms for the steps that
    replayed it."""
    rt = trace.runtime
    if len(steps) < 2 or not len(rt):
        return []
    begins = rt.loc[per_name(rt["name"], lambda n: n.str.contains("StreamBeginCapture", regex=False)),
                    "ts_ns"].to_numpy()
    if not len(begins):
        return []
    ts, end = steps["ts_ns"].to_numpy(), steps["end_ns"].to_numpy()
    i = np.searchsorted(ts, begins, side="right") - 1
    inside = (i >= 0) & (begins < end[np.maximum(i, 0)])
    found = sorted({int(x) for x in steps.index.to_numpy()[i[inside]]})
    return found if len(found) < len(steps) else []
