"""Microbenchmarks that measure a device's ceilings (compute roofs, bandwidth, launch latency).

`measure("cpu" | "cuda" | "cuda:N")` runs them and returns :class:`~roofscope.hardware.ceilings.Ceilings`
with ``source="measured"``; :mod:`.cache` keeps results per device for later analyses.
Importing this package imports neither torch nor the benchmarks (:mod:`.gpu`, :mod:`.compute`,
:mod:`.timing`, ...): the cache is read by every analysis, and needs only the results' names
(:mod:`.names`).
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable

from roofscope.errors import DeviceError

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.hardware.ceilings import Ceilings

__all__ = ["default_device", "measure", "parse_device"]

_DEVICE = re.compile(r"^(cpu|cuda)(?::(\d+))?$")


def parse_device(device: str) -> tuple[str, int | None]:
    """'cpu' -> ('cpu', None), 'cuda' -> ('cuda', None), 'cuda:1' -> ('cuda', 1); else DeviceError."""
    m = _DEVICE.match(str(device).strip().lower())
    if m is None or (m.group(1) == "cpu" and m.group(2) is not None):
        raise DeviceError(f"bad device {device!r}: expected cpu, cuda or cuda:N")
    return m.group(1), (int(m.group(2)) if m.group(2) is not None else None)


def default_device() -> str:
    """The device analyses of this machine's runs will use: ``cuda`` when torch sees a GPU, else ``cpu``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def measure(device: str = "cuda", *, quick: bool = False,
            progress: Callable[[str, int, int], None] | None = None) -> "Ceilings":
    """Measure the ceilings of ``device``; a missing or absent CUDA device is a one-line DeviceError."""
    kind, index = parse_device(device)
    if kind == "cpu":
        from roofscope.microbench.cpu import measure_cpu  # lazily: every cache read imports this package

        return measure_cpu(quick=quick, progress=progress)
    import torch

    if not torch.cuda.is_available():
        raise DeviceError(f"{device!r} requested but torch {torch.__version__} sees no CUDA device; "
                          "measure the CPU with --device cpu")
    count = torch.cuda.device_count()
    if index is None:
        index = torch.cuda.current_device()
    elif index >= count:
        raise DeviceError(f"{device!r} requested but only {count} CUDA device(s) are visible (cuda:0"
                          + (f"..cuda:{count - 1})" if count > 1 else ")"))
    from roofscope.microbench.gpu import measure_gpu  # lazily, as measure_cpu

    return measure_gpu(index, quick=quick, progress=progress)
