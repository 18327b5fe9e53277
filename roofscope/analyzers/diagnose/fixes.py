"""Findings grouped by the change a user makes.

One change often answers several findings: ``torch.compile`` fuses the elementwise chains
(``fusion``) and, with fewer and CUDA-graphed launches, removes the launch-bound idle
(``cuda_graphs``). Each change gets a combined saving that counts overlapping time once:
its findings' savings are summed per term of the step they address (memory-bound time,
host-bound idle, ...), each term capped at the time it holds, and the total capped at the
step. Changes rank by that saving, and ``roofscope diff --applied CHANGE`` checks it.
A blocked fix and advice (a step that finds out more) are no change to make.

The snippets are the rules' own, written for the program (snippets.py, program.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from roofscope.analyzers.model.findings import Finding


@dataclass(frozen=True)
class Change:
    key: str
    title: str
    rules: tuple[str, ...]


CHANGES: tuple[Change, ...] = (
    # small_grid's fix is a compile too (autotuned tile sizes): on an H200 Lightning CNN, compiling with
    # mode="reduce-overhead" saved 1.97 ms, fusion and graphs predicted 0.90 and the small grids 0.62 more.
    Change("torch_compile", "Compile the model (torch.compile: fusion, fewer launches, CUDA graphs, tuned grids)",
           ("fusion", "cuda_graphs", "small_grid")),
    Change("precision", "TF32 tensor cores for fp32 matmuls", ("tf32",)),
    Change("fused_optimizer", "Fused or foreach optimizer", ("fused_optimizer",)),
    Change("data_loader", "Input pipeline: pinned memory, worker processes", ("h2d_copies", "dataloader")),
    Change("host_syncs", "No host syncs in the step", ("host_syncs",)),
    Change("sdpa", "Fused attention (scaled_dot_product_attention)", ("sdpa",)),
    Change("threads", "Threads for the cores the process gets", ("cpu_threads",)),
)
_BY_RULE = {r: c for c in CHANGES for r in c.rules}


def change_of(rule: str) -> str:
    """The change a finding of ``rule`` asks for (a rule without a group is its own change)."""
    c = _BY_RULE.get(rule)
    return c.key if c else rule


def group(findings: list[Finding], terms: dict[str, float], step_s: float) -> list[dict[str, Any]]:
    """One entry per change, ranked by combined saving (see the module docstring)."""
    by_change: dict[str, list[Finding]] = {}
    for f in findings:
        if f.status != "blocked" and f.kind != "advice":  # no change to make as it stands
            by_change.setdefault(f.change or change_of(f.rule), []).append(f)
    out = []
    for key, fs in by_change.items():
        per_term: dict[str, float] = {}
        for f in fs:
            per_term[f.binding] = per_term.get(f.binding, 0.0) + f.saving_s
        # Savings on one term overlap: never more than the term holds (terms without a time,
        # such as copy, are kept as given).
        combined = sum(min(v, terms[t]) if terms.get(t) else v for t, v in per_term.items())
        combined = min(combined, step_s) if step_s > 0 else combined
        c = next((c for c in CHANGES if c.key == key), None)
        out.append({"change": key, "title": c.title if c else fs[0].title,
                    "rules": [f.rule for f in fs], "findings": [f.rank for f in fs],
                    "saving_s": float(combined), "saving_pct": float(combined / step_s) if step_s > 0 else 0.0,
                    "snippet": fs[0].snippet, "framework": fs[0].framework, "apply": merge_apply(f.apply for f in fs)})
    out.sort(key=lambda d: -d["saving_s"])
    for i, d in enumerate(out, 1):
        d["rank"] = i
    return out


# Of several compile modes asked for by one change, the one that does what the others do and more.
_COMPILE_ORDER = ("compile:reduce-overhead", "compile:max-autotune-no-cudagraphs", "compile:default", "compile")


def merge_apply(applies: Iterable[str]) -> str:
    """One ``apply`` for several findings' (NAME[:ARG] joined by ";"): each name once, one compile mode."""
    names = list(dict.fromkeys(a for s in applies for a in s.split(";") if a))
    modes = [m for m in _COMPILE_ORDER if m in names]
    return ";".join(n for n in names if not n.startswith("compile") or modes and n == modes[0])


def apply(findings: list[Finding]) -> None:
    """Set each finding's change; a blocked fix or advice injects nothing (its ``apply`` is "")."""
    for f in findings:
        f.change = change_of(f.rule)
        if f.status == "blocked" or f.kind == "advice":
            f.apply = ""


__all__ = ["CHANGES", "Change", "apply", "change_of", "group", "merge_apply"]
