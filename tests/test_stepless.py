"""Every script gets a Run: with no step boundary some seconds after the first GPU work (the start,
on a CPU), `roofscope run` records a time window instead (collectors/torchprof.py); a boundary
that arrives later still starts the step schedule. CPU, subprocess and in-process."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import roofscope
from roofscope.cli import main
from roofscope.collectors.torchprof import STEPLESS_WINDOW_S

PEAKS = ["--peak-tflops", "1", "--peak-bandwidth", "10", "--settle", "0"]  # exact step counts

# A user's own kernel in a plain loop: no module, no optimizer, no roofscope.step().
LOOP = textwrap.dedent('''
    import sys, time
    import torch
    x = torch.randn(64, 64)
    # Loop for argv[1] s of its own time: the profiler's first start (seconds on a busy machine,
    # inside the alarm) does not count, so the window always sees the rest of the loop.
    busy, last = 0.0, time.time()
    while busy < float(sys.argv[1]):
        x = torch.tanh(x @ x)
        now = time.time()
        busy, last = busy + min(now - last, 0.01), now
    import roofscope
    for _ in range(int(sys.argv[2])):   # steps that come late (after the window opened)
        x = torch.tanh(x @ x)
        roofscope.step()
''')


def _meta(run: Path) -> dict:
    return json.loads((run / "run.json").read_text())


def test_a_stepless_loop_gets_a_window_run(tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-m", "roofscope", "run", "-o", str(out), *PEAKS, "--no-report",
                          "--stepless-after", "0.3", str(script), "0.6", "0"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    meta = _meta(out)
    assert meta["steps"]["boundaries_seen"] == 0 and meta["steps"]["stepless_window"] == "recorded"
    said = " ".join(meta["warnings"])
    assert "no step boundary arrived within 0.3 s of the program's start: recorded a 5 s time window" in said
    assert "--step-on" in said
    # The console says so too.
    assert "no step boundary arrived within 0.3 s" in res.stdout + res.stderr
    a = roofscope.analyze(out)
    assert {"aten::mm", "aten::tanh"} <= set(a.kernels["name"].astype(str))
    # The window is bounded: it closes after 5 s, or when the script ends.
    span_s = (a.trace.ops["end_ns"].max() - a.trace.ops["ts_ns"].min()) / 1e9
    assert 0 < span_s < STEPLESS_WINDOW_S + 0.5


def test_steps_after_the_window_opened_still_get_the_schedule(tmp_path: Path, capsys) -> None:
    script = tmp_path / "late.py"
    script.write_text(LOOP)
    out = tmp_path / "run"
    # 0.6 s without steps (the window opens at 0.2 s), then 8 steps: wait 1 + warmup 2 + active 3.
    assert main(["run", "-o", str(out), *PEAKS, "--no-report", "-q", "--stepless-after", "0.2", str(script),
                 "0.6", "8"]) == 0
    meta = _meta(out)
    assert meta["steps"]["stepless_window"] == "superseded"
    assert not any("no step boundary" in w for w in meta["warnings"])
    a = roofscope.analyze(out)
    assert len(a.steps()) == 3


def test_a_boundary_in_time_keeps_the_schedule(tmp_path: Path) -> None:
    script = tmp_path / "steps.py"
    script.write_text(LOOP)
    out = tmp_path / "run"
    assert main(["run", "-o", str(out), *PEAKS, "--no-report", "-q", str(script), "0", "8"]) == 0
    meta = _meta(out)
    assert "stepless_window" not in meta["steps"] and meta["steps"]["boundaries_seen"] == 8


@pytest.mark.gpu
def test_a_stepless_cuda_loop_counts_from_the_first_gpu_work(tmp_path: Path) -> None:
    # On a CUDA machine the wait for a boundary starts at the first GPU work, not at start-up.
    script = tmp_path / "cuda_loop.py"
    script.write_text(LOOP.replace("torch.randn(64, 64)", "torch.randn(1024, 1024, device='cuda')"))
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-m", "roofscope", "run", "-o", str(out), "--no-report",
                          "--stepless-after", "0.5", str(script), "2", "0"], capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr
    meta = _meta(out)
    assert meta["steps"]["stepless_window"] == "recorded"
    assert "within 0.5 s of the program's first GPU work" in " ".join(meta["warnings"])
    a = roofscope.analyze(out)
    assert len(a.kernels) > 0 and (a.kernels["cat"] == "kernel").any()


def test_a_stepless_run_has_no_steps_for_the_counters_pass() -> None:
    from roofscope.commands.counters import recorded_target
    from roofscope.errors import RoofscopeError
    from roofscope.run import new_meta

    meta = new_meta(["roofscope", "run", "loop.py"],
                    steps={"requested": {"wait": 1, "warmup": 2, "active": 3}, "stepless_window": "recorded"})
    with pytest.raises(RoofscopeError, match="none arrived in this Run: it recorded a time window"):
        recorded_target(meta)
