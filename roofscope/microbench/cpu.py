"""CPU ceilings: matmul FLOP/s per dtype and memory copy bandwidth, measured with torch.

Short on purpose (about a second): enough for CPU-only runs to get a real roofline.
"""
from __future__ import annotations

import platform
import time
from datetime import datetime, timezone
from pathlib import Path

from ..devices import Ceilings


def cpu_name() -> str:
    """The CPU model, e.g. 'cpu: AMD EPYC 7B13' (falls back to the architecture)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return "cpu: " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu: " + (platform.processor() or platform.machine() or "unknown")


def _best_time(fn, repeats: int) -> float:
    fn()  # warm-up: first calls pay for allocation and thread start-up
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def measure_cpu(n: int = 1024, copy_mib: int = 256, repeats: int = 5) -> Ceilings:
    """Best-of-``repeats`` fp32/bf16 matmul rate (n x n x n, random data) and copy bandwidth."""
    import torch

    peaks = {}
    for key, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a = torch.randn(n, n, dtype=dtype)
        b = torch.randn(n, n, dtype=dtype)
        peaks[key] = 2.0 * n ** 3 / _best_time(lambda: torch.mm(a, b), repeats)
    src = torch.randn(copy_mib * (1 << 20) // 4)
    dst = torch.empty_like(src)
    # A copy reads and writes every byte.
    bandwidth = 2.0 * src.numel() * 4 / _best_time(lambda: dst.copy_(src), repeats)
    return Ceilings(device=cpu_name(), source="measured", peaks=peaks, bandwidth=bandwidth,
                    measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    env={"torch": torch.__version__, "threads": torch.get_num_threads(),
                         "method": f"best of {repeats}: {n}^3 matmul, {copy_mib} MiB copy"})
