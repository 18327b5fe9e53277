"""The inner runner of the counters pass: the user's script with ncu's range on the recorded steps.

    python -m roofscope.collectors.counters.ncu_target --wait W --warmup U --active A [--step-on S] [-m] TARGET [ARGS...]

ncu runs this with ``--profile-from-start off``, so it profiles only the kernels between
``cudaProfilerStart`` and ``cudaProfilerStop``. Those are called at the step boundaries
where the Kineto collector (torchprof.py) starts and ends recording, after the same
``torch.cuda.synchronize()``, so ncu sees the kernels of the same steps the trace holds.
Steps come from ``roofscope.step()``, the first optimizer's ``step()`` or, in an inference
loop, the outermost forwards (``--step-on``: generate() calls, MODULE.FUNC, or FILE:LINE: the
script's loop the Run's steps were the iterations of, collectors/loops/), by the rules of
recording/rules.py and with its hooks (collectors/steps.py), and the script ends once the recorded steps are profiled (exit code 0). No torch.profiler here: Kineto and ncu both need CUPTI, and under ncu Kineto
records no GPU activity at all.
"""
from __future__ import annotations

import argparse
import sys

from roofscope.collectors.recording.counter import StepCounter
from roofscope.collectors.script import ScriptError, check_target, run_target
from roofscope.collectors.session import ProfileComplete
from roofscope.collectors.torchprof import Schedule, enable_inductor_metadata
from roofscope.errors import RoofscopeError


class CounterRange(StepCounter):
    """Counts step boundaries and opens ncu's range over the active steps."""

    def __init__(self, schedule: Schedule, step_on: str | None = None) -> None:
        super().__init__(step_on)
        self.start_at = schedule.wait + schedule.warmup
        self.stop_at = schedule.steps
        self.steps = 0
        self.recording = False

    def begin(self) -> None:
        if self.start_at == 0:
            self._start()

    @property
    def source(self) -> str:
        return self.rule.source

    def advance(self) -> None:
        if self.steps >= self.stop_at:
            return
        self.steps += 1
        if self.steps == self.start_at:
            self._start()
        if self.steps == self.stop_at:
            self.end()
            # Nothing after the recorded steps is profiled: end the script here rather than run the
            # rest of a long training job a second time under ncu.
            raise ProfileComplete()

    def _start(self) -> None:
        import torch

        if not torch.cuda.is_available():
            return  # nothing to profile; ncu then reports that no kernels were profiled
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        self.recording = True

    def end(self) -> None:
        """Close the range (also when the script ends inside the active steps)."""
        if not self.recording:
            return
        import torch

        self.recording = False
        try:
            torch.cuda.synchronize()
        except RuntimeError:  # a crashed CUDA context: ncu keeps what it profiled
            pass
        torch.cuda.cudart().cudaProfilerStop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m roofscope.collectors.counters.ncu_target",
                                 description="Run TARGET with ncu's range on the steps roofscope records.")
    ap.add_argument("--wait", type=int, required=True)
    ap.add_argument("--warmup", type=int, required=True)
    ap.add_argument("--active", type=int, required=True)
    ap.add_argument("--step-on", dest="step_on", default=None,
                    help="the Run's --step-on (forward, generate, MODULE.FUNC, FILE:LINE: its loop)")
    ap.add_argument("-m", dest="module", action="store_true", help="TARGET is a module (python -m)")
    ap.add_argument("target")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    ns = ap.parse_args(argv)
    try:
        script = check_target(ns.target, ns.module)
    except ScriptError as e:
        print(f"roofscope: error: {e}", file=sys.stderr)
        return e.exit_code
    rng = CounterRange(Schedule(ns.wait, ns.warmup, ns.active), ns.step_on)
    # Same Inductor config as the Kineto pass, so torch.compile emits the same kernels.
    enable_inductor_metadata()
    try:
        with rng.watching(script):
            rng.begin()
            outcome = run_target(ns.target, ns.args, module=ns.module)
    except RoofscopeError as e:
        print(f"roofscope: error: {e}", file=sys.stderr)
        return e.exit_code
    finally:
        rng.end()
    sys.stdout.flush()
    return outcome.code


if __name__ == "__main__":
    sys.exit(main())
