"""`roofscope verify RUN`: the options of the verification (roofscope/verify/), and how the program a Run
recorded is read back from its `roofscope run` command line to be run again."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roofscope.commands.clickopts import recorded_run
from roofscope.config import VerifySettings, values
from roofscope.errors import RoofscopeError
from roofscope.verify import Program, Stopped, verify_run


@dataclass(kw_only=True)
class VerifyOptions(VerifySettings):
    run: str
    fixes: tuple[str, ...] = ()          # --fix SPEC: these instead of the Run's top fixes
    fix_modules: tuple[str, ...] = ()    # --fix-module: modules registering fixes (roofscope.fixes.register)
    force: bool = False
    quiet: bool = False
    yes: bool = False


def recorded_program(meta: dict[str, Any]) -> Program:
    """The script (or module), its arguments, working directory and step rule of a Run made by `roofscope run`."""
    params = recorded_run(meta, "roofscope cannot run its program again; record it with `roofscope run SCRIPT`")
    if meta.get("distributed"):
        raise RoofscopeError("this Run is one rank of a distributed job, and verify runs the program as one process;"
                             " verify a single-process Run of it")
    steps = meta.get("steps") if isinstance(meta.get("steps"), dict) else {}
    if steps.get("source") in (None, "none"):
        raise RoofscopeError("verify times the program's own steps, and this Run's program marked none (no"
                             " optimizer.step(), roofscope.step() or outermost forward); record it with --step-on")
    cwd = str(meta.get("cwd") or ".")
    target, module = str(params["target"]), bool(params.get("module"))
    if not module and not (Path(cwd) / target).is_file():
        raise RoofscopeError(f"the Run's script {target} is not in its working directory {cwd} any more")
    step_on = steps.get("step_on")
    return Program(target=target, args=tuple(params.get("args") or ()), module=module, cwd=cwd,
                   step_on=step_on if isinstance(step_on, str) else None)


def run(opts: VerifyOptions) -> int:
    try:
        verify_run(opts.run, recorded_program, VerifySettings(**values(VerifySettings, opts)), asked=opts.fixes,
                   fix_modules=opts.fix_modules, force=opts.force, quiet=opts.quiet, yes=opts.yes)
    except Stopped as e:   # interrupted: what was measured is written; the exit says how it ended
        return 128 + e.signum
    return 0
