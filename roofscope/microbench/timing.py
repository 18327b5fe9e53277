"""Timing primitives for the GPU microbenchmarks: CUDA-event repetitions, summaries, L2 flush.

The pure parts (``summarize``, ``choose_reps``, ``Measurement``) take plain floats so they
can be tested without a GPU; torch is imported only inside the functions that launch work.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

# Per configuration: long enough that clocks settle and one slow repetition cannot
# move the median, short enough that a whole measure_gpu() stays well under a minute.
TARGET_S = 0.3
QUICK_TARGET_S = 0.08
MIN_REPS = 5
MAX_REPS = 500
# Warm-up per configuration, after the first (compiling) call.
WARMUP_S = 0.03
# CPU time to queue one repetition (two events and a launch) is a few us; the
# GPU sleep that covers the queueing is sized generously at 30 us per rep and
# ~2 GHz, and capped so a slow kernel's loop never waits on it.
_QUEUE_S_PER_REP = 30e-6
_SLEEP_CYCLES_PER_S = 2e9
# Larger than any Hopper/Blackwell L2 (50-60 MB, up to 126 MB on B200) with margin.
FLUSH_BYTES = 256 << 20


@dataclass(frozen=True)
class Summary:
    """Median/min/max of repetition times (seconds)."""

    median: float
    min: float
    max: float
    reps: int


@dataclass(frozen=True)
class Measurement:
    """What one benchmark returns: its best configuration, in the result's unit.

    ``value`` is the headline figure (FLOP/s, B/s, or seconds for a latency);
    ``median``/``min``/``max`` describe the repetitions of the kept configuration.
    """

    value: float
    median: float
    min: float
    max: float
    config: str


def summarize(times: Sequence[float]) -> Summary:
    if not times:
        raise ValueError("no timings to summarize")
    return Summary(median=statistics.median(times), min=min(times), max=max(times), reps=len(times))


def choose_reps(estimate_s: float, target_s: float = TARGET_S,
                min_reps: int = MIN_REPS, max_reps: int = MAX_REPS) -> int:
    """Repetitions that fill about ``target_s`` given one run's estimated time."""
    if estimate_s <= 0:
        return max_reps
    return max(min_reps, min(max_reps, int(target_s / estimate_s)))


def rate(work: float, s: Summary, config: str) -> Measurement:
    """A throughput measurement (work per second): the slowest run gives the minimum rate.
    Its value is the fastest run's rate: a ceiling is a roof that no kernel should beat, and a
    median roof is one that the device's own best runs (and real kernels) sit above."""
    return Measurement(value=work / s.min, median=work / s.median,
                       min=work / s.max, max=work / s.min, config=config)


def latency(s: Summary, config: str, per: int = 1) -> Measurement:
    """A latency measurement in seconds per unit of ``per`` operations."""
    return Measurement(value=s.median / per, median=s.median / per,
                       min=s.min / per, max=s.max / per, config=config)


def best(measurements: Sequence[Measurement], lower_is_better: bool = False) -> Measurement:
    if not measurements:
        raise ValueError("no configuration produced a measurement")
    pick = min if lower_is_better else max
    return pick(measurements, key=lambda m: m.value)


def time_cuda(fn: Callable[[], object], *, target_s: float = TARGET_S,
              flush: Callable[[], object] | None = None, warmup_s: float = WARMUP_S) -> Summary:
    """Time ``fn`` on the current stream with a pair of CUDA events per repetition.

    ``flush`` runs before each repetition outside the timed region, so a memory
    benchmark never reads what the previous repetition left in L2.
    """
    import torch

    def once() -> None:
        if flush is not None:
            flush()
        fn()

    once()  # compiles Triton kernels, picks cuBLAS algorithms, allocates
    torch.cuda.synchronize()
    # One timed probe sizes both the warm-up (clocks and caches settle) and the
    # timed loop, so cheap and expensive configurations spend similar wall time.
    probe = _event_pairs(1)[0]
    if flush is not None:
        flush()
    probe[0].record()
    fn()
    probe[1].record()
    torch.cuda.synchronize()
    estimate = probe[0].elapsed_time(probe[1]) / 1e3
    for _ in range(choose_reps(estimate, warmup_s, 1)):
        once()
    reps = choose_reps(estimate, target_s)
    pairs = _event_pairs(reps)
    # A GPU-side sleep holds the stream while the CPU queues every repetition:
    # without it a tiny kernel's events would measure the CPU's launch gap.
    torch.cuda._sleep(int(min(reps * _QUEUE_S_PER_REP, 0.05) * _SLEEP_CYCLES_PER_S))
    for start, end in pairs:
        if flush is not None:
            flush()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return summarize([s.elapsed_time(e) / 1e3 for s, e in pairs])


def warm_up_gpu(seconds: float) -> None:
    """Run bf16 matmuls for ``seconds`` so the first benchmark does not pay the clock ramp."""
    import time

    import torch

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()


def _event_pairs(n: int) -> list:
    import torch

    return [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(n)]


def l2_flusher(nbytes: int = FLUSH_BYTES) -> Callable[[], object]:
    """A callable that evicts L2 by reading a buffer larger than it.

    Reading rather than writing leaves clean lines behind: a write-based flush
    would leave dirty lines whose write-back lands inside the next timed run.
    """
    import torch

    buf = torch.ones(nbytes // 4, device="cuda")
    return lambda: buf.sum()


def free_memory() -> None:
    """Release what the previous benchmark cached so the next one has the whole GPU."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
