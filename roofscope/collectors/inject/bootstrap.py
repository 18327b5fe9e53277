"""The program run with fixes injected, no source edits: the bootstrap of ``roofscope verify``.

    python -m roofscope.collectors.inject [--fix SPEC] [--fix-module FILE.py|MODULE] [--record FILE]
        [--steps N [--warmup-steps W] [--compare-steps K]] [--step-on S] [-m] TARGET [ARGS...]

It installs the fixes of SPEC (roofscope/fixes/), then runs TARGET as ``python`` would
(collectors/script.py). Without ``--fix`` it runs the program as it is: the baseline, under the
same bootstrap. With ``--record`` it also times the program's own steps, with the boundaries
``roofscope run`` finds (session.StepRule: ``roofscope.step()``, the first optimizer's ``step()``,
outermost forwards, ``--step-on``) and collectors/steptimes.py's clock, no profiler: at least W
warm-up steps, until they settle (``--settle`` K steps within ``--settle-tolerance`` of their
median, at most ``--settle-max-steps`` / ``--settle-max-s`` after the warm-up), then N timed steps,
after which the program is stopped (exit code 0); a program that ends before its steps settle has
its steps after the warm-up timed (``settled`` false). Over the first K steps it keeps the losses and
the model's outputs (probe.py). FILE gets, as JSON: how the program ended, the step times, where
the timed steps begin, the results and what each fix changed (or why it could not).

With ``--alternate B`` (fixes that are switches only: registry.Fix.switch) the timed steps run in
blocks of B, the fix on, off, off, on, on, off... (it stays on through the warm-up, where the results
are kept); ``fixed`` in FILE says which way each timed step ran. Both sides of the comparison then come
from one process, which the drift between processes cannot tell apart.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from roofscope.collectors.inject.probe import ResultProbe
from roofscope.collectors.script import Outcome, check_target, exit_forked_child, run_target
from roofscope.collectors.recording.counter import StepCounter
from roofscope.collectors.session import ProfileComplete
from roofscope.collectors.steptimes import StepTimer
from roofscope.config import Collection
from roofscope.errors import RoofscopeError
from roofscope.fileio import atomic_write
from roofscope.fixes import FIXES, FixError, Injection, install, load_modules, parse, switches

RECORD_VERSION = 1


class StepWindow(StepCounter):
    """Counts and times the program's step boundaries; ends the program after the timed steps."""

    def __init__(self, ns: argparse.Namespace, probe: ResultProbe, injection: Injection) -> None:
        import torch

        super().__init__(ns.step_on)
        self.ns = ns
        self.timer = StepTimer(cuda=torch.cuda.is_available())
        self.probe = probe
        self.injection = injection
        self.boundaries = 0
        self.timed_from: int | None = None     # the boundary the timed steps start at (the timer's index)
        self.settled: bool | None = None
        self.fixed: list[bool] = []            # --alternate: the fix on (True) in each timed step, in order
        self._warm: tuple[int, float] | None = None   # the warm-up's last boundary, and when it came

    def advance(self) -> None:
        self.timer.mark("unprofiled")
        self.boundaries += 1
        self.injection.boundary()   # a flag the program set by other means is held again (Injection.flag)
        if self.injection.roots.seen:
            self.injection.roots.stop()   # a step with roots has ended: no global module hook in the timed steps
        self.probe.boundary(self.boundaries)
        ns, last = self.ns, len(self.timer) - 1
        if ns.steps is None:
            return
        if self.timed_from is None:
            if self.boundaries < max(ns.warmup_steps, ns.compare_steps):
                return
            if self._warm is None:
                self._warm = (last, time.perf_counter())
            w, since = self._warm
            settled = self.timer.settled(ns.settle, ns.settle_tolerance, since=w + 1)
            if settled or last - w >= ns.settle_max_steps or time.perf_counter() - since >= ns.settle_max_s:
                self.timed_from, self.settled = last, settled
                self.timer.restart()   # our own check is no step's time
        elif last - self.timed_from >= ns.steps:
            raise ProfileComplete()
        if ns.alternate and self.timed_from is not None:
            on = ((last - self.timed_from) // ns.alternate) % 4 in (0, 3)   # on off off on: ABBA blocks
            if on != (self.fixed[-1] if self.fixed else True):
                self.injection.set_fixed(on)
            self.fixed.append(on)

    def to_dict(self) -> dict[str, Any]:
        steps = self.timer.finish()
        if self.timed_from is None and self._warm is not None:
            # The program ended while its steps had not settled: those after the warm-up are what it ran.
            self.timed_from, self.settled = self._warm[0], False
        return {"source": self.rule.source, "boundaries": self.boundaries, "timed_from": self.timed_from,
                "settled": self.settled, "index": [s.index for s in steps], "host_s": [s.host_s for s in steps],
                "gpu_s": [s.gpu_s for s in steps], **({"fixed": self.fixed} if self.ns.alternate else {})}


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m roofscope.collectors.inject",
                                 description="Run TARGET with fixes injected (roofscope verify's bootstrap).")
    ap.add_argument("--fix", default=None, metavar="SPEC", help="NAME[:ARG][;NAME[:ARG]...] (docs/verify.md)")
    ap.add_argument("--fix-module", action="append", default=[], metavar="FILE.py|MODULE",
                    help="a module that registers fixes (roofscope.fixes.register); repeatable")
    ap.add_argument("--record", default=None, metavar="FILE", help="write the step times and results here (JSON)")
    ap.add_argument("--steps", type=int, default=None, metavar="N", help="timed steps, then end the program")
    ap.add_argument("--warmup-steps", type=int, default=3, metavar="W")
    ap.add_argument("--compare-steps", type=int, default=3, metavar="K")
    ap.add_argument("--settle", type=int, default=Collection.settle, metavar="K")
    ap.add_argument("--settle-tolerance", type=float, default=Collection.settle_tolerance)
    ap.add_argument("--settle-max-steps", type=int, default=Collection.settle_max_steps)
    ap.add_argument("--settle-max-s", type=float, default=Collection.settle_max_s)
    ap.add_argument("--alternate", type=int, default=0, metavar="B",
                    help="turn the fixes (switches only) off and on in blocks of B timed steps")
    ap.add_argument("--step-on", dest="step_on", default=None,
                    help="the Run's --step-on (forward, generate, MODULE.FUNC)")
    ap.add_argument("-m", dest="module", action="store_true", help="TARGET is a module (python -m)")
    ap.add_argument("target")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    return ap


def main(argv: list[str] | None = None) -> int:
    ns = _parser().parse_args(argv)
    try:
        script = check_target(ns.target, ns.module)
        load_modules(ns.fix_module)
        specs = parse(ns.fix) if ns.fix else ()
        if ns.alternate and not (specs and switches(specs) and ns.steps):
            raise FixError("--alternate needs --steps and a --fix whose every fix is a switch"
                           f" ({', '.join(sorted(n for n, f in FIXES.items() if f.switch))})")
    except RoofscopeError as e:
        print(f"roofscope: error: {e}", file=sys.stderr)
        return e.exit_code
    injection = Injection()
    probe = ResultProbe(ns.compare_steps if ns.record else 0, injection)
    window = StepWindow(ns, probe, injection)
    pid, outcome = os.getpid(), Outcome(1, "exception", "the bootstrap failed")
    try:
        with window.watching(script):
            try:
                install(specs, injection)
            except Exception as e:   # the fix's own failure: the program cannot run with it
                traceback.print_exc()
                outcome = Outcome(1, "exception", f"installing {ns.fix} failed: {type(e).__name__}: {e}")
            else:
                probe.install()
                outcome = run_target(ns.target, ns.args, module=ns.module)
    finally:
        sys.stdout.flush()
        if os.getpid() != pid:
            exit_forked_child(outcome.code)  # a child the program forked
        if ns.record:
            record = {"version": RECORD_VERSION, "fix": ns.fix, "outcome": outcome.as_dict(),
                      "steps": window.to_dict(), **probe.to_dict(),
                      "applied": injection.done, "skipped": injection.skipped}
            atomic_write(Path(ns.record), json.dumps(record), force=True)
        injection.undo()
    return outcome.code


if __name__ == "__main__":
    sys.exit(main())
