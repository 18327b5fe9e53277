"""What the gate cannot compare it refuses, exit 2 in one line, never a verdict (issue 40): a baseline
of another device or precision, implausible samples, a trace cut short (unless --allow-partial), a
bound that cannot fail. And what it says about its samples is true (issue 36): the advice names the
knob that sets them, the counts are the trace's. In process and as a subprocess, on real Runs."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from roofscope.analysis import run
from roofscope.analyzers.compare.comparable import IncomparableError
from roofscope.cli import main
from roofscope.gate import check, write_baseline
from roofscope.gate.snapshot import GateInputError, snapshot_of
from roofscope.gate.stats import steps_to_decide
from roofscope.gate.thresholds import ThresholdError, metric

from .test_gate import snap
from .test_gate_ceilings import trace
from .test_trace import HTA

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
CPU = DATA / "cpu_block.json.gz"                  # a real CPU trace: one step of a small model
H200_RUN = DATA / "h200_gpt_run"                  # 3 profiled steps, no unprofiled step times
GENERATE_RUN = DATA / "h200_gpt2_generate_run"    # 3 profiled steps and the program's own step times


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "roofscope", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)


def _one_line(err: str, *words: str) -> None:
    assert err.startswith("roofscope: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err


@pytest.fixture(scope="module")
def a100_baseline(tmp_path_factory) -> Path:
    """A baseline written from HTA's A100 trace (5 steps of a 16-rank NCCL job)."""
    path = tmp_path_factory.mktemp("a100") / "a100.json"
    write_baseline(HTA, path)
    return path


@pytest.fixture(scope="module")
def cut_run(tmp_path_factory) -> Path:
    """The H200 Run with its trace.json.gz cut at 100,000 of its 136,974 bytes (a copy stopped midway):
    its three steps are there, most of their kernels are not."""
    d = tmp_path_factory.mktemp("cut") / "run"
    shutil.copytree(H200_RUN, d)
    (d / "summary.json").unlink()
    (d / "trace.json.gz").write_bytes((H200_RUN / "trace.json.gz").read_bytes()[:100_000])
    return d


# ---------------------------------------------------------------------------------------------
# another device, another precision


def test_a_baseline_of_another_device_is_refused(a100_baseline, capsys):
    # Before: a CPU run against the A100's baseline with mfu/hfu/mbu off gave PASS (exit 0) and one
    # warning; with the default limits "MFU fell 99.9%", FAIL (exit 1); this one-step CPU trace: exit 3.
    for limits in ("mfu=off,hfu=off,mbu=off", None):
        with pytest.raises(IncomparableError, match=f"{a100_baseline} is a baseline of NVIDIA A100-SXM4-80GB, the"
                                                    " run ran on cpu") as e:
            check(CPU, a100_baseline, max_regression=limits)
        assert e.value.exit_code == 2
    off = "mfu=off,hfu=off,mbu=off"
    assert main(["gate", str(CPU), "--baseline", str(a100_baseline), "--max-regression", off]) == 2
    _one_line(capsys.readouterr().err, "differ by the hardware", "write a baseline on this device")


def test_a_baseline_of_another_device_is_refused_as_a_subprocess(a100_baseline):
    r = _cli("gate", str(CPU), "--baseline", str(a100_baseline))
    assert r.returncode == 2 and r.stdout == ""
    _one_line(r.stderr, "is a baseline of NVIDIA A100-SXM4-80GB, the run ran on cpu")


def test_a_baseline_of_another_precision_is_refused(tmp_path, capsys):
    # The same eight steps of one 4096x1024x1024 GEMM in fp32 (baseline) and bf16 (run) on the H100
    # the traces name: MFU of the fp32 peak (67 TFLOP/s) against MFU of the bf16 one (990). Before, the
    # run was put on the baseline's bf16 peak and compared with an fp32 share: "MFU fell", FAIL, exit 1.
    # (the bf16 GEMM on a tensor-core kernel: an sgemm kernel is CUDA-core fp32 whatever the op's dtype)
    fp32 = trace(tmp_path / "fp32.json")
    bf16 = trace(tmp_path / "bf16.json", dtype="c10::BFloat16", kernel="ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_nn")
    assert (run(fp32).summary.metrics.peak_roof, run(bf16).summary.metrics.peak_roof) == ("fp32", "bf16")
    path = tmp_path / "b.json"
    write_baseline(fp32, path)
    with pytest.raises(IncomparableError, match="the baseline computes mostly in fp32, the run in bf16") as e:
        check(bf16, path)
    assert e.value.exit_code == 2
    assert main(["gate", str(bf16), "--baseline", str(path)]) == 2
    _one_line(capsys.readouterr().err, "shares of different peaks", "write the baseline again")
    assert check(fp32, path).passed                      # the same precision still compares


# ---------------------------------------------------------------------------------------------
# implausible samples, bounds that cannot fail


def test_implausible_baseline_samples_are_refused(tmp_path, capsys):
    # Before: MFU samples of 1e308 read as "MFU fell 100%", FAIL (exit 1): a corrupt number judged.
    path = tmp_path / "b.json"
    write_baseline(H200_RUN, path)
    good = json.loads(path.read_text())
    for name, value, words in (("mfu", 1e308, "a sample of mfu is 1e+308: no MFU exceeds 100000.00%"),
                               ("step_time", 1e308, "a sample of step_time is 1e+308 s: no profiled step lasts a day"),
                               ("hfu", -0.5, "a sample of hfu is a negative share")):
        doc = json.loads(json.dumps(good))
        doc["metrics"][name]["samples"] = [value] * 3
        path.write_text(json.dumps(doc))
        with pytest.raises(GateInputError, match="malformed baseline") as e:
            check(H200_RUN, path)
        assert words in str(e.value) and e.value.exit_code == 2
        assert main(["gate", str(H200_RUN), "--baseline", str(path)]) == 2
        _one_line(capsys.readouterr().err, words)


def test_implausible_run_samples_are_refused():
    # A run's HFU a million times its own (0.3% -> 3000x the peak): no ceilings are that stale.
    s = snapshot_of(H200_RUN)
    assert 0 < s.median("hfu") < 0.01
    bad = replace(s, samples={**s.samples, "hfu": s.samples["hfu"] * 1e6})
    with pytest.raises(GateInputError, match=r"implausible run \(a sample of hfu is \d+(\.\d+)?: no HFU exceeds"):
        check(bad, s)
    with pytest.raises(GateInputError, match=r"implausible run .*: no baseline written"):
        write_baseline(bad, "/nonexistent-dir/never-written.json")


def test_what_is_plausible():
    nan = float("nan")
    # Above the roof is possible (stale ceilings, data in a cache faster than DRAM), a thousandfold not.
    assert metric("mbu").implausible(np.array([0.5, 12.0, nan])) is None
    assert metric("mbu").implausible(np.array([1000.5])) == \
        "a sample of mbu is 1000: no MBU exceeds 100000.00%, not even on stale ceilings"
    # 1 - busy / wall may round a billionth past 1 (or below 0): rounding, not a wrong share.
    assert metric("idle_fraction").implausible(np.array([1.0 + 1e-12, -1e-12])) is None
    assert metric("idle_fraction").implausible(np.array([1.2])).startswith("a sample of idle_fraction is 1.2")
    assert metric("region:decode").implausible(np.array([86_400.0])) is None
    assert metric("step_time").implausible(np.array([np.inf])) == "a sample of step_time is infinite"


@pytest.mark.parametrize("option, value, shown", [("--max-step-time-ms", "inf", "inf"),
                                                  ("--max-step-time-ms", "1e12", "1e+12"),
                                                  ("--max-step-time", "100000s", "100000s")])
def test_a_bound_that_cannot_fail_is_refused(capsys, option, value, shown):
    # Before: --max-step-time-ms inf was accepted and passed every run (only nan was refused).
    assert main(["gate", str(H200_RUN), option, value]) == 2
    _one_line(capsys.readouterr().err, f"{option} {shown}: expected a positive time of at most a day")
    with pytest.raises(ThresholdError, match="an infinite bound would pass every run"):
        check(H200_RUN, max_step_time=float("inf"))
    assert check(H200_RUN, max_step_time="1s").passed     # ~6.3 ms steps


# ---------------------------------------------------------------------------------------------
# traces cut short


def test_a_run_cut_short_is_refused_unless_allowed(cut_run, tmp_path, capsys):
    # Before: --write-baseline wrote it silently, 3 steps of a fraction of their kernels, and the gate
    # judged it as a run.
    b = tmp_path / "b.json"
    assert main(["gate", "--write-baseline", str(cut_run), str(b)]) == 2
    _one_line(capsys.readouterr().err, f"{cut_run}: the trace was cut short (file cut short at byte",
              "or pass --allow-partial")
    assert not b.exists()
    with pytest.raises(IncomparableError, match="the trace was cut short") as e:
        check(cut_run, H200_RUN)
    assert e.value.exit_code == 2
    # --allow-partial writes it and says so; the baseline keeps the cut, and a check against it needs the flag.
    assert main(["gate", "--write-baseline", str(cut_run), str(b), "--allow-partial"]) == 0
    assert "roofscope: warning: the trace was cut short (file cut short at byte" in capsys.readouterr().err
    assert json.loads(b.read_text())["cut_short"].startswith("file cut short at byte")
    with pytest.raises(IncomparableError, match=rf"baseline {b} \(of {cut_run}\): the trace was cut short"):
        check(H200_RUN, b, max_regression="mbu=off")
    r = check(H200_RUN, b, allow_partial=True, max_regression="mfu=off,hfu=off,mbu=off")
    assert any(w.startswith("the baseline's trace was cut short (file cut short at byte") for w in r.warnings)


def test_a_gpu_trace_cut_before_its_kernels_is_judged_on_no_ceilings(tmp_path, capsys):
    # head -c 9443 of the H200 Run's trace: 326 events, CPU ops only. Before, it was read as a CPU
    # trace of this machine and its ops judged on this machine's CPU ceilings (MFU 7754%).
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes((H200_RUN / "trace.json.gz").read_bytes()[:9443])
    r = run(cut)
    assert r.cpu_only and r.trace.meta.cut_short
    assert r.summary.device == "NVIDIA H200" and not r.ceilings.known
    assert r.summary.metrics.peak_flops is None and r.summary.metrics.hfu is None
    assert main(["analyze", str(cut)]) == 0
    out = capsys.readouterr().out
    assert "ceilings  no ceilings: the trace of NVIDIA H200 was cut short before its GPU kernels" in out
    assert main(["gate", str(cut), "--max-step-time", "1s"]) == 2        # and the gate refuses it
    _one_line(capsys.readouterr().err, "the trace was cut short")


# ---------------------------------------------------------------------------------------------
# what the gate says about its samples (issue 36)


def test_the_advice_names_the_knob_that_sets_the_samples():
    # A Run's step time and utilizations are its steps run without the profiler, after the profile:
    # --active sets the profiled steps only (--active 6 gave 12 such samples, --active 20 gave 3).
    # 2 vs 2 steps: the best p is 1/C(4,2) = 1/6 > 0.05, undecided whatever the medians.
    base, slow = snap([10.0, 10.1], regions={"fwd": [5.0, 5.0]}), snap([12.0, 12.1], regions={"fwd": [6.0, 6.1]})
    own = {c.name: c for c in check(replace(slow, time_source="unprofiled"),
                                     replace(base, time_source="unprofiled")).checks}
    assert own["step_time"].note.endswith(
        "record at least 3 steps a side (steps run without the profiler: let the program run 3 steps past its"
        " profile, not --active, 8-10 tolerate a slow step, and rewrite the baseline)")
    assert own["step_time"].message().endswith("2 vs 2 steps without the profiler): " + own["step_time"].note)
    # Regions are the profiled steps' even in such a Run: --active sets them.
    assert "(--active 3, 8-10 tolerate a slow step" in own["region:fwd"].note
    profiled = {c.name: c for c in check(slow, base).checks}
    assert "(--active 3, 8-10 tolerate a slow step" in profiled["step_time"].note
    assert "without the profiler" not in profiled["step_time"].message()
    # A pass whose steps could not have caught the limit (test_gate.py: five steps scattered 9-14 ms,
    # p = 0.27 for a run 5% slower): the same advice.
    steps = replace(snap([9.0, 10.0, 12.0, 14.0, 10.5]), time_source="unprofiled")
    need = steps_to_decide(steps.samples["step_time"] + 0.525e-3, steps.samples["step_time"])
    assert check(steps, steps).checks[0].note == (
        "within the limit, but these steps could not have caught a regression of 5% (p=0.27 for one); about"
        f" {need} steps a side (steps run without the profiler: let the program run {need} steps past its"
        " profile, not --active, the baseline's too) would")


def test_write_baseline_counts_both_kinds_of_steps(tmp_path):
    # Before: "3 steps" for a baseline whose step-time samples were the hundreds run without the profiler.
    n_own = len(run(GENERATE_RUN).program_samples)
    assert n_own > 100
    r = _cli("gate", "--write-baseline", str(GENERATE_RUN), str(tmp_path / "b.json"))
    assert r.returncode == 0, r.stderr
    assert (f"NVIDIA H200, 3 profiled steps; step time and utilizations from {n_own} steps without the profiler"
            in r.stderr)
    doc = json.loads((tmp_path / "b.json").read_text())
    assert len(doc["steps"]) == 3 and len(doc["metrics"]["step_time"]["samples"]) == n_own


def test_a_profile_made_again_that_did_not_complete_counts_the_trace_steps(tmp_path):
    # The session profiled again once the steps settled, the program ended before that profile
    # completed, and the earlier profile (steps 54-56, the trace's) was kept; run.json labelled its
    # steps dropped and the incomplete one's profiled. Before: "profiled_steps": 1 for a 3-step trace,
    # its median that one step's.
    d = tmp_path / "run"
    shutil.copytree(GENERATE_RUN, d)
    (d / "summary.json").unlink()
    meta = json.loads((d / "run.json").read_text())
    st = meta["step_times"]
    later = max(i for i, p in zip(st["index"], st["phase"]) if p == "active") + 10
    st["phase"] = ["dropped" if p in ("warmup", "active") else
                   {later: "warmup", later + 1: "active"}.get(i, p) for i, p in zip(st["index"], st["phase"])]
    (d / "run.json").write_text(json.dumps(meta))
    r = run(d)
    block = r.to_dict()["step_time"]
    assert block["profiled_steps"] == 3 == len(r.step_samples)
    traced = [st["host_s"][st["index"].index(i)] for i in (54, 55, 56)]
    gpu = [st["gpu_s"][st["index"].index(i)] for i in (54, 55, 56)]
    assert block["profiled_median_s"] == pytest.approx(float(np.median([g if g is not None else h
                                                                         for g, h in zip(gpu, traced)])))
    # The incomplete profile's steps are nobody's: neither profiled nor the program's own.
    own = r.program_samples.index
    assert later + 1 not in own and later not in own and 54 not in own
