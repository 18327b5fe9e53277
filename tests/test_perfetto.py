"""The annotated trace for Perfetto (reports/perfetto.py): Chrome JSON that Perfetto's trace processor
reads, with each kernel's roofline verdict as args and counter tracks; `--perfetto PATH`, `--format
perfetto`; and `report --open` without a browser.

Perfetto's trace processor (the `perfetto` Python package) downloads its `trace_processor_shell`
binary at run time, which an offline machine cannot: the load test runs only where that binary is
given (ROOFSCOPE_TRACE_PROCESSOR=/path/to/trace_processor_shell, or on PATH), and the format is
checked structurally everywhere else.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from roofscope.analysis import analyze
from roofscope.cli import main
from roofscope.reports.perfetto import _counters, render_perfetto, trace_events

DATA = Path(__file__).parent / "data"
EAGER = DATA / "h100_eager_block.json.gz"
CPU = DATA / "cpu_block.json.gz"
PEAKS = ["--peak-tflops", "0.1", "--peak-bandwidth", "10"]


@pytest.fixture(scope="module")
def eager():
    return analyze(EAGER)


def _doc(data: bytes) -> dict:
    return json.loads(gzip.decompress(data))


def test_every_kernel_is_an_event_with_its_verdict(eager) -> None:
    doc = _doc(render_perfetto(eager))
    ev = doc["traceEvents"]
    k = eager.kernels[eager.kernels["timed"].astype(bool)]
    xs = [e for e in ev if e["ph"] == "X" and e["pid"] > 0]
    assert len(xs) == len(k)
    # The step-2 forward QKV GEMM: 12.88 GFLOP in 21.601 us = 596.5 TFLOP/s against the bf16 dense
    # peak 989.5 TFLOP/s: efficiency 0.6028.
    gemm = next(e for e in xs if e["name"].startswith("nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_bias_TNT"))
    a = gemm["args"]
    assert (a["class"], a["category"], a["op"], a["dtype"]) == ("compute", "gemm", "aten::addmm", "bf16")
    assert a["flops"] == 12_884_901_888 and gemm["dur"] == pytest.approx(21.601)
    assert a["achieved_flops_per_s"] == pytest.approx(12_884_901_888 / 21.601e-6, rel=1e-6)
    assert a["efficiency"] == pytest.approx(a["achieved_flops_per_s"] / 989.5e12, rel=1e-6)
    assert {"bytes", "intensity", "achieved_bytes_per_s", "roof_flops_per_s"} <= set(a)
    # Findings reach the kernels their evidence names.
    top = eager.diagnosis.findings[0]
    named = {e["name"] for e in xs if any(f.startswith(f"#{top.rank} ") for f in e["args"].get("findings", []))}
    assert named == {k_["name"] for k_ in top.kernels}
    # Tracks: a process per GPU, a named thread per stream, one step event per profiled step.
    meta = [e for e in ev if e["ph"] == "M"]
    assert {"GPU 0", "steps"} <= {e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert [e["name"] for e in ev if e["ph"] == "X" and e["pid"] == 0] == ["step 2"]
    names = {e["name"] for e in ev if e["ph"] == "C"}
    assert names == {"achieved FLOP/s", "achieved bytes/s", "efficiency %"}
    assert all(isinstance(e["ts"], float) for e in ev if "ts" in e)


def test_counter_tracks_add_overlapping_kernels() -> None:
    # k1 runs 0-10 ns at 100 FLOP/s (efficiency 0.5), k2 5-15 ns at 50 FLOP/s (0.25):
    # FLOP/s 100 from 0, 150 from 5, 50 from 10, 0 from 15; efficiency of the kernel last
    # started: 50% from 0, 25% from 5 (k2), 25% at 10 (k2 still runs), 0% from 15.
    ev = _counters(1, np.array([0, 5]), np.array([10, 15]), np.array([100.0, 50.0]), np.array([8.0, 2.0]),
                   np.array([0.5, 0.25]))
    flops = [(e["ts"] * 1e3, e["args"]["FLOP/s"]) for e in ev if e["name"] == "achieved FLOP/s"]
    assert flops == [(0, 100), (5, 150), (10, 50), (15, 0)]
    bw = [e["args"]["bytes/s"] for e in ev if e["name"] == "achieved bytes/s"]
    assert bw == [8, 10, 2, 0]
    assert [e["args"]["efficiency %"] for e in ev if e["name"] == "efficiency %"] == [50, 25, 25, 0]


def test_cpu_trace_has_a_thread_track() -> None:
    a = analyze(CPU, peak_tflops=0.1, peak_bandwidth_gbs=10)
    ev = trace_events(a)
    assert {e["args"]["name"] for e in ev if e["name"] == "process_name"} == {"steps", "CPU"}
    xs = [e for e in ev if e["ph"] == "X" and e["pid"] == 1]
    assert len(xs) == len(a.kernels) and any(e["args"].get("flops") for e in xs)


def test_analyze_perfetto_option_in_process(tmp_path, capsys) -> None:
    out = tmp_path / "t.json.gz"
    assert main(["analyze", str(CPU), *PEAKS, "-q", "--perfetto", str(out)]) == 0
    assert "wrote" in capsys.readouterr().err
    assert any(e["ph"] == "X" for e in _doc(out.read_bytes())["traceEvents"])
    assert main(["analyze", str(CPU), *PEAKS, "-q", "--perfetto", str(out)]) == 2   # never overwrites
    assert "--force" in capsys.readouterr().err


def test_report_perfetto_subprocess(tmp_path) -> None:
    out = tmp_path / "trace.annotated.json.gz"
    res = subprocess.run([sys.executable, "-m", "roofscope", "report", str(CPU), *PEAKS, "-o",
                          str(tmp_path / "r.html"), "--perfetto", str(out)], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    assert _doc(out.read_bytes())["otherData"]["producer"] == "roofscope"


def _trace_processor() -> str | None:
    return os.environ.get("ROOFSCOPE_TRACE_PROCESSOR") or shutil.which("trace_processor_shell")


@pytest.mark.skipif(_trace_processor() is None,
                    reason="no trace_processor_shell binary (the perfetto package downloads it at run time; "
                           "set ROOFSCOPE_TRACE_PROCESSOR=/path/to/trace_processor_shell)")
def test_loads_in_perfettos_trace_processor(eager, tmp_path) -> None:
    tp_mod = pytest.importorskip("perfetto.trace_processor", reason="the perfetto package is not installed")
    path = tmp_path / "t.json"
    path.write_bytes(gzip.decompress(render_perfetto(eager)))
    tp = tp_mod.TraceProcessor(trace=str(path), config=tp_mod.TraceProcessorConfig(bin_path=_trace_processor()))
    try:
        n = tp.query("select count(*) as n from slice where category != 'step'").as_pandas_dataframe()["n"][0]
        assert n == int(eager.kernels["timed"].astype(bool).sum())
        args = tp.query("select key from args where key like 'args.%'").as_pandas_dataframe()["key"]
        assert {"args.class", "args.flops", "args.efficiency"} <= set(args)
        tracks = tp.query("select name from counter_track").as_pandas_dataframe()["name"]
        assert any("FLOP/s" in t for t in tracks)
    finally:
        tp.close()


# -- report --open without a browser --------------------------------------------------------------------

def test_open_without_browser_says_where_the_report_is(tmp_path, monkeypatch, capsys) -> None:
    import webbrowser

    monkeypatch.setattr(webbrowser, "open", lambda url: False)
    html = tmp_path / "r.html"
    assert main(["report", str(CPU), *PEAKS, "-o", str(html), "--open"]) == 0
    assert f"no browser found to open the report; it is at {html}" in capsys.readouterr().err


def test_open_without_browser_subprocess(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["BROWSER"] = str(tmp_path / "no-such-browser")   # tried first, and cannot start
    env["PATH"] = os.path.dirname(sys.executable)         # no console browser (lynx, w3m) either
    html = tmp_path / "r.html"
    res = subprocess.run([sys.executable, "-m", "roofscope", "report", str(CPU), *PEAKS, "-o", str(html), "--open"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr
    assert "no browser found to open the report; it is at" in res.stderr and html.is_file()
