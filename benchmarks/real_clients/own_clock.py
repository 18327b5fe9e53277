"""The clients' own step timer, as a user would write it: the host time between consecutive step
ends (no extra synchronization, so the program runs as it would without it). Printed at the end:
every step's time and the steady median after the first ``skip`` steps, the figure roofscope's
unprofiled step time is checked against (docs/validation.md)."""
from __future__ import annotations

import statistics
import time


class StepClock:
    def __init__(self) -> None:
        self.t: list[float] = []

    def tick(self) -> None:
        self.t.append(time.perf_counter())

    def report(self, skip: int = 10, unit: str = "step") -> float:
        gaps = [b - a for a, b in zip(self.t, self.t[1:])]
        steady = statistics.median(gaps[skip:] or gaps)
        print(f"{unit} times ms:", [round(g * 1e3, 2) for g in gaps])
        print(f"own steady {unit} {steady * 1e3:.3f} ms (median of {unit}s {skip + 1}..{len(gaps)})", flush=True)
        return steady
