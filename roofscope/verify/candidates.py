"""Which fixes ``roofscope verify`` tries, and what the analysis predicted for each.

Each finding of the Run's summary names its injectable fix in ``fix.apply`` (roofscope/fixes/; ""
when only a source edit answers it). A summary written before the analysis named them has no
``apply``: the fix is derived from the finding's rule and change (``fixes.derive``, documented in
docs/verify.md). Findings naming the same fix are one candidate: its rule is the first (highest
saving) finding's, its prediction the combined saving of their change when they are all of it
(diagnosis.changes counts overlapping time once), else their savings combined the same way (added
across terms; within one term never more than the term holds). Blocked findings
claim no saving and are left out unless asked for with ``--fix``.

By default the top ``top`` candidates are tried, and the findings ranked above the last of them that
need a source edit are reported "not applicable" (nothing to inject). ``--fix SPEC`` tries exactly
the specs given, each with the prediction of the findings naming it, if any.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from roofscope.analyzers.diagnose.fixes import combined_saving
from roofscope.errors import RoofscopeError
from roofscope.fixes import FixError, derive, parse, spec_text


class NothingToVerify(RoofscopeError):
    """No fix to try: the Run has no recommendation with an injectable fix, and none was named."""


@dataclass
class Candidate:
    fix: str                         # the canonical spec; "" when a source edit is needed
    rule: str = ""
    rules: list[str] = field(default_factory=list)
    change: str = ""
    predicted_s: float | None = None
    title: str = ""
    fix_text: str = ""               # the finding's own fix, for a source edit's reason


def _apply(finding: dict[str, Any]) -> str:
    fix = finding.get("fix") or {}
    spec = fix.get("apply") if isinstance(fix, dict) and "apply" in fix else derive(str(finding.get("rule", "")),
                                                                                    str(finding.get("change", "")))
    if not spec:
        return ""
    try:
        return spec_text(parse(str(spec)))
    except FixError:   # a fix this roofscope does not know (a newer analysis, a --fix-module not loaded)
        return ""


def group(summary: dict[str, Any], blocked: bool = False) -> list[Candidate]:
    """One candidate per fix the summary's findings name, in the findings' rank order."""
    findings = sorted(summary.get("findings") or [], key=lambda f: f.get("rank") or 0)
    changes = {c.get("change"): c for c in (summary.get("diagnosis") or {}).get("changes") or []}
    out: dict[str, Candidate] = {}
    per_term: dict[str, dict[str, float]] = {}
    edits: list[Candidate] = []
    for f in findings:
        if f.get("status") == "blocked" and not blocked:
            continue
        spec, saving = _apply(f), float(f.get("saving_s") or 0.0)
        rule, change = str(f.get("rule", "")), str(f.get("change", ""))
        if not spec:
            edits.append(Candidate("", rule, [rule], change, saving, str(f.get("title", "")),
                                   str((f.get("fix") or {}).get("text", ""))))
            continue
        c = out.setdefault(spec, Candidate(spec, rule, [], change, 0.0, str(f.get("title", ""))))
        c.rules.append(rule)
        by_term = per_term.setdefault(spec, {})
        term = str(f.get("binding", ""))
        by_term[term] = by_term.get(term, 0.0) + saving
        if change != c.change:
            c.change = ""
    terms = (summary.get("diagnosis") or {}).get("terms_s") or {}
    for c in out.values():
        combined = changes.get(c.change)
        if c.change and combined is not None and set(combined.get("rules") or ()) == set(c.rules):
            c.predicted_s = float(combined.get("saving_s") or 0.0)
        else:   # as diagnosis.changes combines: savings on one term overlap, never more than the term holds
            c.predicted_s = combined_saving(per_term[c.fix], {t: float(v) for t, v in terms.items() if v})
    # Source edits keep their place among the fixes: by the first rank of their finding.
    order = {f.get("rule"): i for i, f in enumerate(findings)}
    return sorted([*out.values(), *edits], key=lambda c: order.get(c.rule, len(order)))


def choose(summary: dict[str, Any], top: int, asked: tuple[str, ...] = ()) -> list[Candidate]:
    """The candidates to report: ``asked`` specs (``--fix``) or the top ``top`` injectable ones, with the
    source edits ranked above the last of those; NothingToVerify when none is left."""
    if asked:
        named = {c.fix: c for c in group(summary, blocked=True) if c.fix}
        out = []
        for text in asked:
            spec = spec_text(parse(text))
            c = named.get(spec)
            out.append(Candidate(spec, c.rule, c.rules, c.change, c.predicted_s, c.title) if c else
                       Candidate(spec, title=spec))
        return list({c.fix: c for c in out}.values())
    chosen: list[Candidate] = []
    injectable = 0
    for c in group(summary):
        if injectable == top:
            break
        chosen.append(c)
        injectable += bool(c.fix)
    while chosen and not chosen[-1].fix:
        chosen.pop()
    if not chosen:
        n = len(summary.get("findings") or [])
        raise NothingToVerify(("nothing to verify: the Run has no recommendation" if not n else
                              f"nothing to verify: none of the Run's {n} recommendations has a fix roofscope can "
                              "inject (each needs a source edit)") + "; name fixes to try with --fix SPEC")
    return chosen
