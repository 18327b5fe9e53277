"""The Kineto reader: torch.profiler's Chrome traces (``.json``, ``.json.gz``) into a linked Trace.

kineto.py decodes the JSON, kineto_frames.py builds the tables; here they are linked and the
top-level keys become the typed TraceMeta: the device the kernels ran on (deviceProperties),
the process group (distributedInfo) and the clock base (baseTimeNanoseconds).
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roofscope.analyzers.model.trace import Device, Distributed, Trace, TraceMeta

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

NAME = "kineto"
# Kineto writes distributedInfo before the events: a file's first 64 KiB hold it.
_DIST_INFO = re.compile(rb'"distributedInfo"\s*:\s*(\{[^{}]*\})')
# Where a trace without deviceProperties may name its GPU in distributedInfo.
_DEVICE_NAME_KEYS = ("device_name", "deviceName", "gpu_name")


def _count(v: Any) -> int | None:
    """A rank or a size: an int, or a float that is one (2.0); else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    return int(v) if isinstance(v, float) and v.is_integer() else None


def distributed(info: Any) -> Distributed | None:
    """distributedInfo, typed; None when the trace has none (or not an object)."""
    if not isinstance(info, dict):
        return None
    backend = info.get("backend")
    return Distributed(rank=_count(info.get("rank")), world_size=_count(info.get("world_size")),
                       backend=backend if isinstance(backend, str) else None, recorded=info)


def _device(meta: dict[str, Any], kernels: pd.DataFrame) -> Device:
    """The GPU the kernels ran on. Kernels name their device by id; when no listed id matches
    (ROCm traces number devices differently in kernels and in deviceProperties), the first
    listed device. Without deviceProperties, the name distributedInfo gives, if any (and only
    when there are kernels: a CPU-only trace ran on no GPU)."""
    listed = meta["deviceProperties"] or []
    props = None
    if listed:
        used = kernels["device"].dropna().astype(int).value_counts().index.tolist() if len(kernels) else []
        props = next((p for i in used for p in listed if p.get("id") == i), listed[0])
    name = props.get("name") if props else None
    info = meta["distributedInfo"]
    if props is None and len(kernels) and isinstance(info, dict):
        name = next((info[k] for k in _DEVICE_NAME_KEYS if isinstance(info.get(k), str)), None)
    mem = props.get("totalGlobalMem") if props else None
    return Device(name=name if isinstance(name, str) else None,
                  memory_bytes=mem if isinstance(mem, (int, float)) and not isinstance(mem, bool) else None,
                  properties=props)


def load_trace(path: str | os.PathLike) -> Trace:
    """Read a Kineto trace (``.json`` or ``.json.gz``) into a linked :class:`Trace`."""
    # start-up time: the tables are pandas', and the command line's early read (kineto_prefetch.py)
    # imports this package in a child that must not import pandas
    from roofscope.analyzers.ingest.frames import link
    from roofscope.analyzers.ingest.kineto_frames import read_frames

    f = read_frames(path)
    link(f.ops, f.runtime, f.kernels, f.annotations)
    base = f.meta["baseTimeNanoseconds"]
    meta = TraceMeta(reader=NAME, device=_device(f.meta, f.kernels), distributed=distributed(f.meta["distributedInfo"]),
                     clock_base_ns=None if base is None else base + int(round(f.t0_us * 1000)),
                     events=f.events, skipped_events=f.skipped)
    return Trace(path=str(path), ops=f.ops, signatures=f.signatures, kernels=f.kernels, runtime=f.runtime,
                 annotations=f.annotations, meta=meta, comm_args=f.comm_args)


class KinetoReader:
    name = NAME
    suffixes = (".json", ".json.gz")

    def sniff(self, head: bytes, file_name: str) -> bool:
        # Any JSON: Kineto's decoder says what a JSON file that is no trace is (an execution
        # trace, a memory timeline), so this reader is asked after every other.
        return head.lstrip(b" \t\r\n")[:1] in (b"{", b"[")

    def read(self, path: Path) -> Trace:
        return load_trace(path)

    def peek_rank(self, head: bytes) -> Distributed | None:
        m = _DIST_INFO.search(head)
        try:
            return distributed(json.loads(m.group(1))) if m else None
        except ValueError:
            return None


READER = KinetoReader()
