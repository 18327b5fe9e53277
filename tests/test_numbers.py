"""Numbers a user reads: rates from costed launches, steps, units, messages (issue 20)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from roofscope.analysis import analyze
from roofscope.analyzers.model.summary import Summary

from .conftest import external
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
             mm_us: float = 500, add_us: float = 100, mm: bool = True) -> "object":
    """A CPU-only Run's trace: ``steps`` complete steps (3, 4, ...) of one 256^3 mm (unless not
    ``mm``) and ``adds`` elementwise adds each, then (``partial``) a 40 us tail step that the
    script's end cut short."""
    b = TraceBuilder(device_name=None)
    t = 0.0
    for i in range(steps):
        b.annotation(f"ProfilerStep#{3 + i}", ts=t, dur=mm_us + adds * add_us + 20)
        if mm:
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
    assert a.summary.partial_steps == [6] and a.complete_steps == (3, 4, 5)
    assert list(a.step_samples.index) == [3, 4, 5]
    # Three complete steps of 520 us each: the 40 us tail would have made the median (520+520)/2 anyway,
    # but the minimum 40 us.
    assert a.summary.metrics.steps == 3 and a.summary.metrics.step_time_min_s == pytest.approx(520e-6)
    assert Snapshot.from_result(a).steps == [3, 4, 5]
    assert "steps 3-6 (step 6 cut short by the script's end" in render_summary(a)


def test_gate_does_not_check_op_counted_mfu_as_a_second_figure(tmp_path):
    from roofscope.gate import check

    # No GEMM to count model FLOPs from: MFU is op-counted, the same figure as HFU.
    base = _cpu_run(tmp_path, "base", steps=4, adds=2, mm=False, partial=False)
    run = _cpu_run(tmp_path, "run", steps=4, adds=2, mm=False, partial=False, add_us=200)  # slower adds
    assert run.summary.metrics.mfu_source == "op_counted"
    r = check(run, base)
    by = {c.metric.name: c for c in r.checks}
    assert by["mfu"].status == "skip" and "op-counted" in by["mfu"].note and "checked once as hfu" in by["mfu"].note
    # MFU (= HFU here) is not a second regression beside HFU's.
    assert [c.metric.name for c in r.failures] == ["step_time", "hfu", "mbu"]


def test_gate_bound_on_op_counted_mfu_says_so(tmp_path):
    from roofscope.gate import check

    r = check(_cpu_run(tmp_path, "a", adds=1, mm=False, partial=False), min_mfu=0.01)
    (c,) = r.checks
    assert "op-counted" in c.message() and "median of 3 steps" in c.message()


def test_diff_and_gate_share_one_mfu_and_wasted_work_is_not_better(tmp_path):
    from roofscope.analyzers.compare.diff import diff
    from roofscope.gate import Snapshot
    from roofscope.reports.diffview import render_terminal

    a, b = _cpu_run(tmp_path, "a", steps=4), _cpu_run(tmp_path, "b", steps=4, adds=4)
    d = diff(a, b)
    m = {c.key: c for c in d.metrics}
    assert m["mfu"].b == pytest.approx(Snapshot.from_result(b).median("mfu"))
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
    from roofscope.text import number
    from roofscope.reports.html import render_html

    assert (number(2.665e10), number(1234.5), number(0.012345), number(12)) == ("26.65 G", "1,234", "0.01235", "12")
    a = analyze(_gemm_trace(tmp_path), use_cache=False)
    findings = [{"rule": "fusion", "title": "Fuse", "saving_s": 1e-3, "saving_pct": 0.1, "summary": "x",
                 "confidence": "medium", "binding": "memory", "evidence": {"figures": {"bytes/step": 2.665e10}},
                 "fix": {"text": "compile", "snippet": "model = torch.compile(model)"}}]
    html = render_html(replace(a, summary=Summary.from_dict({**a.to_dict(), "findings": findings})))
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


def test_one_option_vocabulary_with_the_old_names_kept(tmp_path, capsys):
    from roofscope.cli import cli, main

    trace = _gemm_trace(tmp_path)
    # report: -o/--out as everywhere else, --output still works.
    for flag, name in (("--out", "a.html"), ("--output", "b.html"), ("-o", "c.html")):
        assert main(["report", str(trace), flag, str(tmp_path / name)]) == 0
        assert (tmp_path / name).exists()
    # The datasheet to draw with: --datasheet, and the old --device, which warns: --device names the
    # device to measure or run on (microbench, the examples).
    for flag in ("--datasheet", "--device"):
        assert main(["analyze", str(trace), flag, "h200", "-q"]) == 0
    # run: --sample as in `roofscope counters --sample`, --counters-sample kept.
    run = cli.commands["run"]
    for flag in ("--sample", "--counters-sample"):
        assert run.make_context("run", [flag, "7", "x.py"]).params["counters_sample"] == 7
    # analyze and report take Run directories as well as traces, and say so.
    for cmd in ("analyze", "report"):
        assert main([cmd, "--help"]) == 0
        text = capsys.readouterr().out
        assert "RUN_OR_TRACE" in text and "Kineto TRACE" not in text


def test_gate_bounds_take_shares_and_times_with_units():
    from roofscope.gate.thresholds import ThresholdError, bounds

    (mfu, idle, step) = bounds(min_mfu="35%", max_idle_fraction="5%", max_step_time="120ms")
    assert (mfu.value, idle.value, step.value) == (0.35, 0.05, pytest.approx(0.12))
    assert bounds(min_mfu="0.35")[0].value == 0.35 and bounds(max_step_time_ms=120)[0].value == pytest.approx(0.12)
    with pytest.raises(ThresholdError, match="--max-step-time 120: expected a time with its unit"):
        bounds(max_step_time="120")
    with pytest.raises(ThresholdError, match="one bound"):
        bounds(max_step_time="1s", max_step_time_ms=5)


def test_scipy_is_installed_with_roofscope():
    # The gate's Mann-Whitney test is scipy's: a runtime dependency, which the dev extra gets too.
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(Path(__file__).parents[1] / "setup.cfg")
    assert "scipy" in cfg["options"]["install_requires"]


# -- roofs no kernel beats -------------------------------------------------------------------------

LEVELS = (("L2", 2 << 20, 200e9), ("LLC", 32 << 20, 100e9), ("DRAM", float("inf"), 20e9))


def _ceilings(levels=LEVELS):
    from roofscope.hardware.devices import Ceilings

    return Ceilings(device="cpu: test", source="measured", peaks={"fp32": 1e11}, bandwidth=20e9, levels=levels)


def test_level_of_lets_each_level_serve_what_it_holds():
    import numpy as np

    bw, name = _ceilings().level_of(np.array([1 << 20, 2 << 20, 8 << 20, 100 << 20, np.nan]))
    assert list(name) == ["L2", "L2", "LLC", "DRAM", "DRAM"]
    # Fits L2: its 200 GB/s. 8 MiB: 2 MiB from L2 and 6 MiB from the LLC,
    # 8 MiB / (2 MiB/200e9 + 6 MiB/100e9) = 8/7 x 100 GB/s = 114.3 GB/s.
    # 100 MiB: 2/200e9 + 30/100e9 + 68/20e9 (in MiB) = 3.71 MiB per GB/s -> 26.9 GB/s, above DRAM's 20
    # because a working set that size can still find 32 MiB in the caches. Unknown size: DRAM.
    mib = 1 << 20
    assert bw[0] == bw[1] == 200e9 and bw[-1] == 20e9
    assert bw[2] == pytest.approx(8 * mib / (2 * mib / 200e9 + 6 * mib / 100e9)) == pytest.approx(114.29e9, rel=1e-4)
    assert bw[3] == pytest.approx(100 * mib / (2 * mib / 200e9 + 30 * mib / 100e9 + 68 * mib / 20e9))
    assert 20e9 < bw[3] < 27e9
    bw, name = _ceilings(levels=()).level_of(np.array([1 << 20]))
    assert list(bw) == [20e9] and list(name) == [""]


def _inplace_trace(tmp_path: Path) -> Path:
    # add_ on 1M floats in place: reads 2 x 4 MiB, writes 4 MiB = 12 MiB (it fits a 32 MiB LLC)
    # in 100 us: 125.8 GB/s.
    b = TraceBuilder(device_name=None)
    b.op("aten::add_", ts=0, dur=100, dims=[[1 << 20], [1 << 20], []], types=["float", "float", "Scalar"])
    return b.write(tmp_path / "inplace.json")


def test_cache_resident_op_is_placed_under_its_level_roof_not_above_dram(tmp_path):
    from roofscope.reports.console import render_summary

    one_roof = analyze(_inplace_trace(tmp_path), ceilings=_ceilings(levels=()))
    k = one_roof.kernels.iloc[0]
    # 12 MiB / 20 GB/s = 629 us of floor in 100 us: 629% of a DRAM-only roof, flagged, never bare.
    assert k["efficiency"] == pytest.approx(12 * 2 ** 20 / 20e9 / 100e-6) and bool(k["above_roof"])
    assert one_roof.to_dict()["above_roof"]["kernels"] == 1
    text = " ".join(render_summary(one_roof).split())
    # one roof, no cache level: the text says what a cache-resident kernel beats, and how to measure one
    assert ("1 kernel (1 call) ran above its roof (the ceilings have no cache roof, and data that stays in L2 moves "
            "faster than memory): aten::add_ 629.1% (memory, no cache roof); measure the ceilings, cache levels "
            "included, with `roofscope microbench`") in text
    assert "629.1%!" in text
    levels = analyze(_inplace_trace(tmp_path), ceilings=_ceilings())
    k = levels.kernels.iloc[0]
    # 2 MiB from L2 at 200 GB/s and 10 MiB from the LLC at 100 GB/s: 10.5 + 104.9 = 115.3 us of
    # floor in 100 us is still above; with the whole 12 MiB in L2 (63 us) it would not be.
    assert k["roof_level"] == "LLC"
    assert k["floor_s"] == pytest.approx(2 * 2 ** 20 / 200e9 + 10 * 2 ** 20 / 100e9) and bool(k["above_roof"])
    fast = _ceilings(levels=(("LLC", 32 << 20, 300e9), ("DRAM", float("inf"), 20e9)))
    k = analyze(_inplace_trace(tmp_path), ceilings=fast).kernels.iloc[0]
    assert k["efficiency"] == pytest.approx(12 * 2 ** 20 / 300e9 / 100e-6) and not k["above_roof"]


def test_levels_round_trip_through_a_ceilings_file(tmp_path):
    from roofscope.hardware.devices import load_ceilings_file, save_ceilings_file

    save_ceilings_file(_ceilings(), tmp_path / "c.json")
    assert load_ceilings_file(tmp_path / "c.json").levels == LEVELS


def test_noisy_measurement_is_flagged_and_does_not_replace_a_quiet_one(monkeypatch):
    from roofscope.errors import RoofscopeError
    from roofscope.microbench import cache
    from roofscope.microbench.cpu import _result

    monkeypatch.delenv("ROOFSCOPE_NOISY_SPREAD", raising=False)
    # Repetitions of 1, 1, 2, 2, 2 s for 1 GB: best 1 GB/s, median 0.5 GB/s: spread 50% > 25%.
    r = _result("DRAM copy", "memory", "bandwidth:DRAM", "B/s", {}, 1e9, lambda: [1.0, 1.0, 2.0, 2.0, 2.0])
    assert r["value"] == 1e9 and r["median"] == 0.5e9 and r["spread"] == 0.5 and r["noisy"]
    quiet = _result("DRAM copy", "memory", "bandwidth:DRAM", "B/s", {}, 1e9, lambda: [1.0, 1.1, 1.05])
    assert not quiet["noisy"]
    from dataclasses import replace

    cache.save(_ceilings())
    with pytest.raises(RoofscopeError, match="not cached: noisy measurement of DRAM copy"):
        cache.save(replace(_ceilings(), env={"noisy": ["DRAM copy"]}))


def test_cache_levels_from_sysfs(tmp_path):
    from roofscope.microbench.cpu import cache_levels

    for i, (level, kind, size) in enumerate(((1, "Data", "32K"), (2, "Unified", "1024K"), (3, "Unified", "32768K"))):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(kind + "\n")
        (d / "size").write_text(size + "\n")
    # Two threads: 2 x 1 MiB of L2; the 32 MiB L3 is the LLC.
    assert cache_levels(2, root=str(tmp_path)) == [("L2", 2 << 20), ("LLC", 32 << 20)]
    assert cache_levels(1, root=str(tmp_path / "missing")) == [("L2", 1 << 20), ("LLC", 32 << 20)]


def test_microbench_without_flags_measures_the_device_analyses_use(monkeypatch, tmp_path, capsys):
    import roofscope.microbench as mb
    from roofscope.cli import main

    seen = []

    def fake(device, quick=False, progress=None):
        seen.append(device)
        return _ceilings()

    monkeypatch.setattr(mb, "measure", fake)
    monkeypatch.setattr(mb, "default_device", lambda: "cpu")
    assert main(["microbench", "--no-cache"]) == 0
    assert seen == ["cpu"]
    assert "memory L2 200 GB/s" in capsys.readouterr().out


# -- advice that changes something -----------------------------------------------------------------

HTA = external("hta_a100_rank0.json.gz")


@pytest.fixture(scope="module")
def hta():
    return analyze(HTA, use_cache=False)


def test_idle_other_is_addressed_on_the_a100_trace(hta):
    (f,) = [f for f in hta.diagnosis.findings if f.rule == "idle_other"]
    # 68% of the step idle with work queued; the host spent 86 ms/step of it in aten::to (cudaMemcpyAsync).
    assert hta.diagnosis.to_dict()["binding"]["idle_other"] == pytest.approx(0.678, abs=0.001)
    assert f.rank == 1 and f.title == "GPU idle while the host copies memory"
    assert f.figures["host op: aten::to"] == pytest.approx(0.086, abs=0.001)
    assert f.saving_s == pytest.approx(0.5 * f.figures["idle_other_s"])


def test_fix_snippets_hold_for_the_runs_own_facts(hta):
    from roofscope.reports.console import render_summary

    by = {f.rule: f for f in hta.diagnosis.findings}
    # 0.016 of 4.231 ms/step of H2D is pageable: no pin_memory advice.
    assert "pin_memory" not in by["h2d_copies"].snippet and "pin memory" not in by["h2d_copies"].title
    # No DDP default (25 MB) as advice.
    assert "bucket_cap_mb=25" not in by["exposed_communication"].snippet
    text = render_summary(hta)
    # Multi-line snippets are printed whole.
    for line in by["exposed_communication"].snippet.splitlines():
        assert line in text


def test_comm_snippet_from_the_collectives():
    import pandas as pd

    from roofscope.analyzers.diagnose.communication import comm_snippet

    def kc(n, mb):
        return pd.DataFrame({"collective": ["allreduce"] * n, "bytes": [mb * 2 ** 20] * n})

    # 40 all-reduces of 4 MB over 2 steps (20/step): larger buckets, 2 x 4 = 8 MB.
    assert comm_snippet(kc(40, 4.0), steps=2).splitlines()[0].startswith("model = DDP(model, bucket_cap_mb=8, ")
    # 20 all-reduces of 12.5 MB a step would ask for 25 MB, DDP's default: no bucket size is given.
    assert "bucket_cap_mb" not in comm_snippet(kc(20, 12.5), steps=1)
    # One all-reduce of 400 MB a step: smaller buckets (100 MB) start all-reducing during the backward.
    assert "bucket_cap_mb=100" in comm_snippet(kc(1, 400.0), steps=1)
    assert comm_snippet(pd.DataFrame({"collective": ["sendrecv"], "bytes": [1.0]})) == ""


def test_cpu_main_job_says_every_rule_was_skipped(tmp_path):
    from roofscope.reports.console import render_summary
    from roofscope.reports.html import render_html

    a = _cpu_run(tmp_path, "a")
    # The CPU rules ran (analyzers/diagnose/cpu.py): a bare trace of matmuls gives them nothing to say.
    text = " ".join(render_summary(a).split())
    assert "No recommendations (4 rules skipped)" in text and "run.json records no thread count" in text
    html = render_html(a)
    assert "every rule was skipped" in html and "no DataLoader with num_workers=0 in the steps" in html


def test_one_step_reads_as_one_step_everywhere(tmp_path):
    from roofscope.reports.console import render_summary
    from roofscope.reports.html import render_html
    from roofscope.reports.markdown import render_markdown

    a = _cpu_run(tmp_path, "one", steps=1, partial=False)
    text = render_summary(a)
    assert ", step 3" in text and "steps 3-3" not in text and "1 profiled, 0.520 ms/step" in text
    assert "| step time (profiled), 1 step | 0.520 ms |" in render_markdown(a)
    html = render_html(a)
    assert "median of 1 steps" not in html and ">1 profiled step<" in html


def test_gate_cli_takes_bounds_with_units(tmp_path, capsys):
    from roofscope.cli import main

    _cpu_run(tmp_path, "bench", adds=1, partial=False)
    trace = str(tmp_path / "bench.json")
    # Steps of 0.620 ms: within 1ms, above 500us.
    assert main(["gate", trace, "--max-step-time", "1ms", "-q"]) == 0
    assert main(["gate", trace, "--max-step-time", "500us"]) == 1
    assert "above the bound <= 0.500 ms (median of 3 steps)" in capsys.readouterr().out
    assert main(["gate", trace, "--min-mbu", "101%"]) == 2
    assert "--min-mbu 101%: expected a share between 0% and 100%" in capsys.readouterr().err


def test_gpu_kernel_roof_is_hbm_unless_it_beat_hbm():
    """H100-like levels: L2 50 MB at 7.9 TB/s, HBM at 3.28 TB/s. A kernel is placed against HBM,
    the rate its compulsory bytes move at from memory, unless it moved them faster: then part came
    from L2 and its roof is the levels' blend. Nsight Compute's DRAM bytes (a replay from flushed
    caches) follow the same rule."""
    import pandas as pd

    from roofscope.analyzers.place.roofline import place
    from roofscope.hardware.devices import Ceilings

    c = Ceilings(device="gpu", source="measured", peaks={"bf16": 790e12}, bandwidth=3.28e12,
                 levels=(("L2", 50e6, 7.9e12), ("HBM", float("inf"), 3.28e12)))
    k = pd.DataFrame({
        "name": ["slow", "fast", "ncu", "ncu_fast"], "dur_ns": [40_000, 10_000, 10_000, 3_490],
        "flops": [0.0] * 4, "bytes": [40e6, 40e6, 30e6, 11.8e6], "dtype": ["bf16"] * 4,
        "tensor_core": [False] * 4, "category": ["elementwise", "elementwise", "elementwise", "reduction"],
        "cost_source": ["formula", "formula", "ncu", "ncu"]})
    p = place(k, c).set_index("name")
    # slow: 40 MB in 40 us = 1 TB/s, under HBM: roof HBM, floor 40e6 / 3.28e12 = 12.2 us, 30.5%
    assert p.loc["slow", "roof_level"] == "HBM" and p.loc["slow", "efficiency"] == pytest.approx(40e6 / 3.28e12 / 40e-6)
    # fast: 4 TB/s beats HBM; 40 MB fits L2: roof 7.9 TB/s, floor 5.06 us, 50.6%, not 305% of HBM
    assert p.loc["fast", "roof_level"] == "L2" and p.loc["fast", "efficiency"] == pytest.approx(40e6 / 7.9e12 / 10e-6)
    assert not p["above_roof"].any()
    # ncu: 30 MB of DRAM bytes in 10 us = 3 TB/s on HBM: 91.5%
    assert p.loc["ncu", "roof_level"] == "HBM" and p.loc["ncu", "efficiency"] == pytest.approx(30e6 / 3.28e12 / 10e-6)
    # ncu_fast (Lightning's cuDNN split-K reduction on an H100): 11.8 MB of cold-cache DRAM bytes
    # in the traced 3.49 us = 3.38 TB/s, 103% of HBM; its partials sat in L2: 3.38 / 7.9 = 42.8%
    assert p.loc["ncu_fast", "roof_level"] == "L2"
    assert p.loc["ncu_fast", "efficiency"] == pytest.approx(11.8e6 / 7.9e12 / 3.49e-6)


def test_above_roof_names_the_compute_peak_a_gemm_beat(tmp_path):
    """A CPU mm above the fp32 peak is reported against that peak, not a memory level: 2*256^3 =
    33.6 MFLOP in 100 us is 335.5 GFLOP/s against a 100 GFLOP/s roof (335.5%); its 3 x 256 KiB
    = 786 kB at 20 GB/s would take 39 us, so the FLOPs set its floor."""
    from roofscope.hardware.devices import Ceilings

    b = TraceBuilder(device_name=None)
    b.op("aten::mm", ts=0, dur=100, dims=[[256, 256], [256, 256]], types=["float", "float"])
    c = Ceilings(device="cpu: test", source="measured", peaks={"fp32": 1e11}, bandwidth=20e9,
                 levels=(("LLC", 32 << 20, 100e9), ("DRAM", float("inf"), 20e9)))
    top = analyze(b.write(tmp_path / "mm.json"), ceilings=c).to_dict()["above_roof"]["top"]
    assert top == [{"name": "aten::mm", "efficiency": pytest.approx(2 * 256 ** 3 / 1e11 / 100e-6), "level": "fp32"}]
