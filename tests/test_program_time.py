"""The program's own time (issue 25): steps timed without the profiler, the profile taken once the
steps settle, the first generate() call re-profiled, and savings carried into the program's time."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch

import roofscope
from roofscope.analyzers.views import programtime
from roofscope.analyzers.views.programtime import GRAPH_REPLAY_S, ProgramTime, step_time
from roofscope.analyzers.model.findings import Finding
from roofscope.collectors import steptimes
from roofscope.collectors.steptimes import StepTimer
from roofscope.run import RunError, typed_meta
from roofscope.run.schema import RunMeta
from tests.conftest import console_field

GPT2_RUN = Path(__file__).parent / "data" / "h200_gpt2_generate_run"
PEAKS = ["--peak-tflops", "1", "--peak-bandwidth", "10"]


# -- the timer ------------------------------------------------------------------------------------

def _timer(monkeypatch, times_ms: list[float], phases: list[str]) -> StepTimer:
    """A CPU StepTimer whose boundaries fall at the cumulative ``times_ms``."""
    clock = iter([0] + [int(sum(times_ms[:i + 1]) * 1e6) for i in range(len(times_ms))])
    monkeypatch.setattr(steptimes.time, "perf_counter_ns", lambda: next(clock))
    t = StepTimer(cuda=False)
    t.mark("unprofiled")
    for p in phases:
        t.mark(p)
    return t


def test_settled_needs_k_steady_unprofiled_steps(monkeypatch) -> None:
    # steps of 100, 50, 20, 10, 10.5, 9.8 ms: the last three lie within 15% of their median 10 ms;
    # the three before them (50, 20, 10: median 20, 50 is 150% off) do not.
    t = _timer(monkeypatch, [100, 50, 20, 10, 10.5, 9.8], ["unprofiled"] * 6)
    assert t.settled(3, 0.15)
    assert not t.settled(4, 0.15)            # 20 ms is 95% off the median of the last four
    assert t.settled(0, 0.15)                # settling off
    assert not t.settled(3, 0.15, since=5)   # only step 5 counts from there: fewer than 3


def test_finish_numbers_steps_as_the_trace_does(monkeypatch) -> None:
    t = _timer(monkeypatch, [10, 20, 30], ["warmup", "active", "unprofiled"])
    got = t.finish()
    # step N is the interval from boundary N to N+1 (ProfilerStep#N); step 0 is not timed
    assert [(s.index, s.phase, round(s.host_s * 1e3, 6)) for s in got] == \
        [(1, "warmup", 10.0), (2, "active", 20.0), (3, "unprofiled", 30.0)]
    assert all(s.gpu_s is None for s in got)


# -- summary.json's step_time -----------------------------------------------------------------------

def _meta(host_ms: list[float], phases: list[str], settle: str = "settled", k: int = 3,
          tokens: list[int | None] | None = None, outer: list[int | None] | None = None) -> RunMeta:
    """run.json's step fields, typed as the analysis reads them (run.typed_meta, as roofscope.analyze's run_meta)."""
    n = len(host_ms)
    return typed_meta({"steps": {"requested": {"wait": 1, "warmup": 2, "active": 3},
                                 "settle": {"k": k, "outcome": settle}},
                       "step_times": {"index": list(range(1, n + 1)), "phase": phases,
                                      "host_s": [x / 1e3 for x in host_ms], "gpu_s": [None] * n,
                                      "tokens": tokens or [None] * n, "outer": outer or [None] * n}})


def test_step_time_block_leaves_cold_steps_out() -> None:
    host = [200, 100, 20, 21, 19, 60, 55, 40, 41, 39, 20, 20, 22, 18, 20]
    phases = ["unprofiled"] * 5 + ["warmup"] * 2 + ["active"] * 3 + ["unprofiled"] * 5
    st = step_time(_meta(host, phases))
    # steady: the 3 settled steps before the warm-up (20, 21, 19 ms) and the 5 after the profile
    # (20, 20, 22, 18, 20): median 20 ms; cold: steps 1-2 (200, 100 ms); profiled: median 40 ms
    assert st["unprofiled_steps"] == 8 and st["unprofiled_median_s"] == pytest.approx(0.020)
    assert st["cold_steps"] == [1, 2] and st["cold_median_s"] == pytest.approx(0.150)
    assert st["profiled_median_s"] == pytest.approx(0.040) and st["inflation"] == pytest.approx(2.0)
    assert st["source"] == "host"


def test_step_time_splits_decode_from_prefill() -> None:
    host = [30, 5, 5, 5, 9, 9, 9, 30, 5, 5, 6]
    phases = ["unprofiled"] * 4 + ["warmup"] + ["active"] * 2 + ["unprofiled"] * 4
    tokens = [64, 1, 1, 1, 1, 1, 1, 64, 1, 1, 1]
    st = step_time(_meta(host, phases, tokens=tokens))
    # after the profile: prefill 30 ms, decode 5, 5, 6 ms; settled before it: 5, 5, 5 ms
    assert st["decode_median_s"] == pytest.approx(0.005) and st["prefill_median_s"] == pytest.approx(0.030)


def test_a_cold_outer_iteration_is_a_stretch_apart_and_inflation_is_like_with_like() -> None:
    # Loop steps of a decode's 3 rounds (the outer loop's iterations 0, 1, 2); the profile was of round 0,
    # cold (40 ms a token), and never made again: the steps after it are the rest of round 0 and rounds 1-2.
    host = [40, 41, 40, 60, 62, 61, 61, 60, 40, 39, 41, 10, 11, 10, 10, 9, 10, 11, 10]
    phases = ["unprofiled"] * 3 + ["warmup"] * 2 + ["active"] * 3 + ["unprofiled"] * 11
    outer = [0] * 11 + [1] * 4 + [2] * 4
    st = step_time(_meta(host, phases, outer=outer))
    # round 0's unprofiled median (40 ms) is 4x round 2's (10 ms): a cold stretch, apart from the median of
    # rounds 1-2 (10 ms); the profiled steps (61 ms) against their own round's unprofiled steps (40 ms)
    assert st["unprofiled_median_s"] == pytest.approx(0.010) and st["unprofiled_steps"] == 8
    assert st["cold_stretches"] == [{"outer": 0, "steps": 6, "median_s": pytest.approx(0.040)}]
    assert st["inflation"] == pytest.approx(61 / 40) and st["inflation_outer"] == 0
    from roofscope.reports.phrases import step_time_lines

    lines = step_time_lines(st, {"loop": {"outer": [{"text": "for r in range(rounds)"}]}})
    assert "(1.52x iteration 0's unprofiled steps)" in lines[0]
    assert lines[1].strip() == "cold: iteration 0 of `for r in range(rounds)`, 6 steps at 40.000 ms (left out of the median)"
    # without the outer column (every other step source) nothing changes
    assert "cold_stretches" not in step_time(_meta(host, phases)) and "inflation_outer" not in step_time(_meta(host, phases))


def test_no_step_times_no_block() -> None:
    assert step_time(typed_meta({"steps": {}})) is None and step_time(None) is None


def test_step_times_of_an_older_collector_read_whole() -> None:
    # A run.json with only the index and host times (no phase, GPU or token columns) reads as
    # unprofiled steps timed on the host: steps 2-4 are steady (after wait=1), step 1 is cold.
    st = step_time(typed_meta({"steps": {"requested": {"wait": 1}},
                               "step_times": {"index": [1, 2, 3, 4], "host_s": [0.5, 0.010, 0.012, 0.011]}}))
    assert st["source"] == "host" and st["unprofiled_steps"] == 3
    assert st["unprofiled_median_s"] == pytest.approx(0.011) and st["cold_steps"] == [1]
    assert st["profiled_steps"] == 0 and st["inflation"] is None


def test_ragged_step_times_are_a_malformed_run() -> None:
    with pytest.raises(RunError, match="step_times: columns of different lengths"):
        typed_meta({"step_times": {"index": [1, 2, 3], "host_s": [0.01, 0.02]}})


# -- savings in the program's time ------------------------------------------------------------------

def test_program_time_scales_host_terms_and_bounds_savings() -> None:
    # The GPT-2 decode on an H200: a profiled step of 44.4 ms, 1.0 ms of it kernels (latency-bound),
    # 43.4 ms idle; unprofiled 5.8 ms. Host terms scale by (5.8 - 1.0) / 43.4 = 0.1106.
    terms = {"latency": 0.0010, "host": 0.0431, "sync": 0.0002, "idle_other": 0.0001}
    pt = ProgramTime.of(0.0058, terms, 0.0444, events=8000)
    assert pt.scale == pytest.approx(4.8 / 43.4)
    assert pt.terms(terms)["host"] == pytest.approx(0.0431 * 4.8 / 43.4)
    assert pt.terms(terms)["latency"] == 0.0010
    f = Finding(rule="launch_bound_decode", title="t", binding="host", saving_s=0.0430, confidence="high",
                summary="", fix="")
    pt.apply(f)
    # 43.0 ms x 0.1106 = 4.756 ms, under the bound 5.8 - 1.0 - 0.01 (a graph replay) = 4.79 ms
    assert f.saving_s == pytest.approx(0.0430 * 4.8 / 43.4)
    assert f.figures["bound_s"] == pytest.approx(0.0058 - 0.0010 - GRAPH_REPLAY_S)
    assert f.figures["profiled_saving_s"] == 0.0430
    # A kernel fix shortens the kernels themselves: a compile saves at most their 1.0 ms of busy time.
    g = Finding(rule="fusion", title="t", binding="memory", saving_s=0.0100, confidence="medium", summary="", fix="",
                apply="compile:default")
    pt.apply(g)
    assert g.saving_s == pytest.approx(0.0010) and g.figures["unbounded_saving_s"] == 0.0100
    # The profiled step was host-bound (43.1 of 44.4 ms waiting on the host), with 8,000 events a step: at most
    # 4.8 us each, the profiler added at most 38.4 ms, so the host's own work is at least 6.0 ms, more than the
    # whole unprofiled step: a fix of kernels alone shows nothing in it.
    assert pt.host_floor_s == pytest.approx(0.0058)
    h = Finding(rule="tf32", title="t", binding="compute", saving_s=0.0005, confidence="medium", summary="", fix="",
                apply="tf32")
    pt.apply(h)
    assert h.saving_s == 0.0 and h.figures["host_floor_s"] == pytest.approx(0.0058)
    assert "sets the step's pace: of the 0.500 ms of GPU time saved, at most 0.000 ms shows in it" in h.fix
    # A GPU-bound profiled step says nothing of the host's work.
    assert ProgramTime.of(0.0330, {"memory": 0.0300, "host": 0.0010}, 0.0320).host_floor_s == 0.0


def test_no_unprofiled_time_no_program_time() -> None:
    assert ProgramTime.of(None, {"host": 1.0}, 2.0) is None
    assert ProgramTime.of(0.0, {"host": 1.0}, 2.0) is None


# -- a real Run: HF GPT-2 generate() on an H200 (tests/data/README.md) --------------------------------

@pytest.fixture(scope="module")
def gpt2():
    return roofscope.analyze(GPT2_RUN)


def test_gpt2_run_profiled_the_second_call_in_its_steady_state(gpt2) -> None:
    meta = gpt2.run_meta
    assert meta["steps"]["rearmed"] and meta["steps"]["settle"]["outcome"] == "settled"
    # the first call (steps 1-47) ran at ~44 ms/token; the profile is of the second call's tokens 54-56
    assert meta["steps"]["recorded"] == [54, 55, 56] and gpt2.to_dict()["steps"] == [54, 55, 56]
    st = gpt2.to_dict()["step_time"]
    assert st["source"] == "gpu" and st["unprofiled_steps"] > 200
    assert 0.006 < st["decode_median_s"] < 0.0075           # the script's own timer: 6.4-6.9 ms/token
    assert st["cold_median_s"] > 0.040 and 1 in st["cold_steps"] and 47 in st["cold_steps"]
    assert 1.5 < st["inflation"] < 2.2                      # 12.0 ms profiled against 6.5 ms


def test_gpt2_headline_and_saving_are_the_programs(gpt2) -> None:
    s = gpt2.to_dict()
    st = s["step_time"]
    assert s["inference"]["tpot_s"] == pytest.approx(st["decode_median_s"])
    assert s["inference"]["decode"]["profiled_step_time_s"] > 0.011
    assert s["metrics"]["step_time_source"] == "unprofiled"
    (f,) = [f for f in s["findings"] if f["rule"] == "launch_bound_decode"]
    pt = s["diagnosis"]["program_time"]
    # never the whole step: at most the token's time less its 1.0 ms of kernels and a graph replay
    assert f["saving_s"] <= pt["unprofiled_step_s"] - pt["busy_s"] - GRAPH_REPLAY_S + 1e-12
    assert 0.6 < f["saving_pct"] < 0.85
    # a static cache measured plain: 7.00 -> 1.97 ms/token (docs/validation.md); predicted 5.27 ms
    assert f["saving_s"] == pytest.approx(0.00527, rel=0.05)


def test_console_says_both_times(gpt2) -> None:
    from roofscope.reports.console import render_summary

    text = render_summary(gpt2)
    own = console_field(text, "own time")
    assert "ms/step without the profiler" in own and "profiled (1.8" in own
    assert "cold steps skipped before the profile" in text
    assert "In the program's own time: host-side terms scaled" in text


# -- end to end on a CPU loop --------------------------------------------------------------------

LOOP = textwrap.dedent('''
    import statistics, sys, time
    import torch, roofscope
    cold = [0.8, 0.4, 0.2, 0.1]
    x = torch.randn(32, 32)
    t = []
    for i in range(int(sys.argv[1])):
        y = x @ x
        time.sleep(cold[i] if i < len(cold) else 0.05)
        roofscope.step()
        t.append(time.perf_counter())
    gaps = [b - a for a, b in zip(t, t[1:])]
    print("OWN", statistics.median(gaps[len(cold):]))
''')


def test_run_times_a_cpu_loop_and_skips_its_cold_steps(tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-m", "roofscope", "run", "-q", "--no-report", "-o", str(out), *PEAKS,
                          "--settle-tolerance", "0.5", str(script), "40"], capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr
    own = float(res.stdout.split("OWN")[1].split()[0])
    meta = json.loads((out / "run.json").read_text())
    st = json.loads((out / "summary.json").read_text())["step_time"]
    # The first profile starts right after --wait, on the cold steps (400, 200, 100 ms: no two within 50%);
    # once the 50 ms steps after it settle, it is dropped and the steady steps are profiled instead.
    assert meta["steps"]["rearmed"] and meta["steps"]["settle"]["outcome"] == "settled"
    phases = meta["step_times"]["phase"]
    assert phases[:5] == ["dropped"] * 5 and meta["steps"]["profiled_from"] >= 10
    # every step is a 50 ms sleep plus a matmul: roofscope's median is the script's own, measured
    # at the same boundaries by the same clock (load shifts both alike)
    assert st["unprofiled_median_s"] >= 0.05 and st["unprofiled_median_s"] == pytest.approx(own, rel=0.1)
    assert st["unprofiled_steps"] >= 25 and meta["steps"]["boundaries_seen"] == 40
    assert len(meta["step_times"]["index"]) == 39


def test_short_script_gets_its_profile_and_a_warning(tmp_path: Path, capsys) -> None:
    from roofscope.cli import main

    script = tmp_path / "short.py"
    script.write_text(LOOP)
    # 7 boundaries: the profile (wait 1, warm-up 2, active 3) ends with the script, on its cold steps
    assert main(["run", "-q", "--no-report", "-o", str(tmp_path / "r"), *PEAKS, str(script), "7"]) == 0
    meta = json.loads((tmp_path / "r" / "run.json").read_text())
    assert meta["steps"]["recorded"] == [3, 4, 5] and not meta["steps"]["rearmed"]
    assert any("did not settle after it" in w for w in meta["warnings"])
    assert "they may be cold; run more steps" in capsys.readouterr().err


# -- generate(): the first call is cold, the second is profiled -----------------------------------

def test_second_generate_call_is_profiled(tmp_path: Path, monkeypatch) -> None:
    import time

    utils = types.ModuleType("transformers.generation.utils")

    class GenerationMixin:
        pass

    utils.GenerationMixin = GenerationMixin
    monkeypatch.setitem(sys.modules, "transformers.generation.utils", utils)

    class LM(torch.nn.Module, GenerationMixin):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)
            self.slow = True

        def forward(self, x):
            time.sleep(0.002 if self.slow else 0.0005)
            return self.lin(x)

        def generate(self, x, n):
            with torch.no_grad():
                for _ in range(n):
                    x = self(x)
            return x

    model = LM()
    x = torch.randn(2, 1, 8)
    with roofscope.profile(steps=2, warmup=1, out=tmp_path / "p", peak_tflops=1, peak_bandwidth_gbs=10,
                           settle_tolerance=10.0, quiet=True, report=False):
        model.generate(x, 12)          # cold: its steps settle (tolerance 10x) and are profiled first
        model.slow = False
        model.generate(x, 12)          # the second call: profiled again
    meta = json.loads((tmp_path / "p" / "run.json").read_text())
    assert meta["steps"]["rearmed"]
    # the first call's forwards end at boundary 11; the second call's profile comes after them
    assert meta["steps"]["profiled_from"] > 12
    assert "dropped" in meta["step_times"]["phase"]


# -- the gate and diff compare the program's time ---------------------------------------------------

def test_gate_samples_are_the_programs_steps(gpt2) -> None:
    from roofscope.gate.evaluate import warnings_for
    from roofscope.gate.snapshot import Snapshot

    snap = Snapshot.from_result(gpt2)
    # one sample per steady unprofiled step (233), not the 3 profiled ones; idle stays the trace's
    assert snap.time_source == "unprofiled"
    assert len(snap.samples["step_time"]) == gpt2.to_dict()["step_time"]["unprofiled_steps"] == 233
    assert len(snap.samples["idle_fraction"]) == 3
    assert snap.median("step_time") == pytest.approx(gpt2.to_dict()["step_time"]["unprofiled_median_s"])
    # MFU per step: the profiled steps' work over the program's own step time
    prof = gpt2.step_samples
    work = float((prof["mfu"] * prof["step_time_s"]).median())
    assert snap.median("mfu") == pytest.approx(work / snap.median("step_time"), rel=1e-6)
    again = Snapshot.from_dict(json.loads(snap.to_json()))
    assert again.time_source == "unprofiled"
    old = Snapshot.from_dict(dict(json.loads(snap.to_json()), time_source="profiled"))
    assert any("step times are profiled ones" in w and "record the baseline again" in w
               for w in warnings_for(snap, old))


def test_diff_says_when_a_run_has_only_profiled_times(gpt2) -> None:
    from roofscope.analyzers.compare.diff import diff

    bare = roofscope.analyze(GPT2_RUN / "trace.json.gz")
    d = diff(bare, gpt2)
    assert any("A has only profiled step times" in w for w in d.warnings)
    # the measured saving is the program's: B's own step time against A's profiled one
    assert d.prediction.measured_s == pytest.approx(
        bare.to_dict()["metrics"]["profiled_step_time_s"] - gpt2.to_dict()["step_time"]["unprofiled_median_s"], rel=0.05)


def test_markdown_and_html_show_both_times(gpt2) -> None:
    from roofscope.reports.html import render_html
    from roofscope.reports.markdown import render_markdown

    md = render_markdown(gpt2)
    assert "| step time without the profiler, median of 233 | 6.544 ms" in md
    assert "| step time profiled | 12.034 ms (1.84x) |" in md
    page = render_html(gpt2)
    assert "Step time (own)" in page and "Profiled step" in page and "43 cold steps skipped" in page
    # a bare trace has only the profiled time, and says so
    bare = roofscope.analyze(GPT2_RUN / "trace.json.gz")
    assert "Step time (profiled)" in render_html(bare) and "step time (profiled)" in render_markdown(bare)


def test_a_host_bound_programs_kernel_only_fixes_are_held_to_the_hosts_time(monkeypatch) -> None:
    # A UNet mid-block training loop on an H200 (tests/data/README.md): own step 5.552 ms, GPU busy 2.552 ms;
    # profiled 12.574 ms, host-bound, 1,498.3 events a step: the host's own work is at least 12.574 - 4.8 us x
    # 1,498.3 = 5.382 ms, so a fix of kernels alone saves at most 0.170 ms (tf32's 0.157 fits; verify measured
    # 0.13 ms [-0.44, 0.71]).
    path = Path(__file__).parent / "data" / "h200_unet_attention_run"
    d = roofscope.analyze(path).diagnosis
    assert d.program_time["host_floor_s"] == pytest.approx(0.012574 - 4.8e-6 * 1498.33, rel=1e-3)
    tf32 = {f.rule: f for f in d.findings}["tf32"]
    assert tf32.saving_s == pytest.approx(0.000157, rel=1e-2) and tf32.figures["bound_s"] == pytest.approx(0.00017, rel=2e-2)
    # Were the profiler's cost a tenth of that, the host's work would fill the step: the fixes of kernels alone
    # would save nothing, and are said among the skipped rules.
    monkeypatch.setattr(programtime, "PROFILER_EVENT_S", 0.48e-6)
    d = roofscope.analyze(path).diagnosis
    rules = [f.rule for f in d.findings]
    assert "tf32" not in rules and "channels_last" not in rules
    reasons = {s["rule"]: s["reason"] for s in d.skipped}
    assert reasons["tf32"] == ("the host's own work, at least 5.552 ms a step without the profiler, fills the step:"
                               " faster kernels save nothing in it")
    # Fixes that issue less host work keep their savings: CUDA graphs first, SDPA's fused kernel (a source edit).
    assert rules[0] == "cuda_graphs" and "sdpa" in rules
