"""Does a Kineto session started right after another record GPU kernels? (CUDA machine only.)

Each mode runs in its own process: PAIRS times, session A records a few matmuls and stops, and
session B starts at once and records a few more. A B with no kernel is the race of
collectors/cupti.py (Kineto's asynchronous CUPTI teardown finalizing the next session). After the
last pair, the launch cost of an empty-ish kernel says whether CUPTI was detached.

    python benchmarks/real_clients/session_switch_probe.py            # the table
    python benchmarks/real_clients/session_switch_probe.py MODE       # one mode (a child)

Modes:
  unprofiled      no session at all: the launch cost with no CUPTI
  torch-default   TEARDOWN_CUPTI unset: Kineto never detaches
  teardown-1      TEARDOWN_CUPTI=1 throughout (roofscope before this probe)
  roofscope       collectors/cupti.py: A stops detaching, B waits for the teardown (before_start)
  roofscope-kept  collectors/cupti.py: A stops without detaching (stopping(then_start=True))
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAIRS = 20
MODES = ("unprofiled", "torch-default", "teardown-1", "roofscope", "roofscope-kept")


def _kernels(prof) -> int:
    from torch.autograd import DeviceType

    return sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA)


def _launch_us(torch) -> float:
    """Median of 7 rounds of 2,000 launches of a one-element add, in microseconds per launch."""
    x = torch.zeros(1, device="cuda")
    rounds = []
    for _ in range(7):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(2000):
            x.add_(1)
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - t) / 2000 * 1e6)
    return sorted(rounds)[3]


def child(mode: str) -> None:
    sys.path.insert(0, str(ROOT))
    import contextlib

    import torch
    from torch.profiler import ProfilerActivity, profile

    from roofscope.collectors import cupti

    if mode == "teardown-1":
        os.environ["TEARDOWN_CUPTI"] = "1"
    elif mode.startswith("roofscope"):
        cupti.claim()
    a = torch.randn(1024, 1024, device="cuda")
    for _ in range(3):
        a @ a
    torch.cuda.synchronize()
    empty_a = empty_b = 0
    for _ in range(PAIRS if mode != "unprofiled" else 0):
        for which in "AB":
            prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
            if mode.startswith("roofscope"):
                cupti.before_start()
            prof.start()
            for _ in range(4):
                a @ a
            torch.cuda.synchronize()
            if mode == "roofscope-kept" and which == "A":
                stop = cupti.stopping(then_start=True)
            elif mode.startswith("roofscope"):
                stop = cupti.stopping()
            else:
                stop = contextlib.nullcontext()
            with stop:
                prof.stop()
            if _kernels(prof) == 0:
                empty_a += which == "A"
                empty_b += which == "B"
    time.sleep(0.2)
    torch.cuda.synchronize()
    print(f"RESULT {mode} {empty_a} {empty_b} {_launch_us(torch):.2f}")


def main() -> None:
    rows = []
    for mode in MODES:
        out = subprocess.run([sys.executable, __file__, mode], capture_output=True, text=True)
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")), None)
        if line is None:
            rows.append((mode, "failed", (out.stderr.strip().splitlines() or ["?"])[-1], ""))
            continue
        _, m, ea, eb, us = line.split()
        rows.append((m, f"{ea}/{PAIRS}", f"{eb}/{PAIRS}", us))
    print(f"| mode | A sessions with no kernel | B (started at once) with no kernel | launch us after |")
    print("|---|---:|---:|---:|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        child(sys.argv[1])
    else:
        main()
