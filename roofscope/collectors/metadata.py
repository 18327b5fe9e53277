"""Facts about the device a session ran on, for the Run's metadata."""
from __future__ import annotations

from typing import Any

from roofscope.microbench.cpu import cpu_name


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
