"""`--step-on __main__.FUNC`: a step per call of the script's own function, and the step-less hint
that names the function the script calls in a loop (collectors/steps.py)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from roofscope.cli import main
from roofscope.collectors.steps import check_script_step_on, looped_functions
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


def test_looped_functions_are_the_scripts_own_calls_inside_loops(script: Path, tmp_path: Path) -> None:
    # line 23 `report(add(x, x))`: both in main()'s loop, the outer call first; main() itself is
    # called once (not in a loop), Runner.step through an instance (not a name of the script)
    assert looped_functions(script) == [("report", 23), ("add", 23)]
    other = tmp_path / "other.py"
    other.write_text("import math\nfor i in range(3):\n    def f():\n        pass\n    math.sqrt(i)\n"
                     "while True:\n    g()\n    break\n\ndef g():\n    pass\n")
    # f is defined in the loop, not called by it; math.sqrt is not the script's; g is called at line 7
    assert looped_functions(other) == [("g", 7)]
    # a name bound to torch.compile of the script's function is a function too; a module bound to a
    # name (model = Net()) is not: wrapping it would hide its attributes
    compiled = tmp_path / "compiled.py"
    compiled.write_text("import torch\ndef g(x):\n    return x\nfast = torch.compile(g)\nmodel = torch.nn.Linear(2, 2)\n"
                        "for _ in range(3):\n    model(fast(torch.ones(2)))\n")
    assert looped_functions(compiled) == [("fast", 7)]
    check_script_step_on("__main__.fast", compiled)
    bad = tmp_path / "bad.py"
    bad.write_text("def (:\n")
    assert looped_functions(bad) == [] and looped_functions(None) == []


def test_a_script_target_is_checked_before_anything_runs(script: Path) -> None:
    check_script_step_on("__main__.add", script)
    check_script_step_on("__main__.Runner.step", script)
    check_script_step_on("forward", script)       # not a script target: nothing to check
    with pytest.raises(RoofscopeError, match=r"loop.py defines no function or class 'ad' at its top level"):
        check_script_step_on("__main__.ad", script)
    with pytest.raises(RoofscopeError, match=r"class Runner of loop.py defines no method 'stop'"):
        check_script_step_on("__main__.Runner.stop", script)


def test_step_on_a_function_of_the_script_counts_its_calls(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["run", "-o", str(out), *PEAKS, "--step-on", "__main__.add", "-q", str(script)]) == 0
    steps = json.loads((out / "run.json").read_text())["steps"]
    # add() runs 12 times in main()'s loop and 5 times through Runner.step: 17 calls. The watcher
    # looks for add every 20 ms, so a call within 20 ms of its def can go uncounted: here the
    # first, when the script reaches main() at once (16 boundaries seen); never a later one.
    assert steps["source"] == "function" and steps["boundaries_seen"] in (16, 17)
    assert steps["recorded"] == [3, 4, 5]   # after 1 wait and 2 warm-up steps
    # the script's function is the script's again afterwards: nothing of roofscope's is left in __main__
    method = tmp_path / "method"
    assert main(["run", "-o", str(method), *PEAKS, "--step-on", "__main__.Runner.step", "-q", str(script)]) == 0
    assert json.loads((method / "run.json").read_text())["steps"]["boundaries_seen"] == 5


def test_the_stepless_hint_names_the_looped_function(script: Path, tmp_path: Path, capsys) -> None:
    assert main(["run", "-o", str(tmp_path / "run"), *PEAKS, "-q", str(script)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert ("no step boundary arrived (no optimizer.step(), roofscope.step(), prof.step() or outermost forward "
            "without gradients): loop.py calls report() in a loop (line 23; also add()): --step-on "
            "__main__.report makes each of its calls a step; or call roofscope.step()") in err


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
    assert json.loads((out / "run.json").read_text())["steps"]["boundaries_seen"] in (16, 17)


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
    assert steps["source"] == "function" and steps["boundaries_seen"] in (29, 30) and steps["recorded"] == [3, 4, 5]
    import roofscope

    k = roofscope.analyze(out).kernels
    k = k[k["cat"] == "kernel"]
    # one matmul and one tanh a step: 3 GEMMs of 2 * 1024^3 FLOPs
    assert (k["op_name"] == "aten::tanh").sum() == 3
    assert k.loc[k["op_name"] == "aten::mm", "flops"].sum() == pytest.approx(3 * 2 * 1024 ** 3)


def test_a_compiling_program_without_steps_steps_on_its_looped_function(script: Path, tmp_path: Path,
                                                                        monkeypatch, capsys) -> None:
    # A program that imported Dynamo gets no step-less window (collectors/windows.py): instead of no Run,
    # each call of the function it calls in a loop (report(), line 23) becomes the step. 12 calls, the
    # ones made before the alarm 1 ms after the start excepted
    from roofscope.collectors import windows

    monkeypatch.setattr(windows, "dynamo_imported", lambda: True)
    out = tmp_path / "run"
    assert main(["run", "-o", str(out), *PEAKS, "-q", str(script)]) == 0
    steps = json.loads((out / "run.json").read_text())["steps"]
    assert (steps["source"], steps["step_on"], steps["recorded"]) == ("function", "__main__.report", [3, 4, 5])
    assert 10 <= steps["boundaries_seen"] <= 12
    err = " ".join(capsys.readouterr().err.split())
    assert ("no step boundary arrived and the program compiles (no step-less time window): each call of loop.py's "
            "report() (called in a loop, line 23) is a step, as --step-on __main__.report makes it") in err


def test_the_first_automatic_step_source_is_the_only_one() -> None:
    from roofscope.collectors.session import StepRule

    # an adopted looped function that runs forwards: its forwards' boundaries must not count too
    rule = StepRule()
    assert rule.automatic("function") and not rule.automatic("forward") and rule.automatic("function")
    rule = StepRule()
    assert rule.automatic("forward") and not rule.automatic("function")
    # --step-on forces its one kind, as before
    rule = StepRule("__main__.f")
    assert rule.automatic("function")


def test_an_optimizer_still_ends_the_steps_of_a_compiling_program(tmp_path: Path, monkeypatch, capsys) -> None:
    # The looped function is adopted at the start (no boundary yet), but the optimizer's steps end
    # the steps as soon as one comes: the run is said to step on the optimizer, not on batch()
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
    # 10 optimizer steps, and the first batch() call's boundary before the first of them
    assert (steps["source"], steps["step_on"], steps["boundaries_seen"]) == ("optimizer", None, 11)
    assert "program compiles" not in capsys.readouterr().err


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
    assert looped_functions(main_file) == [("work", 5)]
    assert check_target("mod", True) == (tmp_path / "mod.py").resolve()
    assert check_target(str(tmp_path / "mod.py"), False) == (tmp_path / "mod.py").resolve()
