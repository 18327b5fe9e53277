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


def _cpu_run(tmp_path: Path, name: str, steps: int = 3, adds: int = 0, partial: bool = True,
             mm_us: float = 500, add_us: float = 100) -> "object":
    """A CPU-only Run's trace: ``steps`` complete steps (3, 4, ...) of one 256^3 mm and ``adds``
    elementwise adds each, then (``partial``) a 40 us tail step that the script's end cut short."""
    b = TraceBuilder(device_name=None)
    t = 0.0
    for i in range(steps):
        b.annotation(f"ProfilerStep#{3 + i}", ts=t, dur=mm_us + adds * add_us + 20)
        b.op("aten::mm", ts=t + 10, dur=mm_us, dims=[[256, 256], [256, 256]], types=["float", "float"])
        for j in range(adds):
            b.op("aten::add", ts=t + 15 + mm_us + j * add_us, dur=add_us - 5, dims=[[1 << 20], [1 << 20], []],
                 types=["float", "float", "Scalar"])
        t += mm_us + adds * add_us + 20
    if partial:
        b.annotation(f"ProfilerStep#{3 + steps}", ts=t, dur=40)
        b.op("aten::mm", ts=t + 5, dur=30, dims=[[256, 256], [256, 256]], types=["float", "float"])
    meta = {"steps": {"requested": {"wait": 1, "warmup": 2, "active": steps + 1},
                      "boundaries_seen": 3 + steps, "source": "optimizer"}}
    return analyze(b.write(tmp_path / f"{name}.json"), run_meta=meta, peak_tflops=1.0, peak_bandwidth_gbs=10.0,
                   use_cache=False)


def test_partial_last_step_is_left_out_of_step_figures(tmp_path):
    from roofscope.gate import Snapshot
    from roofscope.reports.console import render_summary

    a = _cpu_run(tmp_path, "a")
    assert a.partial_steps() == [6] and a.complete_steps() == [3, 4, 5]
    assert list(a.step_samples().index) == [3, 4, 5]
    # Three complete steps of 520 us each: the 40 us tail would have made the median (520+520)/2 anyway,
    # but the minimum 40 us.
    assert a.metrics()["steps"] == 3 and a.metrics()["step_time_min_s"] == pytest.approx(520e-6)
    assert Snapshot.from_analysis(a).steps == [3, 4, 5]
    assert "steps 3-6 (step 6 cut short by the script's end" in render_summary(a)


def test_gate_does_not_check_op_counted_mfu_as_a_second_figure(tmp_path):
    from roofscope.gate import check

    base = _cpu_run(tmp_path, "base", steps=4)
    run = _cpu_run(tmp_path, "run", steps=4, adds=4)  # 4 extra adds a step: more FLOPs, slower steps
    r = check(run, base)
    by = {c.metric.name: c for c in r.checks}
    assert by["mfu"].status == "skip" and "op-counted" in by["mfu"].note and "checked once as hfu" in by["mfu"].note
    assert by["step_time"].status == "fail"
    # MFU (= HFU here) is not a second regression beside HFU's.
    assert [c.metric.name for c in r.failures] == ["step_time", "hfu"]


def test_gate_bound_on_op_counted_mfu_says_so(tmp_path):
    from roofscope.gate import check

    r = check(_cpu_run(tmp_path, "a"), min_mfu=0.01)
    (c,) = r.checks
    assert "op-counted" in c.message() and "median of 3 steps" in c.message()


def test_diff_and_gate_share_one_mfu_and_wasted_work_is_not_better(tmp_path):
    from roofscope.analyzers.diff import diff
    from roofscope.gate import Snapshot
    from roofscope.reports.diffview import render_terminal

    a, b = _cpu_run(tmp_path, "a", steps=4), _cpu_run(tmp_path, "b", steps=4, adds=4)
    d = diff(a, b)
    m = {c.key: c for c in d.metrics}
    assert m["mfu"].b == pytest.approx(Snapshot.from_analysis(b).median("mfu"))
    assert m["step_time_s"].better is False
    # MBU rose only because each step moved 4 x 12 MiB more: not "better".
    assert m["mbu"].delta > 0 and m["mbu"].better is None and m["mbu"].note == "more work, slower steps"
    text = render_terminal(d)
    mbu = next(line for line in text.splitlines() if line.strip().startswith("MBU"))
    assert "better" not in mbu and "more work" in mbu
    assert (d.steps_a, d.steps_b) == (4, 4)
    # Calls per complete step are whole numbers: 1 mm a step, not 5 mm over 4 steps = 1.25.
    mm = d.kernels.set_index("name").loc["aten::mm"]
    assert (mm["calls_a"], mm["calls_b"]) == (1.0, 1.0)
    assert " 0/4 " in next(line for line in text.splitlines() if "aten::add" in line)


def test_script_syntax_error_is_not_blamed_on_missing_step_markers(tmp_path, capsys):
    from roofscope.cli import main

    from .test_collect import PEAKS

    s = tmp_path / "broken.py"
    s.write_text("import torch\ndef f(:\n    pass\n")
    main(["run", "-o", str(tmp_path / "run"), *PEAKS, str(s)])
    err = capsys.readouterr().err
    assert "SyntaxError" in err
    assert "roofscope.step()" not in err and "the script ended early (SyntaxError" in err


def test_summary_and_report_name_the_runs_trace_not_a_temporary_one(tmp_path, capsys):
    import json

    from roofscope.cli import main

    from .test_collect import PEAKS, TRAIN

    s = tmp_path / "train.py"
    s.write_text(TRAIN)
    out = tmp_path / "run"
    assert main(["run", "-o", str(out), *PEAKS, str(s)]) == 0
    trace = str(out / "trace.json.gz")
    assert json.loads((out / "summary.json").read_text())["trace"] == trace
    assert trace in (out / "report.html").read_text()


def test_html_evidence_figures_read_as_numbers_not_exponents(tmp_path):
    from roofscope.reports.console import number
    from roofscope.reports.html import render_html

    assert (number(2.665e10), number(1234.5), number(0.012345), number(12)) == ("26.65 G", "1,234", "0.01235", "12")
    a = analyze(_gemm_trace(tmp_path), use_cache=False)
    s = a.summary()
    s["findings"] = [{"rule": "fusion", "title": "Fuse", "saving_s": 1e-3, "saving_pct": 0.1, "summary": "x",
                      "confidence": "medium", "binding": "memory", "evidence": {"figures": {"bytes/step": 2.665e10}},
                      "fix": {"text": "compile", "snippet": "model = torch.compile(model)"}}]
    html = render_html(a)
    assert "26.65 G" in html and "2.665e+10" not in html


def test_roofline_axis_ticks_keep_one_notation(tmp_path):
    import json
    import shutil
    import subprocess

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the report's tick labels are checked in JavaScript")
    js = (Path(__file__).parents[1] / "roofscope" / "templates" / "report.js").read_text()
    helpers = js[js.index("// ---- formatting"):js.index("  const esc = (s)")]
    prog = helpers + "console.log(JSON.stringify(logTicks(2e10, 3e16, 'FLOP/s')));"
    out = json.loads(subprocess.run([node, "-e", prog], capture_output=True, text=True, check=True).stdout)
    # Decades 1e10..1e17 in SI prefixes all the way: no "100B", no "10^15".
    assert out["ticktext"] == ["10 GFLOP/s", "100 GFLOP/s", "1 TFLOP/s", "10 TFLOP/s", "100 TFLOP/s", "1 PFLOP/s",
                               "10 PFLOP/s", "100 PFLOP/s"]
