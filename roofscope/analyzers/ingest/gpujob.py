"""A trace without GPU activity that was recorded from a GPU job: its CPU side only.

A profiler run without CUDA activities (``activities=[CPU]``, or a rank whose GPU events were left
out) records a GPU job's host ops and none of its kernels: an ``aten::addmm`` then lasts as long as
its launch, and judging it against the CPU's roofs says a 23 TFLOP/s matmul on one core (HTA's
``rank_non_gpu`` trace: "MFU 308%"). Such a trace is named for what it is and not placed on this
machine's CPU roofline (analysis.py gives it no ceilings).

The evidence is what only a CUDA program records on its host side: ops that exist only for CUDA
tensors or kernels (``aten::record_stream``, cuDNN and fused-attention launchers, CUDA-graph and
NCCL calls), GPU optimizers' spans (apex's or DeepSpeed's ``FusedAdam``), CUDA runtime events, a device in the
trace's properties (an MTIA's too), or a process group on NCCL (HCCL, RCCL).
"""
from __future__ import annotations

import re

from roofscope.analyzers.model.trace import Trace

# Host-side names that only a program running on a CUDA (or ROCm) device records.
_GPU_NAMES = re.compile(
    r"^(?:aten::record_stream|aten::_?cudnn_\w+|aten::miopen_\w+|aten::_flash_attention_forward"
    r"|aten::_efficient_attention_forward|aten::_scaled_dot_product_(?:flash|efficient|cudnn)_attention(?!_for_cpu)"
    r"|cuda[A-Z]\w*|nccl:\w+|Optimizer\.step#FusedAdam\.step|.*FusedAdam.*"
    r"|fbgemm::split_embedding_codegen_lookup_\w+_function)$")


# Collective backends of device memory (NVIDIA's, AMD's, Habana's and MTIA's): gloo alone is a CPU job's.
_DEVICE_BACKENDS = re.compile(r"\b(?:\w+:)?[nrh]ccl\b")


def gpu_job_evidence(trace: Trace) -> str:
    """Why a trace with no GPU activity is the host side of a GPU job ("" when nothing says so): the
    GPU-only names it holds, most frequent first, with their counts."""
    if len(trace.kernels):
        return ""
    said = []
    props = trace.meta.device.properties or {}
    if props.get("name") or trace.meta.device.name:
        said.append(f"the trace names the device {props.get('name') or trace.meta.device.name}")
    backend = (trace.meta.distributed.backend or "") if trace.meta.distributed else ""
    if _DEVICE_BACKENDS.search(backend):
        said.append(f"process group backend {backend}")
    if len(trace.runtime):
        said.append(f"{len(trace.runtime):,} CUDA runtime calls")
    names = [trace.annotations["name"], trace.ops["name"]] if len(trace.annotations) else [trace.ops["name"]]
    counts: dict[str, int] = {}
    for col in names:
        for name, n in col.astype(str).value_counts().items():
            if _GPU_NAMES.match(name):
                counts[name] = counts.get(name, 0) + int(n)
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:3]
    if top:
        said.append(", ".join(f"{n} x{c}" for n, c in top))
    return "; ".join(said)


__all__ = ["gpu_job_evidence"]
