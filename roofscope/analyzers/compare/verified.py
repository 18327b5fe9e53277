"""A verified Run's findings, each with what `roofscope verify` measured of its fix, ranked by that.

verify.json (run/verification.py) holds one verdict per fix tried, naming the rules of the findings
it answers (and their change). Each finding of those rules takes its verdict. Findings then rank by
the saving measured where there is one (verified, mispredicted, no effect, slower), by their
prediction where none was measured (a source edit, a fix not tried or that changed nothing in this
program) or too few pairs decided nothing (undecided), and last when the fix as injected crashed or changed the results; each change's list of
findings follows their new ranks.
"""
from __future__ import annotations

import math
from typing import Any

import msgspec

from roofscope.analyzers.model.findings import Diagnosis, Finding
from roofscope.run.layout import VERIFY_FILE
from roofscope.run.verification import MEASURED, Verification


def _matches(f: Finding, v: dict[str, Any]) -> bool:
    rules = v.get("rules") or ([v["rule"]] if v.get("rule") else [])
    return f.rule in rules and (not v.get("change") or f.change == v["change"])


def _key(f: Finding) -> float:
    v = f.verify
    if v is None or v.get("status") not in MEASURED + ("crashed", "changes results"):
        return f.saving_s
    if v.get("status") in MEASURED and v.get("realized_s") is not None:
        return float(v["realized_s"])
    return -math.inf


def rank_verified(diagnosis: Diagnosis, verification: Verification | None) -> dict[str, Any] | None:
    """Attach the verdicts and rank the findings by them (in place); summary.json's ``verification``
    block (each verdict with the rank of the finding it went to, or None), or None without verify.json."""
    if verification is None:
        return None
    verdicts = msgspec.to_builtins(verification.fixes)
    placed: list[Finding | None] = []
    for v in verdicts:
        found = [f for f in diagnosis.findings if f.verify is None and _matches(f, v)]
        for f in found:
            f.verify = v
        placed.append(found[0] if found else None)
    old = {id(f): f.rank for f in diagnosis.findings}
    diagnosis.findings.sort(key=lambda f: -_key(f))   # stable: ties keep the analysis's order
    new = {}
    for i, f in enumerate(diagnosis.findings, 1):
        new[old[id(f)]] = f.rank = i
    for c in diagnosis.changes:
        c["findings"] = [new.get(r, r) for r in c.get("findings") or []]
    return {"file": VERIFY_FILE, "created": verification.created,
            "fixes": [{**v, "finding": f.rank if f is not None else None} for v, f in zip(verdicts, placed)]}


__all__ = ["rank_verified"]
