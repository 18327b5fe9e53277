"""Host-link ceilings: H2D and D2H copy bandwidth from pinned and pageable host memory.

Copies between host and device run at the PCIe (or C2C) link's rate, not HBM's: the analysis
places HtoD/DtoH copies against these figures (Ceilings.copy_roof). Pinned copies are DMA at
link speed; pageable ones are staged by the driver through a pinned bounce buffer, and the
gap between the two is what pinning the memory (``pin_memory=True``) would win. Timed with
the wall clock around a synchronized copy: pageable copies block the host, so CUDA events
around them would measure the staging's queueing, not the copy.
"""
from __future__ import annotations

import time
from typing import Callable

from roofscope.microbench.timing import Measurement, choose_reps, rate, summarize

# Keys of Ceilings.host_link, with the direction and host memory of each.
KEYS = {"h2d": ("HtoD", True), "d2h": ("DtoH", True), "h2d_pageable": ("HtoD", False),
        "d2h_pageable": ("DtoH", False)}
SIZE_MIB = 256  # ~4 ms at 63 GB/s: per-call overheads (a few us) are below 0.1%


def copy_bench(key: str, size_mib: int = SIZE_MIB, target_s: float = 0.3) -> Callable[[], Measurement]:
    """Bytes/s of one host<->device copy direction and host memory kind (``KEYS``)."""
    direction, pinned = KEYS[key]

    def run() -> Measurement:
        import torch

        n = size_mib << 20
        host = torch.empty(n, dtype=torch.uint8, pin_memory=pinned)
        host.fill_(1)  # touch every page: first-touch faults are no part of a copy's cost
        dev = torch.empty(n, dtype=torch.uint8, device="cuda")
        src, dst = (host, dev) if direction == "HtoD" else (dev, host)

        def once() -> float:
            t = time.perf_counter()
            dst.copy_(src, non_blocking=pinned)
            torch.cuda.synchronize()
            return time.perf_counter() - t

        once()  # first copy: pins the bounce buffers, maps the pages
        reps = choose_reps(once(), target_s, min_reps=5, max_reps=50)
        times = [once() for _ in range(reps)]
        memory = "pinned" if pinned else "pageable"
        return rate(float(n), summarize(times), f"{size_mib} MiB, {memory} host memory")

    return run
