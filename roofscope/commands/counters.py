"""`roofscope counters RUN`: the options of the counters pass (roofscope/counters.py), and how a Run's
recorded `roofscope run` command line is read back to re-run it under ncu."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roofscope.collectors.counters.ncu import Target
from roofscope.collectors.torchprof import Schedule
from roofscope.commands.clickopts import recorded_run
from roofscope.counters import counters_pass
from roofscope.errors import RoofscopeError


@dataclass
class CountersOptions:
    run: str
    sample: int | None = None
    skip: int = 0
    from_csv: str | None = None
    force: bool = False
    quiet: bool = False
    kernel_name: str | None = None    # ncu --kernel-name regex:REGEX; with --from-csv, the CSV's filter
    nvtx: str | None = None           # ncu --nvtx --nvtx-include RANGE/
    yes: bool = False


def recorded_target(meta: dict[str, Any]) -> "Target":
    """Script, arguments, ``-m`` and wait/warmup/active of a Run written by ``roofscope run``."""
    params = recorded_run(meta, "it cannot be re-run under ncu; export a CSV with ncu and pass --from-csv FILE")
    steps = meta.get("steps")
    requested = steps.get("requested") if isinstance(steps, dict) else None
    requested = requested if isinstance(requested, dict) else {}
    if "duration_s" in requested:
        raise RoofscopeError("counters need step boundaries, and this Run profiled a time window (--duration);"
                             " record a Run over steps (roofscope.step() or an optimizer) instead")
    # "resumed": the name older Runs gave a kept window.
    if isinstance(steps, dict) and steps.get("stepless_window") in ("recorded", "kept", "resumed"):
        raise RoofscopeError("counters need profiled steps, and this Run's steps recorded none: its trace is a"
                             " step-less time window; mark steps with --step-on or roofscope.step(), or run more steps")
    if not all(isinstance(requested.get(k), int) for k in ("wait", "warmup", "active")):
        raise RoofscopeError("the Run's run.json records no step schedule (steps.requested wait/warmup/active),"
                             " so the counters pass cannot find its steps again")
    # The profile began where the steps settled (profiled_from - warmup), not at --wait: under ncu the
    # steps run far slower and settle elsewhere, so the pass waits for that boundary itself.
    begun = steps.get("profiled_from") if isinstance(steps, dict) else None
    wait = begun - requested["warmup"] if isinstance(begun, int) else requested["wait"]
    step_on = steps.get("step_on") if isinstance(steps, dict) else None
    loop = steps.get("loop") if isinstance(steps, dict) else None
    if isinstance(loop, dict) and loop.get("role") == "step" and isinstance(loop.get("first_edge"), int):
        # The pass steps on that loop (--step-on FILE:LINE) from its first iteration on; the Run's steps
        # began after the loop's first_edge iterations, and after the boundaries of whatever came before it.
        wait += loop["first_edge"] - 1 - int(loop.get("boundaries_before") or 0)
    return Target(target=params["target"], args=tuple(params.get("args") or ()), module=bool(params.get("module")),
                  schedule=Schedule(wait, requested["warmup"], requested["active"]),
                  step_on=step_on if isinstance(step_on, str) else None)


def run(opts: CountersOptions) -> int:
    if opts.from_csv and (opts.sample is not None or opts.skip):
        raise RoofscopeError("--sample and --skip apply to ncu's own pass, not to --from-csv")
    return counters_pass(opts.run, recorded_target, sample=opts.sample, skip=opts.skip, from_csv=opts.from_csv, force=opts.force,
                         quiet=opts.quiet, kernel_name=opts.kernel_name, nvtx=opts.nvtx, yes=opts.yes)
