"""Every script gets a Run: `roofscope run` records a step-less window from the first GPU work (the
start, on a CPU) and keeps it when the step schedule records nothing: no boundary, or too few
(collectors/windows.py): a program whose work runs in a library's loop, not its own. CPU, subprocess
and in-process."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import roofscope
from roofscope.cli import main
from roofscope.collectors import torchprof
from roofscope.collectors import windows
from roofscope.collectors.windows import STEPLESS_WINDOW_S

PEAKS = ["--peak-tflops", "1", "--peak-bandwidth", "10", "--settle", "0"]  # exact step counts

# A kernel in a library's loop (outside the script's folder: no loop of the program's own, so no loop
# steps, collectors/loops/), no module, no optimizer, no roofscope.step().
LIB = textwrap.dedent('''
    import time
    import torch


    def spin(seconds, device="cpu"):
        # Loop for `seconds` of its own time: the profiler's first start (seconds on a busy machine,
        # inside the alarm) does not count, so the window always sees the rest of the loop.
        x = torch.randn(64, 64, device=device)
        busy, last = 0.0, time.time()
        while busy < seconds:
            x = torch.tanh(x @ x)
            now = time.time()
            busy, last = busy + min(now - last, 0.01), now
        return x
''')
LOOP = textwrap.dedent('''
    import sys
    import torch
    sys.path.insert(0, LIBDIR)
    from worklib import spin
    x = spin(float(sys.argv[1]), DEVICE)
    import roofscope
    for _ in range(int(sys.argv[2])):   # steps that come late (after the window opened)
        x = torch.tanh(x @ x)
        roofscope.step()
''')


def _script(tmp_path: Path, name: str, device: str = "cpu") -> Path:
    """The script in tmp_path/app, its library's loop in tmp_path/lib."""
    (tmp_path / "lib").mkdir(exist_ok=True)
    (tmp_path / "lib" / "worklib.py").write_text(LIB)
    (tmp_path / "app").mkdir(exist_ok=True)
    script = tmp_path / "app" / name
    script.write_text(LOOP.replace("LIBDIR", repr(str(tmp_path / "lib"))).replace("DEVICE", repr(device)))
    return script


def _meta(run: Path) -> dict:
    return json.loads((run / "run.json").read_text())


def _said(run: Path) -> str:
    return " ".join(_meta(run)["warnings"])


def test_a_short_stepless_loop_gets_its_opening_window(tmp_path: Path) -> None:
    # 0.3 s of work and no step: the script ends long before --stepless-after's 10 s, and its Run
    # holds the opening window, from the start (a CPU machine) to the script's end.
    script = _script(tmp_path, "loop.py")
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-m", "roofscope", "run", "-o", str(out), *PEAKS, "--no-report",
                          str(script), "0.3", "0"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    meta = _meta(out)
    assert meta["steps"]["boundaries_seen"] == 0 and meta["steps"]["stepless_window"] == "recorded"
    said = _said(out)
    assert re.search(r"recorded a time window instead of steps, the first \d+\.\d s from the"
                     r" program's start", said), said
    assert "--step-on" in said
    assert "no step boundary arrived" in res.stdout + res.stderr   # the console says so too
    a = roofscope.analyze(out)
    assert {"aten::mm", "aten::tanh"} <= set(a.kernels["name"].astype(str))
    span_s = (a.trace.ops["end_ns"].max() - a.trace.ops["ts_ns"].min()) / 1e9
    assert 0 < span_s < STEPLESS_WINDOW_S + 0.5


def test_a_long_stepless_loop_is_recorded_again_after_stepless_after(tmp_path: Path, monkeypatch) -> None:
    # Windows of 0.4 s: the opening one covers 0.4 s after the profiler's first start (up to 2 s on
    # a busy machine); with no boundary by 3 s a second one records 3-3.4 s and replaces it (the
    # loop runs 4 s of its own time).
    monkeypatch.setattr(windows, "STEPLESS_WINDOW_S", 0.4)
    script = _script(tmp_path, "loop.py")
    out = tmp_path / "run"
    assert main(["run", "-o", str(out), *PEAKS, "--no-report", "-q", "--stepless-after", "3", str(script),
                 "4", "0"]) == 0
    assert _meta(out)["steps"]["stepless_window"] == "recorded"
    m = re.search(r"recorded a time window instead of steps, (\d+\.\d) to (\d+\.\d) s after the program's start"
                  r" \(--stepless-after 3\)", _said(out))
    assert m, _said(out)
    start, end = float(m[1]), float(m[2])
    assert start >= 3 and 0.35 <= end - start < 2.5   # late (between bytecodes, after a slow start), never early
    a = roofscope.analyze(out)
    span_s = (a.trace.ops["end_ns"].max() - a.trace.ops["ts_ns"].min()) / 1e9
    assert span_s < 2.5   # one window: the opening one ended near 2 s at most


def test_steps_after_the_opening_window_get_the_schedule(tmp_path: Path, monkeypatch) -> None:
    # 0.6 s without steps (the opening window closes at 0.3 s), then 8 steps: wait 1 + warmup 2 + active 3.
    monkeypatch.setattr(windows, "STEPLESS_WINDOW_S", 0.3)
    script = _script(tmp_path, "late.py")
    out = tmp_path / "run"
    assert main(["run", "-o", str(out), *PEAKS, "--no-report", "-q", str(script), "0.6", "8"]) == 0
    meta = _meta(out)
    assert "stepless_window" not in meta["steps"] and meta["steps"]["boundaries_seen"] == 8
    assert not any("no step boundary" in w or "time window" in w for w in meta["warnings"])
    assert len(roofscope.analyze(out).steps) == 3


def test_too_few_steps_keep_the_opening_window(tmp_path: Path) -> None:
    # 0.3 s of work, then 2 boundaries where the schedule needs 6: the steps record nothing, so the
    # Run keeps the window from the start to the first boundary (it held the loop's mm and tanh).
    script = _script(tmp_path, "few.py")
    out = tmp_path / "run"
    assert main(["run", "-o", str(out), *PEAKS, "--no-report", "-q", str(script), "0.3", "2"]) == 0
    meta = _meta(out)
    assert meta["steps"]["stepless_window"] == "kept" and meta["steps"]["boundaries_seen"] == 2
    said = _said(out)
    assert re.search(r"only 2 step boundaries arrived; the steps recorded nothing: kept the time window recorded"
                     r" before the first of them, the first \d+\.\d s from the program's start", said), said
    a = roofscope.analyze(out)
    assert {"aten::mm", "aten::tanh"} <= set(a.kernels["name"].astype(str))


def test_a_boundary_at_once_keeps_the_schedule(tmp_path: Path) -> None:
    script = _script(tmp_path, "steps.py")
    out = tmp_path / "run"
    assert main(["run", "-o", str(out), *PEAKS, "--no-report", "-q", str(script), "0", "8"]) == 0
    meta = _meta(out)
    assert "stepless_window" not in meta["steps"] and meta["steps"]["boundaries_seen"] == 8


@pytest.mark.parametrize("flags", [["--stepless-after", "0"], ["--wait", "0"], ["--warmup", "0"]])
def test_no_window_when_turned_off_or_the_schedule_starts_at_once(tmp_path: Path, flags: list[str]) -> None:
    # --wait 0 and --warmup 0 would have the step profiler record inside the boundary that ends the
    # window's session (collectors/torchprof.py): their schedule is kept as asked, with no window.
    script = _script(tmp_path, "loop.py")
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-m", "roofscope", "run", "-o", str(out), *PEAKS, "--no-report",
                          *flags, str(script), "0.2", "0"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and not out.exists()
    assert "nothing was recorded" in res.stderr and "Traceback" not in res.stderr


def test_the_boundary_that_ends_the_window_only_warms_the_step_profiler(tmp_path: Path) -> None:
    # The window's session ends inside the boundary (here no record_function is open, but an
    # Optimizer.step's would be): the step profiler starts in warm-up, never recording at once.
    import torch

    c = torchprof.TorchCollector(tmp_path / "trace.json", torchprof.Schedule(wait=1, warmup=1, active=1),
                                 stepless_after_s=30.0)
    c.start()
    try:
        _until_the_opening_window(c)
        torch.mm(torch.randn(8, 8), torch.randn(8, 8))
        c.step()
        assert c.fallback is None and c.phase == "warmup"
        c.step()
        assert c.phase == "recording"
        c.step()
    finally:
        assert c.stop()
    assert c.kept_window is None and not (tmp_path / "stepless-window.json").exists()


def _until_the_opening_window(c: torchprof.TorchCollector) -> None:
    """The opening window starts from SIGALRM, 1 ms after start() on a CPU machine."""
    import time

    deadline = time.monotonic() + 10
    while c.fallback != "recording" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert c.fallback == "recording"


def test_a_capture_inside_a_stepless_window_stays_in_it_and_is_filed(tmp_path: Path, fake_graph) -> None:
    # A CUDA-graph capture before any step (vLLM captures at start-up) lands in the opening window:
    # starting the recorder's own profiler there would switch Kineto sessions under the window's
    # open record_functions. The held window is also filed as a capture file, for replays in a
    # later trace of the steps.
    import torch

    from roofscope.collectors.graphs import GraphRecorder
    from roofscope.analyzers.ingest import read as read_trace

    FakeGraph, _ = fake_graph
    c = torchprof.TorchCollector(tmp_path / "trace.json", stepless_after_s=30.0)
    c.start()
    rec = GraphRecorder(tmp_path / "g", c.make_room, c.give_back_room)
    rec.install()
    c.held.on_hold = rec.file_window
    x = torch.randn(16, 16)
    try:
        _until_the_opening_window(c)
        torch.mm(x, x)
        g = FakeGraph()
        g.capture_begin()
        torch.add(x, 1)
        g.capture_end()
        assert c.fallback == "recording" and not rec._open   # no session switch for the capture
    finally:
        rec.remove()
    assert rec.skipped == 0 and rec.files == []
    assert c.stop() and c.kept_window == "recorded"
    assert [p.name for p in rec.files] == ["capture-window-0000.json"]
    window, filed = read_trace(tmp_path / "trace.json"), read_trace(rec.files[0])
    for t in (window, filed):
        assert {"aten::mm", "aten::add"} <= set(t.ops["name"])
    # analyzers/cost/graphs.py finds the capture by its annotation
    assert "roofscope: graph capture 0" in rec.files[0].read_text()


def test_a_window_without_captures_files_nothing(tmp_path: Path) -> None:
    from roofscope.collectors.graphs import GraphRecorder

    rec = GraphRecorder(tmp_path / "g", lambda: True, lambda: None)
    trace = tmp_path / "w.json"
    trace.write_text("{}")
    rec.file_window(trace)
    assert rec.files == [] and not (tmp_path / "g").exists()


@pytest.mark.gpu
def test_a_short_stepless_cuda_loop_counts_from_the_first_gpu_work(tmp_path: Path) -> None:
    # On a CUDA machine the opening window starts at the first GPU work, not at start-up.
    script = _script(tmp_path, "cuda_loop.py", device="cuda")
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-m", "roofscope", "run", "-o", str(out), "--no-report",
                          str(script), "0.5", "0"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert _meta(out)["steps"]["stepless_window"] == "recorded"
    assert "s from the program's first GPU work" in _said(out)
    a = roofscope.analyze(out)
    assert len(a.kernels) > 0 and (a.kernels["cat"] == "kernel").any()


def test_a_stepless_run_has_no_steps_for_the_counters_pass() -> None:
    from roofscope.commands.counters import recorded_target
    from roofscope.errors import RoofscopeError
    from roofscope.run import new_meta

    meta = new_meta(["roofscope", "run", "loop.py"],
                    steps={"requested": {"wait": 1, "warmup": 2, "active": 3}, "stepless_window": "recorded"})
    with pytest.raises(RoofscopeError, match="its trace is a step-less time window"):
        recorded_target(meta)
