"""The script's own loop as the step (collectors/loops/): which loop the tracker chooses and how the
outer loops name the stretches, from both sources of iterations (marks compiled into the script on every
Python, sys.monitoring on 3.12+); then, end to end on the CPU with no flags, Runs of warm steps whose own
time is the script's own: a decode loop over model.forward with a cold first round, a while loop over a
generator, a loop inside a function the script calls, a plain loop calling a user kernel."""
from __future__ import annotations

import json
import runpy
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from roofscope.cli import main
from roofscope.collectors.loops.marks import Marks
from roofscope.collectors.loops.monitoring import Monitoring
from roofscope.collectors.loops.tracker import LoopTracker

PEAKS = ["--peak-tflops", "1", "--peak-bandwidth", "10"]
SOURCES = ["marks", pytest.param("monitoring", marks=pytest.mark.skipif(sys.version_info < (3, 12),
                                                                          reason="sys.monitoring is 3.12+"))]


def spin(seconds: float) -> None:
    """Work of the test's own (not the script's: its loop is no loop of the program's)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _track(tmp_path: Path, source: str, text: str, forced: str | None = None,
           forwards: list[int] | None = None) -> tuple[LoopTracker, list[tuple[int, int | None]]]:
    """Run ``text`` as a script under ``source``; the tracker and every step boundary (loop line, outer index)."""
    script = tmp_path / "s.py"
    script.write_text(textwrap.dedent(text))
    count = forwards if forwards is not None else []
    tracker = LoopTracker(forwards=lambda: len(count), forced=forced)
    steps: list[tuple[int, int | None]] = []
    tracker.on_step = lambda loop: steps.append((loop.line, tracker.outer_index()))
    watcher = Marks(tracker, script) if source == "marks" else Monitoring(tracker, script)
    assert watcher.start()
    try:
        runpy.run_path(str(script), init_globals={"spin": spin, "forward": lambda: count.append(1)},
                       run_name="__main__")
    finally:
        watcher.stop()
    return tracker, steps


NESTED = '''
    for k in range(5):
        spin(0.0002)
    for epoch in range(3):
        for b in range(12):
            for field in ("ids", "mask"):
                spin(0.00005)
            spin(0.002)
'''


@pytest.mark.parametrize("source", SOURCES)
def test_epochs_and_batches_the_batch_loop_is_the_step(tmp_path: Path, source: str) -> None:
    tracker, steps = _track(tmp_path, source, NESTED)
    step = tracker.step
    assert step is not None and (step.line, step.text) == (5, "for b in range(12)")
    facts = tracker.facts()
    assert facts is not None and [o["line"] for o in facts["outer"]] == [4]
    # the set-up loop (line 2, 5 iterations of 0.2 ms) was the step after 3 timed iterations, then gave way
    # to the batch loop once that had run longer than it ever did
    assert [d["line"] for d in facts["dropped"]] == [2] and "stopped iterating" in facts["dropped"][0]["why"]
    # the batch loop is the step after 8 timed iterations in epoch 0 (its 9th): batches 10-12 of epoch 0,
    # then every batch of epochs 1 and 2, each named by its epoch
    batches = [outer for line, outer in steps if line == 5]
    assert batches == [0] * 3 + [1] * 12 + [2] * 12
    # the loop over a batch's two fields iterates fewer times at a stretch than the batch loop: never the step
    helper = next(loop for loop in tracker.seen() if loop.line == 6)
    assert helper.state == "off" and "a part of each iteration of `for b in range(12)`" in helper.why


@pytest.mark.parametrize("source", SOURCES)
def test_a_comprehension_is_never_the_step(tmp_path: Path, source: str) -> None:
    # A KV cache built by a comprehension of 6 slow items (Python 3.12 inlines it into the module's code:
    # its items are back-edges there), then the decode loop: the loop is the step from its 4th iteration
    # (3 timed): 10 - 4 = 6 boundaries, as the kernel test's 20 - 4; the comprehension never was.
    tracker, steps = _track(tmp_path, source, '''
        cache = [spin(0.0005) for layer in range(6)]
        for tok in range(10):
            spin(0.001)
    ''')
    assert tracker.step is not None and tracker.step.line == 3 and steps == [(3, None)] * 6
    assert all(loop.line == 3 for loop in tracker.seen() if loop.state != "off")


@pytest.mark.parametrize("source", SOURCES)
def test_a_kernels_own_loop_is_a_part_of_the_step(tmp_path: Path, source: str) -> None:
    # kernel() loops 4 times a call; the script's loop calls it 20 times: that loop is the step, from its
    # 4th iteration (3 timed), so 16 boundaries
    tracker, steps = _track(tmp_path, source, '''
        def kernel():
            for _ in range(4):
                spin(0.0003)
        for i in range(20):
            kernel()
    ''')
    assert tracker.step is not None and tracker.step.line == 5 and steps == [(5, None)] * 16
    inner = next(loop for loop in tracker.seen() if loop.line == 3)
    assert inner.state == "off" and inner.function == "kernel"


@pytest.mark.parametrize("source", SOURCES)
def test_a_while_loop_over_a_generator(tmp_path: Path, source: str) -> None:
    tracker, steps = _track(tmp_path, source, '''
        def batches(n):
            for i in range(n):
                yield i
        g = batches(20)
        while True:
            b = next(g, None)
            if b is None:
                break
            spin(0.001)
    ''')
    # the generator's loop waits on its consumer's work: the consumer's while loop is the step (16 or 17
    # boundaries: a while loop's last iteration, which breaks, has no back-edge)
    assert tracker.step is not None and (tracker.step.line, tracker.step.text) == (6, "while True")
    assert len(steps) in (16, 17)
    gen = next(loop for loop in tracker.seen() if loop.line == 3)
    assert gen.state == "off" and gen.generator and "generator" in gen.why


@pytest.mark.parametrize("source", SOURCES)
def test_a_loop_inside_a_function_and_loops_too_short_to_hold_work(tmp_path: Path, source: str) -> None:
    tracker, steps = _track(tmp_path, source, '''
        data = []
        for i in range(5000):
            data.append(i)
        def main():
            for i in range(15):
                spin(0.001)
        main()
    ''')
    assert tracker.step is not None and (tracker.step.line, tracker.step.function) == (6, "main")
    assert len(steps) == 11      # 15 iterations, the step from the 5th on
    short = next(loop for loop in tracker.seen() if loop.line == 3)
    assert short.state == "off" and short.why == "its iterations are too short to hold work"


@pytest.mark.parametrize("source", SOURCES)
def test_a_datasets_own_loop_is_the_data_loading_not_the_step(tmp_path: Path, source: str) -> None:
    # An HF Trainer or Lightning script defines the dataset and no loop of its own: the batches come from the
    # framework's loop. A loop in the dataset's __getitem__ (a tokenizer's over characters) was taken for the
    # step; 155,700 of its iterations filled the step timer before the first optimizer.step(), and no
    # training step was timed (benchmarks/real_clients/cpu/hf_trainer_tiny_bert.py --item-ms 10 --batch 48).
    # Reached through the DataLoader's fetch, it builds a batch, and is never the step.
    tracker, steps = _track(tmp_path, source, '''
        import collections
        import torch

        class Text(torch.utils.data.Dataset):
            def __len__(self):
                return 8

            def __getitem__(self, i):
                for word in range(6):
                    spin(0.0002)
                return torch.zeros(2)

        collections.deque(torch.utils.data.DataLoader(Text(), batch_size=2), maxlen=0)
    ''')
    assert tracker.step is None and steps == []
    loop = next(loop for loop in tracker.seen() if loop.function.endswith("__getitem__"))
    assert loop.state == "off" and loop.why == "reached through a DataLoader's fetch: the data loading's own loop"


@pytest.mark.parametrize("source", SOURCES)
def test_step_on_names_a_loop(tmp_path: Path, source: str) -> None:
    # --step-on FILE:LINE: the fields loop (line 6) whatever is seen, from its second iteration on:
    # 3 epochs x 12 batches x 2 fields = 72 iterations, 71 boundaries
    script = tmp_path / "s.py"
    tracker, steps = _track(tmp_path, source, NESTED, forced=f"{script}:6")
    assert tracker.step is not None and tracker.step.line == 6 and len(steps) == 71
    assert tracker.facts()["first_edge"] == 1   # type: ignore[index]


@pytest.mark.parametrize("source", SOURCES)
def test_forwards_once_an_iteration_stay_the_steps(tmp_path: Path, source: str) -> None:
    tracker, steps = _track(tmp_path, source, '''
        for i in range(12):
            forward()
            spin(0.0005)
    ''', forwards=[])
    assert tracker.step is None and steps == [] and tracker.done
    assert tracker.facts()["role"] == "holds the forward steps"   # type: ignore[index]
    # --step-on loop: the loop all the same (12 iterations, the step from the 5th)
    tracker, steps = _track(tmp_path, source, '''
        for i in range(12):
            forward()
            spin(0.0005)
    ''', forced="loop", forwards=[])
    assert tracker.step is not None and tracker.step.line == 2 and len(steps) == 8


# -- end to end: no flags, a Run of warm steps in the script's own time ----------------------------------

DECODE = textwrap.dedent('''
    """A hand-written decode loop over model.forward, standing in for a Hugging Face causal LM: the
    prefill through model(...), then model.forward(...) per token, which module hooks do not see. Round 0
    is cold (4x slower a token, as a GPU's first tokens are: cuBLAS handles, the allocator's first blocks)."""
    import statistics, sys, time
    import torch

    torch.set_num_threads(1)


    class Block(torch.nn.Module):
        def __init__(self, d):
            super().__init__()
            self.lin = torch.nn.Linear(d, d)

        def forward(self, x):
            return x + torch.tanh(self.lin(x))


    class TinyLM(torch.nn.Module):
        def __init__(self, vocab=64, d=64, layers=4):
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, d)
            self.layers = torch.nn.ModuleList(Block(d) for _ in range(layers))
            self.head = torch.nn.Linear(d, vocab)
            self.cold = True

        def forward(self, ids):
            x = self.emb(ids)
            for layer in self.layers:
                x = layer(x)
            time.sleep(0.04 if self.cold else 0.01)
            return self.head(x)


    model = TinyLM().eval()
    rounds, tokens = int(sys.argv[1]), int(sys.argv[2])
    own = []
    with torch.no_grad():
        for r in range(rounds):
            ids = torch.randint(64, (2, 16))
            logits = model(ids)
            tok = logits[:, -1:].argmax(-1)
            for t in range(tokens):
                t0 = time.perf_counter()
                logits = model.forward(tok)
                tok = logits[:, -1:].argmax(-1)
                own.append((r, time.perf_counter() - t0))
            model.cold = False
    print("OWN", statistics.median(dt for r, dt in own if r > 0))
''')


def test_a_decode_loop_over_model_forward_with_a_cold_first_round(tmp_path: Path, capsys) -> None:
    script = tmp_path / "decode.py"
    script.write_text(DECODE)
    out = tmp_path / "run"
    assert main(["run", "-o", str(out), *PEAKS, "--no-report", "-q", str(script), "3", "30"]) == 0
    own = float(capsys.readouterr().out.split("OWN")[1].split()[0])
    meta = json.loads((out / "run.json").read_text())
    steps, st = meta["steps"], json.loads((out / "summary.json").read_text())["step_time"]
    loop = steps["loop"]
    # the token loop is the step (line 44), named with its round (line 40); module hooks saw only the prefills.
    # TinyLM's loop over its layers (line 30) is the model's own, reached through its forward: never the step
    assert (steps["source"], loop["line"], loop["text"], [o["line"] for o in loop["outer"]]) == \
        ("loop", 44, "for t in range(tokens)", [40])
    assert "the script calls model.forward(...) (line 46) directly, which module hooks do not see (TinyLM.forward)" \
        in loop["why"]
    assert steps["step_on"] == f"{script}:44"
    # round 0 ran at 40 ms a token, settled there and was profiled; round 1 runs at 10 ms: profiled again there
    assert "faster" in steps["rearmed"] and min(meta["step_times"]["outer"][i] for i, p in
                                               enumerate(meta["step_times"]["phase"]) if p == "active") >= 1
    # the own time is the warm rounds', within 10% of the script's own timer; round 0 is a cold stretch apart
    assert st["unprofiled_median_s"] == pytest.approx(own, rel=0.1)
    assert [c["outer"] for c in st["cold_stretches"]] == [0] and st["cold_stretches"][0]["median_s"] > 0.04
    assert st["inflation_outer"] >= 1 and st["inflation"] < 3


GENERATOR = textwrap.dedent('''
    import statistics, time
    import torch

    torch.set_num_threads(1)
    w = torch.randn(128, 128) / 128 ** 0.5


    def batches(n):
        for i in range(n):
            yield torch.randn(32, 128)


    gen, own = batches(60), []
    while True:
        t0 = time.perf_counter()
        x = next(gen, None)
        if x is None:
            break
        for _ in range(3):
            x = torch.tanh(x @ w)
        time.sleep(0.02)
        own.append(time.perf_counter() - t0)
    print("OWN", statistics.median(own[20:]))
''')

IN_FUNCTION = textwrap.dedent('''
    import statistics, time
    import torch

    torch.set_num_threads(1)


    def train(steps):
        w, own = torch.randn(128, 128) / 128 ** 0.5, []
        x = torch.randn(32, 128)
        for i in range(steps):
            t0 = time.perf_counter()
            x = torch.tanh(x @ w)
            time.sleep(0.02)
            own.append(time.perf_counter() - t0)
        return own


    own = train(60)
    print("OWN", statistics.median(own[20:]))
''')

USER_KERNEL = textwrap.dedent('''
    import statistics, time
    import torch

    torch.set_num_threads(1)


    def kernel(x, w):
        for _ in range(4):   # the kernel's own loop: a part of each step
            x = torch.tanh(x @ w) * 0.5 + x
        time.sleep(0.02)
        return x


    x, w = torch.randn(128, 128), torch.randn(128, 128) / 128 ** 0.5
    own = []
    for i in range(60):
        t0 = time.perf_counter()
        x = kernel(x, w)
        own.append(time.perf_counter() - t0)
    print("OWN", statistics.median(own[20:]))
''')


@pytest.mark.parametrize("source, line, text", [(GENERATOR, 15, "while True"), (IN_FUNCTION, 11, "for i in range(steps)"),
                                                (USER_KERNEL, 17, "for i in range(60)")],
                         ids=["while-over-a-generator", "loop-in-a-function", "user-kernel"])
def test_no_flags_a_run_of_the_loops_warm_steps(tmp_path: Path, capsys, source: str, line: int, text: str) -> None:
    script = tmp_path / "script.py"
    script.write_text(source)
    out = tmp_path / "run"
    assert main(["run", "-o", str(out), *PEAKS, "--no-report", "-q", str(script)]) == 0
    own = float(capsys.readouterr().out.split("OWN")[1].split()[0])
    meta = json.loads((out / "run.json").read_text())
    st = json.loads((out / "summary.json").read_text())["step_time"]
    assert (meta["steps"]["source"], meta["steps"]["loop"]["line"], meta["steps"]["loop"]["text"]) == ("loop", line, text)
    assert meta["steps"]["recorded"] and st["unprofiled_median_s"] == pytest.approx(own, rel=0.1)


def test_cli_subprocess_steps_on_the_loop(tmp_path: Path) -> None:
    script = tmp_path / "gen.py"
    script.write_text(GENERATOR)
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "roofscope", "run", "-o", str(out), *PEAKS, "--no-report", "-q",
                        str(script)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    steps = json.loads((out / "run.json").read_text())["steps"]
    assert steps["source"] == "loop" and steps["step_on"] == f"{script}:15"
    # --step-on FILE:LINE chooses the loop from its first iteration: 60 items, 61 iterations (the last breaks)
    again = tmp_path / "again"
    r = subprocess.run([sys.executable, "-m", "roofscope", "run", "-o", str(again), *PEAKS, "--no-report", "-q",
                        "--step-on", f"{script}:15", str(script)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    forced = json.loads((again / "run.json").read_text())["steps"]
    assert forced["source"] == "loop" and forced["boundaries_seen"] == 60 and forced["loop"]["first_edge"] == 1
    r = subprocess.run([sys.executable, "-m", "roofscope", "run", "-o", str(tmp_path / "bad"), *PEAKS, "--step-on",
                        f"{script}:16", str(script)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"roofscope: error: --step-on {script}:16: line 16 of gen.py starts no for or while loop"]


def test_the_counters_pass_steps_on_the_runs_loop() -> None:
    from roofscope.commands.counters import recorded_target
    from roofscope.run import new_meta

    # The Run's steps began after 9 iterations of the loop and 1 boundary of a set-up loop given up; the
    # profile began at boundary 12 (warm-up 2 from 10). The pass counts the loop's iterations from its first:
    # its profile begins at 10 + 9 - 1 - 1 = 17.
    meta = new_meta(["roofscope", "run", "gen.py"],
                    steps={"requested": {"wait": 1, "warmup": 2, "active": 3}, "profiled_from": 12,
                           "step_on": "/w/gen.py:15", "loop": {"role": "step", "first_edge": 9, "boundaries_before": 1}})
    target = recorded_target(meta)
    assert target.step_on == "/w/gen.py:15" and (target.schedule.wait, target.schedule.warmup) == (17, 2)


def test_an_optimizer_after_an_inner_loop_was_taken_has_the_steps(tmp_path: Path) -> None:
    # examples/mlp.py --extra-elementwise 200: a loop of 200 multiplications runs in each training step, before
    # its optimizer.step(); it is taken for the step in the first one (8 in a row, more than its outer loop has
    # made), then the first optimizer.step() comes: its steps are the steps, the loop's are dropped, and a
    # profile of them made again: 8 profiled optimizer steps, as without the inner loop
    out = tmp_path / "run"
    root = Path(__file__).resolve().parents[1]
    assert main(["run", "-o", str(out), *PEAKS, "--settle", "0", "--wait", "1", "--warmup", "1", "--active", "8",
                 "--no-report", "-q", str(root / "examples" / "mlp.py"), "--device", "cpu", "--steps", "10",
                 "--width", "64", "--layers", "1", "--extra-elementwise", "200"]) == 0
    meta = json.loads((out / "run.json").read_text())
    steps, phases = meta["steps"], meta["step_times"]["phase"]
    assert steps["source"] == "optimizer" and "loop" not in steps and len(steps["recorded"]) == 8
    assert steps["rearmed"].startswith("optimizer.step() marks the steps: the iterations of "
                                       "`for _ in range(args.extra_elementwise)` (mlp.py:59, in main())")
    # every step before the optimizer's first boundary, and the one it closed, is no one's
    assert set(phases[:-9]) == {"dropped"} and phases[-9:] == ["warmup"] + ["active"] * 8


def test_forward_steps_that_miss_the_decode_name_the_real_cause(tmp_path: Path, capsys) -> None:
    # --step-on forward: the decode's model.forward(...) calls go around __call__, so only the 3 prefills are
    # outermost forwards: 2 boundaries. The shortfall says why, and what would step on the decode.
    script = tmp_path / "decode.py"
    script.write_text(DECODE.replace("time.sleep(0.04 if self.cold else 0.01)", "pass"))
    out = tmp_path / "run"
    assert main(["run", "-o", str(out), *PEAKS, "--no-report", "-q", "--step-on", "forward", str(script), "3", "8"]) == 0
    said = " ".join(json.loads((out / "run.json").read_text())["warnings"])
    assert "only 2 step boundaries arrived" in said
    assert ("decode.py calls model.forward(...) directly (line 46), which module hooks do not see: only calls through"
            " the module (TinyLM(...)) ended steps; pass --step-on __main__.TinyLM.forward, or --step-on FILE:LINE for"
            " its loop") in said
    assert "run more steps" not in said
