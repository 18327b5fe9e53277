"""The diagnosis' records: one :class:`Finding` per recommendation, and the :class:`Diagnosis`
that ranks them (diagnose/ makes them; renderers, ``diff`` and the job merge read them).

Only records here, no logic beyond their JSON shape: a renderer imports this module, never the
stage that makes them. ``to_dict()`` is what summary.json's ``findings`` and ``diagnosis`` hold.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

CONFIDENCE = ("high", "medium", "low")
# What a finding asks: a change that saves time ("fix"), or a step that finds out more and saves
# nothing by itself ("advice": inspect kernels with ncu; its saving is 0).
KINDS = ("fix", "advice")
# The fixes roofscope can inject into a program without editing it (``roofscope verify``): a finding's
# ``apply`` is ``NAME`` or ``NAME:ARG``, several joined by ";" ("" when the fix needs a source edit).
APPLY_NAMES = ("tf32", "cudnn_benchmark", "channels_last", "compile", "fallback_random", "static_cache",
               "fused_optimizer", "threads", "dataloader")


@dataclass(kw_only=True)
class Finding:
    """One recommendation: what binds, the evidence, the estimated saving, the fix (keywords only:
    eighteen fields, several of them strings, are easy to pass in the wrong order)."""

    rule: str
    title: str
    binding: str
    saving_s: float              # per step
    confidence: str              # one of CONFIDENCE
    summary: str                 # one line of evidence
    fix: str
    snippet: str = ""
    kernels: list[dict[str, Any]] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    saving_pct: float = 0.0      # of the median step; set by the engine
    rank: int = 0
    change: str = ""             # the change a user makes (analyzers/diagnose/fixes.py); set by the engine
    framework: str = ""          # the framework the snippet is written for ("" = plain PyTorch)
    # "blocked": a precondition of the fix fails on this trace (analyzers/diagnose/blockers.py); the finding names
    # what blocks it, offers no saving (saving_s 0; the saving it would have is figures["unblocked_saving_s"])
    status: str = "ok"
    blockers: list[dict[str, Any]] = field(default_factory=list)
    # What `roofscope verify` measured of its fix (a verify.json entry; analyzers/compare/verified.py), if it did
    verify: dict[str, Any] | None = None
    kind: str = "fix"            # one of KINDS
    # The fix as roofscope injects it (APPLY_NAMES: "compile:reduce-overhead", "threads:1;channels_last"),
    # set only where its preconditions hold on this trace; "" when it needs an edit of the program's source.
    apply: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {"rule": d["rule"], "title": d["title"], "binding": d["binding"], "saving_s": d["saving_s"],
                "saving_pct": d["saving_pct"], "confidence": d["confidence"], "summary": d["summary"],
                "evidence": {"kernels": d["kernels"], "figures": d["figures"]},
                "fix": {"text": d["fix"], "snippet": d["snippet"], "framework": d["framework"], "apply": d["apply"]},
                "change": d["change"], "rank": d["rank"], "status": d["status"], "blockers": d["blockers"],
                "kind": d["kind"], **({"verify": d["verify"]} if d["verify"] is not None else {})}


# A profiled step this many times the median of the profiled steps is no step of the program's (a neighbour
# took the cores, a collection ran): its ops would weigh in every per-step figure. A CPU diffusion UNet's
# profile held one step of 3.46 s beside two of 0.25 s; its chains came to 265 ms "a step" and fusion
# promised 138 ms of a 258 ms step, where compile saved about 8 ms (docs/validation.md).
OUTLIER_STEP = 3.0


@dataclass
class Diagnosis:
    """What binds the step (seconds per step by term), the ranked findings, the rules that did not run."""

    findings: list[Finding]
    terms: dict[str, float]
    step_s: float
    skipped: list[dict[str, str]]
    changes: list[dict[str, Any]] = field(default_factory=list)  # findings grouped per change (analyzers/diagnose/fixes.py)
    frameworks: list[str] = field(default_factory=list)
    capture_steps: list[int] = field(default_factory=list)  # left out of the terms (Timeline.capture_steps)
    program_time: dict[str, Any] | None = None  # ProgramTime.to_dict(): savings in the program's own time
    program: dict[str, Any] | None = None  # how the program runs, as the fixes assume it (diagnose/program.py)
    outlier_steps: list[int] = field(default_factory=list)  # left out: far slower than the others (base.py)

    def to_dict(self) -> dict[str, Any]:
        share = {t: (v / self.step_s if self.step_s > 0 else 0.0) for t, v in self.terms.items()}
        return {"step_s": self.step_s, "terms_s": self.terms, "binding": share, "skipped": self.skipped,
                "changes": self.changes, "frameworks": self.frameworks, "capture_steps": self.capture_steps,
                "program_time": self.program_time, "program": self.program,
                **({"outlier_steps": self.outlier_steps} if self.outlier_steps else {}),
                "note": "savings are estimates per step and overlap: they do not add up; each change's"
                        " saving counts its findings' overlapping time once"}


__all__ = ["APPLY_NAMES", "CONFIDENCE", "KINDS", "Diagnosis", "Finding"]
