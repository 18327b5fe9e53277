"""`roofscope run` and `roofscope.profile()` on CPU: Runs written however the program ends.

Subprocess tests cover what only a real process shows (signals, exit codes, tracebacks);
in-process tests cover the rest faster. `--peak-*` flags skip the CPU ceiling measurement.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

import roofscope
from roofscope.cli import main
from roofscope.errors import RoofscopeError

# --settle 0: these tests count the schedule's steps exactly (settling is tested in test_program_time.py).
PEAKS = ["--peak-tflops", "1", "--peak-bandwidth", "10", "--settle", "0"]

TRAIN = textwrap.dedent('''
    import os, pathlib, sys, time
    import torch
    mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
    print("SEEN", repr(sys.argv), __file__, sys.path[0], __name__, flush=True)
    model = torch.nn.Linear(16, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 16)
    for i in range(int(os.environ.get("STEPS", "8"))):
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
        if mode == "raise" and i == 6:
            raise ValueError("boom at step 6")
        if mode == "exit" and i == 6:
            sys.exit(3)
        if mode == "wait" and i == 4:
            pathlib.Path(sys.argv[2]).write_text("ready")
            time.sleep(60)
''')


@pytest.fixture
def script(tmp_path: Path) -> Path:
    p = tmp_path / "train.py"
    p.write_text(TRAIN)
    return p


def _cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "roofscope", *args], capture_output=True, text=True,
                          timeout=600, **kw)


def _meta(run: Path) -> dict:
    return json.loads((run / "run.json").read_text())


# -- subprocess: how the script ends --------------------------------------------------------------

def test_script_exception_writes_run_and_exits_1(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = _cli("run", "-o", str(out), *PEAKS, str(script), "raise")
    assert res.returncode == 1, res.stderr
    # The traceback is the script's own, as Python prints it: no roofscope or runpy frames.
    assert "ValueError: boom at step 6" in res.stderr
    tb = res.stderr.split("Traceback (most recent call last):")[1].split("ValueError")[0]
    assert str(script) in tb and "roofscope" not in tb and "runpy" not in tb
    meta = _meta(out)
    assert meta["exit_status"]["reason"] == "exception"
    assert meta["exit_status"]["code"] == 1
    assert "ValueError: boom at step 6" in meta["exit_status"]["detail"]
    # The schedule needs 1+2+3 = 6 boundaries; the seventh optimizer step is still counted (and
    # timed, without the profiler), and all three active steps are recorded.
    assert meta["steps"]["boundaries_seen"] == 7
    assert meta["step_times"]["phase"] == ["warmup", "warmup", "active", "active", "active", "unprofiled"]
    assert meta["steps"]["recorded"] == [3, 4, 5]
    assert (out / "report.html").exists() and (out / "summary.json").exists()
    assert f"run:    {out}" in res.stdout


def test_sys_exit_code_is_preserved(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = _cli("run", "-o", str(out), *PEAKS, str(script), "exit")
    assert res.returncode == 3, res.stderr
    assert _meta(out)["exit_status"] == {"code": 3, "reason": "exit", "detail": "sys.exit(3)"}


@pytest.mark.parametrize("sig, code, reason", [(signal.SIGINT, 130, "interrupted"),
                                               (signal.SIGTERM, 143, "terminated")])
def test_signal_mid_profile_writes_partial_run(script: Path, tmp_path: Path, sig: int, code: int,
                                               reason: str) -> None:
    out, ready = tmp_path / "run", tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-m", "roofscope", "run", "-o", str(out), *PEAKS, str(script),
                             "wait", str(ready)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while not ready.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert ready.exists(), proc.communicate()[1]
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == code, stderr
    meta = _meta(out)
    assert meta["exit_status"]["reason"] == reason
    # Five boundaries arrived (steps 0-4): steps 3 and 4 complete; step 5, cut short by the
    # signal while the script slept, ran no ops.
    assert meta["steps"]["boundaries_seen"] == 5
    assert meta["steps"]["recorded"] == [3, 4]
    assert "recorded 2 complete active steps" in stderr
    assert (out / "report.html").exists()


def test_module_target_and_python_dash_m(tmp_path: Path) -> None:
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(TRAIN)
    out = tmp_path / "run"
    res = _cli("run", "-o", str(out), *PEAKS, "-m", "mypkg.train", "ok", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    seen = next(line for line in res.stdout.splitlines() if line.startswith("SEEN"))
    # runpy gives argv[0] the module's file and __name__ "__main__"; sys.path[0] is the cwd.
    assert f"['{pkg / 'train.py'}', 'ok']" in seen and seen.endswith(f"{tmp_path} __main__")
    assert _meta(out)["steps"]["recorded"] == [3, 4, 5]


def test_module_target_from_cwd_without_cwd_on_path(tmp_path: Path) -> None:
    # The `roofscope` console script's sys.path[0] is its bin directory, not the cwd; `-P`
    # gives `python -m roofscope` the same start. `python -m pkg.mod` finds pkg in the cwd,
    # and so must `roofscope run -m pkg.mod` (it said "No module named 'pkg'").
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(TRAIN)
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-P", "-m", "roofscope", "run", "-o", str(out), *PEAKS, "-q",
                          "-m", "pkg.mod", "ok"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "SEEN" in res.stdout and _meta(out)["steps"]["recorded"] == [3, 4, 5]


# -- in-process -----------------------------------------------------------------------------------

def test_run_in_process_script_view_and_restored_state(script: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    argv, path = sys.argv[:], sys.path[:]
    assert main(["run", "-o", str(out), *PEAKS, "--tokens-per-step", "8", str(script), "ok", "--lr", "3"]) == 0
    printed = capsys.readouterr().out
    # The script saw the argv, __file__, sys.path[0] and __name__ that `python train.py ok --lr 3` gives.
    assert f"SEEN ['{script}', 'ok', '--lr', '3'] {script} {script.parent} __main__" in printed
    assert sys.argv == argv and sys.path == path
    meta = _meta(out)
    assert meta["command"][:3] == ["roofscope", "run", "-o"]
    assert meta["steps"]["source"] == "optimizer" and meta["exit_status"]["reason"] == "ok"
    assert meta["tokens_per_step"] == 8
    a = roofscope.analyze(out)
    t = a.to_dict()["metrics"]
    assert t["steps"] == 3 and t["tokens_per_s"] == pytest.approx(8 / t["step_time_s"])
    assert "tokens/s" in printed and "report: " in printed


def test_out_exists_refused_before_running(script: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep").write_text("mine")
    assert main(["run", "-o", str(out), str(script), "raise"]) == 2
    err = capsys.readouterr()
    assert "already exists; pass --force" in err.err and "SEEN" not in err.out  # script never ran
    assert (out / "keep").read_text() == "mine"


def test_missing_script_and_module(tmp_path: Path, capsys) -> None:
    assert main(["run", str(tmp_path / "nope.py")]) == 2
    assert "nope.py: no such file" in capsys.readouterr().err
    assert main(["run", "-m", "no_such_module_xyz"]) == 2
    assert "no module named 'no_such_module_xyz'" in capsys.readouterr().err


def test_a_plain_loop_steps_on_its_iterations_and_a_duration_window_works(tmp_path: Path, capsys) -> None:
    s = tmp_path / "infer.py"
    s.write_text("import torch, time\nx = torch.randn(64, 64)\nt = time.time()\n"
                 "while time.time() - t < 2:\n    x = torch.tanh(x @ x)\n")
    out = tmp_path / "run"
    # No hook marks a boundary: the loop's iterations are the steps (docs/steps.md; a program without a
    # loop of its own gets a step-less window, tests/test_stepless.py)
    assert main(["run", "-o", str(tmp_path / "looped"), *PEAKS, str(s)]) == 0
    steps = _meta(tmp_path / "looped")["steps"]
    assert steps["source"] == "loop" and (steps["loop"]["line"], steps["loop"]["text"]) == (4, "while time.time() - t < 2")
    assert "no step boundary arrived" not in capsys.readouterr().err
    assert main(["run", "-o", str(out), *PEAKS, "--duration", "0.2", "--delay", "0.1", str(s)]) == 0
    meta = _meta(out)
    assert meta["steps"]["requested"] == {"duration_s": 0.2, "delay_s": 0.1}
    a = roofscope.analyze(out)
    names = set(a.kernels["name"].astype(str))
    assert {"aten::mm", "aten::tanh"} <= names
    # Only the window was recorded: 0.2 s of the 2 s loop (the bound leaves a loaded machine 1.3 s to stop).
    span_s = (a.trace.ops["end_ns"].max() - a.trace.ops["ts_ns"].min()) / 1e9
    assert 0.1 < span_s < 1.5


def test_profile_context_manager(tmp_path: Path, capsys) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32))
    x = torch.randn(16, 32)
    with roofscope.profile(steps=2, settle=0, wait=0, warmup=1, out=tmp_path / "p", peak_tflops=1, peak_bandwidth_gbs=10, modules=True, quiet=True,
                           tokens_per_step=16, model_flops_per_step=6 * 32 * 64 * 2 * 16) as prof:
        with pytest.raises(RoofscopeError, match="not finished"):
            prof.summary()
        for _ in range(3):
            model(x).sum().backward()
            prof.step()
    assert capsys.readouterr().out == ""  # quiet
    assert prof.run_dir == tmp_path / "p"
    a = prof.analysis
    assert a.to_dict()["steps"] == [1, 2]
    mods = a.by_module()
    # Forward and backward GEMMs both land on the Linear that ran them.
    assert {"Sequential.0", "Sequential.2"} <= set(mods.index)
    mm = a.kernels[a.kernels["name"].astype(str).isin(["aten::mm", "aten::addmm"])]
    assert (mm["module"] != "").all()
    assert "Top" in prof.summary()
    t = a.to_dict()["metrics"]
    assert t["mfu_source"] == "model_flops"
    assert t["mfu"] == pytest.approx(t["model_flops_per_step"] / t["step_time_s"] / t["peak_flops"])


def test_profile_writes_run_on_exception_and_refuses_nesting(tmp_path: Path) -> None:
    x = torch.randn(8, 8)
    with pytest.raises(KeyError):
        with roofscope.profile(steps=1, settle=0, wait=0, warmup=0, out=tmp_path / "p", peak_tflops=1,
                               peak_bandwidth_gbs=10, quiet=True) as prof:
            with pytest.raises(RoofscopeError, match="already active"):
                with roofscope.profile(out=tmp_path / "q"):
                    pass
            x @ x
            prof.step()
            raise KeyError("user bug")
    meta = _meta(tmp_path / "p")
    assert meta["exit_status"]["reason"] == "exception" and "KeyError" in meta["exit_status"]["detail"]
    assert not (tmp_path / "q").exists()
    roofscope.step()  # no session: a no-op


def test_python_dash_m_roofscope_run_help() -> None:
    res = _cli("run", "--help")
    assert res.returncode == 0 and "--duration" in res.stdout and "--modules" in res.stdout


def test_env_var_for_inductor_metadata_is_set_for_the_script(tmp_path: Path) -> None:
    s = tmp_path / "env.py"
    s.write_text("import os\nprint('ENV', os.environ.get('TORCHINDUCTOR_BENCHMARK_KERNEL'))\n")
    res = _cli("run", "-o", str(tmp_path / "r"), str(s), env={**os.environ, "TORCHINDUCTOR_BENCHMARK_KERNEL": ""})
    assert "ENV 1" in res.stdout
    # No torch work: no trace (exit 2), or, on a machine slow enough that the opening window caught the
    # interpreter's own start, a Run of that window (exit 0): either way the variable was set.
    assert (res.returncode, "no trace was recorded" in res.stderr) in ((2, True), (0, False)), res.stderr[-500:]


def test_default_out_dir_and_exit_after_profile(script: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STEPS", "1000")
    assert main(["run", *PEAKS, "--exit-after-profile", str(script), "ok"]) == 0
    runs = list((tmp_path / "roofscope-out").iterdir())
    # roofscope-out/<script stem>-<YYYYmmdd-HHMMSS>
    assert len(runs) == 1 and runs[0].name.startswith("train-") and len(runs[0].name) == len("train-") + 15
    meta = _meta(runs[0])
    # Stopped at the sixth boundary, not after 1000 steps.
    assert meta["exit_status"]["reason"] == "stopped" and meta["steps"]["boundaries_seen"] == 6


def test_explicit_steps_still_record_the_optimizer(tmp_path: Path) -> None:
    # prof.step() marks the boundaries, so the optimizer's step() is no boundary; its facts are still
    # kept, since MFU from tokens needs the parameter count: Linear(16, 16) = 16*16 + 16 = 272.
    model = torch.nn.Linear(16, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 16)
    with roofscope.profile(steps=2, settle=0, wait=0, warmup=1, out=tmp_path / "p", peak_tflops=1, peak_bandwidth_gbs=10,
                           quiet=True, report=False) as prof:
        for _ in range(6):
            prof.step()  # before the optimizer's first step(), which therefore never marks a boundary
            model(x).square().mean().backward()
            opt.step()
            opt.step()   # twice per iteration: counted as boundaries, this would end profiling early
    meta = _meta(tmp_path / "p")
    # All six prof.step() calls are boundaries (the ones after the profile timed only); no optimizer step is.
    assert meta["steps"]["source"] == "explicit" and meta["steps"]["boundaries_seen"] == 6
    assert meta["optimizer"] == {"class": "SGD", "tensors": 2, "params": 272, "fused": None, "foreach": None,
                                 "groups": [{"tensors": 2, "numel": 272, "itemsize": 4}]}


def test_the_first_summary_names_the_recorded_steps_as_a_reanalysis_does(script: Path, tmp_path: Path) -> None:
    # run.json gains steps.recorded after the first analysis; the summary written then says the same
    # (wait 1 + warmup 2: steps 3, 4, 5 recorded), so re-analyzing the Run changes nothing there.
    out = tmp_path / "run"
    assert main(["run", "-o", str(out), *PEAKS, "--no-report", "-q", str(script)]) == 0
    first = json.loads((out / "summary.json").read_text())
    assert first["steps"] == [3, 4, 5] and first["run"]["steps"]["recorded"] == [3, 4, 5]
    assert _meta(out)["steps"]["recorded"] == [3, 4, 5]
    again = roofscope.analyze(out).to_dict()
    assert again["run"]["steps"] == first["run"]["steps"]


def test_a_model_the_program_drops_is_freed_then_not_when_the_profile_stops(tmp_path: Path) -> None:
    # roofscope watched the first module called (the root) through a strong reference, so a model the program
    # had dropped lived until the profile stopped and died inside roofscope's own code: a DDP model's gloo group
    # then tore down while its worker thread waited for the GIL, and the rank hung. Held weakly, it dies when the
    # program drops it, as without roofscope; run.json still names it.
    import gc
    import weakref

    def train() -> weakref.ref:
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(4):
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
            opt.zero_grad()
        return weakref.ref(model)

    with roofscope.profile(steps=1, settle=0, wait=0, warmup=0, out=tmp_path / "p", peak_tflops=1,
                           peak_bandwidth_gbs=10, quiet=True):
        model = train()
        gc.collect()
        assert model() is None
    assert _meta(tmp_path / "p")["program"]["root_module"] == "Sequential"


def test_a_child_the_steps_call_directly_is_named_with_its_holder(tmp_path: Path) -> None:
    # A LightningModule's training_step calls self.body, never its own forward: the fix must compile the child
    # (diagnose/fixes.compile_code), so run.json names the module holding it and the attribute.
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())

    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with roofscope.profile(steps=1, settle=0, wait=0, warmup=0, out=tmp_path / "held", peak_tflops=1,
                           peak_bandwidth_gbs=10, quiet=True):
        for _ in range(4):
            net.body(torch.randn(4, 8)).sum().backward()
            opt.step()
            opt.zero_grad()
    program = _meta(tmp_path / "held")["program"]
    assert (program["root_module"], program["root_owner"], program["root_attr"]) == ("Sequential", "Net", "body")
    # Called as the program's own object, with no module holding the one called: no holder.
    free = torch.nn.Linear(8, 8)
    with roofscope.profile(steps=1, settle=0, wait=0, warmup=0, out=tmp_path / "free", peak_tflops=1,
                           peak_bandwidth_gbs=10, quiet=True):
        for _ in range(4):
            free(torch.randn(4, 8)).sum().backward()
            opt.step()
    assert "root_owner" not in _meta(tmp_path / "free")["program"]


@pytest.mark.parametrize("ending, code", [("", 0), ("sys.exit(3)", 3), ("raise ValueError('boom')", 1)])
def test_the_scripts_globals_live_until_the_interpreter_exits_as_in_a_plain_run(tmp_path: Path, ending: str,
                                                                                code: int) -> None:
    # A plain run keeps __main__'s globals until the interpreter exits. Freed as soon as runpy returned, a DDP
    # model's gloo group was destroyed holding the GIL while its worker thread waited for it: the rank hung
    # (tests/test_gloo_ranks.py on a 2-core machine). The globals outlive the script however it ends.
    import gc

    from roofscope.collectors import script as runner

    script = tmp_path / "s.py"
    script.write_text("import sys\nclass Model:\n    path = sys.argv[1]\n    def __del__(self):\n"
                      f"        open(self.path, 'w').close()\nmodel = Model()\n{ending}\n")
    freed = tmp_path / "freed"
    kept = len(runner._SCRIPT_GLOBALS)
    try:
        outcome = runner.run_target(str(script), [str(freed)])
        assert outcome.code == code
        gc.collect()
        assert not freed.exists()
        assert type(runner._SCRIPT_GLOBALS[-1]["model"]).__name__ == "Model"
    finally:
        del runner._SCRIPT_GLOBALS[kept:]
    gc.collect()   # the script's functions and its globals hold each other
    assert freed.exists()   # dropped with them
