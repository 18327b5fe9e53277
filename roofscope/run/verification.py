"""verify.json: what ``roofscope verify`` measured of the Run's fixes, each re-run in the program.

One entry per fix tried (roofscope/verify/ writes them; schema.FixVerdict types them; docs/verify.md
explains the figures)::

    {"schema_version": 1, "created": ..., "settings": {...}, "fixes": [
      {"rule": "fusion", "fix": "compile", "predicted_s": 0.0021, "realized_s": 0.0018,
       "ci_s": [0.0015, 0.0021], "pairs": 4, "status": "verified", "reason": "...", ...}]}

Seconds are saved per step (negative: the fix costs time). The analysis reads the file when the
Run has one (analysis.py): each finding carries its fix's verdict, and findings rank by the saving
measured. A file that does not read is a one-line error.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec

from roofscope.run.directory import RunError
from roofscope.run.layout import VERIFY_FILE
from roofscope.run.schema import VERIFY_VERSION, FixVerdict, Verification, read_versioned

STATUSES = ("verified", "mispredicted", "no effect", "slower", "undecided", "crashed", "changes results",
            "not applicable")
# Statuses whose saving was measured: a Run ranks their findings by it.
MEASURED = ("verified", "mispredicted", "no effect", "slower")


def load(run_dir: str | os.PathLike) -> Verification | None:
    """The Run's verify.json, or None when it has none."""
    p = Path(run_dir) / VERIFY_FILE
    if not p.exists():
        return None
    try:
        data = p.read_bytes()
    except OSError as e:
        raise RunError(f"{p}: unreadable ({e.strerror})") from None
    doc = read_versioned(data, Verification, key="schema_version", current=VERIFY_VERSION, what="verify",
                         where=str(p), error=RunError)
    bad = [f.status for f in doc.fixes if f.status not in STATUSES]
    if bad:
        raise RunError(f"{p}: unknown status {bad[0]!r}; one of {', '.join(STATUSES)}")
    return doc


def text(doc: Verification) -> str:
    """verify.json's text."""
    return json.dumps(msgspec.to_builtins(doc), indent=1)


__all__ = ["MEASURED", "STATUSES", "FixVerdict", "Verification", "load", "text"]
