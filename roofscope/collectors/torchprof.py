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

Every script gets a recording, also one that never marks a step (a user's own kernel in a plain
loop: no optimizer, no module, no ``roofscope.step()``) and one that ends in less than a second.
In step mode the collector records a step-less window from the program's first GPU work (its start
on a CPU machine): the *opening window*, closed by the first step boundary, by
:data:`STEPLESS_WINDOW_S`, by a compilation's start (collectors/compiling.py) or by the program's
end. Its trace is held aside (collectors/stepless.py) and becomes the Run's only when the step
schedule records none (no boundary ever came, or too few). When no boundary has come
``stepless_after_s`` seconds after the first GPU work, a second window of the same length is
recorded from there and replaces the opening one: a long step-less program is profiled past its
start-up. A CUDA graph captured inside a window is recorded in it (no session switch).

Kineto sessions that follow one another are where the hazards are:
- a ``record_function`` entered under one session and left while another one records writes into
  the first one's freed events. The first boundary closes the opening window inside the boundary's
  own ``record_function`` (``Optimizer.step``), so the step profiler only warms up in that step:
  ``--wait 0`` (a profiler from the start) and ``--warmup 0`` get no opening window;
- CUPTI's teardown between them (collectors/cupti.py);
- Inductor's own profilers while it compiles (collectors/compiling.py).
"""
from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from roofscope.collectors import cupti
from roofscope.collectors.compiling import OnCompileStart, another_profiler, compiling, dynamo_imported
from roofscope.collectors.stepless import HeldWindow
from roofscope.model.trace import DRAIN_LABEL
from roofscope.config import Collection
from roofscope.errors import RoofscopeError

INDUCTOR_ENV = "TORCHINDUCTOR_BENCHMARK_KERNEL"
# The longest step-less window (seconds).
STEPLESS_WINDOW_S = 5.0
# The opening window starts this long after the first GPU work: the alarm's handler runs between
# the main thread's bytecodes, never inside CUDA's lazy initialization.
OPENING_DELAY_S = 0.001
# A time window that would open while a compilation or another profiler runs waits this long and
# looks again; one that records looks this often whether a compilation began unseen (seconds).
BUSY_RETRY_S = 0.5
WINDOW_TICK_S = 0.25


def _kineto_guarded(default: Any = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A profiler transition that fails because another profiler took Kineto over (Inductor
    benchmarking while it compiles, the program's own torch.profiler) must not raise into the
    program: these run in its hooks and signal handlers. The collector gives up (:meth:`_lose`)."""
    def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def guarded(self: "TorchCollector", *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except RuntimeError as e:
                self._lose(e)
                return default
        return guarded
    return wrap


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


class TorchCollector:
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
        self.held = HeldWindow(trace_path.parent)
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
        return self.lost is not None or self.trace_ready

    def _export(self, prof: Any) -> None:
        prof.export_chrome_trace(str(self.trace_path))
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

    @_kineto_guarded()
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
                self._old_alarm = signal.signal(signal.SIGALRM, self._on_alarm)
                self.fallback = "armed"
                self._from_first_gpu_work(OPENING_DELAY_S if opening else self.stepless_after_s,
                                          lambda: self.fallback == "armed")
            return
        if threading.current_thread() is not threading.main_thread():
            raise RoofscopeError("a time window (--duration) needs the main thread (it uses SIGALRM)")
        from torch.profiler import ProfilerAction

        # Always RECORD: a schedule (unlike none) makes prof.step() mark ProfilerStep#N.
        self._prof = self._new_profile(lambda _: ProfilerAction.RECORD)
        self._old_alarm = signal.signal(signal.SIGALRM, self._on_alarm)
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

    @_kineto_guarded(default=False)
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

    def _from_first_gpu_work(self, seconds: float, still: Any) -> None:
        """Set the alarm ``seconds`` after the program's first GPU work (CUDA's lazy
        initialization, which its first kernel launch or allocation triggers), not from start-up:
        imports and model construction on the CPU can take longer than any delay one would guess
        (--delay; the step-less fallback). ``still()`` says whether the alarm is still wanted then."""
        import torch

        def arm() -> None:
            self.held.first_work = time.monotonic()
            if still():
                signal.setitimer(signal.ITIMER_REAL, seconds)

        if torch.cuda.is_available() and not torch.cuda.is_initialized():
            self.delay_from = "first GPU work"
            torch.cuda._lazy_call(arm)
        else:
            self.delay_from = "start"
            arm()

    @_kineto_guarded()
    def _on_alarm(self, *_: Any) -> None:
        # Runs in the main thread between bytecodes, so no op is half-recorded.
        opening = self.fallback in ("armed", "held") or self.window == "waiting"
        if opening and (compiling() or another_profiler()):
            signal.setitimer(signal.ITIMER_REAL, BUSY_RETRY_S)   # Kineto is not ours to take now
        elif self.fallback in ("armed", "held") and dynamo_imported():
            # No step-less window in a program that compiles: a window closed when a compilation
            # began left the step profiler unable to start ("Profiler is already enabled on this
            # thread": 4 of 4 cold lightning --compile runs on the H200; the compilation keeps and
            # restores the thread's profiler state). A window held from before stays.
            self.no_window = "the program imported torch.compile's Dynamo"
        elif self.fallback in ("armed", "held"):
            self._begin_stepless()
        elif self.window == "waiting":
            self._sync()
            self._start_prof()
            self._open_window(self.duration_s)
        elif self.window == "recording":
            self._compile_watch.poll()
            if compiling():   # begun before the watch could see it: close now rather than under Inductor's profiler
                self._cut_window()
            elif not self._dynamo_at_open and dynamo_imported():
                self._cut_window("torch.compile was imported")   # before it compiles (above)
            elif time.monotonic() >= self._window_ends:
                self._close_window()
            else:
                signal.setitimer(signal.ITIMER_REAL, min(WINDOW_TICK_S, self._window_ends - time.monotonic()))

    def _open_window(self, seconds: float) -> None:
        self._dynamo_at_open = dynamo_imported()
        self.window = "recording"
        self._window_ends = time.monotonic() + seconds
        self._compile_watch.install()
        signal.setitimer(signal.ITIMER_REAL, min(WINDOW_TICK_S, seconds))

    @_kineto_guarded()
    def _on_compile_start(self) -> None:
        if self.window == "recording":
            self._cut_window()

    def _cut_window(self, why: str = "a torch.compile compilation began") -> None:
        self.window_cut = why
        self._close_window()

    def _close_window(self, then_start: bool = False) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        if self.fallback != "recording":
            self._finish_window()
            return
        self._finish_window(then_start)   # exported aside by HeldWindow.hold
        self._prof = None
        self.window = None
        self.fallback = "held"
        if self._late() > 0:
            signal.setitimer(signal.ITIMER_REAL, self._late())

    def _late(self) -> float:
        """Seconds until the --stepless-after window is due (<= 0: due, or none)."""
        return self.stepless_after_s - self.held.since_first_work() if self.stepless_after_s else 0.0

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

    def _disarm(self) -> None:
        """Cancel the alarm and give SIGALRM back to whoever had it."""
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self._old_alarm if self._old_alarm is not None else signal.SIG_DFL)

    def _begin_stepless(self) -> None:
        """No step boundary yet (so no step profiler either: :meth:`start`): record a time window from
        now, the opening one at the first GPU work or a later one that replaces it."""
        from torch.profiler import ProfilerAction

        self._prof = self._new_profile(lambda _: ProfilerAction.RECORD, self.held.hold)
        self.fallback = "recording"
        self.held.opened()
        self._sync()
        self._start_prof()
        self._open_window(STEPLESS_WINDOW_S)

    def _end_stepless(self) -> None:
        """A step boundary came: the step schedule takes over from here. A window still recording is
        closed and held: it is the trace only if the schedule records none. The step profiler may
        start in this boundary: CUPTI stays attached for it."""
        if self.fallback == "recording":
            self._close_window(then_start=self.steps + 1 >= self.schedule.wait)
        self._disarm()
        self.fallback = None

    def _finish_window(self, then_start: bool = False) -> None:
        self.window = "done"
        self._compile_watch.remove()
        if self._prof is None:   # given up already (_lose)
            return
        self._sync()
        with cupti.stopping(then_start):
            self._prof.stop()

    @_kineto_guarded(default=True)
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

    @_kineto_guarded()
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

    @_kineto_guarded()
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
        self._prof.start()

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
        if not self.trace_ready and self.held.keep_as(self.trace_path):
            self.kept_window = "recorded" if self.steps == 0 else "kept"
            self.trace_ready = True
        self.held.drop()
        return self.trace_ready

    def shortfall(self) -> str | None:
        """Why the requested steps or window were not all recorded, or None."""
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
