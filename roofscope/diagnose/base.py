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
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pandas as pd

from roofscope.views.programtime import ProgramTime
from roofscope.model.kernels import CLASSES

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.analysis import Analysis

TERMS = CLASSES + ("host", "sync", "idle_other")
# Terms whose fixes make kernels faster (their savings scale with gpu_bound).
KERNEL_TERMS = frozenset(("compute", "memory", "latency", "underutilized", "clock", "occupancy"))
# Rules bound to these terms compare kernels with the roofs: without ceilings they cannot run.
NEEDS_CEILINGS = frozenset(("compute", "memory", "latency", "underutilized", "optimizer"))
CONFIDENCE = ("high", "medium", "low")


@dataclass(kw_only=True)
class Finding:
    """One recommendation: what binds, the evidence, the estimated saving, the fix (keywords only:
    fourteen fields, several of them strings, are easy to pass in the wrong order)."""

    rule: str
    title: str
    binding: str
    saving_s: float              # per step
    confidence: str
    summary: str                 # one line of evidence
    fix: str
    snippet: str = ""
    kernels: list[dict[str, Any]] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    saving_pct: float = 0.0      # of the median step; set by the engine
    rank: int = 0
    change: str = ""             # the change a user makes (fixes.py); set by the engine
    framework: str = ""          # the framework the snippet is written for ("" = plain PyTorch)
    # "blocked": a precondition of the fix fails on this trace (blockers.py); the finding names what
    # blocks it, offers no saving (saving_s 0; the saving it would have is figures["unblocked_saving_s"])
    status: str = "ok"
    blockers: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {"rule": d["rule"], "title": d["title"], "binding": d["binding"], "saving_s": d["saving_s"],
                "saving_pct": d["saving_pct"], "confidence": d["confidence"], "summary": d["summary"],
                "evidence": {"kernels": d["kernels"], "figures": d["figures"]},
                "fix": {"text": d["fix"], "snippet": d["snippet"], "framework": d["framework"]},
                "change": d["change"], "rank": d["rank"], "status": d["status"], "blockers": d["blockers"]}


@dataclass
class Context:
    """What rules read: the analysis, its profiled-step kernels and per-step figures."""

    analysis: "Analysis"
    kernels: pd.DataFrame        # kernels of the profiled steps (all kernels without steps)
    steps: int                   # number of steps the kernels span (>= 1)
    step_s: float                # median step wall time
    terms: dict[str, float]      # seconds per step by term
    gpu_bound: float             # share of the step the GPU is not waiting on the host

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
    g = k.groupby(k["name"].astype(str), sort=False).agg(calls=("dur_s", "size"), time_s=("dur_s", "sum"),
                                                          op=("op_name", "first"))
    cls = k.groupby([k["name"].astype(str), "cls"], sort=False)["dur_s"].sum().reset_index()
    g["cls"] = cls.sort_values("dur_s").drop_duplicates("name", keep="last").set_index("name")["cls"]
    g = g.sort_values("time_s", ascending=False).head(n)
    return [{"name": name, "op": str(r.op), "calls": r.calls / steps, "time_s": r.time_s / steps, "cls": r.cls}
            for name, r in g.iterrows()]


def step_terms(a: "Analysis", kernels: pd.DataFrame, steps: int,
               skip: list[int] | None = None) -> tuple[dict[str, float], float]:
    """Seconds per step by term, and the median step's wall time, over the recorded steps less
    ``skip`` (``steps`` counts those that remain)."""
    tl = a.timeline()
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


@dataclass
class Diagnosis:
    findings: list[Finding]
    terms: dict[str, float]
    step_s: float
    skipped: list[dict[str, str]]
    changes: list[dict[str, Any]] = field(default_factory=list)  # findings grouped per change (fixes.py)
    frameworks: list[str] = field(default_factory=list)
    capture_steps: list[int] = field(default_factory=list)  # left out of the terms (Timeline.capture_steps)
    program_time: dict[str, Any] | None = None  # ProgramTime.to_dict(): savings in the program's own time

    def to_dict(self) -> dict[str, Any]:
        share = {t: (v / self.step_s if self.step_s > 0 else 0.0) for t, v in self.terms.items()}
        return {"step_s": self.step_s, "terms_s": self.terms, "binding": share, "skipped": self.skipped,
                "changes": self.changes, "frameworks": self.frameworks, "capture_steps": self.capture_steps,
                "program_time": self.program_time,
                "note": "savings are estimates per step and overlap: they do not add up; each change's"
                        " saving counts its findings' overlapping time once"}


def run_rules(a: "Analysis", rules: list[Rule]) -> Diagnosis:
    """Run every rule whose binding term holds enough of the step; rank findings by saving."""
    if a.cpu_only:
        return Diagnosis([], {}, 0.0, [{"rule": r.name, "reason": "CPU-only trace: the rules read GPU kernels"}
                                       for r in rules])
    k = a.kernels
    in_steps = k["step"] >= 0
    skip = a.timeline().capture_steps if in_steps.any() else []
    steps = max(1, len(a.steps()) - len(skip)) if in_steps.any() else 1
    kernels = k[in_steps & ~k["step"].isin(skip)] if in_steps.any() else k
    kernels = kernels[kernels["dur_s"].notna()]
    terms, wall = step_terms(a, kernels, steps, skip)
    # Savings in the program's own time: host-side terms scaled to the unprofiled step (programtime.py).
    pt = ProgramTime.of(_unprofiled_step(a), terms, wall)
    step, own_terms = (pt.unprofiled_step_s, pt.terms(terms)) if pt is not None else (wall, terms)
    gpu_bound = max(0.0, 1.0 - own_terms["host"] / step) if step > 0 else 1.0
    ctx = Context(a, kernels, steps, wall, terms, gpu_bound)
    findings: list[Finding] = []
    skipped: list[dict[str, str]] = []
    for rule in rules:
        term = rule.binding
        if term in NEEDS_CEILINGS and not a.ceilings.known:
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
        found = [f for f in rule.match(ctx) if f.saving_s > 0 or f.status == "blocked"]
        if not found:
            skipped.append({"rule": rule.name, "reason": "no matching kernels with a saving"})
        for f in found:
            if f.binding in KERNEL_TERMS:
                f.saving_s *= gpu_bound
            if pt is not None:
                pt.apply(f)
            f.saving_s = min(f.saving_s, step) if step > 0 else f.saving_s
            f.saving_pct = f.saving_s / step if step > 0 else 0.0
        findings.extend(found)
    from roofscope.diagnose import fixes

    frameworks = fixes.apply(findings, a)
    findings.sort(key=lambda f: -f.saving_s)
    for i, f in enumerate(findings, 1):
        f.rank = i
    changes = fixes.group(findings, own_terms, step)
    if pt is not None:
        for c in changes:   # a change's combined saving is bounded like its findings'
            c["saving_s"] = min(c["saving_s"], step)
            c["saving_pct"] = c["saving_s"] / step if step > 0 else 0.0
    return Diagnosis(findings, own_terms, step, skipped, changes, frameworks, skip,
                     program_time=pt.to_dict() if pt is not None else None)


def _unprofiled_step(a: "Analysis") -> float | None:
    """The program's own step time comparable with the profiled steps: decode tokens' when the
    profiled steps decode (inference), else every steady step's."""
    own = a.step_time()
    if not own:
        return None
    inf = a.inference()
    if inf is not None and own.get("decode_median_s") and not inf["steps"].get("prefill"):
        return float(own["decode_median_s"])
    return own.get("unprofiled_median_s")
