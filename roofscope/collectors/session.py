"""A profiling session's lifecycle: from claiming its output and starting the profiler to what was recorded.

``roofscope run`` and ``roofscope.profile()`` both drive one :class:`Session` through
roofscope/pipeline.py: :meth:`Session.start`, step boundaries (explicit ``step()`` calls, else
the first optimizer's ``step()``...: collectors/recording/policy.py), then :meth:`Session.stop`,
which stops every collector and returns what they recorded (:class:`Collected`, its run.json
fields from collectors/recording/runjson.py); the pipeline writes the Run from it, analyzes and
renders, then :meth:`Session.close` drops the session's temporary files.
Only one session may be active per process: Kineto has one profiler.
"""
from __future__ import annotations

import os
import shutil
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from roofscope.collectors import cupti, metadata
from roofscope.collectors.distributed import job_part
from roofscope.collectors.lifecycle import recording_dir
from roofscope.collectors.recording.policy import ProfileComplete, StepPolicy
from roofscope.collectors.recording.recorders import Recorders
from roofscope.collectors.recording.rules import StepRule
from roofscope.collectors.recording.runjson import optimizer_facts, param_group_facts, run_fields
from roofscope.collectors.steptimes import StepTimer
from roofscope.collectors.torchprof import Schedule, TorchCollector, enable_inductor_metadata
from roofscope.config import Collection
from roofscope.errors import OutputExistsError, RoofscopeError
from roofscope.run import directory
from roofscope.run.directory import Claim
from roofscope.run.telemetry import Telemetry

# Imported from here by the script runner and the counters pass (ProfileComplete, StepRule) and by
# callers of the optimizer's facts: the session is the collectors' face.
__all__ = ["Collected", "ProfileComplete", "Session", "SessionConfig", "StepRule", "default_out",
           "optimizer_facts", "param_group_facts", "step", "step_listeners"]

_lock = threading.Lock()
_active: "Session | None" = None


def _after_fork_in_child() -> None:
    # A child forked by the profiled program inherits the session, but the session is its
    # parent's: the child must never finish it, write its Run nor remove its files.
    global _active
    if _active is not None:
        _active.foreign = True
    _active = None


os.register_at_fork(after_in_child=_after_fork_in_child)


def _remove_tmp(path: str, pid: int) -> None:
    if os.getpid() == pid:  # never from a forked child at its exit
        shutil.rmtree(path, ignore_errors=True)


@dataclass(kw_only=True)
class SessionConfig(Collection):
    """A session's settings: the profile's options (roofscope/config.py: the schedule, time
    window, NVML rate (0 turns telemetry off), labels, per-step figures) and where it writes."""

    out: Path | None = None
    force: bool = False
    name: str = "profile"
    command: list[str] = field(default_factory=lambda: list(sys.argv))
    experimental_config: Any = None          # torch.profiler's, for --counters cupti on builds where it works
    script: Path | None = None               # the file `roofscope run` runs as __main__ (--step-on __main__.FUNC)
    schedule: Schedule = field(init=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.schedule = Schedule(self.wait, self.warmup, self.active)


@dataclass
class Collected:
    """What a stopped session recorded; its files stay in the session's temporary directory
    until :meth:`Session.close`."""

    trace: Path | None                 # the Kineto trace; None when the profiler wrote none
    fields: dict[str, Any]             # run.json fields the session knows, in run.json's order
    telemetry: "Telemetry | None"
    captures: list[Path]               # CUDA-graph capture traces (collectors/graphs.py); some may be missing
    warnings: list[str]                # also run.json's `warnings`: later additions land in both


def default_out(name: str, root: Path = Path("roofscope-out")) -> Path:
    """``roofscope-out/<name>-<YYYYmmdd-HHMMSS>``, suffixed ``-2``, ``-3``... if taken."""
    base = root / f"{name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    return out


# Called by every step() too: the counters pass (counters/ncu_target.py) counts steps without a Session.
step_listeners: list[Callable[[], None]] = []


def step() -> None:
    """Mark a step boundary in the active session (a no-op when none is active)."""
    s = _active
    if s is not None:
        s.step()
    for listener in step_listeners:
        listener()


class Session:
    def __init__(self, config: SessionConfig) -> None:
        self.config = config
        # One rank of several writes its part into the job directory (collectors/distributed.py).
        self.part = job_part(config.out, config.name)
        self.out = (self.part.path if self.part is not None
                    else config.out if config.out is not None else default_out(config.name))
        self.warnings: list[str] = []
        self.foreign = False                 # in a child the program forked: the parent's session, hands off
        self.claim: Claim | None = None      # the output, reserved before the program runs (run/directory.py)
        self._tmp: Path | None = None
        self._tmp_cleanup: weakref.finalize | None = None
        self._collector: TorchCollector | None = None
        self._recorders: Recorders | None = None
        self._policy: StepPolicy | None = None   # the steps: boundaries, settling, profiling again
        self._started_at = ""
        self._t0 = 0.0
        self._cpu_start: dict[str, Any] | None = None   # the process's clocks where the session began (run.json's cpu)
        self._finished = False
        self.inductor = ""

    # -- start -------------------------------------------------------------------------------

    def start(self) -> "Session":
        global _active
        if self.part is not None:
            self.part.prepare(self.config.force)
        with _lock:
            if _active is not None:
                raise RoofscopeError("a roofscope profile is already active in this process"
                                     f" (writing {_active.out}); profiles cannot be nested or run concurrently")
            _active = self
        try:
            # Before the program runs: an unwritable, taken or non-Run output fails now, not after it.
            self.claim = self._claim(directory.claim_output)
            self._start_collectors()
        except BaseException:
            self._stop_collectors()
            self._release()
            _active = None
            raise
        return self

    def _claim(self, claim_output: Callable[[Path, bool], "Claim"]) -> "Claim":
        for _ in range(10):
            try:
                return claim_output(self.out, self.config.force)
            except OutputExistsError:
                if self.config.out is not None or self.part is not None:
                    raise
                # Another run took this default name in the same second: the next free one is ours.
                self.out = default_out(self.config.name)
        return claim_output(self.out, self.config.force)

    def _release(self) -> None:
        if self._collector is not None:
            self._collector.exports.close()
        if self._tmp_cleanup is not None:
            self._tmp_cleanup()
        if self.claim is not None:
            self.claim.release()

    def _start_collectors(self) -> None:
        import torch  # start-up time: the CLI does not import torch until a profile starts

        self._started_at = datetime.now().astimezone().isoformat(timespec="seconds")
        self._t0 = time.perf_counter()
        self._cpu_start = metadata.cpu_snapshot()
        self.inductor = enable_inductor_metadata()
        # Not a TemporaryDirectory: its finalizer would also run in a forked child at exit.
        self._tmp = recording_dir(self.claim)   # inside the claimed Run directory, not TMPDIR
        self._tmp_cleanup = weakref.finalize(self, _remove_tmp, str(self._tmp), os.getpid())
        cupti.claim()
        cfg = self.config
        collector = self._collector = TorchCollector(self._tmp / "trace.json", cfg.schedule, cfg.duration, cfg.delay,
                                                     experimental_config=cfg.experimental_config,
                                                     stepless_after_s=cfg.stepless_after)
        self._recorders = Recorders(collector, self._tmp / "graphs", cfg.nvml_hz, cfg.modules, part=self.part)
        self._policy = StepPolicy(cfg, cfg.script, collector, StepTimer(cuda=torch.cuda.is_available()),
                                  self._recorders, self.part, live=lambda: not (self.foreign or self._finished))
        self._recorders.start()
        self._policy.install()
        collector.start()

    # -- steps -------------------------------------------------------------------------------

    def step(self) -> None:
        """An explicit step boundary (see :class:`StepRule`)."""
        if self._policy is not None:
            self._policy.explicit()

    # -- finish ------------------------------------------------------------------------------

    def _stop_collectors(self) -> None:
        if self._policy is not None:   # None: the start failed before any collector ran
            self._policy.stop()

    def stop(self, exit_status: dict[str, Any]) -> Collected:
        """Stop every collector; what they recorded. Call once, whatever ended the program."""
        if self._finished or self.foreign:
            raise RoofscopeError("this profile has already finished" if self._finished else
                                 "this profile belongs to the process that forked this one")
        self._finished = True
        self._stop_collectors()
        wall_s = time.perf_counter() - self._t0
        c, policy, rec = self._collector, self._policy, self._recorders
        assert c is not None and policy is not None and rec is not None
        self.warnings.extend(policy.finish(exit_status))
        step_times = policy.timer.finish()
        if not c.trace_path.exists():
            return Collected(trace=None, fields={}, telemetry=None, captures=[], warnings=self.warnings)
        self.warnings.extend(rec.notes())
        marks = policy.cpu_marks
        fields = run_fields(self.config, c, rec, step_times, policy.timer.dropped, policy.decided(), policy.optimizer,
                            started=self._started_at, wall_s=wall_s, exit_status=exit_status,
                            inductor=self.inductor, warnings=self.warnings, part=self.part, program=policy.program,
                            cpu_marks=(marks.get("start", self._cpu_start), marks.get("end")))
        return Collected(trace=c.trace_path, fields=fields, telemetry=rec.telemetry, captures=rec.captures,
                         warnings=self.warnings)

    def keep_files(self) -> Path | None:
        """Keep the recorded files past :meth:`close` (no Run could be written anywhere); where they are."""
        if self._tmp_cleanup is not None:
            self._tmp_cleanup.detach()
        if self._collector is not None:
            self._collector.exports.keep()
        return self._tmp

    def close(self) -> None:
        """Drop the recorded files and let another session start; after the Run is written."""
        global _active
        self._release()
        with _lock:
            if _active is self:
                _active = None
