"""Rules for time the GPU spends waiting on the host: launches, synchronizations, copies."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from roofscope.analyzers.diagnose.base import Context, Rule, top_kernels
from roofscope.analyzers.diagnose.blockers import (READS, SIZE_READERS, Blocker, graph_blockers, graph_fix,
                                                   host_read_code, host_syncs)
from roofscope.analyzers.diagnose.program import LOADER_SPAN
from roofscope.analyzers.diagnose.fixes import compile_apply, compile_code, loader_code
from roofscope.analyzers.ingest.frames import steps_at
from roofscope.analyzers.diagnose.inference import GRAPH_LAUNCH_S, is_inference
from roofscope.analyzers.ingest.names import per_name
from roofscope.analyzers.ingest.runtime_names import GRAPH_LAUNCHES
from roofscope.analyzers.model.findings import Finding
from roofscope.analyzers.views.timeline import AFTER_SYNC_NS

# Pinned host memory copies at about twice the rate of pageable memory (staged through
# a pinned bounce buffer by the driver); docs/diagnosis.md.
PAGEABLE_SLOWDOWN = 2.0
# Share of the H2D saving that pinning must bring for the fix to mention pin_memory.
PIN_MIN_SHARE = 0.25


class CudaGraphs(Rule):
    """Many short kernels and a GPU starved between them: the step is launch/host-bound."""

    name = "cuda_graphs"
    binding = "host"
    min_share = 0.10

    def precondition(self, ctx: Context) -> str | None:
        if is_inference(ctx):
            return "inference Run: launch_bound_decode covers it"
        rt = ctx.inp.trace.runtime
        if len(rt) and rt["name"].astype(str).isin(GRAPH_LAUNCHES).any():
            return "the step already replays CUDA graphs"
        return None

    def match(self, ctx: Context) -> list[Finding]:
        k = ctx.kernels[ctx.kernels["cat"] == "kernel"]
        per_step = len(k) / ctx.steps
        median_us = float(np.median(k["dur_s"])) * 1e6 if len(k) else 0.0
        idle = ctx.terms["host"]
        # A graph (or a compiled model) replays the model's own launches; the host time between
        # phases (the framework's loop, hooks, data loading, logging) stays. Only idle between
        # two kernels of one forward or backward phase is the launch overhead it removes.
        captured = in_model_idle(ctx) if "phase" in ctx.kernels else idle
        saving = max(0.0, min(idle, captured) - GRAPH_LAUNCH_S)
        # Short kernels are the signature of launch-bound work; long ones mean the host is slow
        # for other reasons (data loading, Python), which graphs do not remove.
        short = median_us < 20
        conf = "high" if short and ctx.share("host") >= 0.3 else "medium" if short else "low"
        found = graph_blockers(ctx)
        if found:
            return [_blocked_graphs(ctx, found, saving, idle, per_step, median_us, k)]
        p = ctx.program
        snippet, framework = compile_code(p, "reduce-overhead")
        already = (" The model is already compiled, without CUDA graphs (mode default or"
                   " max-autotune-no-cudagraphs): compile it with mode=\"reduce-overhead\" instead." if p.compiled else "")
        return [Finding(
            rule=self.name, title="Launch-bound: capture the step in a CUDA graph",
            binding=self.binding, saving_s=saving, confidence=conf,
            summary=f"GPU idle {idle * 1e3:.3f} ms/step ({100 * ctx.share('host'):.0f}%) waiting for launches,"
            f" {min(idle, captured) * 1e3:.3f} ms of it inside forward/backward; {per_step:.0f} kernels/step,"
            f" median {median_us:.1f} us",
            fix="Replay the step as a CUDA graph so the CPU launches it once: torch.compile with"
            " mode=\"reduce-overhead\" (also fuses); nothing on this trace blocks capture (one forward per step,"
            " no syncs, static shapes, no host work). Saving ~ the host-bound idle time." + already,
            snippet=snippet, framework=framework, apply=compile_apply(p, "reduce-overhead"),
            kernels=top_kernels(k, ctx.steps),
            figures={"kernels_per_step": per_step, "median_kernel_us": median_us, "host_idle_s": idle,
             "in_model_idle_s": min(idle, captured), "host_idle_share": ctx.share("host")})]


def _blocked_graphs(ctx: Context, found: list[Blocker], saving: float, idle: float, per_step: float,
                    median_us: float, k: pd.DataFrame) -> Finding:
    """The CUDA-graph finding when the step cannot be captured: what blocks it, and the way around."""
    fix, snippet = graph_fix(ctx, found)
    return Finding(
        rule="cuda_graphs", title="Launch-bound, but the step cannot be captured in a CUDA graph as it is",
        binding="host", saving_s=0.0, confidence="low", status="blocked",
        summary=f"GPU idle {idle * 1e3:.3f} ms/step ({100 * ctx.share('host'):.0f}%) waiting for launches,"
        f" {per_step:.0f} kernels/step, median {median_us:.1f} us; blocked by "
        + "; ".join(b.text() for b in found[:4]) + (f" and {len(found) - 4} more" if len(found) > 4 else ""),
        fix=fix, snippet=snippet, kernels=top_kernels(k, ctx.steps),
        blockers=[b.to_dict() for b in found],
        figures={"unblocked_saving_s": saving, "host_idle_s": idle, "kernels_per_step": per_step,
                 "median_kernel_us": median_us, "blockers": len(found)})


def in_model_idle(ctx: Context) -> float:
    """Host-bound idle per step between two consecutive kernels of one device that are both in
    the forward or both in the backward phase (analyzers/views/phases.py)."""
    gaps = ctx.gaps
    if not len(gaps):
        return 0.0
    k = ctx.inp.kernels   # every kernel, as the timeline found the gaps between (a neighbour may be unprofiled)
    gaps = gaps[gaps["kind"].isin(("host", "queued")) & (gaps["step"] >= 0) & (gaps["next_kernel"] >= 0)]
    order = k[["device", "ts_ns"]].sort_values(["device", "ts_ns"], kind="stable")  # not every column sorted
    prev = pd.Series(order.index.to_numpy(), index=order.index).groupby(order["device"]).shift(1)
    nxt = gaps["next_kernel"].to_numpy()
    p_next = k["phase"].reindex(nxt).to_numpy(dtype=object)
    p_prev = k["phase"].reindex(prev.reindex(nxt).to_numpy()).to_numpy(dtype=object)
    inside = (p_next == p_prev) & np.isin(p_next, ("forward", "backward"))
    return float(gaps["dur_s"].to_numpy()[inside].sum()) / ctx.steps


class HostSyncs(Rule):
    """Host-device synchronizations inside the step drain the GPU's queue. Removing one saves at
    most the time it held the host: the GPU idle after it shrinks by no more than the host waited."""

    name = "host_syncs"
    binding = "sync"
    min_share = 0.02

    def match(self, ctx: Context) -> list[Finding]:
        tl = ctx.inp.timeline
        syncs = tl.syncs
        if not len(syncs):
            return []
        syncs = syncs[syncs["step"] >= 0] if (syncs["step"] >= 0).any() else syncs
        syncs = syncs[~syncs["step"].isin(ctx.left_out)] if ctx.left_out else syncs
        callers = (syncs.groupby(["kind", "caller"]).size() / ctx.steps).sort_values(ascending=False)
        where = ", ".join(f"{n:g}x {kind} in {caller or '(top level)'}" for (kind, caller), n in callers.head(4).items())
        bubble = ctx.terms["sync"]
        blocked = _sync_bound(ctx.gaps, syncs, ctx.steps)
        saving = min(bubble, blocked)
        origin = host_syncs(ctx)
        # Syncs inside a library's ops or in ops that read a size back: no .item() of the user's to drop.
        library = [b for b in origin if b.library or (b.op in SIZE_READERS and b.op not in READS)]
        p = ctx.program
        framework = ""
        advice = p.kind == "generate" and not library   # generate()'s own reads: nothing of the user's to drop
        if library:
            fix, snippet = _library_sync_fix(library)
        elif p.kind == "generate":
            fix = ("The syncs are generate()'s own: it reads the stop condition (EOS, length) back every token;"
                   " a loop of your own can check it every N tokens instead.")
            snippet = ""
        elif is_inference(ctx):  # a decode loop has no loss to accumulate
            fix = ("Keep generated tokens on the GPU: check stop conditions (EOS, length) every N tokens instead "
                   "of every token, and avoid .item()/.cpu()/.tolist() of logits or tokens inside the loop.")
            snippet = ("done = (tokens == eos).any(-1)            # stays on the GPU\n"
                       "if step % 16 == 0 and done.all().item(): break")
        elif p.kind in ("hf_trainer", "lightning"):
            fix = ("The loop reads the loss back when it logs: log less often (the framework's logging interval).")
            snippet, framework = (("TrainingArguments(..., logging_steps=100)   # the loss is read back at each log",
                                   "hf_trainer") if p.kind == "hf_trainer" else
                                  ("Trainer(..., log_every_n_steps=100)   # and self.log(..., sync_dist=False)",
                                   "lightning"))
        else:
            fix = ("Keep values on the GPU: drop .item()/.cpu()/print of tensors in the step, read them every N steps,"
                   " use non_blocking copies and torch.cuda.Event instead of synchronize()."
                   + ("" if p.training else " (The step runs no backward: there is no loss to accumulate.)"))
            snippet = host_read_code(p, set(syncs["kind"].astype(str)))
        return [Finding(
            rule=self.name, title="Host-device syncs inside the step",
            binding=self.binding, saving_s=0.0 if advice else saving, confidence="medium" if not library else "low",
            summary=f"{len(syncs) / ctx.steps:g} syncs/step ({where}); GPU idle {bubble * 1e3:.3f} ms/step after them,"
            f" the host blocked {blocked * 1e3:.3f} ms/step in them (the most removing them saves)",
            fix=fix, snippet=snippet, framework=framework, kernels=[], blockers=[b.to_dict() for b in origin],
            kind="advice" if advice else "fix",
            figures={"syncs_per_step": len(syncs) / ctx.steps, "sync_bubble_s": bubble, "sync_blocked_s": blocked})]


def _sync_bound(gaps: pd.DataFrame, syncs: pd.DataFrame, steps: int) -> float:
    """Per step, the GPU idle after syncs that removing them can save: each gap after a sync
    counts up to the time the syncs ending in it (timeline.py's after_sync window) held the host."""
    g = gaps[gaps["after_sync"]] if len(gaps) else gaps
    if not len(g) or not len(syncs):
        return 0.0
    order = np.argsort(syncs["end_ns"].to_numpy(dtype=np.int64), kind="stable")
    ends = syncs["end_ns"].to_numpy(dtype=np.int64)[order]
    held = np.concatenate(([0.0], np.cumsum(syncs["dur_s"].to_numpy(dtype=np.float64)[order])))
    lo = np.searchsorted(ends, g["start_ns"].to_numpy(dtype=np.int64) - AFTER_SYNC_NS, side="left")
    hi = np.searchsorted(ends, g["end_ns"].to_numpy(dtype=np.int64), side="right")
    return float(np.minimum(g["dur_s"].to_numpy(), held[hi] - held[np.minimum(lo, hi)]).sum()) / steps


def _library_sync_fix(library: list[Blocker]) -> tuple[str, str]:
    """The fix when the syncs come from ops that read sizes back (nonzero, boolean indexing) or from a
    library's ops: no .item() of the user's to drop."""
    names = ", ".join(dict.fromkeys(b.library or b.op for b in library[:4]))
    inside = {b.library.split("::")[0] for b in library if b.library}
    fix = (f"The syncs come from {names}" + (f" inside {', '.join(sorted(inside))}'s ops" if inside else "")
           + ": they read data-dependent sizes back to the host and are part of those ops, not of a .item() in"
           " the loop.")
    if inside:
        fix += (" Call them less often (batch the images of a step into one call) and keep the rest of the step"
                " free of them; they also keep the step out of a CUDA graph.")
        return fix, "# the syncs are inside " + ", ".join(sorted(inside)) + "'s ops: batch their calls per step"
    fix += " Use fixed-size variants: masks with torch.where instead of boolean indexing, nonzero_static."
    return fix, ("x = torch.where(mask, x, 0)                      # instead of x[mask]\n"
                 "idx = torch.nonzero_static(mask, size=k)         # instead of mask.nonzero()")


class HostCopies(Rule):
    """Host-to-device copies from pageable memory or not overlapped with compute."""

    name = "h2d_copies"
    binding = "copy"

    def match(self, ctx: Context) -> list[Finding]:
        copies = ctx.inp.timeline.overall.get("copies", {}).get("HtoD")
        if not copies or not copies.get("count"):
            return []
        n = ctx.steps
        pageable = copies.get("pageable_time_s", 0.0) / n
        exposed = copies.get("exposed_time_s", 0.0) / n
        # Pinning halves pageable copies; overlapping hides what is still exposed after that.
        saving = pageable * (1 - 1 / PAGEABLE_SLOWDOWN) + max(0.0, exposed - pageable * (1 - 1 / PAGEABLE_SLOWDOWN))
        if saving < 0.01 * ctx.step_s:
            return []
        k = ctx.kernels[(ctx.kernels["category"] == "memcpy")
                        & per_name(ctx.kernels["name"], lambda s: s.str.contains("HtoD"))]
        # Pinning is advice only where pageable copies hold a real part of the saving (0.016 ms of
        # 4.231 ms is not worth a word); otherwise the lever is overlap alone.
        pin = pageable * (1 - 1 / PAGEABLE_SLOWDOWN) >= PIN_MIN_SHARE * saving
        p = ctx.program
        # A DataLoader pins its batches itself; without one the program pins what it copies.
        pin_code, framework = (loader_code(p, pin=True) if p.dataloader else
                               ("x = x.pin_memory()   # once, where the batch is made on the host", ""))
        return [Finding(
            rule=self.name,
            title="Host-to-device copies: " + ("pin memory and overlap them" if pin else "overlap them with compute"),
            binding="copy", saving_s=saving, confidence="medium" if pin else "low",
            summary=f"H2D {copies['time_s'] / n * 1e3:.3f} ms/step, {pageable * 1e3:.3f} ms from pageable memory,"
            f" {exposed * 1e3:.3f} ms not overlapped with kernels",
            fix=("Load batches into pinned memory and copy them asynchronously, ahead of use." if pin else
             "The copies already come from pinned memory; issue them ahead of use (non_blocking, on a side stream"
             " or a step early) so kernels run while they transfer."),
            snippet=(pin_code + "\n" if pin else "") + "x = x.to('cuda', non_blocking=True)   # the next batch,"
            " while this one computes", framework=framework if pin else "",
            apply="dataloader:pin_memory" if pin and p.dataloader else "",
            kernels=top_kernels(k, n),
            figures={"h2d_s": copies["time_s"] / n, "pageable_s": pageable, "exposed_s": exposed})]


class DataLoaderWorkers(Rule):
    """A DataLoader without worker processes (``num_workers=0``) loads every batch in the step: the
    main process builds it while the model waits. Workers build the next batches meanwhile; they
    need cores the step's own threads leave free (run.json's ``cpu``, on a CPU run)."""

    name = "dataloader"
    binding = "data"
    min_share = 0.05

    def precondition(self, ctx: Context) -> str | None:
        return None if ctx.program.dataloader == "workers=0" else "no DataLoader with num_workers=0 in the steps"

    def match(self, ctx: Context) -> list[Finding]:
        a = ctx.inp.trace.annotations
        spans = a[a["name"].astype(str).str.startswith(LOADER_SPAN)]
        step = steps_at(a, spans["ts_ns"].to_numpy())
        steps = ctx.kernels["step"].unique()
        spans = spans[np.isin(step, steps[steps >= 0])] if (steps >= 0).any() else spans
        load = float(spans["dur_ns"].sum()) / 1e9 / ctx.steps
        if load < self.min_share * ctx.step_s:
            return []
        # A GPU step gains only what the GPU waited for meanwhile (its host-bound and other idle).
        binding = "data" if ctx.inp.cpu_only else "host"
        saving = load if ctx.inp.cpu_only else min(load, ctx.terms["host"] + ctx.terms["idle_other"])
        cpu = ctx.inp.run.cpu
        free = cpu.cores_free if cpu is not None else None
        busy = cpu.busy_cores if ctx.inp.cpu_only and cpu is not None and free is not None else None
        spread = None
        if busy is not None:
            # A CPU step with the process's clocks: the workers load while the step computes, so the step
            # becomes the compute alone or the process's CPU work (its busy cores times the step) spread over
            # the free cores, the longer (never, with none free); one core stays the main process's.
            spread = math.inf if free <= 0 else busy * ctx.step_s / free
            new = max(ctx.step_s - load, spread)
            saving = max(0.0, ctx.step_s - new)
            workers = 0 if saving < self.min_share * load else max(1, min(4, math.ceil(load / new),
                                                                             int(math.floor(free)) - 1))
        else:
            # On the CPU the step's threads hold cores; a GPU step's main thread holds one.
            busy = (cpu.threads or 1) if ctx.inp.cpu_only and cpu is not None else 1
            spare = int(math.floor(free)) - busy if free is not None else 4
            workers = max(0, min(4, spare))
        p = ctx.program
        snippet, framework = loader_code(p, workers=max(workers, 1))
        said = (f"the DataLoader builds each batch in the main process: {load * 1e3:.3f} ms/step"
                f" ({100 * load / ctx.step_s:.0f}% of the step)")
        figures = {"load_s": load, "cores_free": free, "step_threads": busy, "workers": workers,
                   "spread_step_s": spread}
        if workers < 1:
            return [Finding(
                rule=self.name, title="Batches loaded in the step, and no free core for a worker",
                binding=binding, saving_s=0.0, confidence="low", status="blocked", summary=said,
                fix="Worker processes would load the next batches meanwhile, but " + _no_core(ctx, busy, free, spread),
                blockers=[{"kind": "no_free_core", "op": "DataLoader", "per_step": 1.0, "library": "", "module": "",
                           "detail": f"{free if free is not None else '?'} cores free, {busy:.3g} used by the step"}],
                figures={**figures, "unblocked_saving_s": load})]
        return [Finding(
            rule=self.name, title=f"Batches loaded in the step: DataLoader(num_workers={workers})",
            binding=binding, saving_s=saving, confidence="medium", summary=said,
            fix=f"With {workers} worker process{'es' if workers > 1 else ''} the next batches are built while the"
            " step runs; the step then only takes a finished batch" + (
                f", and on this CPU takes the compute alone or the process's CPU work spread over its {free:.2g} free"
                f" cores, the longer ({(ctx.step_s - saving) * 1e3:.1f} ms profiled)." if spread is not None else "."),
            snippet=snippet, framework=framework,
            figures=figures, apply=f"dataloader:workers={workers}")]


def _no_core(ctx: Context, busy: float, free: float | None, spread: float | None) -> str:
    """Why a worker would gain nothing: the end of the blocked loader fix's sentence."""
    if spread is None:
        return (f"the step's {busy} thread(s) and the machine's other load leave no core for one: a worker would"
                " slow the step as much as it saves (fewer compute threads would leave one).")
    if math.isinf(spread):
        return "the machine's other load leaves this process no core free: a worker would only take the step's."
    return (f"the process kept {busy:.2g} of its {free:.2g} free cores busy over the profiled steps: its CPU work"
            f" alone, spread over them, takes {spread * 1e3:.1f} ms of the {ctx.step_s * 1e3:.1f} ms step, and a worker"
            " would slow the step as much as it saves.")
