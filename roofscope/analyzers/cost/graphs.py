"""CUDA/HIP-graph replays costed from their captures.

Kineto gives a kernel replayed from a graph the correlation of its ``cudaGraphLaunch`` /
``hipGraphLaunch`` and no External id, so no CPU op launched it: without help every replayed
kernel has no cost. The help is the graph's *capture*: a profiler trace of the code between
``cudaStreamBeginCapture`` and ``cudaStreamEndCapture``, where every launch call sits under
the op (with its shapes) that issued it, in launch order, and no kernel runs. A replay runs
the captured launches again, so the i-th kernel of one graph launch (GPU start order) is the
i-th launch of its capture (H100, torch 2.11: 5 of 5 kernels in order, tests/data).

Captures come from the trace itself (captured while recording), from the Run (``roofscope
run`` records each capture separately, collectors/graphs.py) or from ``--graph-capture
FILE``. A replay is matched to a capture by the graph id roofscope's annotations carry
(``roofscope: graph capture N`` / ``roofscope: graph replay N``), else by its kernel count
when that singles out one capture (or several with the same ops and shapes). Instantiation
may drop a memset or copy node (an Inductor cudagraph-tree replay of a Lightning step, H100:
63 captured launches, 62 replayed, the kernels 57 and 57): when the kernel counts agree, the
i-th replayed kernel is the i-th captured kernel launch, and copies pair among copies. A mapped
kernel takes the cost of the nearest op with a formula above its captured launch, split
among that op's kernels in the replay by duration, as eager kernels are (attribution.py), and
the capture's module label. An unmatched replay keeps its time only (reason ``graph_replay``),
grouped by graph launch in the ``graph`` column.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from roofscope.analyzers.cost.attribution import BOUNDS, op_costs
from roofscope.analyzers.cost.costmodel import signature_costs
from roofscope.analyzers.cost.formulas.attention import query_of
from roofscope.analyzers.cost.formulas.families import FAMILY, SIGNATURE
from roofscope.analyzers.cost.formulas.families.paged import FROM_PAGES, FROM_TABLE
from roofscope.analyzers.cost.hidden_args import WINDOW_SOURCE, windowed_attention
from roofscope.analyzers.ingest import read as read_trace
from roofscope.analyzers.ingest.linking import ancestor_where, take
from roofscope.analyzers.ingest.modules import module_column
from roofscope.analyzers.ingest.names import per_name
from roofscope.analyzers.ingest.runtime_names import ASYNC_COPIES, GRAPH_LAUNCHES, KERNEL_LAUNCHES
from roofscope.analyzers.model.trace import CAPTURE_LABEL, REPLAY_LABEL, Trace
from roofscope.run.layout import CAPTURE_GLOB

_BEGIN = re.compile(r"^(cuda|cu|hip)StreamBeginCapture")
_END = re.compile(r"^(cuda|cu|hip)StreamEndCapture")
# Calls that become graph nodes: kernel launches and async copies / fills.
_NODES = KERNEL_LAUNCHES | ASYNC_COPIES
REASON = "graph_replay"


@dataclass
class Capture:
    trace: Trace
    launches: np.ndarray            # rows of trace.runtime, in launch order
    label: str | None               # graph id from roofscope's annotation
    source: str

    @cached_property
    def copies(self) -> np.ndarray:
        """Which launches are memset / memcpy nodes (not kernels); asked once per replay."""
        names = self.trace.runtime["name"].astype(str).to_numpy(dtype=object)[self.launches]
        return np.isin(names, list(ASYNC_COPIES))

    def fingerprint(self) -> tuple:
        ops = self.trace.runtime["op"].to_numpy()[self.launches]
        sig = take(self.trace.ops["sig"].to_numpy(), ops, -1)
        names = take(self.trace.ops["name"].astype(str).to_numpy(dtype=object), ops, "")
        dims = take(self.trace.signatures["input_dims"].astype(str).to_numpy(dtype=object), sig, "") \
            if len(self.trace.signatures) else np.full(len(ops), "", dtype=object)
        return tuple(zip(names.tolist(), dims.tolist()))


@dataclass
class GraphMap:
    """What was mapped: per graph launch, its capture (or why not), and notes for the summary."""
    launches: int = 0
    mapped: int = 0
    captures: int = 0
    unmapped_reasons: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"graph_launches": self.launches, "mapped": self.mapped, "captures": self.captures,
                "unmapped": dict(self.unmapped_reasons), "notes": list(self.notes)}


def run_captures(run_dir: Any) -> list[str]:
    from pathlib import Path

    return [str(p) for p in sorted(Path(run_dir).glob(CAPTURE_GLOB))]


def load_captures(sources: list[Any]) -> list[Trace]:
    return [s if isinstance(s, Trace) else read_trace(s) for s in sources]


def _label_at(trace: Trace, prefix: str, rows: np.ndarray) -> np.ndarray:
    """The id of roofscope's ``prefix`` annotation enclosing each runtime row (same thread), or None."""
    out = np.full(len(rows), None, dtype=object)
    ann = trace.annotations
    if not len(ann) or not len(rows):
        return out
    lab = ann[ann["name"].astype(str).str.startswith(prefix)]
    if not len(lab):
        return out
    rt = trace.runtime
    th, ts, en = (rt[c].to_numpy()[rows] for c in ("thread", "ts_ns", "end_ns"))
    for name, lth, lts, len_ in zip(lab["name"].astype(str), lab["thread"], lab["ts_ns"], lab["end_ns"]):
        inside = (th == lth) & (ts >= lts) & (en <= len_)
        out[inside] = name[len(prefix):]
    return out


def find_captures(trace: Trace, source: str = "") -> list[Capture]:
    """Every capture (begin..end on one thread) in ``trace``, with its node launches."""
    rt = trace.runtime
    if not len(rt):
        return []
    names = rt["name"]
    begins = np.flatnonzero(per_name(names, lambda s: s.str.match(_BEGIN)))
    if not begins.size:
        return []
    ends = np.flatnonzero(per_name(names, lambda s: s.str.match(_END)))
    node = names.isin(_NODES).to_numpy()
    th, ts = rt["thread"].to_numpy(), rt["ts_ns"].to_numpy()
    labels = _label_at(trace, CAPTURE_LABEL, begins)
    out = []
    for b, label in zip(begins, labels):
        after = ends[(th[ends] == th[b]) & (ts[ends] > ts[b])]
        if not after.size:
            continue
        e = after[np.argmin(ts[after])]
        rows = np.flatnonzero(node & (th == th[b]) & (ts > ts[b]) & (ts < ts[e]))
        out.append(Capture(trace, rows[np.argsort(ts[rows], kind="stable")], label, source or trace.path))
    return out


def _fits(c: Capture, size: int, kernels: int) -> bool:
    """Same launch count, or the same kernel count with memset/copy nodes dropped or added."""
    return len(c.launches) == size or int((~c.copies).sum()) == kernels


def _match(group_label: Any, copies: np.ndarray, captures: list[Capture]) -> tuple[Capture | None, str]:
    size, kernels = len(copies), int((~copies).sum())
    if group_label is not None:
        same = [c for c in captures if c.label == group_label]
        if same:
            c = same[-1]  # a graph re-captured under the same id: its latest capture
            return (c, "") if _fits(c, size, kernels) else (None, "count_mismatch")
    by_size = [c for c in captures if len(c.launches) == size] or [c for c in captures if _fits(c, size, kernels)]
    if not by_size:
        return None, "no_capture" if not captures else "count_mismatch"
    if len(by_size) == 1 or len({c.fingerprint() for c in by_size}) == 1:
        return by_size[0], ""
    return None, "ambiguous"


def _paired(cap: Capture, copies: np.ndarray) -> np.ndarray:
    """The capture's launch (a runtime row) behind each replayed kernel, -1 where none: in order,
    kernels among kernels and copies among copies when their counts differ."""
    if len(cap.launches) == len(copies):
        return cap.launches
    out = np.full(len(copies), -1, dtype=np.int64)
    cap_copies = cap.copies
    for mine, theirs in ((~copies, ~cap_copies), (copies, cap_copies)):
        if mine.sum() == theirs.sum():
            out[mine] = cap.launches[theirs]
    return out


BUFFER_LENGTHS = ("no sequence lengths (a graph replay's index tensors are its capture's buffers, sized for the "
                  "largest batch: give the step annotation of sequence sums)")


def _without_buffer_lengths(t: Trace, oc: pd.DataFrame) -> None:
    """A capture's attention ops whose keys were estimated from their index tensors' sizes: those are
    the graph's buffers, sized for its largest batch and context, not the replay's lengths (SGLang
    captures a (max_bs * max_pages) page-index buffer). Uncosted, unless a step annotation gave the
    lengths (hidden_args then costed them exactly)."""
    est = oc["estimate"].to_numpy()
    rows = np.flatnonzero(np.isin(est, (FROM_PAGES, FROM_TABLE)))
    if not rows.size:
        return
    at = oc.index[rows]
    oc.loc[at, ["flops", "bytes", *BOUNDS]] = np.nan
    oc.loc[at, ["reason", "cost_source", "estimate"]] = ["no_shapes", "none", ""]
    oc.loc[at, "missing"] = t.ops["name"].astype(str).to_numpy(dtype=object)[rows] + ": " + BUFFER_LENGTHS


def map_graph_kernels(trace: Trace, kernels: pd.DataFrame, extra: list[Trace] | None = None,
                      window: int | None = None) -> GraphMap:
    """Cost the replayed kernels of ``kernels`` (attribute()'s frame, module column present) in place.
    ``window``: the user's sliding-window length for windowed attention (hidden_args.windowed_attention)."""
    n = len(kernels)
    kernels["graph"] = np.full(n, -1, dtype=np.int64)
    kernels["attn_q"] = np.full(n, None, dtype=object)  # (batch, query length) of replayed attention
    gm = GraphMap()
    launch = kernels["launch"].to_numpy()
    rt_names = trace.runtime["name"].astype(str).to_numpy(dtype=object)
    is_graph = take(np.isin(rt_names, list(GRAPH_LAUNCHES)), launch, False).astype(bool) if len(rt_names) else \
        np.zeros(n, dtype=bool)
    if not is_graph.any():
        return gm
    kernels.loc[is_graph, "graph"] = launch[is_graph]
    captures = find_captures(trace)
    for t in extra or []:
        captures += find_captures(t)
    gm.captures = len(captures)
    # per capture trace and replay step annotation (serving engines' sequence lengths: hidden_args.py)
    costs: dict[tuple[int, str], tuple[pd.DataFrame, np.ndarray, np.ndarray, np.ndarray]] = {}

    def trace_costs(t: Trace, region: str) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, np.ndarray]:
        if (id(t), region) not in costs:
            oc = op_costs(t, signature_costs(t.signatures), region)
            _without_buffer_lengths(t, oc)
            has_formula = (oc["reason"] != "no_formula").to_numpy()
            parent = t.ops["parent"].to_numpy() if len(t.ops) else np.zeros(0, dtype=np.int64)
            costs[id(t), region] = (oc, has_formula, parent, module_column(t, np.arange(len(t.ops))))
        return costs[id(t), region]

    rows = np.flatnonzero(is_graph)
    rows = rows[np.lexsort((kernels["ts_ns"].to_numpy()[rows], launch[rows]))]
    group_starts = np.flatnonzero(np.r_[True, launch[rows][1:] != launch[rows][:-1]])
    bounds = np.r_[group_starts, len(rows)]
    labels = _label_at(trace, REPLAY_LABEL, launch[rows][group_starts])
    gm.launches = len(group_starts)
    cols = {c: kernels[c].to_numpy().copy() for c in
            ("flops", "flops_analytic", "bytes", "dtype", "tensor_core", "category", "cost_source", "op_name",
             "cost_op_name", "unattributed", "missing", "module", "attn_q", "estimate") + BOUNDS}
    op_names_cache: dict[int, np.ndarray] = {}
    kernel_names = kernels["name"].astype(str).to_numpy(dtype=object)
    unmapped = np.zeros(n, dtype=bool)
    is_copy = np.isin(cols["category"], ("memcpy", "memset"))
    for g, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        members = rows[lo:hi]
        copies = is_copy[members]
        cap, why = _match(labels[g], copies, captures)
        if cap is None:
            gm.unmapped_reasons[why] = gm.unmapped_reasons.get(why, 0) + 1
            unmapped[members] = True
            continue
        gm.mapped += 1
        t = cap.trace
        region = str(kernels["region"].iat[members[0]])
        oc, has_formula, parent, modules = trace_costs(t, region)
        op = take(t.runtime["op"].to_numpy(), _paired(cap, copies), -1)
        nearest = ancestor_where(parent, op, has_formula)
        windowed_attention(t, oc, nearest, kernel_names[members], region, window)
        ok = nearest >= 0
        ok[ok] = oc["reason"].to_numpy()[nearest[ok]] == ""
        cost = np.where(ok & ~copies, nearest, -1)
        if id(t) not in op_names_cache:
            op_names_cache[id(t)] = t.ops["name"].astype(str).to_numpy(dtype=object)
        names = op_names_cache[id(t)]
        cols["op_name"][members] = take(names, op, "")
        cols["module"][members] = take(modules, op, "")
        sel = cost >= 0
        if sel.any():
            m, c = members[sel], cost[sel]
            dur = kernels["dur_ns"].to_numpy(dtype=np.float64)[m]
            grp = pd.Series(dur).groupby(c)
            total, count = grp.transform("sum").to_numpy(), grp.transform("size").to_numpy()
            share = np.where(total > 0, dur / np.where(total > 0, total, 1), 1.0 / count)
            for col in ("flops", "bytes") + BOUNDS:
                cols[col][m] = oc[col].to_numpy()[c] * share
            cols["estimate"][m] = oc["estimate"].to_numpy()[c]
            cols["flops_analytic"][m] = cols["flops"][m]
            cols["dtype"][m] = oc["dtype"].to_numpy()[c]
            cols["tensor_core"][m] = oc["tensor_core"].to_numpy()[c]
            cat = oc["category"].to_numpy()[c]
            cols["category"][m] = np.where((cat != "other") & (cat != ""), cat, cols["category"][m])
            source = oc["cost_source"].to_numpy()[c]  # how it was costed, where that says more than "capture"
            cols["cost_source"][m] = np.where(np.isin(source, (WINDOW_SOURCE, FAMILY, SIGNATURE)), source, "capture")
            cols["cost_op_name"][m] = names[c]
            cols["unattributed"][m] = ""
            dims = t.signatures["input_dims"].to_numpy()[t.ops["sig"].to_numpy()[c]] if len(t.signatures) else []
            cols["attn_q"][m] = [query_of(nm, d) for nm, d in zip(names[c], dims)]
        left = ~sel & ~copies & (cols["cost_source"][members] != "launch")  # launch: streamed (attribution.py)
        rest = members[left]
        cols["unattributed"][rest] = np.where(
            take(oc["reason"].to_numpy(), nearest[left], "no_formula") == "no_shapes", "no_shapes", "no_formula")
        cols["missing"][rest] = take(oc["missing"].to_numpy(), nearest[left], "")
        cols["missing"][m if sel.any() else members[:0]] = ""
    cols["unattributed"][unmapped & ~is_copy & (cols["cost_source"] != "launch")] = REASON
    for col, values in cols.items():
        kernels[col] = values
    gm.notes = _notes(gm, float(kernels.loc[unmapped & ~is_copy, "dur_ns"].sum()) / 1e9,
                      float(kernels.loc[is_graph, "dur_ns"].sum()) / 1e9)
    return gm


def _notes(gm: GraphMap, unmapped_s: float, graph_s: float) -> list[str]:
    if gm.launches == 0:
        return []
    head = (f"{gm.launches:,} CUDA-graph launch{'es' if gm.launches != 1 else ''}"
            f" ({graph_s * 1e3:.3f} ms of kernels): {gm.mapped:,} mapped to {gm.captures} capture"
            f"{'s' if gm.captures != 1 else ''}")
    if gm.mapped == gm.launches:
        return [head]
    why = {"no_capture": "no capture of the graph was recorded",
           "count_mismatch": "the replay's kernel count differs from every capture's launch count",
           "ambiguous": "several captures (e.g. one per batch size) have that kernel count"}
    causes = "; ".join(f"{v} launch{'es' if v != 1 else ''}: {why.get(k, k)}"
                       for k, v in sorted(gm.unmapped_reasons.items()))
    return [head, f"{unmapped_s * 1e3:.3f} ms of replayed kernels have time only ({causes}). Fix: profile with "
            "`roofscope run` (it records every capture and labels each graph), or pass the capture's profiler "
            "trace with `roofscope analyze TRACE --graph-capture CAPTURE_TRACE`"]
