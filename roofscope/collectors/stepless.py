"""The step-less windows' trace, held beside the step schedule's (collectors/torchprof.py).

A script that never marks a step, or ends before its first steps are profiled, still gets a Run:
the collector records time windows while no step boundary has come (the opening one from the
program's first GPU work, and one ``--stepless-after`` seconds after it), and the latest of them is
exported here, *aside*. It becomes the Run's trace only when the step schedule records none of its
own. A stopped torch.profiler object is not kept instead: holding one across later Kineto sessions
corrupted memory now and then (CPU, 2026-11-26).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

NAME = "stepless-window.json"


@dataclass
class HeldWindow:
    """The latest step-less window's exported trace, and when it ran."""
    directory: Path
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
        self.path = self.directory / NAME
        prof.export_chrome_trace(str(self.path))
        if self.on_hold is not None:
            self.on_hold(self.path)

    def drop(self) -> None:
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            self.path = None

    def keep_as(self, trace: Path) -> bool:
        """Make the held window the Run's trace; False when none is held."""
        if self.path is None:
            return False
        self.path.replace(trace)
        self.path = None
        return True

    def words(self, counted_from: str, late_after: float | None) -> str:
        """Which stretch the window covers, for the shortfall (``late_after``: --stepless-after)."""
        start, end = self.span
        if self.windows == 1:   # the opening window: from the first GPU work (less the profiler's start)
            return f"the first {end:.1f} s from the program's {counted_from}"
        late = f" (--stepless-after {late_after:g})" if late_after and start >= late_after else ""
        return f"{start:.1f} to {end:.1f} s after the program's {counted_from}{late}"
