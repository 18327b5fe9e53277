"""Golden digests of `roofscope analyze --json` on every shared external trace.

Speed work (issue 16) must not change a single figure. `digests(path)` turns the analysis of
one trace into one short hash per section of the JSON output (each summary key, each
aggregate table), with floats rounded to 9 significant digits so that a changed summation
order cannot flip a digest while any real change does. `tests/data/golden_summaries.json`
holds the digests recorded with the code as it was before the speed work;
tests/test_golden_summaries.py compares against them.

Re-record (for an intentional change of results, saying which in the commit; after merging main,
from main's own code: `git archive main | tar -x -C /tmp/m && PYTHONPATH=/tmp/m python tests/golden.py --write`):

    PYTHONPATH=. python -m tests.golden --write
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from tests.conftest import EXTERNAL, available_traces, corpus_present, external

GOLDEN = Path(__file__).resolve().parent / "data" / "golden_summaries.json"


def trace_files() -> list[str]:
    """Corpus paths of the HTA traces at hand (tests/conftest.py: vendored, and the whole corpus when present)."""
    return [rel for rel in available_traces() if rel.startswith("hta") and rel.endswith((".json", ".json.gz"))]


def _canon(v: Any) -> Any:
    if isinstance(v, float):
        return float(f"{v:.9g}")
    if isinstance(v, dict):
        return {k: _canon(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_canon(x) for x in v]
    return v


def sections(doc: dict[str, Any]) -> dict[str, Any]:
    """The JSON output split into the sections that are digested (the trace's own path left out)."""
    out = {f"summary.{k}": v for k, v in doc["summary"].items() if k != "trace"}
    out.update({k: v for k, v in doc.items() if k.startswith("by_")})
    return out


def digest(value: Any) -> str:
    return hashlib.sha1(json.dumps(_canon(value), sort_keys=True).encode()).hexdigest()[:16]


# Every trace is analyzed on one datasheet device, so that traces without a known device (V100,
# MTIA, CPU-only) are analyzed in full too and the digests do not depend on ceilings resolution.
DEVICE = "a100-sxm4-80gb"


def analyze_json(path: Path) -> dict[str, Any] | str:
    """The --json document of one trace, or the error's class name when roofscope refuses it."""
    from roofscope.analysis import AnalysisSettings, run
    from roofscope.config import CeilingOverrides
    from roofscope.errors import RoofscopeError
    from roofscope.reports.export import to_json_dict

    try:
        return json.loads(json.dumps(to_json_dict(run(path, AnalysisSettings(CeilingOverrides(device=DEVICE), use_cache=False)))))
    except RoofscopeError as e:
        return f"error: {type(e).__name__}"


def digests(path: Path) -> dict[str, str] | str:
    doc = analyze_json(path)
    return doc if isinstance(doc, str) else {k: digest(v) for k, v in sections(doc).items()}


def record() -> dict[str, Any]:
    if not corpus_present():
        raise SystemExit(f"the whole corpus is needed to record its digests: none at {EXTERNAL}")
    return {rel: digests(external(rel)) for rel in trace_files()}


if __name__ == "__main__":
    if "--write" not in sys.argv:
        raise SystemExit(__doc__)
    GOLDEN.write_text(json.dumps(record(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
