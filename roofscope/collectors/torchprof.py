"""The torch.profiler (Kineto) collector: a step schedule or a time window, exported to a file.

Step mode follows ``torch.profiler.schedule(wait, warmup, active)``: ``wait`` steps run
unprofiled (start-up, compilation), ``warmup`` steps run with the profiler started but
discarded (its own start-up cost), ``active`` steps are recorded. The profiler is created when
the wait is over, so every script that reaches its steps gets a profile; ``rearm`` makes that one
provisional and records the schedule again, at once (the session saw the steps settle after it:
the first profile was of cold steps) or once ``ready`` (the session's steady-state test,
collectors/steptimes.py) says the steps have settled (a later ``generate()`` call). Time-window mode
(``duration_s``) is for scripts with no step boundary at all: a ``SIGALRM`` timer starts
the profiler after ``delay_s`` and stops it ``duration_s`` later, so it needs the main
thread; step boundaries that do arrive are still marked. On a CUDA machine the delay counts
from the program's first GPU work.

Every script gets a recording: when no step boundary comes, step-less time windows
(collectors/windows.py, which also drives the ``--duration`` window).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from roofscope.collectors import cupti
from roofscope.collectors.compiling import OnCompileStart, profiler_start
from roofscope.collectors.lifecycle import Exports, replace_handler
from roofscope.collectors.windows import OPENING_DELAY_S, HeldWindow, TimeWindows, kineto_guarded
from roofscope.config import Collection
from roofscope.errors import RoofscopeError
from roofscope.labels import DRAIN_LABEL

INDUCTOR_ENV = "TORCHINDUCTOR_BENCHMARK_KERNEL"


@dataclass(frozen=True)
class Schedule:
    wait: int = Collection.wait
    warmup: int = Collection.warmup
    active: int = Collection.active

    def __post_init__(self) -> None:
        if self.wait < 0 or self.warmup < 0 or self.active < 1:
            raise RoofscopeError(f"invalid schedule wait={self.wait} warmup={self.warmup} active={self.active}:"
                                 " wait and warmup must be >= 0 and active >= 1")

    @property
    def steps(self) -> int:
        return self.wait + self.warmup + self.active


def enable_inductor_metadata() -> str:
    """Make Inductor record bytes/FLOPs per compiled kernel (``benchmark_kernel``); says how.

    A user's own setting wins. The environment variable covers modules compiled later in
    this process; an already imported config is set directly.
    """
    if os.environ.get(INDUCTOR_ENV) not in (None, ""):
        return f"left as set by the user ({INDUCTOR_ENV}={os.environ[INDUCTOR_ENV]})"
    os.environ[INDUCTOR_ENV] = "1"
    cfg = sys.modules.get("torch._inductor.config")
    if cfg is not None:
        cfg.benchmark_kernel = True
    return "enabled"


class TorchCollector(TimeWindows):
    """Owns one ``torch.profiler.profile``; the trace lands in ``trace_path`` when recording ends."""

    def __init__(self, trace_path: Path, schedule: Schedule | None = None,
                 duration_s: float | None = Collection.duration, delay_s: float = Collection.delay,
                 experimental_config: Any = None, ready: Callable[[], bool] | None = None,
                 stepless_after_s: float | None = Collection.stepless_after) -> None:
        if duration_s is not None and duration_s <= 0:
            raise RoofscopeError("--duration must be positive")
        if delay_s < 0:
            raise RoofscopeError("--delay must be >= 0")
        self.trace_path = trace_path
        self._trace_name = trace_path.name
        self.schedule = schedule or Schedule()
        self.duration_s = duration_s
        self.delay_s = delay_s
        # torch._C._profiler._ExperimentalConfig (CUPTI counters; see counters/cupti_probe.py), or None.
        self.experimental_config = experimental_config
        self.steps = 0                 # step boundaries seen
        # Step mode: the boundary count at which the profiler was created (None while waiting for
        # the wait steps and for ``ready``: the steady-state test).
        self.begin: int | None = None
        self.ready = ready
        self.settle_words = ""         # how ``ready`` decides, for the shortfall's message
        self.needs_ready = False       # the first profile starts at --wait; a rearm may wait for ``ready``
        self.stepless_after_s = stepless_after_s or None
        # The step-less windows: None (off, or a step boundary came), "armed" (waiting for the first GPU
        # work or for a compilation to end), "recording", "held" (a window's trace is held; no boundary yet)
        self.fallback: str | None = None
        self.exports = Exports(trace_path.parent)   # the recording directory, or TMPDIR when it will not do
        self.held = HeldWindow(self.exports)
        # What the trace on disk is, when it is a step-less window: "recorded" (no boundary ever came)
        # or "kept" (boundaries came but the step schedule recorded nothing).
        self.kept_window: str | None = None
        # Why no step-less window opens any more (a program that compiles), for the shortfall.
        self.no_window: str | None = None
        self.trace_ready = False
        self.window: str | None = None  # time-window mode: None, "waiting", "recording", "done"
        self._window_ends = 0.0        # time.monotonic() when the recording window closes
        self._dynamo_at_open = False   # Dynamo was imported when the recording window opened
        self._compile_watch = OnCompileStart(self._on_compile_start)
        self.window_cut: str | None = None  # why a time window closed early (a compilation began)
        self.lost: str | None = None   # the profiler error that ended collection (another profiler took Kineto)
        self.unwritten: str | None = None  # why the recorded trace could not be written (a full disk)
        self._prof: Any = None
        self._old_alarm: Any = None
        self.delay_from = "start"      # what --delay counted from
        self._paused = False           # dropped while warming up (make_room)

    @property
    def windowed(self) -> bool:
        return self.duration_s is not None

    @property
    def done(self) -> bool:
        """Everything requested has been recorded (or collection was given up): later steps need no
        profiling."""
        return self.lost is not None or self.trace_ready or self.unwritten is not None

    def _export(self, prof: Any) -> None:
        written = self.exports.export(prof, self._trace_name)
        if written is None:
            self.unwritten = self.exports.failed
            return
        self.trace_path = written
        self.trace_ready = True
        self.held.drop()          # the schedule's own trace: the step-less window is not needed

    def _new_profile(self, schedule: Any, on_ready: Callable[[Any], None] | None = None) -> Any:
        import torch
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            acts.append(ProfilerActivity.CUDA)
        return profile(activities=acts, schedule=schedule, record_shapes=True,
                       on_trace_ready=on_ready or self._export, experimental_config=self.experimental_config)

    @kineto_guarded()
    def start(self) -> None:
        if not self.windowed:
            main = threading.current_thread() is threading.main_thread()
            s = self.schedule
            # No opening window where the step profiler would record in the boundary that closes it
            # (module docstring), nor without the main thread's alarm.
            opening = bool(self.stepless_after_s and main and s.wait > 0 and s.warmup > 0)
            if not opening:
                self._maybe_begin()
            # A profiler already recording (no wait, no warm-up, no settling) records a step-less script anyway.
            if self.stepless_after_s and self.phase != "recording" and main:
                self._old_alarm = replace_handler(signal.SIGALRM, self._on_alarm)
                self.fallback = "armed"
                self._from_first_gpu_work(OPENING_DELAY_S if opening else self.stepless_after_s,
                                          lambda: self.fallback == "armed")
            return
        if threading.current_thread() is not threading.main_thread():
            raise RoofscopeError("a time window (--duration) needs the main thread (it uses SIGALRM)")
        from torch.profiler import ProfilerAction

        # Always RECORD: a schedule (unlike none) makes prof.step() mark ProfilerStep#N.
        self._prof = self._new_profile(lambda _: ProfilerAction.RECORD)
        self._old_alarm = replace_handler(signal.SIGALRM, self._on_alarm)
        self.window = "waiting"
        if self.delay_s > 0:
            self._from_first_gpu_work(self.delay_s, lambda: self.window == "waiting")
        else:
            self._on_alarm()

    def _maybe_begin(self) -> None:
        """Create and start the profiler once the wait is over (and, after a rearm that asked for it,
        once the steps have settled: ``ready``)."""
        if self.steps < self.schedule.wait or (self.needs_ready and self.ready is not None and not self.ready()):
            return
        self._begin(self.schedule.warmup)

    def _begin(self, warmup: int) -> None:
        from torch.profiler import schedule

        s = self.schedule
        inner = schedule(wait=0, warmup=warmup, active=s.active, repeat=1)
        offset = self.steps
        self._prof = self._new_profile(lambda n: inner(max(0, n - offset)))
        self._prof.step_num = offset   # ProfilerStep#N counts every boundary seen
        # Recording starts ``warmup`` boundaries from here, wherever the profile began.
        self.begin = offset - (s.warmup - warmup)
        if warmup == 0:
            self._sync()
        self._start_prof()

    @kineto_guarded(default=False)
    def rearm(self, when_ready: bool = True) -> bool:
        """Record the schedule again (a finished profile's trace is kept by the caller until the new
        one is complete): from the next settled step (``when_ready``), else from this boundary on.
        False in time-window mode, or while the profile is recording. A profile still waiting or
        warming up is dropped."""
        if self.windowed or self.phase == "recording":
            return False
        if self._prof is not None and not self.trace_ready:
            prof, self._prof = self._prof, None
            with cupti.stopping(then_start=not when_ready):
                prof.stop()
        self._prof = None
        self._paused = False
        self.trace_ready = False
        self.begin = None
        self.schedule = Schedule(0, self.schedule.warmup, self.schedule.active)
        self.needs_ready = when_ready
        if not when_ready:
            self._begin(self.schedule.warmup)
        return True

    def _lose(self, error: BaseException) -> None:
        """Give the collection up after a failed profiler transition: what was exported stays."""
        self.lost = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        self._compile_watch.remove()
        self._prof = None
        self._paused = False
        if self.window == "recording":
            self.window = "done"
        if self.windowed or self.fallback is not None:
            try:
                self._disarm()
            except ValueError:   # not the main thread: no alarm of ours there
                pass
        self.fallback = None     # no window opens any more; one held before stays (stop() keeps it)

    @kineto_guarded(default=True)
    def make_room(self) -> bool:
        """Let another profiler run now (a CUDA-graph capture's own, collectors/graphs.py): True
        when none of this one's is active. Kineto runs one session at a time, and a second one
        started while this one warms up cancels it (the trace is lost), so a warming-up profiler
        is dropped, nothing of it being kept, and :meth:`give_back_room` starts it again.
        Inductor's cudagraph trees capture during the first steps, the ones warm-up covers."""
        if self.phase in ("idle", "done"):
            return True
        if self.phase != "warmup" or self.windowed or self.window is not None:
            return False
        prof, self._prof = self._prof, None
        with cupti.stopping(then_start=True):   # the capture's own profiler starts next
            prof.stop()      # WARMUP -> None starts and stops a trace: no export, nothing kept
        self._paused = True
        return True

    @kineto_guarded()
    def give_back_room(self) -> None:
        """Start the profiler dropped by :meth:`make_room` again, in the warm-up steps that remain,
        numbering its steps on from the ones seen."""
        if not self._paused:
            return
        self._paused = False
        assert self.begin is not None
        self._begin(max(1, self.begin + self.schedule.warmup - self.steps))

    @property
    def phase(self) -> str:
        """``idle`` (not started or waiting), ``warmup`` (Kineto prepared), ``recording`` or ``done``."""
        if self.done or self.window == "done" and self.fallback is None:
            return "done"
        if self.windowed or self.window is not None:
            return "recording" if self.window == "recording" else "idle"
        if self._prof is None or self.begin is None:
            return "idle"
        return "warmup" if self.steps < self.begin + self.schedule.warmup else "recording"

    @property
    def recording_next(self) -> bool:
        """The next step is recorded (or recording has begun): time to sample energy closely."""
        if self.windowed:
            return self.window == "recording"
        return self.begin is not None and self.steps + 1 >= self.begin + self.schedule.warmup

    @kineto_guarded()
    def step(self) -> None:
        if self.windowed and self._prof is None:
            return
        if self.fallback is not None:
            self._end_stepless()
        self.steps += 1   # counted after the profile too: boundaries number the steps for a rearm
        if self.done:
            return
        if self.windowed:
            if self.window == "recording":
                self._prof.step()
            return
        if self._prof is None:
            if not self._paused:
                self._maybe_begin()
            return
        assert self.begin is not None
        s = self.schedule
        # The GPU runs behind the CPU: drain it where recording starts and ends, or the first
        # recorded step holds the previous step's kernels (without their launches) and the
        # last one loses its tail.
        if self.steps - self.begin in (s.warmup, s.warmup + s.active):
            self._sync()
        if self.steps - self.begin == s.warmup + s.active:
            with cupti.stopping():   # this step ends the recording
                self._prof.step()
        else:
            self._prof.step()

    def _start_prof(self) -> None:
        cupti.before_start()
        profiler_start(self._prof.start)

    @staticmethod
    def _sync() -> None:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            # Labelled so the analysis can tell roofscope's own sync from the workload's.
            with torch.profiler.record_function(DRAIN_LABEL):
                try:
                    torch.cuda.synchronize()
                except RuntimeError:  # a crashed CUDA context: keep whatever was recorded
                    pass

    def stop(self) -> bool:
        """Stop recording (keeping a partly recorded active phase); True when a trace was written.
        With none from the schedule, a held step-less window is written instead."""
        try:
            if self.fallback == "recording":
                self._close_window()
            if self.windowed or self.fallback is not None:
                self._disarm()
            if self._prof is not None:
                if self.window == "recording":
                    self._finish_window()
                elif not (self.windowed or self.window == "done" or self.trace_ready):
                    self._sync()
                    with cupti.stopping():
                        self._prof.stop()
        except RuntimeError as e:
            self._lose(e)
        self._prof = None
        if self.trace_ready:   # the program may have removed the directory the trace was exported to
            self.trace_path = self.exports.recover(self.trace_path) or self.trace_path
        kept = self.held.keep_as(self._trace_name) if not self.trace_ready else None
        if kept is not None:
            self.trace_path = kept
            self.kept_window = "recorded" if self.steps == 0 else "kept"
            self.trace_ready = True
        self.held.drop()
        return self.trace_ready

    def shortfall(self) -> str | None:
        """Why the requested steps or window were not all recorded, or None."""
        if self.unwritten is not None and not self.trace_ready:
            return f"the profiled steps were recorded but their trace could not be written: {self.unwritten}"
        said = self._schedule_shortfall()
        if self.lost is None:
            return said
        # Boundaries counted after the loss say nothing of what was recorded: only a trace exported before it does.
        return ((said + "; then " if said and self.trace_ready else "") +
                f"the profiler was stopped from outside roofscope ({self.lost}): another torch.profiler took Kineto"
                " over (Inductor benchmarking while it compiled, or the program's own); "
                + ("what was recorded before is kept" if self.trace_ready else "nothing was recorded"))

    def _schedule_shortfall(self) -> str | None:
        window = self.held.words(self.delay_from, self.stepless_after_s) + (f" (cut short: {self.window_cut})" if self.window_cut else "")
        if self.kept_window == "recorded":
            return f"recorded a time window instead of steps, {window}"
        if self.windowed:
            if self.window == "waiting":
                return (f"the program ended before the time window opened (--delay {self.delay_s:g} s, counted from "
                        f"its {self.delay_from})")
            return f"the time window closed early: {self.window_cut}" if self.window_cut else None
        s = self.schedule
        if self.begin is not None and self.steps >= self.begin + s.warmup + s.active:
            return None
        got = (f"requested {s.wait} wait + {s.warmup} warmup + {s.active} active steps, but only "
               f"{self.steps} step boundar{'y' if self.steps == 1 else 'ies'} arrived")
        nothing = (f"; the steps recorded nothing: kept the time window recorded before the first of them, {window}"
                   if self.kept_window == "kept" else "; nothing was recorded"
                   + (f" (no step-less time window: {self.no_window})" if self.no_window else ""))
        if self.begin is None:
            settling = (f" (after the wait, roofscope waited for the step times to settle: {self.settle_words})"
                        if self.needs_ready and self.steps >= s.wait and self.settle_words else "")
            return got + settling + nothing
        complete = self.steps - self.begin - s.warmup
        if complete < 0:
            return got + nothing
        return got + (f"; recorded {complete} complete active step{'' if complete == 1 else 's'}"
                      " and the step that was running when profiling stopped")
