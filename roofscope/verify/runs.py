"""One run of the program for ``roofscope verify``: the bootstrap (collectors/inject/) in a fresh process,
with or without a fix, and the record it leaves; and what a run costs, estimated from the Run.

Each run is a new ``python -m roofscope.collectors.inject`` process in the Run's recorded working
directory, with this roofscope importable, the program's output kept in a log whose last lines
explain a crash. A run that outlives ``--run-timeout-s`` is killed with its process group
(DataLoader workers included) and counts as crashed.
"""
from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from roofscope.config import VerifySettings

_PACKAGE_ROOT = Path(__file__).resolve().parents[2]   # the directory roofscope is imported from


@dataclass(frozen=True)
class Program:
    """What the Run's recorded ``roofscope run`` command ran, and where."""

    target: str
    args: tuple[str, ...]
    module: bool
    cwd: str
    step_on: str | None


def _env() -> dict[str, str]:
    """The environment, with this roofscope first on the path unless it is an installed package there
    (a site-packages directory ahead of the standard library could shadow it)."""
    env = dict(os.environ)
    if _PACKAGE_ROOT.name not in ("site-packages", "dist-packages"):
        env["PYTHONPATH"] = os.pathsep.join([str(_PACKAGE_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def command(program: Program, fix: str | None, settings: VerifySettings, record: Path,
            fix_modules: tuple[str, ...] = (), alternate: bool = False) -> list[str]:
    """The run's command line; ``alternate``: the fix (a switch) turned off and on inside it, over twice the
    steps (as many each way as another run times)."""
    steps = settings.steps * (2 if alternate else 1)
    cmd = [sys.executable, "-m", "roofscope.collectors.inject", "--record", str(record),
           "--steps", str(steps), "--warmup-steps", str(settings.warmup_steps),
           "--compare-steps", str(settings.compare_steps)]
    cmd += ["--fix", fix] if fix else []
    cmd += ["--alternate", str(settings.alternate)] if alternate else []
    for m in fix_modules:
        cmd += ["--fix-module", str(Path(m).resolve()) if m.endswith(".py") else m]
    cmd += ["--step-on", program.step_on] if program.step_on else []
    cmd += ["-m"] if program.module else []
    return cmd + [program.target, *program.args]


def launch(program: Program, fix: str | None, settings: VerifySettings, workdir: Path, name: str,
           fix_modules: tuple[str, ...] = (), alternate: bool = False) -> dict[str, Any]:
    """Run the program once (``fix`` None: as it is); its record, with ``wall_s`` and the log's ``tail``."""
    record, log = workdir / f"{name}.json", workdir / f"{name}.log"
    record.unlink(missing_ok=True)
    t0 = time.perf_counter()
    # The run starts with no signal held (it inherits the mask), and a stopping signal held back by the
    # rounds (workflow.py) arrives while it goes on.
    with open(log, "wb") as out, _mask(signal.SIG_UNBLOCK):
        proc = subprocess.Popen(command(program, fix, settings, record, fix_modules, alternate), cwd=program.cwd,
                                env=_env(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=settings.run_timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code, timed_out = proc.wait(), True
        except BaseException:   # Ctrl-C reaches roofscope only (the run has its own session): end the run too
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    wall = time.perf_counter() - t0
    tail = log.read_bytes()[-4000:].decode(errors="replace").strip().splitlines()[-12:]
    if timed_out:
        limit = f"did not finish within --run-timeout-s {settings.run_timeout_s:g}"
        rec: dict[str, Any] = {"outcome": {"code": code, "reason": "timeout", "detail": limit}}
    elif record.exists():
        rec = json.loads(record.read_text())
    else:   # killed, or the interpreter died before the bootstrap could write its record
        rec = {"outcome": {"code": code, "reason": "killed", "detail": tail[-1] if tail else f"exit code {code}"}}
    return {**rec, "wall_s": wall, "tail": tail}


# What ends verify (Ctrl-C, kill, a closed terminal): workflow.py writes the rounds completed.
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def _mask(how: int) -> Iterator[None]:
    mask = getattr(signal, "pthread_sigmask", None)   # POSIX only: elsewhere signals stay as they are
    old = mask(how, STOPPING) if mask is not None else None
    try:
        yield
    finally:
        if mask is not None:
            mask(signal.SIG_SETMASK, old)


def held() -> Any:
    """The stopping signals held back until the block ends, except while :func:`launch` runs the program."""
    return _mask(signal.SIG_BLOCK)


def failed(rec: dict[str, Any]) -> str | None:
    """Why a run failed, in one line; None when it ran (to its end or the timed steps' end)."""
    outcome = rec.get("outcome") or {}
    if outcome.get("reason") in ("ok", "stopped") and outcome.get("code") == 0:
        return None
    detail = str(outcome.get("detail") or outcome.get("reason") or "failed").strip().splitlines()
    return f"{detail[-1] if detail else 'failed'} (exit code {outcome.get('code')})"


def estimate_s(meta: dict[str, Any], settings: VerifySettings) -> float | None:
    """One run's seconds, from the Run: its time outside the steps (start-up, the model, the data) and
    its unprofiled steps' median, times the warm-up and timed steps. None when the Run does not say."""
    times = meta.get("step_times") or {}
    phases, host = times.get("phase") or [], times.get("host_s") or []
    wall = meta.get("wall_s")
    own = [h for p, h in zip(phases, host) if p == "unprofiled" and h is not None]
    if not own or not isinstance(wall, (int, float)):
        return None
    step = statistics.median(own)
    startup = max(0.0, wall - sum(h for h in host if h is not None))
    return startup + step * (settings.warmup_steps + 3 + settings.steps)


def cold_start(summary: dict[str, Any], meta: dict[str, Any]) -> int:
    """How many steps the Run found cold at its start (0: none): the last cold step in the first half of its
    steps. A generate() program's whole first round runs cold (GPT-2: 48 tokens at 44 ms, then 6.5 ms); a
    baseline timed there makes every fix look several times better than it is."""
    cold = (summary.get("step_time") or {}).get("cold_steps") or []
    total = len((meta.get("step_times") or {}).get("index") or [])
    start = [int(c) for c in cold if not total or c <= total // 2]
    return max(start, default=0)

