"""GPU idle that no launch explains (the ``idle_other`` term): what the host did meanwhile.

A gap is ``other`` when the activity that ends it was launched before the gap began and the
gap is longer than launch latency (timeline.py): the GPU had its work queued but waited, on
an event or another stream, or for the host to finish something before the next launch; the
step's leading and trailing gaps (``edge``) count with it. On HTA's A100 trace such gaps are
68% of the step and no other rule names them. This rule measures which host activity ran
during them: the outermost CPU ops and the CUDA runtime calls overlapping the gaps, by time.
The fix follows the activity that fills the gaps: blocking copies, synchronizations, or host
code on the step's critical path. The saving assumes :data:`RECOVERABLE_SHARE` of the idle
time can be recovered by overlapping that host work with the GPU's (low confidence: the rule
sees what the host did, not whether the GPU could have run meanwhile).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from roofscope.analyzers.diagnose.base import Context, Rule
from roofscope.analyzers.diagnose.fixes import loader_code
from roofscope.analyzers.diagnose.program import Program
from roofscope.analyzers.model.findings import Finding

RECOVERABLE_SHARE = 0.5
COPY_CALLS = ("cudaMemcpyAsync", "cudaMemcpy", "cuMemcpyAsync", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2")
SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaStreamWaitEvent")


def overlap_with(intervals_start: np.ndarray, intervals_end: np.ndarray, start: np.ndarray,
                 end: np.ndarray) -> np.ndarray:
    """Time each [start, end) spends inside the union of the intervals, in O((n + m) log m):
    with C(t) the interval time before t, the overlap is C(end) - C(start)."""
    if not len(intervals_start):
        return np.zeros(len(start))
    order = np.argsort(intervals_start, kind="stable")
    s, e = intervals_start[order].astype(np.float64), intervals_end[order].astype(np.float64)
    # Merge overlapping intervals (gaps of several devices may overlap).
    e = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > e[:-1]]
    s, e = s[new], np.maximum.reduceat(e, np.flatnonzero(new))
    before = np.r_[0.0, np.cumsum(e - s)]

    def covered(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(s, t, side="right")          # intervals starting at or before t
        inside = np.where(i > 0, np.minimum(t, e[np.maximum(i - 1, 0)]) - s[np.maximum(i - 1, 0)], 0.0)
        return before[np.maximum(i - 1, 0)] * (i > 0) + np.clip(inside, 0.0, None)

    t0, t1 = start.astype(np.float64), end.astype(np.float64)
    return np.clip(covered(t1) - covered(t0), 0.0, None)


def host_activity(ctx: Context, gaps: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Seconds per step that the outermost CPU ops and the runtime calls (by name) overlap ``gaps``."""
    st, en = gaps["start_ns"].to_numpy(), gaps["end_ns"].to_numpy()
    ops = ctx.inp.trace.ops
    top = ops[ops["parent"] < 0]
    ov = overlap_with(st, en, top["ts_ns"].to_numpy(), top["end_ns"].to_numpy())
    by_op = _sum_by_name(ov, top["name"]) / 1e9 / ctx.steps
    rt = ctx.inp.trace.runtime
    ov = overlap_with(st, en, rt["ts_ns"].to_numpy(), (rt["ts_ns"] + rt["dur_ns"]).to_numpy())
    by_call = _sum_by_name(ov, rt["name"]) / 1e9 / ctx.steps
    return by_op.sort_values(ascending=False), by_call.sort_values(ascending=False)


def _sum_by_name(values: np.ndarray, names: pd.Series) -> pd.Series:
    """``values`` summed per name, indexed by name in sorted order (as a groupby gives it). Summed
    over the names' category codes (the trace's names are categorical): a groupby on the 339k-row
    string index of the 1.09M-event trace took 0.3-0.7 s."""
    if not isinstance(names.dtype, pd.CategoricalDtype) or names.isna().any():
        names = names.astype(str).astype("category")   # missing names grouped as astype(str) spells them
    codes = names.cat.codes.to_numpy()
    uniques = np.asarray(names.cat.categories.astype(str), dtype=object)
    sums = np.bincount(codes, weights=values, minlength=len(uniques))
    present = np.bincount(codes, minlength=len(uniques)) > 0
    return pd.Series(sums[present], index=pd.Index(uniques[present], dtype=object)).sort_index()


def _fix(by_call: pd.Series, idle_s: float, pageable_share: float, program: Program) -> tuple[str, str, str]:
    """(title, fix text, snippet) for the host activity that fills most of the idle time."""
    copies = float(by_call[by_call.index.isin(COPY_CALLS)].sum())
    syncs = float(by_call[by_call.index.isin(SYNC_CALLS)].sum())
    if copies >= max(syncs, 0.25 * idle_s):
        text = ("The host blocks in memory copies while the GPU waits: move data to the GPU once, outside the"
                " loop, or issue the copies ahead of use with non_blocking=True")
        snippet = "x = x.to('cuda', non_blocking=True)   # issued a step ahead, from pinned memory"
        if pageable_share > 0.5:
            # Pageable host memory makes every copy synchronous for the host: pinning is the lever.
            text += "; most copies read pageable memory, which blocks the host: pin it"
            pin = (loader_code(program, pin=True)[0] if program.dataloader
                   else "x = x.pin_memory()   # where the batch is made")
            snippet = pin + "\n" + snippet
        return "GPU idle while the host copies memory", text + ".", snippet
    if syncs >= 0.25 * idle_s:
        return ("GPU idle around synchronizations",
                "The host waits on synchronizations and then launches the next work late: drop the"
                " synchronize() calls from the step, or replace them with events the GPU waits on.",
                "done = torch.cuda.Event(); done.record()   # instead of torch.cuda.synchronize()\n"
                "torch.cuda.current_stream().wait_event(done)")
    return ("GPU idle while the host runs other work",
            "The GPU has its work queued but waits while the host runs the ops below; move that host work"
            " off the step's critical path (prefetch the next batch, run it asynchronously).", "")


class IdleOther(Rule):
    """The GPU waits in gaps no launch explains while the host does something else."""

    name = "idle_other"
    binding = "idle_other"
    min_share = 0.10

    def match(self, ctx: Context) -> list[Finding]:
        tl = ctx.inp.timeline
        gaps = ctx.gaps
        if not len(gaps):
            return []
        gaps = gaps[gaps["kind"].isin(("other", "edge")) & ~gaps["after_sync"]]
        if (gaps["step"] >= 0).any():
            gaps = gaps[gaps["step"] >= 0]
        if not len(gaps):
            return []
        idle = ctx.terms["idle_other"]
        by_op, by_call = host_activity(ctx, gaps)
        h2d = (tl.overall.get("copies") or {}).get("HtoD") or {}
        pageable = h2d.get("pageable_time_s", 0.0) / h2d["time_s"] if h2d.get("time_s") else 0.0
        title, text, snippet = _fix(by_call, idle, pageable, ctx.program)
        ops = ", ".join(f"{name} {1e3 * t:.3f} ms" for name, t in by_op.head(3).items() if t > 0)
        calls = ", ".join(f"{name} {1e3 * t:.3f} ms" for name, t in by_call.head(3).items() if t > 0)
        longest = float(gaps["dur_s"].max())
        return [Finding(
            rule=self.name, title=title, binding=self.binding, saving_s=RECOVERABLE_SHARE * idle, confidence="low",
            summary=f"GPU idle {idle * 1e3:.3f} ms/step ({100 * ctx.share('idle_other'):.0f}%) with work queued:"
            f" {len(gaps) / ctx.steps:.0f} gaps/step, the longest {longest * 1e3:.3f} ms"
            + (f"; meanwhile the host ran {ops}" if ops else "")
            + (f" (runtime: {calls})" if calls else "")
            + f". Saving assumes {100 * RECOVERABLE_SHARE:.0f}% of it overlaps with GPU work once moved",
            fix=text, snippet=snippet, kernels=[],
            figures={"idle_other_s": idle, "gaps_per_step": len(gaps) / ctx.steps, "longest_gap_s": longest,
             **{f"host op: {n}": float(t) for n, t in by_op.head(3).items() if t > 0},
             **{f"runtime: {n}": float(t) for n, t in by_call.head(3).items() if t > 0}})]
