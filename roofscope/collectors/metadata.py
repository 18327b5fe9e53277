"""Facts about the device and the process a session ran on, for the Run's metadata."""
from __future__ import annotations

import os
import resource
import time
from typing import Any

from roofscope.microbench.cpu import cpu_name

# Variables that set the thread pools' sizes before torch starts them.
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML library, no driver, no permission: the field stays empty
        return None


def device_metadata() -> dict[str, Any]:
    """The CUDA device in use (name, properties, driver) or, without CUDA, the CPU."""
    import torch

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        # cuda_available: a GPU machine whose program never used the GPU (analysis says so).
        return {"type": "cpu", "name": cpu_name(), "threads": torch.get_num_threads(),
                "cuda_available": torch.cuda.is_available()}
    index = torch.cuda.current_device()
    p = torch.cuda.get_device_properties(index)
    return {
        "type": "cuda",
        "index": index,
        "count": torch.cuda.device_count(),
        "name": p.name,
        "capability": f"{p.major}.{p.minor}",
        "total_memory": int(p.total_memory),
        "multi_processor_count": int(p.multi_processor_count),
        "l2_cache_size": int(getattr(p, "L2_cache_size", 0)) or None,
        "driver": _driver_version(),
        "cuda_runtime": torch.version.cuda,
    }


def _run_delay_ns() -> int | None:
    """Nanoseconds this process's threads have waited runnable for a core (the scheduler's run delay,
    /proc/self/task/*/schedstat's second field; None where the kernel keeps no schedstat)."""
    total, seen = 0, False
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                total += int(f.read().split()[1])
                seen = True
        except (OSError, IndexError, ValueError):   # a thread that ended meanwhile
            continue
    return total if seen else None


def cpu_snapshot() -> dict[str, float | int | None]:
    """The process's clocks now: wall, CPU time of every thread (user + system), the time its threads
    waited for a core, involuntary context switches (a thread taken off a core it still wanted)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"wall_ns": time.perf_counter_ns(), "cpu_s": r.ru_utime + r.ru_stime, "run_delay_ns": _run_delay_ns(),
            "involuntary_switches": r.ru_nivcsw}


def cpu_facts(start: dict[str, Any] | None, end: dict[str, Any] | None = None) -> dict[str, Any]:
    """run.json's ``cpu``: the cores this process may run on against torch's thread count, the machine's
    load, and the process's clocks between two :func:`cpu_snapshot` (the profiled steps: what the CPU
    rules read to tell a thread count larger than the free cores, docs/diagnosis.md)."""
    import torch   # start-up time: the CLI imports collectors before any program runs

    end = end or cpu_snapshot()
    try:
        affinity: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):   # not Linux
        affinity = None
    try:
        load: list[float] | None = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    window = None
    if start is not None:
        wall = (end["wall_ns"] - start["wall_ns"]) / 1e9
        # Threads that ended between the snapshots take their counts with them: never below 0.
        delay = max(0, end["run_delay_ns"] - start["run_delay_ns"]) / 1e9 \
            if end["run_delay_ns"] is not None and start["run_delay_ns"] is not None else None
        window = {"wall_s": round(wall, 6), "cpu_s": round(end["cpu_s"] - start["cpu_s"], 6),
                  "run_delay_s": None if delay is None else round(delay, 6),
                  "involuntary_switches": end["involuntary_switches"] - start["involuntary_switches"]}
    return {"cores": os.cpu_count(), "affinity": affinity, "torch_threads": torch.get_num_threads(),
            "interop_threads": torch.get_num_interop_threads(),
            "env": {k: os.environ[k] for k in THREAD_ENV if k in os.environ}, "load_avg": load, "window": window}


def backend_flags() -> dict[str, Any]:
    """Settings that decide kernels and that no trace records: cuDNN's autotuner, TF32 for matmuls and convolutions."""
    import torch   # start-up time

    return {"cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32)}
