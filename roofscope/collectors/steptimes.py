"""The program's own step times, measured without the profiler, and when they have settled.

At every step boundary (an optimizer step, an outermost forward, ``roofscope.step()``,
``prof.step()``, ``--step-on``) :class:`StepTimer` keeps a host timestamp and, on a CUDA
machine, a CUDA event recorded on the current stream, without synchronizing: the events are
read when the session ends. It does so in the wait and warm-up steps, in the profiled steps
and after the profiled window while the script goes on, so run.json can say what a step costs
with the profiler and without it (docs/overhead.md). A step is the interval between two
boundaries; its time on the GPU is the time between the events that bound it (the GPU's
progress through the stream, which is the step's real throughput whether the GPU or the host
is the bottleneck), its host time the time between the timestamps.

:meth:`StepTimer.settled` is the steady-state test: the last ``k`` unprofiled steps within
``tolerance`` of their median. When the steps after the first profile pass it, the session
profiles again on them (collectors/recording/policy.py). On a CUDA machine it reads only the events that
have completed (``Event.query``, no sync).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

# Past this many boundaries the timer stops recording (a long job's own steps are many; the
# median of 100k is as good as of more, and the events' memory stays bounded).
MAX_STEPS = 100_000


@dataclass
class StepTime:
    """One step: the interval from boundary ``index`` to the next, numbered as the trace numbers its
    steps (``ProfilerStep#index``; step 0, before the first boundary, is not timed)."""

    index: int
    phase: str                 # "unprofiled" (before the profile or after it), "warmup", "active"
    host_s: float
    gpu_s: float | None        # None without CUDA events (a CPU run) or when an event never completed
    tokens: int | None = None  # tokens per sequence of the forward that started the step (forward steps)
    outer: int | None = None   # the iteration of the step loop's outer loop the step ended in (loop steps)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class StepTimer:
    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self._host: list[int] = []
        self._events: list[Any] = []
        self._phases: list[str] = []      # the phase of the step that *ends* at each boundary
        self._tokens: list[int | None] = []
        self._outer: list[int | None] = []
        self._done_upto = 0               # events known complete (settle checks, no sync)
        # Where the step after a boundary began, when not at the boundary itself (restart()).
        self._start_host: dict[int, int] = {}
        self._start_events: dict[int, Any] = {}
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._host)

    def mark(self, phase: str, tokens: int | None = None, outer: int | None = None) -> None:
        """A boundary: the step ending here ran in ``phase`` (in iteration ``outer`` of the step loop's
        outer loop); ``tokens`` describe the step starting here."""
        if len(self._host) >= MAX_STEPS:
            self.dropped += 1
            return
        self._host.append(time.perf_counter_ns())
        self._phases.append(phase)
        self._tokens.append(tokens)
        self._outer.append(outer)
        if self.cuda:
            self._events.append(self._event())

    def restart(self) -> None:
        """The step after the latest boundary starts now: roofscope's own work at that boundary
        (writing the trace out) is nobody's step."""
        i = len(self._host) - 1
        if i < 0:
            return
        self._start_host[i] = time.perf_counter_ns()
        if self.cuda:
            self._start_events[i] = self._event()

    def relabel(self, old: tuple[str, ...], new: str) -> None:
        """Steps of a profile that was dropped (a rearm) are neither profiled nor the program's."""
        self._phases = [new if p in old else p for p in self._phases]

    def _event(self) -> Any:
        import torch

        if not torch.cuda.is_initialized():
            return None
        e = torch.cuda.Event(enable_timing=True)
        try:
            e.record()
        except RuntimeError:  # a broken context: keep the host time
            return None
        return e

    def _gpu_interval(self, i: int) -> float | None:
        a, b = self._start_events.get(i - 1, self._events[i - 1]), self._events[i]
        if a is None or b is None:
            return None
        try:
            return a.elapsed_time(b) / 1e3
        except RuntimeError:
            return None

    def _host_interval(self, i: int) -> float:
        return (self._host[i] - self._start_host.get(i - 1, self._host[i - 1])) / 1e9

    def recent(self, n: int, since: int = 0) -> list[float]:
        """The last ``n`` complete unprofiled step times (GPU where known, else host) of the steps
        from index ``since`` on (the step after boundary ``since``), without a sync."""
        if self.cuda:
            while self._done_upto < len(self._events):
                e = self._events[self._done_upto]
                if e is not None and not e.query():
                    break
                self._done_upto += 1
            last, interval = self._done_upto, self._gpu_interval
        else:
            last, interval = len(self._host), self._host_interval
        vals = [interval(i) for i in range(max(1, since, last - n), last) if self._phases[i] == "unprofiled"]
        return [v for v in vals if v is not None]

    def settled(self, k: int, tolerance: float, since: int = 0) -> bool:
        """The last ``k`` complete steps from index ``since`` on (all unprofiled) lie within
        ``tolerance`` of their median."""
        if k <= 0:
            return True
        vals = self.recent(k, since)
        if len(vals) < k:
            return False
        med = statistics.median(vals)
        return med > 0 and all(abs(v - med) <= tolerance * med for v in vals)

    def finish(self) -> list[StepTime]:
        """Every step timed, once the GPU has reached the last event (one sync, at the end)."""
        if self.cuda and self._events and self._events[-1] is not None:
            try:
                self._events[-1].synchronize()
            except RuntimeError:
                pass
        out = []
        for i in range(1, len(self._host)):
            gpu = self._gpu_interval(i) if self.cuda else None
            out.append(StepTime(i, self._phases[i], self._host_interval(i),
                                None if gpu is None else round(gpu, 9), self._tokens[i - 1], self._outer[i]))
        return out
