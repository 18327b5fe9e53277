"""`roofscope gate` end to end: real Runs of examples/mlp.py (unchanged rerun passes, a run
slowed by extra elementwise ops fails), the H200 GPT Run and the HTA trace, exit codes in
process and as a subprocess, and every output file."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

import roofscope
from roofscope.cli import main
from roofscope.analyzers.compare.comparable import IncomparableError
from roofscope.hardware.devices import Ceilings
from roofscope.reports.gate import text
from roofscope.gate import check, load_baseline, write_baseline
from roofscope.gate.evaluate import warnings_for
from roofscope.gate.snapshot import Snapshot, snapshot_of

from .kineto import TraceBuilder
from .test_trace import HTA

ROOT = Path(__file__).resolve().parents[1]
H200_RUN = ROOT / "tests" / "data" / "h200_gpt_run"

# A tiny MLP step on the CPU, also where there is a GPU (~1-2 ms on one thread; 2-5 ms when
# other processes share the two cores); 12000 extra multiplications by 1.0 of the 64x256 input
# add ~90 ms per step: a ~45x slowdown, far past the wide limits below even when the load moves.
MLP_ARGS = ["--device", "cpu", "--steps", "10", "--batch", "64", "--width", "256", "--layers", "2"]
SLOW = ["--extra-elementwise", "12000"]
# Limits wide enough that an unchanged rerun passes on a busy machine (with two busy-loops
# beside it, one rerun measured +112%, p = 0.052; with nine agents sharing the two cores,
# +224%, p = 0.025, against a baseline profiled a minute before): step time may grow 6x,
# MFU/HFU/MBU fall by 83%, before the gate fails; the slowed run is ~45x slower. CPU runs
# have no GPU idle fraction.
LIMITS = "step_time=500%,mfu=83%,hfu=83%,mbu=83%,region:*=500%"


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               OMP_NUM_THREADS="1")
    env.pop("GITHUB_ACTIONS", None)
    env.pop("GITHUB_STEP_SUMMARY", None)
    env.update(extra)
    return env


def _roofscope(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "roofscope", *args], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, env=_env(**env))


def _profile(out: Path, *script_args: str) -> Path:
    # --settle 0: the schedule as asked (the gate then compares the 8 profiled steps; the program's-time
    # samples of a settled Run are tested in test_program_time.py)
    proc = _roofscope("run", "-o", str(out), "--settle", "0", "--wait", "1", "--warmup", "1", "--active", "8",
                      "--nvml-hz", "0",
                      "--no-report", "-q", "examples/mlp.py", *MLP_ARGS, *script_args)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("gate-runs")
    return {"base": _profile(d / "base"), "rerun": _profile(d / "rerun"), "slow": _profile(d / "slow", *SLOW)}


@pytest.fixture(scope="module")
def baseline(runs, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gate-baseline") / "baseline.json"
    assert main(["gate", "--write-baseline", str(runs["base"]), str(path)]) == 0
    return path


def test_write_baseline_from_a_cpu_run(baseline, runs, capsys):
    b = load_baseline(baseline)
    doc = json.loads(baseline.read_text())
    assert doc["format"] == "roofscope-gate-baseline" and doc["version"] == 1
    assert doc["source"] == str(runs["base"])
    assert doc["environment"]["torch"].startswith("2.") and doc["environment"]["roofscope"] == "0.1.0"
    assert len(b.steps) == 8 and len(b.samples["step_time"]) == 8
    assert {"step_time", "mfu", "hfu", "mbu"} <= set(b.samples)
    assert b.median("step_time") == pytest.approx(float(np.median(b.samples["step_time"])))
    assert "aten::addmm" in b.kernels.index and (b.kernels["time_s"] > 0).all()
    # Existing baseline: refused without --force (exit 2, one line), written with it.
    before = baseline.read_text()
    capsys.readouterr()
    assert main(["gate", "--write-baseline", str(runs["base"]), str(baseline)]) == 2
    err = capsys.readouterr().err
    assert err == f"roofscope: error: {baseline} already exists; pass --force to overwrite it\n"
    assert baseline.read_text() == before


def test_unchanged_rerun_passes_and_writes_every_output(runs, baseline, tmp_path, capsys):
    junit, md, js = tmp_path / "gate.xml", tmp_path / "gate.md", tmp_path / "gate.json"
    code = main(["gate", str(runs["rerun"]), "--baseline", str(baseline), "--max-regression", LIMITS,
                 "--junit", str(junit), "--markdown", str(md), "--json", str(js)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "PASS:" in out and "FAIL" not in out
    doc = json.loads(js.read_text())
    assert doc["passed"] is True and doc["exit_code"] == 0
    names = [c["name"] for c in doc["checks"]]
    assert names[:4] == ["step_time", "mfu", "hfu", "mbu"]
    suite = ET.fromstring(junit.read_text()).find("testsuite")
    assert [c.get("name") for c in suite.findall("testcase")] == names
    assert suite.get("failures") == "0"
    assert md.read_text().startswith("### roofscope gate :white_check_mark: PASS:")


def test_a_dash_prints_that_verdict_alone(runs, baseline, capsys):
    assert main(["gate", str(runs["rerun"]), "--baseline", str(baseline), "--max-regression", LIMITS,
                 "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)   # the JSON alone, no verdict table around it
    assert doc["passed"] is True and [c["name"] for c in doc["checks"]][:2] == ["step_time", "mfu"]
    assert main(["gate", str(runs["rerun"]), "--baseline", str(baseline), "--junit", "-", "--json", "-"]) == 2
    assert capsys.readouterr().err == ("roofscope: error: only one output can be '-' (standard output),"
                                       " got --junit and --json\n")


def test_slowed_run_fails_with_kernel_evidence(runs, baseline, tmp_path):
    summary = tmp_path / "step-summary.md"
    proc = _roofscope("gate", str(runs["slow"]), "--baseline", str(baseline), "--max-regression", LIMITS,
                      GITHUB_ACTIONS="true", GITHUB_STEP_SUMMARY=str(summary))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    r = check(runs["slow"], baseline, max_regression=LIMITS)
    step = next(c for c in r.checks if c.name == "step_time")
    assert step.status == "fail" and step.change > 2.0          # more than 3x slower
    assert step.p_value < 0.001                                  # 8 vs 8 separated: 1/C(16,8) = 7.8e-5
    # The extra multiplications are the evidence: aten::mul grew most (it did not run in the baseline).
    top = r.grown_kernels().iloc[0]
    assert top["name"] == "aten::mul" and top["calls_b"] > 2000 and top["status"] == "appeared"
    lines = proc.stdout.splitlines()
    errors = [x for x in lines if x.startswith("::error title=roofscope gate%3A step_time regressed::")]
    assert len(errors) == 1 and "Kernels that grew most: aten::mul +" in errors[0]
    assert "FAIL:" in proc.stdout and "kernels whose time per step grew" in proc.stdout
    assert summary.read_text().startswith("### roofscope gate :x: FAIL:")


def test_gate_a_run_against_a_run_directory(runs):
    # The baseline may be a Run directory too (no baseline file); a run against itself passes.
    r = check(runs["rerun"], runs["rerun"], max_regression=LIMITS)
    assert r.passed and all(c.change == 0 for c in r.checks if c.status != "skip")
    assert r.grown_kernels().empty


@pytest.mark.parametrize("args, fragment", [
    (["gate", "nope"], "nothing to check: give a baseline or an absolute bound"),
    (["gate", "--write-baseline", "{base}"], "--write-baseline needs the file to write"),
    (["gate", "{base}", "x.json"], "unexpected argument 'x.json'"),
    (["gate", "--write-baseline", "{base}", "x.json", "--min-mfu", "0.3"],
     "--write-baseline only writes the baseline; --min-mfu belong to a check run"),
    (["gate", "{base}", "--baseline", "{base}/run.json"], "not a roofscope gate baseline"),
    (["gate", "{base}/missing", "--min-mfu", "0.3"], "no such file"),
    (["gate", "{base}", "--min-mfu", "35"], "--min-mfu 35: expected a share between 0% and 100%"),
])
def test_usage_and_input_errors_exit_2(runs, capsys, args, fragment):
    argv = [a.format(base=runs["base"]) for a in args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_trace_without_steps_is_refused(tmp_path, capsys):
    # One kernel, no ProfilerStep#N span: no per-step samples to compare.
    b = TraceBuilder(device_name="NVIDIA H100 80GB HBM3")
    ext = b.op("aten::relu", 10, 50, [[1024, 1024]], ["float"])
    b.launch_kernel("vectorized_elementwise_kernel", 20, 40, 10, ext=ext)
    trace = b.write(tmp_path / "nosteps.json")
    assert main(["gate", "--write-baseline", str(trace), str(tmp_path / "b.json")]) == 2
    err = capsys.readouterr().err
    assert err == (f"roofscope: error: {trace}: no profiled steps (ProfilerStep#N spans); the gate compares"
                   " per-step samples: profile with `roofscope run` or a torch.profiler schedule\n")
    assert not (tmp_path / "b.json").exists()


def test_exit_codes_as_a_subprocess(runs, baseline):
    ok = _roofscope("gate", str(runs["rerun"]), "--baseline", str(baseline), "--max-regression", LIMITS, "-q")
    assert (ok.returncode, ok.stdout) == (0, "")
    bad = _roofscope("gate", str(runs["rerun"]), "--baseline", str(baseline), "--max-regression", "mfu=5")
    assert bad.returncode == 2 and bad.stderr.startswith("roofscope: error: --max-regression mfu=5:")
    # An absolute bound no CPU run meets: median MFU far below 100%.
    floor = _roofscope("gate", str(runs["rerun"]), "--min-mfu", "1.0", "-q")
    assert floor.returncode == 1
    # A baseline of one step: 8 vs 1 can reach p = 1/C(9,1) = 0.11 at best: cannot decide, exit 3.
    doc = json.loads(baseline.read_text())
    for entry in doc["metrics"].values():
        entry["samples"] = entry["samples"][:1]
    one = baseline.parent / "one-step.json"
    one.write_text(json.dumps(doc))
    undecided = _roofscope("gate", str(runs["rerun"]), "--baseline", str(one), "--max-regression", LIMITS)
    assert undecided.returncode == 3, undecided.stdout + undecided.stderr
    assert "UNDECIDED:" in undecided.stdout and "record at least 3 steps a side" in undecided.stdout
    # A corrupt baseline: one line, exit 2 (exit 1 would report it as a regression).
    doc["kernels"]["rows"][0]["time_s"] = "fast"
    one.write_text(json.dumps(doc))
    corrupt = _roofscope("gate", str(runs["rerun"]), "--baseline", str(one))
    assert corrupt.returncode == 2 and corrupt.stderr == (
        f"roofscope: error: {one}: malformed baseline (Expected `float`, got `str` - at `$.kernels.rows[0].time_s`)\n")


def test_h200_gpt_run_against_itself_and_slowed(tmp_path):
    path = tmp_path / "h200.json"
    snap = write_baseline(H200_RUN, path)
    assert snap.device == "NVIDIA H200" and snap.steps == [3, 4, 5]
    assert snap.environment["torch"] == "2.11.0+cu130" and snap.environment["cuda"] == "13.0"
    # The samples are the analysis's per-step samples, their medians its headline metrics.
    a = roofscope.analyze(H200_RUN)
    samples, metrics = a.step_samples, a.to_dict()["metrics"]
    assert snap.samples["step_time"].tolist() == samples["step_time_s"].tolist()
    assert snap.median("step_time") == pytest.approx(metrics["step_time_s"])
    assert snap.median("mfu") == pytest.approx(metrics["mfu"])
    assert 0.006 < snap.median("step_time") < 0.0065             # ~6.3 ms steps
    same = check(H200_RUN, path)
    assert same.passed and same.warnings == []
    # The same three values a side, a < b < c twice each: mid-ranks 1.5, 3.5, 5.5 (each twice); the
    # run's sum 10.5 is reached or passed by 14 of the C(6,3) = 20 splits: p = 0.7. The best any
    # split could do is {c, c, b}: 2/20 = 0.1 > 0.05: the ties, not the counts (3 vs 3 reach 1/20),
    # put alpha out of reach, so the medians decide (change 0%: pass).
    step = next(c for c in same.checks if c.name == "step_time")
    assert step.p_value == pytest.approx(0.7) and step.change == 0.0
    assert step.status == "pass"
    # ...but a run 5% slower with these three steps' scatter would not separate either: the pass says so.
    assert step.note.startswith("within the limit, but these steps could not have caught a regression of 5% (p=0.2")
    # The same Run 10% slower on every step: +10% > 5% on the limit; 3 vs 3 separated, p = 1/20.
    slowed = snapshot_of(H200_RUN)
    slowed.samples["step_time"] = slowed.samples["step_time"] * 1.10
    c = next(c for c in check(slowed, path).checks if c.name == "step_time")
    assert c.status == "fail" and c.change == pytest.approx(0.10) and c.p_value == pytest.approx(0.05)


def test_cpu_run_against_the_h200_baseline_is_refused(runs, tmp_path):
    path = tmp_path / "h200.json"
    write_baseline(H200_RUN, path)
    # Another device: refused (exit 2) whatever the limits, every one off included (before: a
    # warning, and the verdict of MFU on the H200's peak).
    for limits in (None, "step_time=off,mfu=off,hfu=off,mbu=off,region:*=off"):
        with pytest.raises(IncomparableError, match=f"{path} is a baseline of NVIDIA H200, the run ran on cpu") as e:
            check(runs["rerun"], path, max_regression=limits)
        assert e.value.exit_code == 2
    # The H200 datasheet: bf16 989.5 TFLOP/s, 4.8 TB/s; the CPU's roofs are measured here (when the
    # CPU has ceilings at all), and the snapshots still tell the ceilings apart.
    w = warnings_for(snapshot_of(runs["rerun"]), load_baseline(path))
    if snapshot_of(runs["rerun"]).ceilings.get("peak_flops"):
        assert any(x.startswith("the run's ceilings differ from the baseline's (peak_flops: baseline 9.895e+14")
                   for x in w)


# The CPU's roofs, measured twice on one machine: quiet, then busy (a 2-core CPU's fp32 matmul
# ranged 3.05-68.9 GFLOP/s over an hour); the rerun's are 3.5x the baseline's.
BUSY = Ceilings(device="cpu", source="measured", peaks={"fp32": 5e9}, bandwidth=2e9)
QUIET = Ceilings(device="cpu", source="measured", peaks={"fp32": 17.6e9}, bandwidth=7e9)


def test_unchanged_run_on_remeasured_ceilings_passes(runs, tmp_path):
    # One Run analyzed on two ceilings sets: what unchanged code gives when the CPU's ceilings were
    # re-measured between the baseline and the rerun.
    path = tmp_path / "b.json"
    write_baseline(roofscope.analyze(runs["base"], ceilings=BUSY), path)
    same = Snapshot.from_result(roofscope.analyze(runs["base"], ceilings=QUIET))
    assert same.median("hfu") == pytest.approx(load_baseline(path).median("hfu") * 5 / 17.6)
    # On its own ceilings the run's HFU is 5/17.6 = 28% of the baseline's: "HFU fell 72%" failed
    # unchanged code even under the wide limits. On the baseline's, nothing moved.
    r = check(same, path, max_regression=LIMITS)
    assert r.exit_code == 0, text(r)
    c = {x.name: x for x in r.checks}
    assert c["hfu"].change == pytest.approx(0.0, abs=1e-12) and c["mbu"].change == pytest.approx(0.0, abs=1e-12)
    # The slowed run still fails on the other ceilings; its HFU fell with the steps (less: the extra
    # multiplications are FLOPs too), compared on the baseline's ceilings, not raised 3.5x by QUIET's.
    slow = check(Snapshot.from_result(roofscope.analyze(runs["slow"], ceilings=QUIET)), path,
                 max_regression="step_time=100%,hfu=50%,mfu=off,mbu=off,region:*=off")
    c = {x.name: x for x in slow.checks}
    assert c["step_time"].status == "fail" and c["hfu"].change < -0.5


def test_bare_trace_baseline_hta(tmp_path):
    snap = write_baseline(HTA, tmp_path / "hta.json")
    assert snap.device == "NVIDIA A100-SXM4-80GB" and len(snap.steps) == 5
    assert snap.environment == {"roofscope": None, "torch": None, "cuda": None, "python": None}
    assert check(HTA, tmp_path / "hta.json").passed
    assert isinstance(load_baseline(tmp_path / "hta.json"), Snapshot)
