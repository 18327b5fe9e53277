"""The analysis runs with the garbage collector paused and pandas' text as Python strings, and gives the
caller's settings back (analysis._analysis_scope)."""
from __future__ import annotations

import gc
from pathlib import Path

import pandas as pd

import roofscope.analysis as analysis

TRACE = Path(__file__).parent / "data" / "h100_eager_block.json.gz"


def test_the_stages_run_with_python_strings_and_no_collector_and_the_callers_settings_come_back(monkeypatch) -> None:
    seen = []
    cost = analysis._cost

    def spy(*args, **kwargs):
        seen.append((pd.get_option("mode.string_storage"), gc.isenabled()))
        return cost(*args, **kwargs)

    monkeypatch.setattr(analysis, "_cost", spy)
    before = pd.get_option("mode.string_storage")
    result = analysis.analyze(TRACE, use_cache=False)
    # pyarrow's text (where installed) made the stages' many small string operations 25% slower on a
    # million events for the same outputs: inside, the storage is Python's whatever the caller chose.
    assert seen == [("python", False)]
    assert pd.get_option("mode.string_storage") == before and gc.isenabled()
    assert len(result.kernels) > 0
