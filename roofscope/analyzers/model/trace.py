"""The contract between readers and the analysis: :class:`Trace`, its typed :class:`TraceMeta`,
and the annotation labels roofscope's collectors write and its stages read.

A reader (``roofscope.analyzers.ingest``) turns one file of some profiler's format into a ``Trace``;
nothing after it knows which format that was. Timestamps are int64 **nanoseconds** from the
trace's first event (``ts_ns``, ``dur_ns``, ``end_ns``). The tables and their columns are
described in docs/architecture.md ("Key data contracts").
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

# The annotation labels (roofscope/labels.py): the readers' contract carries them.
from roofscope.labels import (  # noqa: F401
    CAPTURE_LABEL,
    DRAIN_LABEL,
    FORWARD_LABEL,
    MODULE_PREFIX,
    REPLAY_LABEL,
    ROOFSCOPE_PREFIX,
    STEP_PREFIX,
)

# --- Tables ----------------------------------------------------------------------------------
# The columns of each table as a reader gives them; linking (analyzers/ingest/frames.py) adds ``thread``
# (ops, runtime, annotations), ``parent`` (ops), ``op`` (runtime, kernels) and ``launch``,
# ``timed``, ``step``, ``region`` (kernels). ``sig`` indexes ``signatures``.
OPS_COLUMNS = ("name", "pid", "tid", "ts_ns", "dur_ns", "end_ns", "external_id", "rf_id", "seq", "sig",
               "kernel_num_gb", "kernel_flop")
RUNTIME_COLUMNS = ("name", "pid", "tid", "ts_ns", "dur_ns", "end_ns", "correlation", "external_id", "size")
KERNEL_COLUMNS = ("name", "ts_ns", "dur_ns", "end_ns", "correlation", "external_id", "cat", "device", "stream",
                  "bytes", "counter_flops", "grid", "block")
ANNOTATION_COLUMNS = ("name", "pid", "tid", "ts_ns", "dur_ns", "end_ns", "external_id")
SIGNATURE_COLUMNS = ("name", "input_dims", "input_types", "input_strides", "concrete_inputs")

# --- Table values ----------------------------------------------------------------------------
# GPU-side activity categories (``kernels["cat"]``) that occupy a stream.
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
# record_param_comms arguments by External id (``Trace.comm_args``).
COMM_ARG_COLUMNS = ("collective", "in_nelems", "out_nelems", "dtype", "group_size")
# torch's sizes and element counts are int64: a recorded shape past it is no tensor's (ingest drops
# such Input Dims, frames.drop_impossible_shapes; the cost model and the rules refuse them too).
INT64_MAX = (1 << 63) - 1
# How a skipped-events reason begins when the file was cut short (a process killed while writing
# it): what is complete was read, and a job merge refuses such a rank (analyzers/job/ranks.py).
CUT_SHORT = "file cut short"


@dataclass(frozen=True)
class Device:
    """The GPU the trace's kernels ran on, as its profiler described it; all None when the trace
    names none."""

    name: str | None = None
    memory_bytes: float | None = None
    # The profiler's own record of the device (Kineto: its deviceProperties entry: numSms,
    # warpSize, computeMajor...), for the facts a datasheet lookup or a rule reads.
    properties: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Distributed:
    """The process group the traced process belonged to."""

    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    # As the profiler recorded it: summary.json's ``distributed`` block.
    recorded: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TraceMeta:
    """What a trace says about itself besides its events."""

    reader: str = ""                                   # the reader that read it ("kineto")
    device: Device = field(default_factory=Device)
    distributed: Distributed | None = None
    # Unix time in ns of the trace's time 0 (its first event): trace time + this is the clock
    # NVML samples are stamped with. None when the format records no wall clock.
    clock_base_ns: int | None = None
    events: int | None = None                          # events in the file
    skipped_events: Mapping[str, int] = field(default_factory=dict)   # malformed events, by reason

    @property
    def cut_short(self) -> str | None:
        """The skipped-events reason saying the file was cut short, if it was."""
        return next((r for r in self.skipped_events if r.startswith(CUT_SHORT)), None)


def empty_comm_args() -> pd.DataFrame:
    import pandas as pd  # here, not at the top: collectors import the labels into profiled programs

    return pd.DataFrame({c: pd.Series([], dtype=object) for c in COMM_ARG_COLUMNS},
                        index=pd.Index([], name="external_id", dtype=object))


@dataclass
class Trace:
    """One trace as DataFrames (ops, signatures, kernels, runtime, annotations); timestamps are
    int64 ns from the first event."""

    path: str
    ops: pd.DataFrame
    signatures: pd.DataFrame
    kernels: pd.DataFrame
    runtime: pd.DataFrame
    annotations: pd.DataFrame
    meta: TraceMeta = field(default_factory=TraceMeta)
    # record_param_comms arguments by External id, as recorded (any JSON type; analyzers/views/collectives.py
    # checks them): COMM_ARG_COLUMNS. Empty in older traces.
    comm_args: pd.DataFrame = field(default_factory=empty_comm_args)

