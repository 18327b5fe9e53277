"""Runtime API names of CUDA (runtime and driver) and HIP (ROCm), by role.

Kineto records ROCm's HIP calls in the same ``cuda_runtime`` category as CUDA's, so every
place that recognizes a launch, a graph replay, a copy or a host sync by its API name reads
these sets (a name missing here silently hides the call from that analysis).
"""
from __future__ import annotations

import re

KERNEL_LAUNCHES = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
    "cudaLaunchCooperativeKernelMultiDevice", "cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel",
    "hipLaunchKernel", "hipExtLaunchKernel", "hipLaunchCooperativeKernel", "hipModuleLaunchKernel",
    "hipExtModuleLaunchKernel", "hipHccModuleLaunchKernel", "hipModuleLaunchCooperativeKernel",
})
GRAPH_LAUNCHES = frozenset({"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"})
# Copies and fills the host only enqueues (it does not wait for them).
ASYNC_COPIES = frozenset({
    "cudaMemcpyAsync", "cudaMemcpy2DAsync", "cudaMemsetAsync", "cuMemcpyAsync", "cuMemcpyHtoDAsync",
    "cuMemcpyDtoHAsync", "cuMemsetD8Async", "cuMemsetD32Async",
    "hipMemcpyAsync", "hipMemcpy2DAsync", "hipMemsetAsync", "hipMemsetD32Async", "hipMemcpyHtoDAsync",
    "hipMemcpyDtoHAsync", "hipMemcpyDtoDAsync",
})
# Calls during which the host waits for the device, by kind.
HOST_SYNCS = {
    "cudaStreamSynchronize": "stream_sync", "cuStreamSynchronize": "stream_sync", "hipStreamSynchronize": "stream_sync",
    "cudaDeviceSynchronize": "device_sync", "cuCtxSynchronize": "device_sync", "hipDeviceSynchronize": "device_sync",
    "cudaEventSynchronize": "event_sync", "cuEventSynchronize": "event_sync", "hipEventSynchronize": "event_sync",
    "cudaMemcpy": "memcpy_sync", "cudaMemcpy2D": "memcpy_sync", "hipMemcpy": "memcpy_sync",
    "hipMemcpy2D": "memcpy_sync",
    # ROCm's blocking copy (PyTorch's non_blocking=False copies on ROCm): returns when the copy is done.
    "hipMemcpyWithStream": "memcpy_sync",
}
# Every call that puts work on a stream: its host time is launch overhead.
LAUNCHES = KERNEL_LAUNCHES | GRAPH_LAUNCHES | ASYNC_COPIES

_DIRECTION = re.compile(r"^Memcpy\s+(HtoD|DtoH|DtoD|PtoP|HtoH)\b")
# Older ROCm (roctracer) names its copies by the HIP copy kind.
_ROCM_DIRECTION = {"CopyHostToDevice": "HtoD", "CopyDeviceToHost": "DtoH", "CopyDeviceToDevice": "DtoD",
                   "CopyHostToHost": "HtoH"}


def copy_direction(name: str) -> str:
    """Direction of a GPU copy or fill from its activity name (``Memcpy HtoD (Pageable -> Device)``,
    ROCm's ``CopyHostToDevice``): HtoD, DtoH, DtoD, PtoP, HtoH, ``memset`` or ``other``."""
    m = _DIRECTION.match(name)
    if m:
        return m.group(1)
    rocm = _ROCM_DIRECTION.get(name.split(" ", 1)[0])
    return rocm or ("memset" if name.startswith(("Memset", "FillBuffer")) else "other")
