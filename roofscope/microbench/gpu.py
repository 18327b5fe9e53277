"""Measure a GPU's ceilings: the benchmark list, the runner, and the Ceilings it yields.

The runner and the reduction to Ceilings take plain callables and dicts, so they are
tested on CPU; only ``measure_gpu`` and the benchmark bodies touch torch and CUDA.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

from roofscope.errors import DeviceError
from roofscope.hardware.ceilings import Ceilings
from roofscope.hardware.datasheets import PRECISIONS, DeviceSpec, match_device
from roofscope.microbench import compute, hostlink, launch, memory
from roofscope.microbench.names import DATA, TENSOR_CORE, matmul_name
from roofscope.microbench.timing import QUICK_TARGET_S, TARGET_S, Measurement, free_memory, warm_up_gpu

Progress = Callable[[str, int, int], None]
UNITS = {"compute": "FLOP/s", "memory": "B/s", "latency": "s"}
_BANDWIDTH_KEYS = ("bandwidth", "hbm_read", "hbm_write", "hbm_triad")
# Streaming benchmarks whose best rate is the bandwidth roof: the copy feeds "bandwidth".
_STREAMING = {"bandwidth": "hbm copy", "hbm_read": "hbm read", "hbm_write": "hbm write", "hbm_triad": "hbm triad"}


@dataclass(frozen=True)
class Benchmark:
    """One entry of the plan: which Ceilings key it feeds and how to measure it."""

    name: str
    kind: str  # "compute" | "memory" | "latency"
    key: str
    run: Callable[[], Measurement]


def plan(quick: bool) -> list[Benchmark]:
    """Every benchmark, cheapest shapes first in quick mode; each keeps its best config."""
    t = QUICK_TARGET_S if quick else TARGET_S
    # GEMMs hit the H200's software power cap after ~0.1 s (clocks 1980 -> 1515 MHz: bf16 804 ->
    # 689 TFLOP/s; docs/microbench.md), so every compute ceiling is timed in short bursts after
    # an idle gap: the ceiling is the unthrottled rate (fp64 DGEMM: 57.0 -> 60.4 TFLOP/s).
    mt = min(t, 0.05)
    # Square GEMMs are not the fastest: an HF Llama's LM-head backward GEMMs (N = 1024 wide,
    # K = 32000 or 8192 deep) ran at 850 TFLOP/s on an H100 where 8192^3 gave 790 at best
    # (docs/validation.md), so a deep, narrow shape is timed too.
    deep = (8192, 1024, 32768)
    big = (4096, 8192, deep) if quick else (4096, 8192, 16384, deep, (32768, 1024, 8192))
    # fp64/fp32 are 15-20x slower than bf16: 16384^3 would take seconds per repetition.
    slow = (8192,) if quick else (4096, 8192)
    gib = (1.0,) if quick else (1.0, 2.0)
    B, mm, fma = Benchmark, compute.matmul_bench, compute.fma_bench
    return [
        # Each tensor-core precision on random operands, then on zeros: real operands (softmax
        # gradients, padded batches) draw less power than random ones and run faster, so the
        # roof no kernel beats is the zero-operand rate (compute.py).
        *(B(matmul_name(p, data), "compute", p, mm(p, slow if p == "tf32" else big, mt, data=data))
          for p in TENSOR_CORE for data in DATA),
        B("matmul fp32", "compute", "fp32", mm("fp32", slow, mt)),
        B("fma fp32", "compute", "fp32", fma("fp32", (512,) if quick else (256, 1024), mt)),
        B("matmul fp64", "compute", "fp64", mm("fp64", slow, mt)),
        B("fma fp64", "compute", "fp64_vector", fma("fp64", (256,) if quick else (128, 512), mt)),
        B("hbm copy", "memory", "bandwidth", memory.copy_bench(gib, t, (4096,) if quick else (2048, 8192))),
        B("hbm read", "memory", "hbm_read", memory.read_bench(gib, t)),
        B("hbm write", "memory", "hbm_write", memory.write_bench(gib, t)),
        B("hbm triad", "memory", "hbm_triad", memory.triad_bench(gib, t)),
        B("l2 read", "memory", "l2", memory.l2_bench((8,) if quick else (8, 16), target_s=t)),
        # The host link, for copies between host and device (Ceilings.host_link).
        *(B(f"{key.replace('_', ' ')}{'' if '_' in key else ' pinned'}", "memory", key,
            hostlink.copy_bench(key, target_s=t)) for key in hostlink.KEYS),
        B("launch eager", "latency", "launch_eager", launch.eager_bench()),
        B("launch graph", "latency", "launch_graph", launch.graph_bench()),
        B("kernel min", "latency", "kernel_min", launch.kernel_min_bench()),
    ]


def datasheet_figure(spec: DeviceSpec | None, key: str) -> float | None:
    """The datasheet number a result compares with, if the datasheet has one."""
    if spec is None:
        return None
    if key in _BANDWIDTH_KEYS:
        return spec.bandwidth
    if key == "fp64_vector":
        return spec.fp64_vector
    if key in hostlink.KEYS:
        return spec.host_link
    return spec.peaks.get(key)


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")[:300]


def run_benchmarks(benchmarks: Sequence[Benchmark], spec: DeviceSpec | None = None,
                   progress: Progress | None = None,
                   cleanup: Callable[[], None] = free_memory,
                   clock: Callable[[], float] = time.perf_counter) -> list[dict[str, Any]]:
    """Run each benchmark in turn; a failure becomes a result with ``error``, never an abort."""
    results = []
    for i, b in enumerate(benchmarks):
        if progress is not None:
            progress(b.name, i, len(benchmarks))
        start = clock()
        m: Measurement | None = None
        error: str | None = None
        try:
            m = b.run()
        except compute.Unsupported as e:
            error = f"unsupported: {e}"
        # Out-of-memory, cuBLAS and Triton compile errors all land here: one bad
        # benchmark must not cost the others.
        except Exception as e:  # noqa: BLE001
            error = _one_line(e)
        finally:
            try:
                cleanup()
            except Exception as e:  # noqa: BLE001 - a failed cleanup is worth a note, not an abort
                error = error or f"cleanup failed: {_one_line(e)}"
        results.append({
            "name": b.name, "kind": b.kind, "key": b.key,
            "value": m.value if m else None, "unit": UNITS[b.kind],
            "median": m.median if m else None, "min": m.min if m else None,
            "max": m.max if m else None, "config": m.config if m else "",
            "datasheet": datasheet_figure(spec, b.key),
            "seconds": clock() - start, "error": error,
        })
    return results


def _best_by_key(results: Sequence[dict[str, Any]]) -> dict[str, float]:
    bests: dict[str, float] = {}
    for r in results:
        v = r["value"]
        if v is None:
            continue
        lower = r["kind"] == "latency"
        old = bests.get(r["key"])
        if old is None or (v < old if lower else v > old):
            bests[r["key"]] = v
    return bests


def ceilings_from_results(device: str, spec: DeviceSpec | None, results: Sequence[dict[str, Any]],
                          measured_at: str, env: dict[str, Any]) -> Ceilings:
    """Reduce the results to Ceilings: the best value per key, with a note per failure."""
    bests = _best_by_key(results)
    notes = [f"{r['name']}: {r['error']}" for r in results if r["error"]]
    streaming = {key: bests[key] for key in _STREAMING if key in bests}
    env = dict(env)
    if streaming:
        # The roof is the best streaming rate measured: a kernel that streams faster than the
        # roof would sit above it (elementwise kernels beat a copy's rate).
        best_key = max(streaming, key=streaming.__getitem__)
        bandwidth = streaming[best_key]
        env["bandwidth_from"] = _STREAMING[best_key]
    else:
        if spec is None:
            raise DeviceError(f"could not measure the memory bandwidth of {device!r} and no datasheet is known")
        # A roofline needs a slope; the datasheet's is better than none, and the note says so.
        bandwidth = spec.bandwidth
        notes.append("hbm streaming benchmarks failed: bandwidth is the datasheet figure")
        env["bandwidth_from"] = "datasheet"
    # Memory levels: HBM is the roof, L2 the second roof kernels with a cache-resident working
    # set reach (elementwise kernels on 25-50 MB tensors ran at 1.3-1.5x the HBM rate on an H100).
    env["levels"] = {"hbm": bandwidth, **({"l2": bests["l2"]} if "l2" in bests else {})}
    l2_bytes = env.get("l2_bytes")
    levels = (("L2", float(l2_bytes), bests["l2"]), ("HBM", float("inf"), bandwidth)) \
        if l2_bytes and bests.get("l2", 0.0) > bandwidth else ()
    return Ceilings(
        device=device, source="measured",
        peaks={p: bests[p] for p in PRECISIONS if p in bests},
        bandwidth=bandwidth, datasheet=spec,
        launch_latency_s=bests.get("launch_eager"), fp64_vector=bests.get("fp64_vector"),
        notes=tuple(notes), measured_at=measured_at, env=env,
        host_link={k: bests[k] for k in hostlink.KEYS if k in bests}, levels=levels,
    )


def _nvml_env(index: int) -> dict[str, Any]:
    """Driver version and max clocks from NVML; None wherever NVML cannot say."""
    env: dict[str, Any] = {"driver": None, "sm_clock_max_mhz": None, "mem_clock_max_mhz": None}
    try:
        import pynvml as nv

        nv.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML (or no pynvml) leaves the fields None
        return env
    try:
        driver = nv.nvmlSystemGetDriverVersion()
        env["driver"] = driver.decode() if isinstance(driver, bytes) else str(driver)
        handle = _nvml_handle(nv, index)
        env["sm_clock_max_mhz"] = int(nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_SM))
        env["mem_clock_max_mhz"] = int(nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_MEM))
    except Exception:  # noqa: BLE001
        pass
    finally:
        nv.nvmlShutdown()
    return env


def _nvml_handle(nv: Any, index: int) -> Any:
    # NVML numbers every GPU; CUDA only the visible ones, so match by UUID when torch has it.
    import torch

    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    if uuid is not None:
        try:
            return nv.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
        except Exception:  # noqa: BLE001
            pass
    return nv.nvmlDeviceGetHandleByIndex(index)


def measure_gpu(index: int = 0, *, quick: bool = False, progress: Progress | None = None) -> Ceilings:
    """Measure the ceilings of CUDA device ``index`` (about 40 s; ``quick`` 15-20 s on an H100)."""
    import torch

    if not torch.cuda.is_available():
        raise DeviceError("measure_gpu needs a CUDA GPU and torch built with CUDA")
    start = time.perf_counter()
    props = torch.cuda.get_device_properties(index)
    name = torch.cuda.get_device_name(index)
    spec = match_device(name, props.total_memory)
    with torch.cuda.device(index):
        # An idle GPU sits near 400 MHz; the first matmuls would be timed mid-ramp.
        # Longer would spend power budget the GEMMs need.
        warm_up_gpu(0.1)
        results = run_benchmarks(plan(quick), spec, progress)
    env: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, **_nvml_env(index),
                           "l2_bytes": getattr(props, "L2_cache_size", None)}
    env["runtime_s"] = time.perf_counter() - start
    env["method"] = (f"{'quick' if quick else 'full'}: CUDA events, fastest repetition, "
                     "random inputs (and zeros for tensor-core matmuls), best config per benchmark")
    env["results"] = results
    return ceilings_from_results(name, spec, results,
                                 datetime.now(timezone.utc).isoformat(timespec="seconds"), env)
