"""The typed Summary (analyzers/model/summary.py) gives back the very summary dict it was built from,
on every real trace at hand (tests/conftest.py), and its readers see the same figures as the dict's."""
from __future__ import annotations

import json
import math

import pytest

from roofscope.analyzers.model.summary import Metrics, Summary
from roofscope.jsonsafe import json_safe
from tests.conftest import external
from tests.golden import DEVICE, GOLDEN, trace_files

# The traces roofscope analyzes (its golden digests record a refusal as the error's name).
_RECORDED = json.loads(GOLDEN.read_text())
ANALYZED = [rel for rel in trace_files() if not isinstance(_RECORDED.get(rel), str)]


@pytest.mark.parametrize("rel", ANALYZED)
def test_round_trip_on_shared_traces(rel: str) -> None:
    from roofscope.analysis import analyze

    a = analyze(external(rel), device=DEVICE, use_cache=False)
    d = a.to_dict()
    back = Summary.from_dict(d).to_dict()
    assert back == d
    assert list(back) == list(d)          # key order too: the JSON writes it
    assert Summary.from_dict(json_safe(d)).to_dict() == json_safe(d)
    typed = a.summary
    assert typed.metrics.to_dict() == d["metrics"]
    assert [f.rank for f in typed.findings] == [f["rank"] for f in d["findings"]]
    assert {c: v.time_s for c, v in typed.time_by_class.items()} == {
        c: v["time_s"] for c, v in d["time_by_class"].items()}


def test_absent_keys_stay_absent_and_extra_keys_are_kept() -> None:
    # A gate baseline's metrics from an older roofscope: fewer keys, one this version does not know.
    old = {"step_time_s": 0.01, "future_figure": 3, "throttled_fraction": math.nan}
    m = Metrics.from_dict(old)
    assert m.step_time_s == 0.01 and m.mfu is None and m.extra == {"future_figure": 3}
    assert list(m.to_dict()) == list(old) and m.to_dict()["future_figure"] == 3


def test_nested_parts_are_typed() -> None:
    s = Summary.from_dict({"findings": [{"rank": 1, "title": "t", "fix": {"text": "x", "snippet": ""}}],
                           "diagnosis": {"skipped": [{"rule": "r", "reason": "why"}]},
                           "time_by_class": {"memory": {"time_s": 1.0, "share": 0.5}}, "telemetry": None})
    assert s.findings[0].fix.text == "x" and s.diagnosis.skipped[0].reason == "why"
    assert s.time_by_class["memory"].share == 0.5 and s.telemetry is None
    assert "metrics" not in s.to_dict()
