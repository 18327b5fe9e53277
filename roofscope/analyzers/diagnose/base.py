"""The rule engine: what binds the step, which rules apply, and their ranked findings.

A step's time splits into *terms* (shares of the median step's wall time): GPU busy
time divided among the roofline classes of the kernels running (``compute``,
``memory``, ``latency``, ``underutilized``, ``unknown``, ``communication``), and GPU
idle time by cause (``host``: the GPU waited for a launch; ``sync``: the bubble after a
host synchronization; ``idle_other``). Each rule addresses one term (its
``binding``) and runs only when that term holds at least ``min_share`` of the step,
so a fix is never proposed for a term that does not bind: fusion needs memory-bound
time, CUDA graphs need host-bound idle time, TF32 needs compute-bound time.

Savings are per step. A rule that speeds up kernels saves GPU time; while the GPU
waits on the host, faster kernels only lengthen the wait, so kernel savings count in
proportion to the time the GPU is not starved by the host (``gpu_bound``). Savings of
different findings overlap (fusing a chain also removes its launches) and are not
additive.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from roofscope.analyzers.diagnose import fixes
from roofscope.analyzers.diagnose.inputs import DiagnosisInput
from roofscope.analyzers.diagnose.program import Program, program_of
from roofscope.analyzers.ingest.names import as_text
from roofscope.analyzers.model.findings import OUTLIER_STEP, Diagnosis, Finding
from roofscope.analyzers.model.kernels import CLASSES
from roofscope.analyzers.views.programtime import ProgramTime
from roofscope.analyzers.views.timeline import Timeline, in_window, step_windows

TERMS = CLASSES + ("host", "sync", "idle_other")
# Unprofiled steps whose 90th percentile is this many times their 10th ran as the machine let them (a CPU
# client's steps took 37 ms to 1.25 s, its median 424 ms against 81 profiled: channels_last predicted 35.5 ms
# by scaling up, and saved 2.98 ms [1.14, 4.82] in verify); steady programs' stay under 1.3.
UNSTEADY_SPREAD = 2.0
# Terms whose fixes make kernels faster (their savings scale with gpu_bound).
KERNEL_TERMS = frozenset(("compute", "memory", "latency", "underutilized", "clock", "occupancy"))
# Rules bound to these terms compare kernels with the roofs: without ceilings they cannot run.
NEEDS_CEILINGS = frozenset(("compute", "memory", "latency", "underutilized", "optimizer"))


@dataclass
class Context:
    """What rules read: the declared input (inputs.py) and the engine's figures over its profiled steps."""

    inp: DiagnosisInput
    kernels: pd.DataFrame        # kernels of the profiled steps (all kernels without steps)
    steps: int                   # number of steps the kernels span (>= 1)
    step_s: float                # median step wall time
    terms: dict[str, float]      # seconds per step by term
    gpu_bound: float             # share of the step the GPU is not waiting on the host
    program: Program = field(default_factory=lambda: Program("training_loop"))   # how it runs (program.py)
    memo: dict[str, Any] = field(default_factory=dict)   # what several rules read, computed once (graph blockers)
    left_out: list[int] = field(default_factory=list)     # steps outside ``steps``: graph captures, outliers

    @cached_property
    def gaps(self) -> pd.DataFrame:
        """The timeline's idle gaps, less those of the steps left out."""
        g = self.inp.timeline.gaps
        return g[~g["step"].isin(self.left_out)] if self.left_out and len(g) else g

    def per_step(self, seconds: float) -> float:
        return seconds / self.steps

    def share(self, term: str) -> float:
        return self.terms.get(term, 0.0) / self.step_s if self.step_s > 0 else 0.0


class Rule(abc.ABC):
    """A diagnosis rule. Subclasses set the class attributes and implement :meth:`match`;
    :meth:`precondition` may add checks beyond the binding term's share."""

    name: ClassVar[str]
    binding: ClassVar[str]
    min_share: ClassVar[float] = 0.05

    def precondition(self, ctx: Context) -> str | None:
        """None when the rule may apply, else why not (reported as skipped)."""
        return None

    @abc.abstractmethod
    def match(self, ctx: Context) -> list[Finding]:
        """The findings of this rule on ``ctx`` (empty when nothing matches)."""


def top_kernels(k: pd.DataFrame, steps: int, n: int = 5) -> list[dict[str, Any]]:
    """Evidence: the kernels holding most of ``k``'s time, per step."""
    if not len(k):
        return []
    names = pd.Series(as_text(k["name"]), index=k.index, name="name")
    g = k.groupby(names, sort=False).agg(calls=("dur_s", "size"), time_s=("dur_s", "sum"), op=("op_name", "first"))
    cls = k.groupby([names, "cls"], sort=False)["dur_s"].sum().reset_index()
    g["cls"] = cls.sort_values("dur_s").drop_duplicates("name", keep="last").set_index("name")["cls"]
    g = g.sort_values("time_s", ascending=False).head(n)
    return [{"name": name, "op": str(r.op), "calls": r.calls / steps, "time_s": r.time_s / steps, "cls": r.cls}
            for name, r in g.iterrows()]


def step_terms(tl: Timeline, kernels: pd.DataFrame, steps: int,
               skip: list[int] | None = None) -> tuple[dict[str, float], float]:
    """Seconds per step by term, and the median step's wall time, over the timeline's steps less
    ``skip`` (``steps`` counts those that remain)."""
    s = tl.steps.drop(index=skip or [], errors="ignore")
    if len(s):
        wall = float(np.median(s["wall_s"]))
        busy = float(s["busy_s"].mean())
        host = float(s["idle_host_s"].mean() + s["idle_queued_s"].mean())
        other = float(s["idle_other_s"].mean() + s["idle_edge_s"].mean())
    else:
        wall = busy = host = other = 0.0
    gaps = tl.gaps[~tl.gaps["step"].isin(skip or [])] if skip else tl.gaps
    sync = float(gaps.loc[gaps["after_sync"], "dur_s"].sum()) / steps if len(gaps) else 0.0
    # A gap after a sync is the sync's bubble, whatever else it is.
    after = gaps[gaps["after_sync"]] if len(gaps) else gaps
    host_sync = float(after.loc[after["kind"].isin(("host", "queued")), "dur_s"].sum()) / steps if len(gaps) else 0.0
    terms = dict.fromkeys(TERMS, 0.0)
    by_cls = kernels.groupby("cls")["dur_s"].sum() / steps
    total = float(by_cls.sum())
    for c, t in by_cls.items():
        # Streams overlap: split the busy union among classes by their kernel time.
        terms[str(c)] = busy * float(t) / total if total > 0 else 0.0
    terms["host"] = max(0.0, host - host_sync)
    terms["sync"] = sync
    terms["idle_other"] = max(0.0, other - (sync - host_sync))
    return terms, wall


def outlier_steps(durations: pd.Series) -> list[int]:
    """The steps (``durations``' index) to leave out of the diagnosis: slower than OUTLIER_STEP times the
    median, among 3 steps or more (so always fewer than half of them)."""
    if len(durations) < 3:
        return []
    return sorted(int(s) for s in durations.index[durations.to_numpy() > OUTLIER_STEP * float(np.median(durations))])


def _kept(f: Finding) -> bool:
    """A finding worth saying: a saving, a blocked fix (what blocks it), or advice (saves nothing itself)."""
    return f.saving_s > 0 or f.status == "blocked" or f.kind == "advice"


def _rank(findings: list[Finding]) -> None:
    fixes.apply(findings)
    findings.sort(key=lambda f: (f.kind == "advice", -f.saving_s))
    for i, f in enumerate(findings, 1):
        f.rank = i


def run_cpu_rules(inp: DiagnosisInput, rules: list[Rule]) -> Diagnosis:
    """The CPU rules (cpu.py) on a CPU-only trace, whose "kernels" are its CPU ops: terms by roofline
    class, and ``host`` the rest of the step (Python, the framework, ops without a cost). Savings are
    scaled from the profiled step to the program's own (the profiler slows every op alike), not up to an
    own step the machine set (``UNSTEADY_SPREAD``)."""
    if inp.gpu_job:
        why = f"CPU-only trace of a GPU job ({inp.gpu_job}): its GPU activity was not recorded"
        return Diagnosis([], {}, 0.0, [{"rule": r.name, "reason": why} for r in rules])
    k = inp.kernels
    in_steps = k["step"] >= 0
    outliers = outlier_steps(inp.steps.set_index("step")["dur_s"]) if in_steps.any() and len(inp.steps) else []
    kernels = (k[in_steps & ~k["step"].isin(outliers) & k["dur_s"].notna()] if in_steps.any()
               else k[k["dur_s"].notna()])
    steps = max(1, int(kernels["step"].nunique())) if in_steps.any() else 1
    typical = inp.steps[~inp.steps["step"].isin(outliers)]
    wall = float(np.median(typical["dur_s"])) if len(typical) else float(kernels["dur_s"].sum())
    terms = (kernels.groupby("cls")["dur_s"].sum() / steps).to_dict()
    terms["host"] = max(0.0, wall - sum(terms.values()))
    program = program_of(inp, kernels)
    ctx = Context(inp, kernels, steps, wall, terms, 1.0, program, left_out=outliers)
    own = _unprofiled_step(inp)
    # The profiler slows every op alike: savings follow the program's own step. Where its unprofiled steps ran
    # at speeds far apart (a neighbour taking the cores now and then), the machine set that step, not the ops'
    # work: savings are not scaled up to it, and the rest of the step goes to ``host``.
    scale = own / wall if own and wall > 0 else 1.0
    spread = inp.run.unprofiled_spread
    if spread is not None and spread > UNSTEADY_SPREAD:
        scale = min(1.0, scale)
    step = own or wall
    findings: list[Finding] = []
    skipped: list[dict[str, str]] = []
    for rule in rules:
        why = rule.precondition(ctx)
        found = [] if why else [f for f in rule.match(ctx) if _kept(f)]
        if why or not found:
            skipped.append({"rule": rule.name, "reason": why or "no matching ops with a saving"})
        for f in found:
            if scale != 1.0:
                f.figures["profiled_saving_s"] = f.saving_s
            f.saving_s = min(f.saving_s * scale, step)
            f.saving_pct = f.saving_s / step if step > 0 else 0.0
        findings.extend(found)
    _rank(findings)
    terms = {t: v * scale for t, v in terms.items()}
    terms["host"] = max(0.0, step - sum(v for t, v in terms.items() if t != "host"))
    return Diagnosis(findings, terms, step, skipped, fixes.group(findings, terms, step), list(program.frameworks),
                     program=program.to_dict(), outlier_steps=outliers)


def run_rules(inp: DiagnosisInput, rules: list[Rule]) -> Diagnosis:
    """Run every rule whose binding term holds enough of the step; rank findings by saving."""
    k = inp.kernels
    in_steps = k["step"] >= 0
    captures = inp.timeline.capture_steps if in_steps.any() else []
    tl_steps = inp.timeline.steps
    outliers = (outlier_steps(tl_steps.drop(index=captures, errors="ignore")["wall_s"])
                if in_steps.any() and len(tl_steps) else [])
    skip = [*captures, *outliers]
    steps = max(1, len(inp.steps) - len(skip)) if in_steps.any() else 1
    # One copy of the frame: the steps analyzed, with a duration.
    kernels = k[(in_steps & ~k["step"].isin(skip) if in_steps.any() else True) & k["dur_s"].notna()]
    terms, wall = step_terms(inp.timeline, kernels, steps, skip)
    # Savings in the program's own time: host-side terms scaled to the unprofiled step (programtime.py).
    pt = ProgramTime.of(_unprofiled_step(inp), terms, wall, _host_events(inp, skip))
    step, own_terms = (pt.unprofiled_step_s, pt.terms(terms)) if pt is not None else (wall, terms)
    gpu_bound = max(0.0, 1.0 - own_terms["host"] / step) if step > 0 else 1.0
    program = program_of(inp, kernels)
    ctx = Context(inp, kernels, steps, wall, terms, gpu_bound, program, left_out=skip)
    findings: list[Finding] = []
    skipped: list[dict[str, str]] = []
    for rule in rules:
        term = rule.binding
        if term in NEEDS_CEILINGS and not inp.ceilings.known:
            skipped.append({"rule": rule.name, "reason": "needs ceilings: pass --datasheet KEY, --peak-tflops and"
                                                          " --peak-bandwidth, or --ceilings FILE"})
            continue
        # Binding is judged in the program's own time: the profiler's inflated host time binds nothing.
        share = own_terms.get(term, 0.0) / step if step > 0 else 0.0
        if term in ctx.terms and share < rule.min_share:
            skipped.append({"rule": rule.name, "reason": f"not binding: {term} is {100 * share:.1f}% of"
                                                          f" the step (needs {100 * rule.min_share:.0f}%)"})
            continue
        why = rule.precondition(ctx)
        if why:
            skipped.append({"rule": rule.name, "reason": why})
            continue
        found = [f for f in rule.match(ctx) if _kept(f)]
        if not found:
            skipped.append({"rule": rule.name, "reason": "no matching kernels with a saving"})
        for f in found:
            if f.binding in KERNEL_TERMS:
                f.saving_s *= gpu_bound
            if pt is not None:
                pt.apply(f)
            f.saving_s = min(f.saving_s, step) if step > 0 else f.saving_s
            f.saving_pct = f.saving_s / step if step > 0 else 0.0
        # A fix of kernels in a step the host's own work fills saves nothing in it: said, not ranked.
        paced = [f for f in found if f.saving_s <= 0 and f.status == "ok" and "host_floor_s" in f.figures]
        for f in paced:
            floor_ms = f.figures["host_floor_s"] * 1e3
            skipped.append({"rule": rule.name, "reason": f"the host's own work, at least {floor_ms:.3f} ms a step"
                            " without the profiler, fills the step: faster kernels save nothing in it"})
        findings.extend(f for f in found if f not in paced)
    _rank(findings)
    changes = fixes.group(findings, own_terms, step)
    if pt is not None:
        for c in changes:   # a change's combined saving is bounded like its findings'
            c["saving_s"] = min(c["saving_s"], step)
            c["saving_pct"] = c["saving_s"] / step if step > 0 else 0.0
    return Diagnosis(findings, own_terms, step, skipped, changes, list(program.frameworks), captures,
                     program_time=pt.to_dict() if pt is not None else None, program=program.to_dict(),
                     outlier_steps=outliers)


def _host_events(inp: DiagnosisInput, skip: list[int]) -> float:
    """The CPU ops and runtime calls the profiler recorded a step, over the steps analyzed."""
    if not len(inp.steps) or not {"step", "ts_ns", "end_ns"} <= set(inp.steps.columns):
        return 0.0   # no step windows (a diagnosis input written by hand): no floor from them
    s = inp.steps[~inp.steps["step"].isin(skip)]
    if not len(s):
        return 0.0
    _, starts, ends = step_windows(s)
    n = sum(int((in_window(f["ts_ns"].to_numpy(dtype=np.int64), starts, ends) >= 0).sum())
            for f in (inp.trace.ops, inp.trace.runtime) if len(f))
    return n / len(s)


def _unprofiled_step(inp: DiagnosisInput) -> float | None:
    """The program's own step time comparable with the profiled steps: decode tokens' when the
    profiled steps decode (inference), else every steady step's."""
    run = inp.run
    if inp.inference is not None and run.decode_step_s and not inp.inference["steps"].get("prefill"):
        return float(run.decode_step_s)
    return run.unprofiled_step_s
