"""`--step-on __main__.FUNC`: a step per call of the script's own function, wrapped right after the
statement that defines it (collectors/steps.py, collectors/loops/); without --step-on, the script's own
loop is the step (collectors/loops/tracker.py), also in a program that imported torch.compile's Dynamo."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from roofscope.cli import main
from roofscope.collectors.steps import check_script_step_on, direct_forward_calls
from roofscope.errors import RoofscopeError

PEAKS = ["--peak-tflops", "1", "--peak-bandwidth", "10", "--settle", "0"]

LOOP = textwrap.dedent('''
    import time

    import torch


    def add(x, y):
        return (x + y).relu().sum()


    def report(v):
        return float(v)


    class Runner:
        def step(self, x):
            return add(x, x)


    def main():
        x = torch.randn(64, 64)
        for _ in range(12):
            report(add(x, x))
            time.sleep(0.03)


    if __name__ == "__main__":
        main()
        r = Runner()
        for _ in range(5):
            r.step(torch.ones(4))
''')


@pytest.fixture
def script(tmp_path: Path) -> Path:
    p = tmp_path / "loop.py"
    p.write_text(LOOP)
    return p


def test_direct_forward_calls_are_the_scripts_own_calls_inside_loops(tmp_path: Path) -> None:
    # what the messages name when module hooks saw fewer forwards than the decode made: model.forward(...)
    # in a loop (line 4), not the one outside any loop (line 2)
    p = tmp_path / "decode.py"
    p.write_text("import torch\nmodel.forward(x)\nfor t in range(3):\n    y = model.forward(y)\n    z = model(y)\n")
    assert direct_forward_calls(p) == [("model.forward", 4)]
    bad = tmp_path / "bad.py"
    bad.write_text("def (:\n")
    assert direct_forward_calls(bad) == [] and direct_forward_calls(None) == []


def test_a_script_target_is_checked_before_anything_runs(script: Path) -> None:
    check_script_step_on("__main__.add", script)
    check_script_step_on("__main__.Runner.step", script)
    check_script_step_on("forward", script)       # not a script target: nothing to check
    with pytest.raises(RoofscopeError, match=r"loop.py defines no function or class 'ad' at its top level"):
        check_script_step_on("__main__.ad", script)
    with pytest.raises(RoofscopeError, match=r"class Runner of loop.py defines no method 'stop'"):
        check_script_step_on("__main__.Runner.stop", script)
    # FILE:LINE names a loop: line 22 is main()'s `for`, line 23 its body
    check_script_step_on(f"{script}:22", script)
    with pytest.raises(RoofscopeError, match=r"--step-on .*loop.py:23: line 23 of loop.py starts no for or while loop"):
        check_script_step_on(f"{script}:23", script)
    with pytest.raises(RoofscopeError, match=r"no such file"):
        check_script_step_on("nope.py:3", script)


def test_step_on_a_function_of_the_script_counts_its_calls(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["run", "-o", str(out), *PEAKS, "--step-on", "__main__.add", "-q", str(script)]) == 0
    steps = json.loads((out / "run.json").read_text())["steps"]
    # add() runs 12 times in main()'s loop and 5 times through Runner.step: 17 calls, every one counted
    # (add is wrapped right after its def, before main() runs)
    assert steps["source"] == "function" and steps["boundaries_seen"] == 17
    assert steps["recorded"] == [3, 4, 5]   # after 1 wait and 2 warm-up steps
    # the script's function is the script's again afterwards: nothing of roofscope's is left in __main__
    method = tmp_path / "method"
    assert main(["run", "-o", str(method), *PEAKS, "--step-on", "__main__.Runner.step", "-q", str(script)]) == 0
    assert json.loads((method / "run.json").read_text())["steps"]["boundaries_seen"] == 5


def test_without_flags_the_scripts_loop_is_the_step(script: Path, tmp_path: Path) -> None:
    # main()'s `for _ in range(12)` (line 22): each iteration 30 ms of sleep around add() and report(); the
    # loop is the step once 4 iterations were seen (3 timed in a row), so 12 - 4 = 8 boundaries. The later
    # loop over Runner.step (5 short iterations) never ran longer than it: it does not take the steps over.
    out = tmp_path / "run"
    assert main(["run", "-o", str(out), *PEAKS, "-q", str(script)]) == 0
    steps = json.loads((out / "run.json").read_text())["steps"]
    assert (steps["source"], steps["step_on"], steps["boundaries_seen"]) == ("loop", f"{script}:22", 8)
    loop = steps["loop"]
    assert (loop["line"], loop["text"], loop["function"], loop["role"]) == (22, "for _ in range(12)", "main", "step")
    assert loop["outer"] == [] and steps["recorded"] == [3, 4, 5]
    st = json.loads((out / "summary.json").read_text())["step_time"]
    assert 0.03 <= st["unprofiled_median_s"] < 0.045


def test_cli_subprocess_refuses_a_name_the_script_does_not_define(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "roofscope", "run", "-o", str(out), *PEAKS, "--step-on",
                        "__main__.nope", str(script)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr and not out.exists()
    assert r.stderr.strip().splitlines() == [
        "roofscope: error: --step-on __main__.nope: loop.py defines no function or class 'nope' at its top level"]
    r = subprocess.run([sys.executable, "-m", "roofscope", "run", "-o", str(out), *PEAKS, "--step-on",
                        "__main__.add", "-q", str(script)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "run.json").read_text())["steps"]["boundaries_seen"] == 17


@pytest.mark.gpu
def test_step_on_a_script_function_records_its_kernels_on_the_gpu(tmp_path: Path) -> None:
    # The script's loop calls step() 30 times, each launching a matmul and a tanh on the GPU; with
    # --step-on __main__.step the profile is steps 3-5 (1 wait, 2 warm-up) of those calls
    script = tmp_path / "cuda_loop.py"
    script.write_text("import torch\n\ndef step(x):\n    return torch.tanh(x @ x)\n\n"
                      "x = torch.randn(1024, 1024, device='cuda')\nfor _ in range(30):\n    x = step(x)\n"
                      "torch.cuda.synchronize()\n")
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "roofscope", "run", "-o", str(out), "--no-report", "--settle", "0",
                        "--step-on", "__main__.step", str(script)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    steps = json.loads((out / "run.json").read_text())["steps"]
    assert steps["source"] == "function" and steps["boundaries_seen"] == 30 and steps["recorded"] == [3, 4, 5]
    import roofscope

    k = roofscope.analyze(out).kernels
    k = k[k["cat"] == "kernel"]
    # one matmul and one tanh a step: 3 GEMMs of 2 * 1024^3 FLOPs
    assert (k["op_name"] == "aten::tanh").sum() == 3
    assert k.loc[k["op_name"] == "aten::mm", "flops"].sum() == pytest.approx(3 * 2 * 1024 ** 3)


def test_a_program_that_imported_dynamo_steps_on_its_loop(script: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    # A program that imported Dynamo gets no step-less window (collectors/windows.py); its loop is the step all
    # the same, and nothing says it compiles
    from roofscope.collectors import windows

    monkeypatch.setattr(windows, "dynamo_imported", lambda: True)
    out = tmp_path / "run"
    assert main(["run", "-o", str(out), *PEAKS, "-q", str(script)]) == 0
    steps = json.loads((out / "run.json").read_text())["steps"]
    assert (steps["source"], steps["step_on"], steps["recorded"]) == ("loop", f"{script}:22", [3, 4, 5])
    assert "compiles" not in capsys.readouterr().err


def test_the_first_automatic_step_source_is_the_only_one() -> None:
    from roofscope.collectors.session import StepRule

    # the script's loop and the forwards it makes: the first of them is the only one
    rule = StepRule()
    assert rule.automatic("loop") and not rule.automatic("forward") and rule.automatic("loop")
    rule = StepRule()
    assert rule.automatic("forward") and not rule.automatic("function")
    # the loop tracker hands over the loop where forwards came less than once an iteration: it takes over
    assert rule.loop() and rule.source == "loop" and not rule.automatic("forward")
    # never once an optimizer or roofscope.step() came
    rule = StepRule()
    assert rule.explicit() and not rule.loop()
    # --step-on forces its one kind, as before
    rule = StepRule("__main__.f")
    assert rule.automatic("function")


def test_an_optimizer_still_ends_the_steps_of_a_compiling_program(tmp_path: Path, monkeypatch, capsys) -> None:
    # The optimizer's steps end the steps from the first one on: the script's loop, found after three
    # iterations, is not taken for the step
    from roofscope.collectors import windows

    monkeypatch.setattr(windows, "dynamo_imported", lambda: True)
    s = tmp_path / "train.py"
    s.write_text(textwrap.dedent('''
        import time
        import torch

        def batch():
            return torch.randn(8, 16)

        model = torch.nn.Linear(16, 16)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        time.sleep(0.05)
        for i in range(10):
            model(batch()).square().mean().backward()
            opt.step()
            opt.zero_grad()
    '''))
    out = tmp_path / "run"
    assert main(["run", "-o", str(out), *PEAKS, "-q", str(s)]) == 0
    steps = json.loads((out / "run.json").read_text())["steps"]
    assert (steps["source"], steps["step_on"], steps["boundaries_seen"]) == ("optimizer", None, 10)
    assert "loop" not in steps and "compiles" not in capsys.readouterr().err


def test_the_file_run_as_main_is_known_for_modules_and_packages(tmp_path: Path, monkeypatch) -> None:
    from roofscope.collectors.script import check_target

    # `roofscope run -m pkg` runs pkg/__main__.py: found without importing pkg (its __init__ would run
    # before the profile); --step-on __main__.FUNC is checked against that file
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("raise RuntimeError('imported too early')\n")
    (tmp_path / "pkg" / "__main__.py").write_text("def work():\n    pass\n\nfor _ in range(3):\n    work()\n")
    (tmp_path / "mod.py").write_text("x = 1\n")
    monkeypatch.chdir(tmp_path)
    main_file = check_target("pkg", True)
    assert main_file == (tmp_path / "pkg" / "__main__.py").resolve()
    check_script_step_on("__main__.work", main_file)
    assert check_target("mod", True) == (tmp_path / "mod.py").resolve()
    assert check_target(str(tmp_path / "mod.py"), False) == (tmp_path / "mod.py").resolve()
