"""Numbers a user reads: rates from costed launches, steps, units, messages (issue 20)."""
from __future__ import annotations

from pathlib import Path

import pytest

from roofscope.analyzers.analysis import analyze

from .kineto import TraceBuilder

MM = dict(dims=[[1024, 1024], [1024, 1024]], types=["float", "float"])


def _gemm_trace(tmp_path: Path) -> Path:
    """One GEMM kernel launched 3 times: twice by aten::mm (costed), once with no op (uncosted)."""
    b = TraceBuilder()
    for i in range(2):
        ext = b.op("aten::mm", ts=1000 * i, dur=100, **MM)
        b.launch_kernel("sm90_gemm", launch_ts=1000 * i + 10, ts=1000 * i + 200, dur=50, ext=ext)
    b.launch_kernel("sm90_gemm", launch_ts=3000, ts=3200, dur=50)  # no launching op
    return b.write(tmp_path / "t.json")


def test_kernel_rates_use_costed_launches_only(tmp_path):
    a = analyze(_gemm_trace(tmp_path), use_cache=False)
    row = a.by_kernel().loc["sm90_gemm"]
    # 2 calls x 2 * 1024^3 FLOP = 4.295e9 FLOP over the 2 costed calls' 100 us (not all 3 calls' 150 us).
    assert row["calls"] == 3 and row["costed_calls"] == 2
    assert row["achieved_flops"] == pytest.approx(2 * 2 * 1024 ** 3 / 100e-6)
    assert row["coverage"] == pytest.approx(100 / 150)
    # The op table and the kernel table now agree on the GEMM's rate.
    assert a.by_op().loc["aten::mm", "achieved_flops"] == pytest.approx(row["achieved_flops"])


def test_console_shows_coverage_beside_partial_rates(tmp_path):
    from roofscope.reports.console import render_summary

    text = render_summary(analyze(_gemm_trace(tmp_path), use_cache=False))
    header = next(line for line in text.splitlines() if "achieved" in line and "kernel" in line)
    assert "costed" in header
    row = next(line for line in text.splitlines() if "sm90_gemm" in line)
    assert "66.7%" in row
