"""Never lose a profile (issue 27): a profiled program's life and roofscope's own, end to end.

Subprocesses of `python -m roofscope run` on tiny CPU scripts for what only a real process shows
(fork, signals, exit codes); in-process calls for the rest. `--peak-*` flags skip the CPU ceiling
measurement. The window "roofscope is analyzing" is made deterministic without a test hook: a
`--formulas` file gives aten::addmm (the Linear layer's op) a formula that announces itself in a
file and sleeps, and the formulas run in the analysis only.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import roofscope
from roofscope.cli import main
from roofscope.errors import RoofscopeError
from roofscope.run import new_meta, write_run
from roofscope.run.directory import CLAIM_FILE
from roofscope.run.layout import MANIFEST_FILE

PEAKS = ["--peak-tflops", "1", "--peak-bandwidth", "10"]
RUN = [*PEAKS, "--settle", "0"]  # these tests count the schedule's steps exactly

# 8 optimizer steps: wait 1 + warmup 2 + active 3 records steps 3, 4, 5. argv[1] picks a mode.
TRAIN = textwrap.dedent('''
    import os, pathlib, sys, time
    import torch
    here = pathlib.Path(__file__).parent
    (here / "ran").write_text("yes")
    mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
    device = os.environ.get("DEVICE", "cpu")
    model = torch.nn.Linear(16, 16).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 16, device=device)
    for i in range(8):
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
        if mode == "fork" and i == 2:
            pid = os.fork()
            if pid == 0:
                import signal
                signal.alarm(200)   # hang guard: a child stuck in its exit does not outlive the test
                print("CHILD", os.getpid(), flush=True)
                sys.exit(5)
            print("CHILD EXIT", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
        if mode == "hold" and i == 4:
            (here / "holding").write_text("yes")
            while not (here / "go").exists():
                time.sleep(0.05)
        if mode == "hup" and i == 3:     # a hang-up (the terminal closed, a batch system's notice) at step 4
            import signal
            os.kill(os.getpid(), signal.SIGHUP)
        if mode == "steal" and i == 4:   # something else takes the output path while the script runs
            import shutil
            out = pathlib.Path(sys.argv[2])
            shutil.rmtree(out)
            out.write_text("not yours")
    if mode == "osexit":
        os._exit(4)
''')

# A formula for aten::addmm that says the analysis has started, then keeps it busy.
SLOW_FORMULA = textwrap.dedent('''
    import pathlib, time
    import roofscope

    def addmm(bias, a, b, *rest):
        pathlib.Path({marker!r}).write_text("analyzing")
        time.sleep(60)
        return 2 * a[0] * a[1] * b[1]

    roofscope.register_formula("aten::addmm", addmm, category="gemm", replace=True)
''')


@pytest.fixture
def script(tmp_path: Path) -> Path:
    p = tmp_path / "train.py"
    p.write_text(TRAIN)
    return p


def _env(tmp_path: Path, device: str = "cpu") -> dict[str, str]:
    """The subprocess's temporary files under tmp_path, where the test can look for leftovers."""
    tmp = tmp_path / "tmpdir"
    tmp.mkdir(exist_ok=True)
    return {**os.environ, "TMPDIR": str(tmp), "DEVICE": device}


def _cli(*args: str, tmp_path: Path, timeout: float = 180, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "roofscope", *args], capture_output=True, text=True,
                          timeout=timeout, env=_env(tmp_path), **kw)


def _wait_for(path: Path, proc: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert path.exists(), proc.communicate()[1]


def _hidden(folder: Path) -> list[str]:
    """Hidden leftovers: a Run's manifest is no leftover."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") and p.name != MANIFEST_FILE)


# -- 27.1: a forked child leaves the parent's session alone ---------------------------------------

@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_forked_child_exiting_through_sys_exit_neither_hangs_nor_writes(script: Path, tmp_path: Path,
                                                                       device: str) -> None:
    out = tmp_path / "run"
    # Before the fix the child deadlocked in its exit (and wrote its own Run first): the timeout guards.
    # On CUDA the parent also runs the NVML sampler's thread and CUPTI when it forks.
    res = subprocess.run([sys.executable, "-m", "roofscope", "run", "-o", str(out), *RUN, str(script), "fork"],
                         capture_output=True, text=True, timeout=240, env=_env(tmp_path, device))
    assert res.returncode == 0, res.stderr
    # The child ended with its own code, as under python, and printed nothing of roofscope's.
    assert "CHILD EXIT 5" in res.stdout
    assert res.stdout.count("run:    ") == 1 and "Traceback" not in res.stderr
    meta = json.loads((out / "run.json").read_text())
    assert meta["exit_status"]["reason"] == "ok"
    # The parent's trace survived the child (its temporary directory was not removed by the child):
    # 8 optimizer steps, the schedule's steps 3, 4 and 5 recorded.
    assert meta["steps"]["recorded"] == [3, 4, 5]
    assert (out / "summary.json").exists() and not (out / CLAIM_FILE).exists()
    assert not list((tmp_path / "tmpdir").glob("roofscope-*"))   # the session's temporary files are gone


FORK_IN_PROFILE = textwrap.dedent('''
    import os, sys
    import torch
    import roofscope

    model = torch.nn.Linear(8, 8)
    pid = None
    with roofscope.profile(steps=2, settle=0, wait=0, warmup=0, out=sys.argv[1], peak_tflops=1, peak_bandwidth_gbs=10,
                           quiet=True) as prof:
        for i in range(4):
            model(torch.randn(4, 8))
            prof.step()
            if i == 0:
                pid = os.fork()
                if pid == 0:
                    break          # the child leaves the block: it must not end the parent's profile
                print("CHILD EXIT", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
    if pid == 0:
        # Not sys.exit: a forked child's C++ exit hangs in Kineto's destructors, with torch.profiler too.
        os._exit(7)
    print("RUN", prof.run_dir, prof.analysis is not None)
''')


def test_forked_child_leaving_a_profile_block_leaves_it_to_the_parent(tmp_path: Path) -> None:
    script, out = tmp_path / "lib.py", tmp_path / "run"
    script.write_text(FORK_IN_PROFILE)
    res = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True, timeout=180,
                         env=_env(tmp_path))
    assert res.returncode == 0, res.stderr
    assert "CHILD EXIT 7" in res.stdout and f"RUN {out} True" in res.stdout
    # Two boundaries make the two active steps: the parent's, not cut short by the child.
    assert json.loads((out / "run.json").read_text())["steps"]["recorded"] == [0, 1]


# -- 27.2: a signal after the script ended skips the analysis, never the data ----------------------

@pytest.mark.parametrize("sig, code, device", [(signal.SIGINT, 130, "cpu"), (signal.SIGTERM, 143, "cpu"),
                                               pytest.param(signal.SIGTERM, 143, "cuda", marks=pytest.mark.gpu)])
def test_signal_during_analysis_keeps_the_recorded_run(script: Path, tmp_path: Path, sig: int, code: int,
                                                       device: str) -> None:
    out, marker = tmp_path / "run", tmp_path / "analyzing"
    formulas = tmp_path / "slow_formulas.py"
    formulas.write_text(SLOW_FORMULA.format(marker=str(marker)))
    proc = subprocess.Popen([sys.executable, "-m", "roofscope", "run", "-o", str(out), *RUN, "--formulas",
                             str(formulas), str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env(tmp_path, device))
    _wait_for(marker, proc)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stderr
    assert f"analyze it later with `roofscope analyze {out}`" in stderr and "Traceback" not in stderr
    # The recorded data is kept whole; what the analysis would have added is not there.
    meta = json.loads((out / "run.json").read_text())
    # all 8 optimizer steps are boundaries (the ones after the profile timed only)
    assert meta["exit_status"]["reason"] == "ok" and meta["steps"]["boundaries_seen"] == 8
    assert (out / "trace.json.gz").stat().st_size > 0 and not (out / "summary.json").exists()
    assert _hidden(out) == [] and _hidden(tmp_path) == []
    assert not list((tmp_path / "tmpdir").glob("roofscope-*"))   # no trace left behind in $TMPDIR
    # ... and analyzes later, as said.
    assert main(["analyze", str(out), *PEAKS, "-q"]) == 0


def test_a_signal_that_skips_nothing_is_delivered_again() -> None:
    from roofscope.collectors.lifecycle import Guard, Interrupted

    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        with Guard(redeliver=True) as g:
            with g.armed():
                pass                              # the analysis ended: a signal waits for the end
            signal.raise_signal(signal.SIGINT)
            assert g.unhandled == signal.SIGINT
    with pytest.raises(KeyboardInterrupt):
        with Guard(redeliver=True) as g:
            with pytest.raises(Interrupted), g.armed():   # the first one skips the analysis...
                signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)    # ... a second one is Ctrl-C as usual, at the end
    assert signal.getsignal(signal.SIGINT) is before


def test_an_interrupt_python_swallows_still_skips_the_analysis(capsys) -> None:
    import weakref

    from roofscope.collectors.lifecycle import Guard, Interrupted

    class Thing:
        pass

    # The sweep found it: a signal whose handler ran inside a weakref callback raised Interrupted there,
    # Python printed "Exception ignored in: <function WeakSet...>" and the analysis went on to the end.
    ran_on = []
    with Guard() as g:
        with pytest.raises(Interrupted), g.armed():
            thing = Thing()
            ref = weakref.ref(thing, lambda _: signal.raise_signal(signal.SIGINT))
            del thing               # the callback runs here, and the handler inside it
            ran_on.append(ref() is None)
    assert ran_on == [True] and g.received == signal.SIGINT
    assert "Exception ignored" not in capsys.readouterr().err


SIGNAL_IN_WRITE = textwrap.dedent('''
    import os, signal, sys
    import torch
    import roofscope
    import roofscope.pipeline as pipeline

    real = pipeline.write_run

    def write_run(*args, **kwargs):       # SIGTERM lands while the Run is being written
        os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    pipeline.write_run = write_run
    model = torch.nn.Linear(8, 8)
    with roofscope.profile(steps=1, settle=0, wait=0, warmup=0, out=sys.argv[1], peak_tflops=1, peak_bandwidth_gbs=10,
                           quiet=True) as prof:
        for _ in range(3):
            model(torch.randn(4, 8))
            prof.step()
    print("INTERRUPTED", prof.result.interrupted, "RESULT", prof.analysis)
''')


def test_sigterm_during_the_write_keeps_a_whole_run(tmp_path: Path) -> None:
    script, out = tmp_path / "lib.py", tmp_path / "run"
    script.write_text(SIGNAL_IN_WRITE)
    res = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True, timeout=180,
                         env=_env(tmp_path))
    # Before: killed by the signal (-15), no Run, an empty hidden .run.xxxx/ beside it.
    assert res.returncode == 0, res.stderr
    assert f"INTERRUPTED {int(signal.SIGTERM)} RESULT None" in res.stdout
    assert "roofscope: SIGTERM received: the recorded profile is being written; stopping right after" in res.stderr
    assert "interrupted (SIGTERM) before the analysis ended" in res.stderr
    # One active step: the first prof.step() ends it (and the recording); the other two are timed only.
    assert json.loads((out / "run.json").read_text())["steps"]["boundaries_seen"] == 3
    assert (out / "trace.json.gz").exists() and _hidden(tmp_path) == [] and _hidden(out) == []


# -- 27.3: output errors show before the script runs; a failed write is rescued --------------------

def test_unwritable_output_fails_before_the_script_runs(script: Path, tmp_path: Path, capsys) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert main(["run", "-o", str(blocker / "run"), *RUN, str(script)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"roofscope: error: cannot write the Run to {blocker / 'run'}: Not a directory")
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "ran").exists()


def test_read_only_output_fails_before_the_script_runs(script: Path, tmp_path: Path) -> None:
    if os.geteuid() == 0:   # root writes through permission bits: /sys refuses even root
        target = Path("/sys/roofscope-lifecycle-test")
        if not Path("/sys").is_dir() or target.exists():
            pytest.skip("no read-only place to write to")
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        target = ro / "run"
    res = _cli("run", "-o", str(target), *RUN, str(script), tmp_path=tmp_path)
    assert res.returncode == 2, res.stderr
    assert f"roofscope: error: cannot write the Run to {target}" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "ran").exists()


def test_dot_with_force_is_one_line_not_a_traceback(script: Path, tmp_path: Path) -> None:
    res = _cli("run", "-o", ".", "--force", *RUN, str(script), tmp_path=tmp_path, cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip() == ("roofscope: error: . is the current directory or one above it; choose a new"
                                  " directory for the Run, e.g. -o runs/NAME")
    assert not (tmp_path / "ran").exists() and script.exists()


def test_output_taken_while_the_script_ran_is_rescued(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = _cli("run", "-o", str(out), *RUN, str(script), "steal", str(out), tmp_path=tmp_path)
    assert res.returncode == 0, res.stderr            # the script's code, not roofscope's 2
    assert out.read_text() == "not yours"             # what took the path is left alone
    rescued = list((tmp_path / "tmpdir").glob("roofscope-rescue-train-*"))
    assert len(rescued) == 1
    assert f"could not write the Run to {out}" in res.stderr and f"saved to {rescued[0]} instead" in res.stderr
    assert json.loads((rescued[0] / "run.json").read_text())["steps"]["recorded"] == [3, 4, 5]
    assert (rescued[0] / "summary.json").exists()


def test_profile_refuses_unwritable_out_before_the_block_and_never_masks_the_users_error(
        tmp_path: Path, monkeypatch) -> None:
    import tempfile

    import torch

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    ran = []
    with pytest.raises(RoofscopeError, match="cannot write the Run to .*: Not a directory"):
        with roofscope.profile(steps=1, settle=0, wait=0, warmup=0, out=blocker / "run", peak_tflops=1,
                               peak_bandwidth_gbs=10, quiet=True):
            ran.append(True)
    assert ran == []
    # The output taken inside the block: the user's ValueError comes out, the Run goes to a rescue folder.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    out = tmp_path / "run"
    prof = roofscope.profile(steps=1, settle=0, wait=0, warmup=0, out=out, peak_tflops=1, peak_bandwidth_gbs=10, quiet=True)
    with pytest.raises(ValueError, match="the user's own"):
        with prof:
            torch.nn.Linear(4, 4)(torch.randn(2, 4))
            prof.step()
            shutil.rmtree(out)
            out.write_text("not yours")
            raise ValueError("the user's own")
    assert prof.run_dir is not None and prof.run_dir.name.startswith("roofscope-rescue-")
    assert out.read_text() == "not yours"


def test_nowhere_to_write_keeps_the_recorded_trace(tmp_path: Path, monkeypatch) -> None:
    import torch

    import roofscope.pipeline as pipeline

    def full_disk(out, **kwargs):
        raise OSError(28, "No space left on device", str(out))

    monkeypatch.setattr(pipeline, "write_run", full_disk)
    with pytest.raises(RoofscopeError, match="neither .*/run \\(No space left on device\\) nor a rescue directory"
                                             " \\(No space left on device\\) took it; the recorded trace is kept"
                                             " in ") as e:
        with roofscope.profile(steps=1, settle=0, wait=0, warmup=0, out=tmp_path / "run", peak_tflops=1,
                               peak_bandwidth_gbs=10, quiet=True) as prof:
            torch.nn.Linear(4, 4)(torch.randn(2, 4))
            prof.step()
    kept = Path(str(e.value).rsplit(" ", 1)[1])
    assert json.loads((kept / "trace.json").read_text())["traceEvents"]
    shutil.rmtree(kept)


def test_counters_asks_at_a_terminal(tmp_path: Path, monkeypatch, capsys) -> None:
    import io

    from roofscope.collectors.counters import ncu

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    run = _foreign_run(tmp_path, "elsewhere")
    monkeypatch.setenv(ncu.NCU_ENV, str(tmp_path / "no-ncu"))
    monkeypatch.setattr(sys, "stdin", Terminal("n\n"))
    assert main(["counters", str(run)]) == 2
    err = capsys.readouterr().err
    assert "roofscope run train.py --lr 1\nRun it under ncu? [y/N]" in err
    assert err.rstrip().endswith("the recorded command was not run (not confirmed)")
    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
    assert main(["counters", str(run)]) == 2
    assert "no-ncu is not an executable" in capsys.readouterr().err


# -- 27.4: --force replaces only a Run or an empty folder ------------------------------------------

def test_force_never_deletes_a_folder_that_is_not_a_run(script: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("mine")
    (project / "run.json").write_text('{"not": "ours"}')   # a file of that name is not a Run
    res = _cli("run", "-o", str(project), "--force", *RUN, str(script), tmp_path=tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip().endswith("--force replaces only a Run or an empty directory; choose another output"
                                       " directory")
    assert (project / "notes.txt").read_text() == "mine" and not (tmp_path / "ran").exists()


def test_force_replaces_a_run_and_an_empty_folder(tmp_path: Path, capsys) -> None:
    from roofscope.run.directory import claim_output

    old = tmp_path / "old"
    write_run(old, meta=new_meta(["roofscope", "run", "x.py"]), trace=b'{"traceEvents": []}')
    empty = tmp_path / "empty"
    empty.mkdir()
    for target in (old, empty):
        claim = claim_output(target, force=True)
        assert json.loads((target / CLAIM_FILE).read_text())["pid"] == os.getpid()
        claim.release()
        assert not (target / CLAIM_FILE).exists()
    assert (old / "run.json").exists()   # claiming alone replaces nothing


# -- 27.5: one output, one run ---------------------------------------------------------------------

def test_second_run_into_a_claimed_output_is_refused_before_its_script(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "roofscope", "run", "-o", str(out), *RUN, str(script), "hold"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path))
    try:
        _wait_for(tmp_path / "holding", first)
        (tmp_path / "ran").unlink()
        for extra in ([], ["--force"]):
            res = _cli("run", "-o", str(out), *extra, *RUN, str(script), tmp_path=tmp_path)
            assert res.returncode == 2
            assert res.stderr.strip() == (f"roofscope: error: {out} is being written by another roofscope (pid"
                                          f" {first.pid} on {os.uname().nodename}); choose another output directory")
            assert not (tmp_path / "ran").exists()
    finally:
        (tmp_path / "go").write_text("go")
    _, stderr = first.communicate(timeout=180)
    assert first.returncode == 0, stderr
    assert json.loads((out / "run.json").read_text())["steps"]["recorded"] == [3, 4, 5]
    assert not (out / CLAIM_FILE).exists()


def test_default_output_taken_by_a_concurrent_run_moves_to_the_next_name(tmp_path: Path, monkeypatch) -> None:
    import torch

    import roofscope.run.directory as directory

    real, taken = directory.claim_output, []

    def first_taken(out, force):       # a run started in the same second claimed the same default name
        if not taken:
            taken.append(Path(out))
            real(out, force)
            raise directory.OutputBusyError(f"{out} is being written by another roofscope")
        return real(out, force)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(directory, "claim_output", first_taken)
    with roofscope.profile(steps=1, settle=0, wait=0, warmup=0, name="job", peak_tflops=1, peak_bandwidth_gbs=10,
                           quiet=True) as prof:
        torch.nn.Linear(4, 4)(torch.randn(2, 4))
        prof.step()
    assert prof.run_dir == taken[0].with_name(taken[0].name + "-2")
    assert (tmp_path / prof.run_dir / "run.json").exists()


def test_a_dead_runs_claim_is_taken_over(tmp_path: Path) -> None:
    from roofscope.run.directory import claim_output

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    out = tmp_path / "run"
    out.mkdir()
    (out / CLAIM_FILE).write_text(json.dumps({"pid": int(dead.stdout), "host": os.uname().nodename}))
    claim = claim_output(out, force=False)   # its empty folder too, without --force
    assert claim.held()
    with pytest.raises(RoofscopeError, match=f"being written by another roofscope \\(pid {os.getpid()}"):
        claim_output(out, force=True)
    claim.release()
    assert out.exists()   # not created by this claim: left in place


# -- 27.14: counters and formulas ------------------------------------------------------------------

def _foreign_run(tmp_path: Path, host: str | None) -> Path:
    meta = new_meta(["roofscope", "run", "train.py", "--lr", "1"], cwd=str(tmp_path),
                    steps={"requested": {"wait": 1, "warmup": 1, "active": 2}})
    if host is None:
        del meta["environment"]["hostname"]
    else:
        meta["environment"]["hostname"] = host
    return write_run(tmp_path / "run", meta=meta, trace=b'{"traceEvents": []}').path


@pytest.mark.parametrize("host", ["elsewhere", None])
def test_counters_refuses_another_machines_command_without_yes(tmp_path: Path, host: str | None) -> None:
    run = _foreign_run(tmp_path, host)
    res = _cli("counters", str(run), tmp_path=tmp_path, stdin=subprocess.DEVNULL)
    assert res.returncode == 2
    line = res.stderr.strip()
    assert len(line.splitlines()) == 1 and line.endswith("check it and pass --yes to run it")
    assert f"recorded {'on elsewhere' if host else 'on an unknown machine'}, not on this one" in line
    assert "roofscope run train.py --lr 1" in line


def test_counters_with_yes_goes_on_to_ncu(tmp_path: Path, monkeypatch, capsys) -> None:
    from roofscope.collectors.counters import ncu

    run = _foreign_run(tmp_path, "elsewhere")
    monkeypatch.setenv(ncu.NCU_ENV, str(tmp_path / "no-ncu"))
    assert main(["counters", str(run)]) == 2
    assert "pass --yes" in capsys.readouterr().err
    assert main(["counters", str(run), "--yes"]) == 2
    err = capsys.readouterr().err
    assert "no-ncu is not an executable" in err and "--yes" not in err


def test_formulas_file_calling_sys_exit_is_a_one_line_error(script: Path, tmp_path: Path) -> None:
    bad = tmp_path / "exits.py"
    bad.write_text("import sys\nsys.exit(7)\n")
    res = _cli("run", "-o", str(tmp_path / "run"), *RUN, "--formulas", str(bad), str(script), tmp_path=tmp_path)
    assert res.returncode == 2   # was 7, silently
    assert res.stderr.strip() == f"roofscope: error: --formulas {bad}: called sys.exit(7) while being imported"
    assert not (tmp_path / "ran").exists()


# Optimizer steps, each a step boundary, that the scripts below begin with: 8 are wait 1, warm-up 2 and
# active 3 (steps 3, 4 and 5), then two timed only.
STEPS = textwrap.dedent('''
    import os, signal, sys, time
    import torch
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range({n}):
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
''')


# -- 40.1: whatever ends the script, its Run is written -------------------------------------------

def _leftovers(tmp_path: Path, out: Path) -> list[str]:
    """What a finished profile must not leave: its claim, its recording, a trace in TMPDIR."""
    return ([p.name for p in out.iterdir() if p.name.startswith(".roofscope-") and p.name != MANIFEST_FILE]
            + [p.name for p in (tmp_path / "tmpdir").glob("roofscope-*")])


def test_os_exit_after_the_steps_writes_the_run_and_keeps_the_code(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = _cli("run", "-o", str(out), *RUN, str(script), "osexit", tmp_path=tmp_path)
    # Before: rc 4, but the Run folder held only .roofscope-claim and the trace was left in $TMPDIR/roofscope-*/.
    assert res.returncode == 4, res.stderr
    meta = json.loads((out / "run.json").read_text())
    assert meta["exit_status"] == {"code": 4, "reason": "os._exit", "detail": "os._exit(4)"}
    assert meta["steps"]["recorded"] == [3, 4, 5] and (out / "summary.json").exists()
    assert f"run:    {out}" in res.stdout and "exited with code 4 (os._exit)" in res.stderr
    assert _leftovers(tmp_path, out) == []


OS_EXIT_IN_PROFILE = textwrap.dedent('''
    import os, sys
    import torch
    import roofscope

    model = torch.nn.Linear(8, 8)
    with roofscope.profile(steps=2, settle=0, wait=0, warmup=0, out=sys.argv[1], peak_tflops=1, peak_bandwidth_gbs=10,
                           quiet=True) as prof:
        for i in range(3):
            model(torch.randn(4, 8))
            prof.step()
        os._exit(6)
''')


def test_os_exit_inside_a_profile_block_writes_the_run_first(tmp_path: Path) -> None:
    script, out = tmp_path / "lib.py", tmp_path / "run"
    script.write_text(OS_EXIT_IN_PROFILE)
    res = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True, timeout=180,
                         env=_env(tmp_path))
    assert res.returncode == 6, res.stderr
    meta = json.loads((out / "run.json").read_text())
    assert meta["exit_status"]["reason"] == "os._exit" and meta["steps"]["recorded"] == [0, 1]
    assert _leftovers(tmp_path, out) == []


def test_sighup_at_a_step_writes_the_run(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = _cli("run", "-o", str(out), *RUN, str(script), "hup", tmp_path=tmp_path)
    # Before: killed by the signal (rc -1), the Run folder held only the claim, the trace stayed in /tmp.
    assert res.returncode == 128 + signal.SIGHUP, res.stderr
    meta = json.loads((out / "run.json").read_text())
    assert meta["exit_status"] == {"code": 129, "reason": "terminated", "detail": "SIGHUP"}
    # wait 1 + warmup 2: the hang-up at the 4th boundary ends the script in the first active step
    assert meta["steps"]["boundaries_seen"] == 4 and "the script ended early (SIGHUP)" in res.stderr
    assert (out / "trace.json.gz").stat().st_size > 0 and _leftovers(tmp_path, out) == []


def test_a_hang_up_that_took_the_terminal_keeps_the_run_and_the_exit_code(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "roofscope", "run", "-o", str(out), *RUN, str(script), "hup"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(tmp_path))
    proc.stdout.close()     # the terminal is gone with the hang-up: every line printed fails (EPIPE)
    proc.stderr.close()
    # Before: the summary's first line raised BrokenPipeError out of roofscope (rc 1, the interpreter's 120).
    assert proc.wait(timeout=180) == 128 + signal.SIGHUP
    assert json.loads((out / "run.json").read_text())["exit_status"]["detail"] == "SIGHUP"
    assert _leftovers(tmp_path, out) == []


# A signal that lands right after the script's last line, in roofscope's own code (once in 62 tries it lost the
# Run: "roofscope: interrupted", rc 130, the folder holding only the claim, then a segfault at exit), made
# deterministic: the script leaves a stdout whose flush() sends SIGINT once, and the first flush after the
# script is roofscope's own (the output the script printed goes out before the Run is written).
LATE_SIGNAL = STEPS.format(n=8) + textwrap.dedent('''
    class Stdout:
        def __init__(self, inner):
            self.inner, self.armed = inner, False

        def write(self, text):
            return self.inner.write(text)

        def flush(self):
            if self.armed:
                self.armed = False
                os.kill(os.getpid(), signal.SIGINT)
            self.inner.flush()

    sys.stdout = Stdout(sys.stdout)
    print("last line")
    sys.stdout.armed = True
''')


def test_a_signal_right_after_the_script_never_loses_the_run(tmp_path: Path) -> None:
    script, out = tmp_path / "late.py", tmp_path / "run"
    script.write_text(LATE_SIGNAL)
    res = _cli("run", "-o", str(out), *RUN, str(script), tmp_path=tmp_path)
    assert res.returncode == 130, res.stderr
    assert "roofscope: interrupted\n" not in res.stderr and "Traceback" not in res.stderr
    meta = json.loads((out / "run.json").read_text())
    # The script itself ended well; the signal after it skipped the analysis, said so, and lost nothing:
    # all 8 steps' boundaries, the profile of steps 3, 4 and 5 kept (no summary: its analysis skipped).
    assert meta["exit_status"]["reason"] == "ok" and meta["steps"]["boundaries_seen"] == 8
    assert meta["steps"]["profiled_from"] == 3 and (out / "trace.json.gz").stat().st_size > 0
    assert f"interrupted (SIGINT) before the analysis ended: the recorded profile is kept in {out}" in res.stderr
    assert _leftovers(tmp_path, out) == []
    assert main(["analyze", str(out), *PEAKS, "-q"]) == 0


def test_the_profile_records_inside_its_run_folder_not_in_tmpdir(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "roofscope", "run", "-o", str(out), *RUN, str(script), "hold"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path))
    try:
        _wait_for(tmp_path / "holding", proc)
        # Before: the recording was $TMPDIR/roofscope-*/ (a full TMPDIR: "no trace was recorded", rc 2).
        assert list((tmp_path / "tmpdir").glob("roofscope-*")) == []
        assert [p.name[:len(".roofscope-recording-")] for p in out.glob(".roofscope-recording-*")] \
            == [".roofscope-recording-"]
    finally:
        (tmp_path / "go").write_text("go")
    _, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr
    assert json.loads((out / "run.json").read_text())["steps"]["recorded"] == [3, 4, 5]
    assert _leftovers(tmp_path, out) == []


@pytest.fixture
def tmpfs(tmp_path: Path):
    """A small file system of its own (root and a kernel that lets it mount one), unmounted after."""
    mounted: list[Path] = []

    def make(name: str, size_kb: int, fill_kb: int = 0) -> Path:
        d = tmp_path / name
        d.mkdir()
        if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(d)],
                                               capture_output=True).returncode != 0:
            pytest.skip("cannot mount a tmpfs here")
        mounted.append(d)
        if fill_kb:
            (d / "fill").write_bytes(b"\0" * fill_kb * 1024)
        return d

    yield make
    for d in mounted:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


def test_a_full_tmpdir_costs_no_run(script: Path, tmp_path: Path, tmpfs) -> None:
    # 16 KiB left: enough for Python to accept it as TMPDIR, not for the 100 KiB trace.
    tmp = tmpfs("smalltmp", 64, fill_kb=48)
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-m", "roofscope", "run", "-o", str(out), *RUN, str(script)],
                         capture_output=True, text=True, timeout=180, env={**_env(tmp_path), "TMPDIR": str(tmp)})
    # Before: "no trace was recorded, so no Run was written", rc 2.
    assert res.returncode == 0, res.stderr
    assert json.loads((out / "run.json").read_text())["steps"]["recorded"] == [3, 4, 5]
    assert (out / "report.html").exists() and list(tmp.glob("roofscope-*")) == []


def test_a_full_output_disk_after_the_recorded_data_is_a_warning(script: Path, tmp_path: Path, tmpfs) -> None:
    # 200 KiB: the claim, the 100 KiB recording, trace.json.gz and run.json fit; the 1.2 MB report.html does not.
    disk = tmpfs("disk", 200)
    out = disk / "run"
    res = _cli("run", "-o", str(out), *RUN, str(script), tmp_path=tmp_path)
    # Before: "could not write the Run: [Errno 28] No space left on device", rc 2, the Run's data written whole.
    assert res.returncode == 0, res.stderr
    assert (f"the Run's recorded data is in {out}, but report.html could not be written there (No space left on"
            " device)") in res.stderr
    assert "could not write the Run" not in res.stderr and "report: " not in res.stdout
    assert json.loads((out / "run.json").read_text())["steps"]["recorded"] == [3, 4, 5]
    assert main(["analyze", str(out), *PEAKS, "-q"]) == 0
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST_FILE, "ceilings.json", "run.json", "summary.json",
                                                     "trace.json.gz"]


def test_a_trace_no_disk_takes_is_said_so(script: Path, tmp_path: Path, tmpfs) -> None:
    disk, tmp = tmpfs("disk", 24), tmpfs("smalltmp", 64, fill_kb=48)
    out = disk / "run"
    res = subprocess.run([sys.executable, "-m", "roofscope", "run", "-o", str(out), *RUN, str(script)],
                         capture_output=True, text=True, timeout=180, env={**_env(tmp_path), "TMPDIR": str(tmp)})
    assert res.returncode == 2
    # Kineto says only "Failed to write to log file!" and raises nothing: roofscope names what was lost.
    assert re.search(r"warning: the profiled steps were recorded but their trace could not be written: Kineto could"
                     r" not write \S+/trace\.json \(\d+\.\d MiB free there\)\n", res.stderr), res.stderr
    assert "no trace was recorded, so no Run was written" in res.stderr and "lower --wait" not in res.stderr
    assert not out.exists() and list(tmp.glob("roofscope-*")) == []   # no partial .tmp left either


def test_a_report_the_disk_refuses_keeps_the_scripts_exit_code(script: Path, tmp_path: Path, monkeypatch,
                                                               capsys) -> None:
    import roofscope.pipeline as pipeline

    real = pipeline.add_files

    def full_for_reports(run_dir, files):
        if "report.html" in files:
            raise OSError(28, "No space left on device", str(run_dir))
        return real(run_dir, files)

    monkeypatch.setattr(pipeline, "add_files", full_for_reports)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    out = tmp_path / "run"
    assert main(["run", "-o", str(out), *RUN, str(script)]) == 0
    err = capsys.readouterr().err
    assert "but report.html could not be written there (No space left on device)" in err
    assert (out / "summary.json").exists() and not (out / "report.html").exists()


def test_a_dead_profiles_trace_is_named_at_the_next_use_of_its_folder(tmp_path: Path, capsys) -> None:
    # What a profile killed (SIGKILL, a crash) after its trace was exported leaves: its claim and recording.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    out = tmp_path / "run"
    recording = out / ".roofscope-recording-x1"
    recording.mkdir(parents=True)
    (out / CLAIM_FILE).write_text(json.dumps({"pid": int(dead.stdout), "host": os.uname().nodename}))
    (recording / "trace.json").write_text('{"traceEvents": []}')
    said = (f"a profile recorded {recording / 'trace.json'} but its process ended before writing a Run from it;"
            f" `roofscope analyze {recording / 'trace.json'}` reads it")
    assert main(["analyze", str(out)]) == 2
    assert said in capsys.readouterr().err
    with pytest.raises(RoofscopeError, match="already exists and " + said.replace("(", r"\(").replace(")", r"\)")
                       .replace(".", r"\.")):
        roofscope.profile(out=out, quiet=True).__enter__()
    assert (recording / "trace.json").exists()     # never removed, also not with --force


# -- 40.2: --force replaces roofscope's files, never the user's ------------------------------------

def test_force_keeps_the_users_files_in_an_old_run(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert _cli("run", "-o", str(out), *RUN, str(script), tmp_path=tmp_path).returncode == 0
    (out / "notes.txt").write_text("mine")
    (out / "mydata").mkdir()
    (out / "mydata" / "x.csv").write_text("1,2")
    res = _cli("run", "-o", str(out), "--force", "--no-report", *RUN, str(script), tmp_path=tmp_path)
    assert res.returncode == 0, res.stderr
    # Before: the old Run's directory was replaced whole, notes.txt and mydata/ with it.
    assert (out / "notes.txt").read_text() == "mine" and (out / "mydata" / "x.csv").read_text() == "1,2"
    # The old Run's report.html was roofscope's: gone with it, no stale report beside the new Run.
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST_FILE, "ceilings.json", "mydata", "notes.txt",
                                                     "run.json", "summary.json", "trace.json.gz"]
    assert json.loads((out / MANIFEST_FILE).read_text())["files"] == ["ceilings.json", "run.json", "summary.json",
                                                                     "trace.json.gz"]


def test_force_over_a_run_without_manifest_replaces_only_the_layouts_files(tmp_path: Path) -> None:
    out = tmp_path / "run"
    write_run(out, meta=new_meta(["a"]), trace=b'{"traceEvents": []}', files={"report.html": "old"})
    (out / MANIFEST_FILE).unlink()           # a Run written before the manifest, or copied without it
    (out / "summary.md").write_text("the user's own notes")
    write_run(out, meta=new_meta(["b"]), trace=b'{"traceEvents": []}', force=True)
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST_FILE, "run.json", "summary.md", "trace.json.gz"]
    assert json.loads((out / "run.json").read_text())["command"] == ["b"]


# -- 40.3: a forked child is the script's, not roofscope's ----------------------------------------

FORK_CHECK = textwrap.dedent('''
    import os, signal, sys
    import torch
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(8):
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        if i == 4:
            pid = os.fork()
            if pid == 0:
                names = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM)}
                print("CHILD", {signal.Signals(s).name: h.name if isinstance(h, signal.Handlers) else h.__qualname__
                                for s, h in names.items()}, type(os._exit).__name__, flush=True)
                os._exit(0)
            os.waitpid(pid, 0)
''')


def test_forked_child_gets_the_default_signal_handlers_back(tmp_path: Path) -> None:
    script = tmp_path / "forks.py"
    script.write_text(FORK_CHECK)
    res = _cli("run", "-o", str(tmp_path / "run"), *RUN, str(script), tmp_path=tmp_path)
    assert res.returncode == 0, res.stderr
    # Before: SIGTERM was roofscope's _on_sigterm and SIGALRM the step-less window's alarm in the child too.
    assert ("CHILD {'SIGINT': 'default_int_handler', 'SIGTERM': 'SIG_DFL', 'SIGHUP': 'SIG_DFL', 'SIGALRM': 'SIG_DFL'}"
            " builtin_function_or_method") in res.stdout


# A child stuck in C code never returns to the interpreter, so a Python-level handler never runs: a
# fork-unsafe OpenMP pool does this (torch's matmul in a child forked after the parent's); a mutex locked
# twice does it deterministically.
STUCK_CHILD = STEPS.format(n=6) + textwrap.dedent('''
    import ctypes
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        libc = ctypes.CDLL(None)
        mutex = ctypes.create_string_buffer(64)     # PTHREAD_MUTEX_INITIALIZER is all zeros
        libc.pthread_mutex_lock(mutex)
        os.write(w, b"x")
        libc.pthread_mutex_lock(mutex)              # never returns
    os.read(r, 1)
    os.kill(pid, signal.SIGTERM)                    # what `timeout` sends the whole group
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and os.waitpid(pid, os.WNOHANG) == (0, 0):
        time.sleep(0.05)
    if time.monotonic() >= deadline:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        print("CHILD SURVIVED SIGTERM")
    else:
        print("CHILD ENDED BY SIGTERM")
''')


def test_a_child_stuck_in_c_code_dies_on_sigterm(tmp_path: Path) -> None:
    script = tmp_path / "stuck.py"
    script.write_text(STUCK_CHILD)
    res = _cli("run", "-o", str(tmp_path / "run"), *RUN, str(script), tmp_path=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "CHILD ENDED BY SIGTERM" in res.stdout   # before: it survived, holding its parent's timeout up


POOL = STEPS.format(n=6) + textwrap.dedent('''
    import multiprocessing as mp

    def spin(_):
        while True:        # Python bytecode: a Python-level SIGTERM handler runs at once here
            pass

    pool = mp.get_context("fork").Pool(3)
    pool.map_async(spin, range(3))
    time.sleep(1)
    pool.terminate()       # SIGTERM to every worker
    pool.join()
    print("POOL DONE", flush=True)
''')


def test_pool_workers_end_silently_on_terminate(tmp_path: Path) -> None:
    script = tmp_path / "pool.py"
    script.write_text(POOL)
    res = _cli("run", "-o", str(tmp_path / "run"), *RUN, str(script), tmp_path=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "POOL DONE" in res.stdout
    # Before: each spinning worker printed a roofscope.collectors.script.Terminated traceback.
    assert "Terminated" not in res.stderr and "Traceback" not in res.stderr
