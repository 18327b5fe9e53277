"""Does torch.profiler record CUPTI hardware counters on this build? Only a probe can tell.

``torch._C._profiler._ExperimentalConfig(profiler_metrics=..., profiler_measure_per_kernel=True)``
is accepted by every recent torch, but builds for CUDA >= 12.6 compile Kineto's CUPTI range
profiler out: the profile runs, the trace exports its kernels, and no counter event
(Kineto's ``cuda_profiler_range`` category, which analyzers/ingest/kineto_frames.py ingests) appears.
Nothing else in the trace says so (no metadata, no warning), so the only way to know is
to profile one tiny matmul with the config and look for counter events.
"""
from __future__ import annotations

import os
import tempfile
from typing import Any

from roofscope.errors import RoofscopeError
from roofscope.fileio import read_maybe_gzip

METRIC = "kineto__cuda_core_flops"
COUNTER_CATEGORY = "cuda_profiler_range"


class CuptiCountersError(RoofscopeError):
    """torch.profiler cannot record CUPTI counters here (no CUDA, or the path is compiled out)."""


def experimental_config() -> Any:
    """The profiler config asking Kineto for per-kernel CUDA-core FLOP counters."""
    from torch._C._profiler import _ExperimentalConfig

    return _ExperimentalConfig(profiler_metrics=[METRIC], profiler_measure_per_kernel=True)


def _record(path: str) -> None:
    """Profile one 64x64 matmul with the counter config and export the trace to ``path``."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(64, 64, device="cuda")
    with profile(activities=[ProfilerActivity.CUDA], experimental_config=experimental_config()) as prof:
        x @ x
        torch.cuda.synchronize()
    prof.export_chrome_trace(path)


def counter_events(path: str | os.PathLike) -> int:
    """Number of CUPTI counter events in an exported trace."""
    import msgspec

    events = msgspec.json.decode(read_maybe_gzip(path, RoofscopeError, "expected a trace")).get("traceEvents") or []
    return sum(1 for e in events if isinstance(e, dict) and e.get("cat") == COUNTER_CATEGORY)


def cupti_counters_work() -> bool:
    """True when torch.profiler records counter events on this machine's GPU."""
    import torch

    if not torch.cuda.is_available():
        return False
    with tempfile.TemporaryDirectory(prefix="roofscope-cupti-") as tmp:
        path = os.path.join(tmp, "probe.json")
        try:
            _record(path)
        # A build without the config's arguments, or a CUPTI that refuses the metric.
        except (RuntimeError, TypeError, ImportError):
            return False
        return os.path.exists(path) and counter_events(path) > 0


def require_cupti_counters() -> None:
    """Raise :class:`CuptiCountersError` (one line, with the way out) unless counters work."""
    import torch

    if not torch.cuda.is_available():
        raise CuptiCountersError(f"--counters cupti needs a CUDA GPU, and torch {torch.__version__} sees none;"
                                 " hardware counters are GPU counters")
    if not cupti_counters_work():
        raise CuptiCountersError(
            f"torch {torch.__version__} with CUDA {torch.version.cuda} records no CUPTI counter events"
            " (_ExperimentalConfig(profiler_metrics=...) is compiled out for CUDA >= 12.6); use --counters ncu")
