"""`roofscope run [OPTIONS] SCRIPT [ARGS]...`: profile an unmodified script and write a Run."""
from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

from roofscope.analyzers.cost.formulas.custom import load_all
from roofscope.collectors.counters import cupti_probe
from roofscope.collectors.lifecycle import Guard, intercept_exit
from roofscope.collectors.script import Outcome, check_target, exit_forked_child, run_target
from roofscope.collectors.session import Session, SessionConfig
from roofscope.collectors.steps import check_script_step_on
from roofscope.commands.counters import recorded_target
from roofscope.commands.options import CeilingOptions
from roofscope.commands.verify import recorded_program
from roofscope.config import (CeilingOverrides, Collection, Presentation, RankMerge, RooflineThresholds, VerifySettings,
                              values)
from roofscope.counters import after_run, check_before_run
from roofscope.errors import RoofscopeError
from roofscope.pipeline import PipelineOptions, SessionResult, announce, finish
from roofscope.run import Run
from roofscope.verify import NothingToVerify, Stopped, verify_run


@dataclass
class RunOptions(CeilingOptions, Collection, RankMerge, Presentation):
    """`roofscope run`'s own options; the profile's, ceilings and merge come from roofscope/config.py."""

    target: str
    args: tuple[str, ...] = ()
    module: bool = False
    out: str | None = None
    no_report: bool = False
    verify: bool = False                     # then `roofscope verify` on the Run, with its defaults
    counters: str | None = None              # "ncu" or "cupti"
    counters_sample: int | None = None
    counters_skip: int = 0
    counters_kernel_name: str | None = None
    counters_nvtx: str | None = None
    quiet: bool = False
    formulas: tuple[str, ...] = ()
    formats: tuple[str, ...] = ()            # renderer names (reports/registry.py), written into the Run
    argv: list[str] = field(default_factory=lambda: list(sys.argv))


def _name(opts: RunOptions) -> str:
    return opts.target.rsplit(".", 1)[-1] if opts.module else Path(opts.target).stem


def run(opts: RunOptions) -> int:
    script = check_target(opts.target, opts.module)
    check_script_step_on(opts.step_on, script)
    options = PipelineOptions(report=not opts.no_report, formats=tuple(opts.formats), top=opts.top, quiet=opts.quiet,
                              **values(CeilingOverrides, opts), **values(RooflineThresholds, opts))
    load_all(opts.formulas)
    filters = {"kernel_name": opts.counters_kernel_name, "nvtx": opts.counters_nvtx}
    if opts.counters is not None or opts.counters_sample is not None or opts.counters_skip or any(filters.values()):
        check_before_run(opts.counters, opts.duration, opts.counters_sample, opts.counters_skip, **filters)
    experimental = None
    if opts.counters == "cupti":
        experimental = cupti_probe.experimental_config()
    config = SessionConfig(out=Path(opts.out) if opts.out else None, force=opts.force, name=_name(opts),
                           command=opts.argv, experimental_config=experimental, script=script,
                           **values(Collection, opts))
    # From before the profile starts to the end of its Run: a signal outside the script waits for the Run.
    with Guard() as guard:
        session = Session(config).start()

        def os_exit(code: int) -> None:   # the script called os._exit(code): the process exits with it after
            _end(opts, options, session, guard, Outcome(code, "os._exit", f"os._exit({code})"))

        with intercept_exit(os_exit):
            outcome = run_target(opts.target, list(opts.args), module=opts.module, guard=guard)
        sys.stdout.flush()
        if session.foreign:
            exit_forked_child(outcome.code)  # a child the script forked: the Run is its parent's
        code, result = _end(opts, options, session, guard, outcome)
    # Outside the guard: the counters pass and verify run the program again, and a signal must stop them at once.
    if result is None or guard.received is not None:
        return code
    if opts.counters == "ncu":
        counters_code = after_run(result.run, recorded_target, outcome.code, opts.counters_sample, opts.quiet,
                                  opts.counters_skip, **filters)
        if counters_code:
            return counters_code
    if opts.verify and not result.interrupted:
        verify_code = _verify(result.run, outcome.code, opts.quiet, distributed=session.part is not None)
        if verify_code:
            return verify_code
    return code


def _end(opts: RunOptions, options: PipelineOptions, session: Session, guard: Guard,
         outcome: Outcome) -> tuple[int, SessionResult | None]:
    """After the script, however it ended: the Run written and announced; the process's exit code."""
    try:
        result = finish(session, outcome.as_dict(), options, guard)
    except (RoofscopeError, OSError) as e:
        # The script's own exit code still wins over ours.
        print(f"roofscope: error: could not write the Run: {e}", file=sys.stderr)
        return outcome.code or RoofscopeError.exit_code, None
    try:
        problem = announce(session, result, exit_code=guard.exit_code(outcome.code),
                           merge_timeout_s=opts.merge_timeout, top=opts.top, quiet=opts.quiet, options=options)
        if outcome.code != 0:
            print(f"roofscope: {opts.target} exited with code {outcome.code} ({outcome.reason})", file=sys.stderr)
        elif guard.received is not None and not result.interrupted:
            print(f"roofscope: {signal.Signals(guard.received).name} received after the Run was written;"
                  " stopping", file=sys.stderr)
    except OSError:
        # The terminal is gone (a hang-up, a closed pipe): the Run is written and the exit code stands.
        _silence()
        problem = result.problem()
    if outcome.code != 0 or guard.received is not None:
        return guard.exit_code(outcome.code), result
    return (RoofscopeError.exit_code if problem else 0), result


def _silence() -> None:
    """Send what is left to print (and the interpreter's last flush) to /dev/null."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(devnull, fd)


def _verify(r: Run | None, script_code: int, quiet: bool, distributed: bool) -> int:
    """``--verify``: `roofscope verify` on the Run just written; its exit code."""
    if r is None:
        return 0
    if distributed:   # every rank would re-run its own copy of a job that needs all of them
        print("roofscope: warning: --verify runs the program as one process, not a rank of a distributed job:"
              " not verifying", file=sys.stderr)
        return 0
    if script_code != 0:
        print(f"roofscope: warning: the script exited with code {script_code}: not verifying its fixes"
              f" (run `roofscope verify {r.path}` once it succeeds)", file=sys.stderr)
        return 0
    try:
        verify_run(r.path, recorded_program, VerifySettings(), quiet=quiet, yes=True)  # the Run just made here
    except NothingToVerify as e:
        print(f"roofscope: verify: {e}", file=sys.stderr)
    except RoofscopeError as e:
        print(f"roofscope: error: verify: {e} (the Run {r.path} was written without verify.json)", file=sys.stderr)
        return e.exit_code
    except Stopped as e:   # interrupted: the rounds completed are in verify.json
        return 128 + e.signum
    return 0
