"""CPU ceilings: matmul FLOP/s per dtype and memory copy bandwidth, measured with torch.

Short on purpose (about a second, less with ``quick``): CPU-only runs measure it when the
cache has no entry, and CI runs it. Reports like the GPU path (roofscope.microbench.gpu):
median/min/max over repetitions and one result dict per benchmark in ``env["results"]``.
"""
from __future__ import annotations

import platform
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from ..devices import Ceilings
from ..errors import DeviceError

Progress = Callable[[str, int, int], None]


def cpu_name() -> str:
    """The CPU model, e.g. 'cpu: AMD EPYC 7B13' (falls back to the architecture)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return "cpu: " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu: " + (platform.processor() or platform.machine() or "unknown")


def _times(fn: Callable[[], Any], repeats: int) -> list[float]:
    fn()  # warm-up: first calls pay for allocation and thread start-up
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def _result(name: str, kind: str, key: str, unit: str, config: dict[str, Any],
            work: float, run: Callable[[], list[float]]) -> dict[str, Any]:
    """Run one benchmark; ``work`` (FLOP or bytes) over each repetition's time is its rate.

    ``value`` is the best rate: a ceiling is what the hardware can reach, and slower
    repetitions are interference (other processes, frequency ramp), not the roof.
    """
    t0 = time.perf_counter()
    res: dict[str, Any] = {"name": name, "kind": kind, "key": key, "value": None, "unit": unit,
                           "median": None, "min": None, "max": None, "config": config,
                           "datasheet": None, "seconds": None, "error": None}
    try:
        rates = [work / t for t in run() if t > 0]
        if not rates:
            raise RuntimeError("timer resolution too coarse")
        res.update(value=max(rates), median=statistics.median(rates), min=min(rates), max=max(rates))
    except Exception as e:  # e.g. a dtype this CPU build cannot multiply: skip that roof, keep the rest
        res["error"] = f"{type(e).__name__}: {e}"
    res["seconds"] = time.perf_counter() - t0
    return res


def measure_cpu(n: int | None = None, copy_mib: int | None = None, repeats: int | None = None, *,
                quick: bool = False, progress: Progress | None = None) -> Ceilings:
    """fp32/bf16 n x n x n matmul rate and copy bandwidth, median/min/max over ``repeats``.

    ``progress(name, i, total)`` is called before benchmark ``i`` (0-based, as in the GPU path) of ``total``.
    """
    import torch

    n = n or (512 if quick else 1024)
    copy_mib = copy_mib or (64 if quick else 256)
    repeats = repeats or (3 if quick else 5)
    started = time.perf_counter()
    threads = torch.get_num_threads()
    benches: list[tuple[str, str, str, str, dict[str, Any], float, Callable[[], list[float]]]] = []
    for key, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        def run(dtype=dtype) -> list[float]:
            a = torch.randn(n, n).to(dtype)
            b = torch.randn(n, n).to(dtype)
            return _times(lambda: torch.mm(a, b), repeats)

        benches.append((f"{key} matmul", "compute", key, "FLOP/s",
                        {"n": n, "dtype": str(dtype).replace("torch.", ""), "repeats": repeats,
                         "threads": threads}, 2.0 * n ** 3, run))
    numel = copy_mib * (1 << 20) // 4

    def copy() -> list[float]:
        src = torch.randn(numel)
        dst = torch.empty_like(src)
        return _times(lambda: dst.copy_(src), repeats)

    # A copy reads and writes every byte.
    benches.append(("memory copy", "memory", "bandwidth", "B/s",
                    {"bytes": numel * 4, "repeats": repeats, "threads": threads}, 2.0 * numel * 4, copy))

    results = []
    for i, (name, kind, key, unit, config, work, run) in enumerate(benches):
        if progress is not None:
            progress(name, i, len(benches))
        results.append(_result(name, kind, key, unit, config, work, run))
    peaks = {r["key"]: r["value"] for r in results if r["kind"] == "compute" and r["value"]}
    bw = next(r for r in results if r["key"] == "bandwidth")
    if not peaks or not bw["value"]:
        failed = "; ".join(f"{r['name']}: {r['error']}" for r in results if r["error"])
        raise DeviceError(f"CPU microbenchmark failed: {failed}")
    notes = tuple(f"{r['name']} skipped: {r['error']}" for r in results if r["error"])
    return Ceilings(device=cpu_name(), source="measured", peaks=peaks, bandwidth=bw["value"],
                    measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), notes=notes,
                    env={"torch": torch.__version__, "threads": threads, "runtime_s": time.perf_counter() - started,
                         "method": f"best of {repeats} (after a warm-up): {n}^3 matmul, {copy_mib} MiB copy",
                         "quick": quick, "results": results})
