"""The deprecated `Analysis` face (roofscope/compat/): it still answers as it did, each member reading the
Result, warns where the caller built it, and nothing in roofscope uses it."""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import roofscope
from roofscope.compat import Analysis, analyze
from roofscope.gate import check
from roofscope.gate.snapshot import GateInputError
from tests.importgraph import graph_of, read_imports

RUN = Path(__file__).parent / "data" / "h200_gpt_run"


@pytest.fixture(scope="module")
def result() -> roofscope.Result:
    return roofscope.analyze(RUN)


def test_the_face_warns_once_at_the_callers_line() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a = analyze(RUN)
    assert [w.category for w in caught] == [DeprecationWarning]
    assert caught[0].filename == __file__ and "roofscope.analyze() returns the Result" in str(caught[0].message)
    with pytest.warns(DeprecationWarning) as wrapped:
        Analysis(a.result)
    assert wrapped[0].filename == __file__


def test_every_member_reads_the_result(result: roofscope.Result) -> None:
    with pytest.warns(DeprecationWarning):
        a = Analysis(result)
    assert a.result is result and a.summary() == result.to_dict() and a.typed_summary() is result.summary
    assert a.metrics() == result.to_dict()["metrics"] and a.metrics()["mfu"] == result.summary.metrics.mfu
    assert a.steps() is result.steps and a.timeline() is result.timeline and a.diagnosis() is result.diagnosis
    assert a.step_samples() is result.step_samples and a.by_phase() is result.phases
    assert a.complete_steps() == list(result.complete_steps) and a.partial_steps() == result.summary.partial_steps
    assert a.program_samples() == (result.program_samples, result.time_source)
    assert a.step_time() == result.to_dict().get("step_time") and a.inference() == result.summary.inference
    assert a.unattributed() == result.to_dict()["unattributed"]
    assert a.telemetry_summary() == result.to_dict()["telemetry"]
    assert a.by_kernel().equals(result.by_kernel()) and a.by_module(1).equals(result.by_module(1))
    assert (a.trace, a.ceilings, a.kernels, a.params, a.run_meta) == (result.trace, result.ceilings, result.kernels,
                                                                       result.params, result.run_meta)


def test_the_keywords_are_roofscope_analyzes(result: roofscope.Result) -> None:
    with pytest.warns(DeprecationWarning):
        a = analyze(RUN, peak_tflops=100, peak_bandwidth_gbs=1000)
    assert a.ceilings.bandwidth == 1e12 and a.ceilings.roof("bf16", True) == 100e12


def test_the_gate_takes_a_result_and_refuses_the_face(result: roofscope.Result) -> None:
    # One run against itself: every metric unchanged, so the gate passes (exit 0).
    assert check(result, result).exit_code == 0
    with pytest.warns(DeprecationWarning):
        a = Analysis(result)
    with pytest.raises(GateInputError, match="Analysis: expected a Run directory, a trace, a baseline file, a Result"):
        check(a, result)


def test_nothing_in_roofscope_imports_the_face() -> None:
    graph = graph_of(read_imports())
    assert sorted(m for m, targets in graph.items() if "roofscope.compat" in targets) == []
    assert "roofscope.analysis" in graph["roofscope.compat"]
