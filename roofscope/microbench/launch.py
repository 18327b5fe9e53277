"""Launch-overhead ceilings: eager per-kernel cost, CUDA-graph per-kernel cost, shortest kernel.

The eager figure is what ``Ceilings.launch_latency_s`` holds: below it a stream of
small kernels is bound by the CPU issuing them, not by the GPU running them.
"""
from __future__ import annotations

import time
from typing import Callable

from roofscope.microbench.timing import Measurement, latency, summarize, time_cuda

# Long enough that the one synchronize per sequence is noise (under 1%).
SEQUENCE = 1000


def eager_bench(repeats: int = 7, n: int = SEQUENCE) -> Callable[[], Measurement]:
    """Wall time per kernel of ``n`` back-to-back ``x.add_(1)`` on a one-element tensor."""

    def run() -> Measurement:
        import torch

        x = torch.zeros(1, device="cuda")
        times = []
        for i in range(repeats + 1):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                x.add_(1)
            torch.cuda.synchronize()
            if i:  # the first sequence warms the allocator and the dispatcher caches
                times.append(time.perf_counter() - t0)
        return latency(summarize(times), f"{n} x add_ on 1 element, wall time / {n}", per=n)

    return run


def graph_bench(n: int = SEQUENCE, target_s: float = 0.05) -> Callable[[], Measurement]:
    """Per-kernel time of the same ``n`` kernels captured once in a CUDA graph and replayed."""

    def run() -> Measurement:
        import torch

        x = torch.zeros(1, device="cuda")
        # Capture must happen off the default stream; warm up there first so no
        # lazy initialisation lands inside the graph.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                x.add_(1)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(n):
                x.add_(1)
        s = time_cuda(graph.replay, target_s=target_s)
        del graph
        return latency(s, f"{n} x add_ in one CUDA graph, replay time / {n}", per=n)

    return run


def kernel_min_bench(target_s: float = 0.05) -> Callable[[], Measurement]:
    """Duration of one tiny kernel between CUDA events: the floor any kernel pays."""

    def run() -> Measurement:
        import torch

        x = torch.zeros(1, device="cuda")
        return latency(time_cuda(lambda: x.add_(1), target_s=target_s), "1 x add_ on 1 element, CUDA events")

    return run
