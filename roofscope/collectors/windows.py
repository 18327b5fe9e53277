"""Time windows of the Kineto collector (collectors/torchprof.py): a ``--duration`` window and the
step-less ones, driven by ``SIGALRM`` in the main thread.

Every script gets a recording, also one that never marks a step (a user's own kernel in a plain
loop: no optimizer, no module, no ``roofscope.step()``) and one that ends in less than a second.
In step mode the collector records a step-less window from the program's first GPU work (its start
on a CPU machine): the *opening window*, closed by the first step boundary, by
:data:`STEPLESS_WINDOW_S`, by a compilation's start or by the program's end. Its trace is held
aside (:class:`HeldWindow`) and becomes the Run's only when the step schedule records none (no
boundary ever came, or too few). When no boundary has come ``stepless_after_s`` seconds after the
first GPU work, a second window of the same length is recorded from there and replaces the opening
one: a long step-less program is profiled past its start-up. A CUDA graph captured inside a window
is recorded in it (no session switch).

Kineto sessions that follow one another are where the hazards are:

- a ``record_function`` entered under one session and left while another one records writes into
  the first one's freed events. The first boundary closes the opening window inside the boundary's
  own ``record_function`` (``Optimizer.step``), so the step profiler only warms up in that step:
  ``--wait 0`` (a profiler from the start) and ``--warmup 0`` get no opening window;
- CUPTI's teardown between them (collectors/cupti.py);
- ``torch.compile``: Inductor's own profilers while it compiles, and the compilation's saved and
  restored thread state (collectors/compiling.py). A window neither opens during a compilation nor
  stays open when one starts, and a program that has imported Dynamo gets no step-less window.

The alarm's handler runs between the main thread's bytecodes, so no op is half-recorded; a window
that records ticks every :data:`WINDOW_TICK_S` to see a compilation the callbacks missed.
Every trace, the windows' and the step schedule's, is exported through collectors/lifecycle/recording.py.
"""
from __future__ import annotations

import functools
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from roofscope.collectors import cupti
from roofscope.collectors.compiling import another_profiler, compiling, dynamo_cause, dynamo_imported
from roofscope.collectors.lifecycle import Exports, restore_handler

# The step-less windows' trace is held beside the step schedule's: the latest window is exported
# aside and becomes the Run's trace only when the step schedule records none of its own. A stopped
# torch.profiler object is not kept instead: holding one across later Kineto sessions corrupted memory
# now and then (CPU, 2026-11-26).
HELD_NAME = "stepless-window.json"


@dataclass
class HeldWindow:
    """The latest step-less window's exported trace, and when it ran."""
    exports: Exports
    first_work: float | None = None     # time.monotonic() of the program's first GPU work (its start on a CPU)
    span: tuple[float, float] = (0.0, 0.0)   # the window's start and end, seconds after first_work
    windows: int = 0                    # windows opened; the first is the opening one
    path: Path | None = None
    # Called with each held trace (the graph recorder adopts one that holds captures).
    on_hold: Callable[[Path], None] | None = field(default=None, repr=False)

    def since_first_work(self) -> float:
        return time.monotonic() - self.first_work if self.first_work is not None else 0.0

    def opened(self) -> None:
        self.windows += 1
        self.span = (self.since_first_work(), 0.0)

    def hold(self, prof: Any) -> None:
        """torch.profiler's ``on_trace_ready`` for a window: export it aside (replacing an earlier one)."""
        self.span = (self.span[0], self.since_first_work())   # writing it out is no part of it
        exported = self.exports.export(prof, HELD_NAME)
        if exported is None:
            return        # not written (a full disk): an earlier window, if any, stays held
        self.path = exported
        if self.on_hold is not None:
            self.on_hold(self.path)

    def drop(self) -> None:
        if self.path is not None:
            self.exports.drop(self.path)
            self.path = None

    def keep_as(self, name: str) -> Path | None:
        """Make the held window the Run's trace, renamed ``name`` where it lies; None when none is held."""
        held, self.path = self.path, None
        if held is not None:
            held = self.exports.recover(held)
        return held.replace(held.with_name(name)) if held is not None else None

    def words(self, counted_from: str, late_after: float | None) -> str:
        """Which stretch the window covers, for the shortfall (``late_after``: --stepless-after)."""
        start, end = self.span
        if self.windows == 1:   # the opening window: from the first GPU work (less the profiler's start)
            return f"the first {end:.1f} s from the program's {counted_from}"
        late = f" (--stepless-after {late_after:g})" if late_after and start >= late_after else ""
        return f"{start:.1f} to {end:.1f} s after the program's {counted_from}{late}"


# The longest step-less window (seconds).
STEPLESS_WINDOW_S = 5.0
# The opening window starts this long after the first GPU work: the alarm's handler runs between
# the main thread's bytecodes, never inside CUDA's lazy initialization.
OPENING_DELAY_S = 0.001
# A time window that would open while a compilation or another profiler runs waits this long and
# looks again; one that records looks this often whether a compilation began unseen (seconds).
BUSY_RETRY_S = 0.5
WINDOW_TICK_S = 0.25


def kineto_guarded(default: Any = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A profiler transition that fails because another profiler took Kineto over (Inductor
    benchmarking while it compiles, the program's own torch.profiler) must not raise into the
    program: these run in its hooks and signal handlers. The collector gives up (:meth:`_lose`)."""
    def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except RuntimeError as e:
                self._lose(e)
                return default
        return guarded
    return wrap


class TimeWindows:
    """The alarm-driven windows of :class:`~roofscope.collectors.torchprof.TorchCollector` (its state
    lives there: ``window``, ``fallback``, ``held``, ``_prof``...)."""

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

    @kineto_guarded()
    def _on_alarm(self, *_: Any) -> None:
        # Runs in the main thread between bytecodes, so no op is half-recorded.
        opening = self.fallback in ("armed", "held") or self.window == "waiting"
        if opening and (compiling() or another_profiler()):
            signal.setitimer(signal.ITIMER_REAL, BUSY_RETRY_S)   # Kineto is not ours to take now
        elif self.fallback in ("armed", "held") and dynamo_imported():
            # No step-less window in a program that compiles: a window closed when a compilation
            # began left the step profiler unable to start ("Profiler is already enabled on this
            # thread": 5 of 5 cold lightning --compile runs on the H200; most likely the compilation
            # saves and restores the thread's state, the profiler's included: not verified). A window
            # held from before stays.
            self._refuse_windows()
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
            elif self.fallback == "recording" and not self._dynamo_at_open and dynamo_imported():
                self._cut_window("torch.compile was imported")   # a step-less one, before it compiles (above)
            elif time.monotonic() >= self._window_ends:
                self._close_window()
            else:
                signal.setitimer(signal.ITIMER_REAL, min(WINDOW_TICK_S, self._window_ends - time.monotonic()))

    def _refuse_windows(self) -> None:
        """No more step-less windows in this program (it imported Dynamo): say why, once (the steps then
        come from the script's own loop, collectors/loops/, or none)."""
        if self.no_window is None:
            self.no_window = dynamo_cause()

    def _open_window(self, seconds: float) -> None:
        self._dynamo_at_open = dynamo_imported()
        self.window = "recording"
        self._window_ends = time.monotonic() + seconds
        self._compile_watch.poll()
        signal.setitimer(signal.ITIMER_REAL, min(WINDOW_TICK_S, seconds))

    @kineto_guarded()
    def _on_compile_start(self) -> None:
        if self.window == "recording":
            self._cut_window()

    def _cut_window(self, why: str = "a torch.compile compilation began") -> None:
        """Close a window for a compilation: the program compiles, so it gets no step-less one again."""
        self.window_cut = why
        stepless = self.fallback == "recording"
        self._close_window()
        if stepless:
            self._refuse_windows()

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

    def _disarm(self) -> None:
        """Cancel the alarm and give SIGALRM back to whoever had it."""
        signal.setitimer(signal.ITIMER_REAL, 0)
        restore_handler(signal.SIGALRM, self._old_alarm)

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
