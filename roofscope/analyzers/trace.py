"""Kineto (torch.profiler) Chrome-trace ingestion into pandas DataFrames.

The JSON is decoded with msgspec into typed structs that keep only the fields the
analysis reads; shape arguments stay as raw JSON bytes so that identical op
signatures are deduplicated before anything is parsed (a million events usually
carry a few thousand distinct signatures). benchmarks/bench_ingest.py measures this
against json and orjson.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Union

import msgspec
import numpy as np
import pandas as pd

from ..errors import TraceError
from ..fileio import read_maybe_gzip
from .linking import enclosing, interval_parents, take

_NO_RAW = msgspec.Raw(b"")
# Annotation prefix of module labels (collectors/modules.py writes them).
MODULE_PREFIX = "nn.Module: "
# roofscope's own annotations (the GPU drain, CUDA-graph captures and replays, forward steps)
# are never regions.
ROOFSCOPE_PREFIX = "roofscope: "
# Annotation around roofscope's own GPU drain where recording starts and ends (torchprof.py).
DRAIN_LABEL = ROOFSCOPE_PREFIX + "drain GPU"

# GPU-side activity categories that occupy a stream.
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
# Older Kineto wrote "Kernel"/"Memcpy"/"Memset"; map them onto the modern names.
_CAT_ALIASES = {"Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset",
                "Runtime": "cuda_runtime", "Operator": "cpu_op"}


class _Args(msgspec.Struct, frozen=True, gc=False):
    external_id: Union[int, None] = msgspec.field(name="External id", default=None)
    correlation: Union[int, None] = None
    device: Union[int, None] = None
    stream: Union[int, None] = None
    bytes: Union[float, None] = None
    grid: Union[list, None] = None
    block: Union[list, None] = None
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=_NO_RAW)
    input_types: msgspec.Raw = msgspec.field(name="Input type", default=_NO_RAW)
    input_strides: msgspec.Raw = msgspec.field(name="Input Strides", default=_NO_RAW)
    concrete_inputs: msgspec.Raw = msgspec.field(name="Concrete Inputs", default=_NO_RAW)
    # record_param_comms' collective arguments (newer PyTorch). Raw: other ops use these keys
    # with other types (an op's own "dtype"), so they are decoded on record_param_comms only.
    comm_collective: msgspec.Raw = msgspec.field(name="Collective name", default=_NO_RAW)
    comm_in_nelems: msgspec.Raw = msgspec.field(name="In msg nelems", default=_NO_RAW)
    comm_out_nelems: msgspec.Raw = msgspec.field(name="Out msg nelems", default=_NO_RAW)
    comm_dtype: msgspec.Raw = msgspec.field(name="dtype", default=_NO_RAW)
    comm_group_size: msgspec.Raw = msgspec.field(name="Group size", default=_NO_RAW)
    kernel_num_gb: Union[float, None] = None
    kernel_flop: Union[float, None] = None
    kernel_backend: Union[str, None] = None
    rf_id: Union[int, None] = msgspec.field(name="Record function id", default=None)
    # Autograd sequence number: a backward node carries its forward op's number.
    seq: Union[int, None] = msgspec.field(name="Sequence number", default=None)
    # CUPTI range-profiler counters (old Kineto "cuda_profiler_range" events): SASS
    # instruction counts per precision; FLOPs = add + mul + 2 * fma.
    sass_dadd: Union[float, None] = msgspec.field(
        name="smsp__sass_thread_inst_executed_op_dadd_pred_on.sum", default=None)
    sass_dmul: Union[float, None] = msgspec.field(
        name="smsp__sass_thread_inst_executed_op_dmul_pred_on.sum", default=None)
    sass_dfma: Union[float, None] = msgspec.field(
        name="smsp__sass_thread_inst_executed_op_dfma_pred_on.sum", default=None)
    sass_hadd: Union[float, None] = msgspec.field(
        name="smsp__sass_thread_inst_executed_op_hadd_pred_on.sum", default=None)
    sass_hmul: Union[float, None] = msgspec.field(
        name="smsp__sass_thread_inst_executed_op_hmul_pred_on.sum", default=None)
    sass_hfma: Union[float, None] = msgspec.field(
        name="smsp__sass_thread_inst_executed_op_hfma_pred_on.sum", default=None)
    sass_fadd: Union[float, None] = msgspec.field(
        name="smsp__sass_thread_inst_executed_op_fadd_pred_on.sum", default=None)
    sass_fmul: Union[float, None] = msgspec.field(
        name="smsp__sass_thread_inst_executed_op_fmul_pred_on.sum", default=None)
    sass_ffma: Union[float, None] = msgspec.field(
        name="smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", default=None)


_EMPTY_ARGS = _Args()


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: Union[str, None] = None
    name: str = ""
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    ts: Union[float, None] = None
    dur: Union[float, None] = None
    args: _Args = _EMPTY_ARGS


class _TraceFile(msgspec.Struct):
    traceEvents: Union[list[_Event], None] = None
    schemaVersion: Any = None
    deviceProperties: Union[list[dict], None] = None
    distributedInfo: Union[dict, None] = None
    record_shapes: Any = None
    baseTimeNanoseconds: Union[int, None] = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    cupti_version: Any = None
    displayTimeUnit: Union[str, None] = None
    traceName: Union[str, None] = None


_DECODER = msgspec.json.Decoder(Union[_TraceFile, list[_Event]])


@dataclass
class Trace:
    """One Kineto trace as DataFrames; timestamps are int64 ns from the first event."""

    path: str
    ops: pd.DataFrame
    signatures: pd.DataFrame
    kernels: pd.DataFrame
    runtime: pd.DataFrame
    annotations: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    # record_param_comms arguments by External id, as recorded (any JSON type; analyzers/collectives.py
    # checks them): collective, in_nelems, out_nelems, dtype, group_size. Empty in older traces.
    comm_args: pd.DataFrame = field(default_factory=lambda: _comm_frame([]))

    @property
    def device_name(self) -> str | None:
        """Name of the GPU the kernels ran on (the first in deviceProperties), None for CPU-only."""
        props = self.meta.get("deviceProperties") or []
        used = set(self.kernels["device"].dropna().astype(int)) if len(self.kernels) else set()
        for p in props:
            if not used or p.get("id") in used:
                return p.get("name")
        return None

    @property
    def device_memory(self) -> int | None:
        props = self.meta.get("deviceProperties") or []
        return props[0].get("totalGlobalMem") if props else None


def read_bytes(path: str | os.PathLike) -> bytes:
    """The trace file's JSON bytes, gunzipped when needed."""
    return read_maybe_gzip(path, TraceError, "neither a trace file nor a roofscope Run")


def _decode(path: str, data: bytes) -> _TraceFile:
    try:
        doc = _DECODER.decode(data)
    except msgspec.ValidationError as e:
        raise TraceError(f"{path}: not a Kineto trace ({e})") from None
    except msgspec.DecodeError as e:
        raise TraceError(f"{path}: not valid JSON ({e}); is the file truncated?") from None
    if isinstance(doc, list):
        doc = _TraceFile(traceEvents=doc)
    if doc.traceEvents is None:
        raise TraceError(f"{path}: not a Kineto trace (no 'traceEvents' list)")
    return doc


def _to_ns(values: list[float | None], t0: float) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    # Subtracting the origin before scaling keeps sub-µs digits of epoch-µs timestamps.
    return np.rint((arr - t0) * 1000.0).astype(np.int64)


def _dur_ns(values: list[float | None]) -> np.ndarray:
    arr = np.asarray([0.0 if v is None else v for v in values], dtype=np.float64)
    return np.rint(np.maximum(arr, 0.0) * 1000.0).astype(np.int64)


def _opt_int(values: list) -> pd.Series:
    return pd.Series(pd.array(values, dtype="Int64"))


def _thread_codes(pids: list, tids: list, registry: dict[tuple[str, str], int]) -> np.ndarray:
    """Integer code per (pid, tid), shared through ``registry`` by every table of one trace,
    so ops, runtime calls and annotations on one thread compare equal."""
    keys = pd.MultiIndex.from_arrays([pd.Series(pids, dtype=object).astype(str),
                                      pd.Series(tids, dtype=object).astype(str)])
    codes, uniques = pd.factorize(keys)
    remap = np.asarray([registry.setdefault(u, len(registry)) for u in uniques], dtype=np.int64)
    return remap[codes] if len(codes) else codes.astype(np.int64)


def _build_ops(evs: list[_Event], t0: float,
               threads: dict[tuple[str, str], int]) -> tuple[pd.DataFrame, pd.DataFrame]:
    sig_ids: dict[tuple, int] = {}
    sig_col = []
    for e in evs:
        a = e.args
        key = (e.name, bytes(a.input_dims), bytes(a.input_types), bytes(a.input_strides),
               bytes(a.concrete_inputs))
        sig_col.append(sig_ids.setdefault(key, len(sig_ids)))
    ts = _to_ns([e.ts for e in evs], t0)
    dur = _dur_ns([e.dur for e in evs])
    ops = pd.DataFrame({
        "name": pd.Categorical([e.name for e in evs]),
        "pid": [e.pid for e in evs],
        "tid": [e.tid for e in evs],
        "ts_ns": ts,
        "dur_ns": dur,
        "end_ns": ts + dur,
        "external_id": _opt_int([e.args.external_id for e in evs]),
        "rf_id": _opt_int([e.args.rf_id for e in evs]),
        "seq": _opt_int([e.args.seq for e in evs]),
        "sig": np.asarray(sig_col, dtype=np.int64),
        "kernel_num_gb": np.asarray([np.nan if e.args.kernel_num_gb is None else e.args.kernel_num_gb
                                     for e in evs], dtype=np.float64),
        "kernel_flop": np.asarray([np.nan if e.args.kernel_flop is None else e.args.kernel_flop
                                   for e in evs], dtype=np.float64),
    })
    ops["thread"] = _thread_codes(ops["pid"].tolist(), ops["tid"].tolist(), threads)
    return ops, _signature_table(sig_ids)


def _parse_raw(raw: bytes) -> Any:
    return msgspec.json.decode(raw) if raw else None


def _signature_table(sig_ids: dict[tuple, int]) -> pd.DataFrame:
    rows = list(sig_ids)
    return pd.DataFrame({
        "name": [r[0] for r in rows],
        "input_dims": [_parse_raw(r[1]) for r in rows],
        "input_types": [_parse_raw(r[2]) for r in rows],
        "input_strides": [_parse_raw(r[3]) for r in rows],
        "concrete_inputs": [_parse_raw(r[4]) for r in rows],
    }, index=pd.RangeIndex(len(rows), name="sig"))


def _build_intervals(evs: list[_Event], t0: float, threads: dict[tuple[str, str], int]) -> pd.DataFrame:
    ts = _to_ns([e.ts for e in evs], t0)
    dur = _dur_ns([e.dur for e in evs])
    df = pd.DataFrame({
        "name": pd.Series([e.name for e in evs], dtype=object),
        "pid": [e.pid for e in evs],
        "tid": [e.tid for e in evs],
        "ts_ns": ts,
        "dur_ns": dur,
        "end_ns": ts + dur,
        "correlation": _opt_int([e.args.correlation for e in evs]),
        "external_id": _opt_int([e.args.external_id for e in evs]),
    })
    df["thread"] = _thread_codes(df["pid"].tolist(), df["tid"].tolist(), threads)
    return df


COMM_ARG_COLUMNS = ("collective", "in_nelems", "out_nelems", "dtype", "group_size")


def _comm_frame(evs: list[_Event]) -> pd.DataFrame:
    # A handful of events per step: decoding their raw values one by one costs nothing.
    rows = [e.args for e in evs if e.name == "record_param_comms" and e.args.comm_in_nelems]
    raw = {"collective": [a.comm_collective for a in rows], "in_nelems": [a.comm_in_nelems for a in rows],
           "out_nelems": [a.comm_out_nelems for a in rows], "dtype": [a.comm_dtype for a in rows],
           "group_size": [a.comm_group_size for a in rows]}
    # The trailing None keeps numpy from building a 2-D array when every value is a list.
    return pd.DataFrame({c: np.array([_parse_raw(v) for v in raw[c]] + [None], dtype=object)[:-1]
                         for c in COMM_ARG_COLUMNS},
                        index=pd.Index([a.external_id for a in rows], name="external_id", dtype=object))


def _counter_flops(a: _Args) -> float:
    counts = [a.sass_dadd, a.sass_dmul, a.sass_dfma, a.sass_hadd, a.sass_hmul, a.sass_hfma,
              a.sass_fadd, a.sass_fmul, a.sass_ffma]
    if all(c is None for c in counts):
        return np.nan
    c = [x or 0.0 for x in counts]
    return c[0] + c[1] + 2 * c[2] + c[3] + c[4] + 2 * c[5] + c[6] + c[7] + 2 * c[8]


def _build_kernels(evs: list[_Event], t0: float) -> pd.DataFrame:
    df = _build_intervals(evs, t0, {})  # GPU streams: their thread codes are dropped below
    df["name"] = pd.Categorical(df["name"])
    df["cat"] = pd.Categorical([_CAT_ALIASES.get(e.cat, e.cat) for e in evs])
    df["device"] = _opt_int([e.args.device if e.args.device is not None else
                             (e.pid if isinstance(e.pid, int) else None) for e in evs])
    df["stream"] = _opt_int([e.args.stream if e.args.stream is not None else
                             (e.tid if isinstance(e.tid, int) else None) for e in evs])
    df["bytes"] = np.asarray([np.nan if e.args.bytes is None else e.args.bytes for e in evs],
                             dtype=np.float64)
    df["counter_flops"] = np.asarray([_counter_flops(e.args) for e in evs], dtype=np.float64)
    df["grid"] = [e.args.grid for e in evs]
    df["block"] = [e.args.block for e in evs]
    # Kernels of all activity types in time order, whatever order the buckets were filled in.
    return df.drop(columns=["pid", "tid", "thread"]).sort_values("ts_ns", kind="stable").reset_index(drop=True)


def load_trace(path: str | os.PathLike) -> Trace:
    """Read a Kineto trace (``.json`` or ``.json.gz``) into a linked :class:`Trace`."""
    path_s = str(path)
    doc = _decode(path_s, read_bytes(path))
    buckets: dict[str, list[_Event]] = {"cpu_op": [], "user_annotation": [], "gpu_user_annotation": [],
                                       "cuda_runtime": [], "cuda_driver": [], "kernel": [],
                                       "gpu_memcpy": [], "gpu_memset": [], "cuda_profiler_range": []}
    t0 = None
    for e in doc.traceEvents:
        if e.ph != "X" or e.ts is None:
            continue
        cat = _CAT_ALIASES.get(e.cat, e.cat)
        bucket = buckets.get(cat)
        if bucket is not None:
            bucket.append(e)
            if t0 is None or e.ts < t0:
                t0 = e.ts
    if t0 is None:
        raise TraceError(f"{path_s}: no torch.profiler events (no cpu_op, kernel or runtime events);"
                         " is this a Kineto trace?")
    threads: dict[tuple[str, str], int] = {}
    ops, signatures = _build_ops(buckets["cpu_op"], t0, threads)
    runtime = _build_intervals(buckets["cuda_runtime"] + buckets["cuda_driver"], t0, threads)
    kernels = _build_kernels(buckets["kernel"] + buckets["gpu_memcpy"] + buckets["gpu_memset"]
                             + buckets["cuda_profiler_range"], t0)
    annotations = _build_intervals(buckets["user_annotation"], t0, threads).drop(columns=["correlation"])
    comm_args = _comm_frame(buckets["cpu_op"])
    meta = _meta_of(doc, path_s, t0)
    meta["gpu_annotations"] = len(buckets["gpu_user_annotation"])
    del doc, buckets

    _link(ops, runtime, kernels, annotations)
    return Trace(path=path_s, ops=ops, signatures=signatures, kernels=kernels, runtime=runtime,
                 annotations=annotations, meta=meta, comm_args=comm_args)


def _meta_of(doc: _TraceFile, path: str, t0: float) -> dict[str, Any]:
    meta = {f: getattr(doc, f) for f in _TraceFile.__struct_fields__ if f != "traceEvents"}
    meta.update(path=path, t0_us=t0, events=len(doc.traceEvents))
    return meta


def _link(ops: pd.DataFrame, runtime: pd.DataFrame, kernels: pd.DataFrame,
          annotations: pd.DataFrame) -> None:
    """Fill ``ops.parent``, ``runtime.op`` and ``kernels.op``/``launch``/``step``/``region`` in place."""
    ops["parent"] = interval_parents(ops["thread"].to_numpy(), ops["ts_ns"].to_numpy(),
                                     ops["end_ns"].to_numpy())
    runtime["op"] = enclosing(ops["thread"].to_numpy(), ops["ts_ns"].to_numpy(),
                              ops["end_ns"].to_numpy(), ops["parent"].to_numpy(),
                              runtime["thread"].to_numpy(), runtime["ts_ns"].to_numpy(),
                              runtime["end_ns"].to_numpy())
    # kernel -> runtime launch through the CUPTI correlation id
    corr = runtime["correlation"].astype("Int64")
    launch_index = pd.Index(corr.where(corr.notna(), -1).to_numpy(np.int64))
    kcorr = kernels["correlation"].fillna(-2).to_numpy(np.int64)
    if launch_index.has_duplicates:
        first = ~launch_index.duplicated()
        launch = pd.Index(launch_index[first]).get_indexer(kcorr)
        launch = np.where(launch >= 0, np.flatnonzero(first)[np.maximum(launch, 0)], -1)
    else:
        launch = launch_index.get_indexer(kcorr)
    ranges = (kernels["cat"] == "cuda_profiler_range").to_numpy()
    if ranges.any():
        # Counter ranges carry no correlation id; they follow cudaLaunchKernel calls one to one,
        # in launch order. Link them only when the counts agree.
        launches = runtime.index[runtime["name"] == "cudaLaunchKernel"]
        launches = runtime.loc[launches].sort_values("ts_ns").index.to_numpy()
        rows = np.flatnonzero(ranges)
        rows = rows[np.argsort(kernels["ts_ns"].to_numpy()[rows], kind="stable")]
        if len(launches) == len(rows):
            launch[rows] = launches
    kernels["launch"] = launch
    kernels["timed"] = ~ranges
    op = take(runtime["op"].to_numpy(), launch, -1)
    # Without a launch event, a modern trace's kernel External id names its launching op;
    # in older traces it merely repeats the correlation id and must not be trusted.
    ext = kernels["external_id"].fillna(-1).to_numpy(np.int64)
    trusted = (op < 0) & (ext >= 0) & (ext != kcorr)
    if trusted.any() and len(ops):
        op_ext = ops["external_id"].fillna(-1).to_numpy(np.int64)
        ext_index = pd.Index(op_ext)
        if ext_index.has_duplicates:
            ext_index = ext_index.where(~ext_index.duplicated(), -3)
        by_ext = ext_index.get_indexer(ext[trusted])
        op[trusted] = by_ext
    kernels["op"] = op
    _assign_steps(kernels, runtime, annotations)
    _assign_regions(kernels, runtime, annotations)


def _assign_steps(kernels: pd.DataFrame, runtime: pd.DataFrame, annotations: pd.DataFrame) -> None:
    """Step number of each kernel, by the time of its launch (or of itself, unlaunched)."""
    launch = kernels["launch"].to_numpy()
    t = np.where(launch >= 0, take(runtime["ts_ns"].to_numpy(), launch, 0), kernels["ts_ns"].to_numpy())
    kernels["step"] = steps_at(annotations, t)


def steps_at(annotations: pd.DataFrame, t: np.ndarray) -> np.ndarray:
    """``N`` of the ``ProfilerStep#N`` annotation spanning each time, or -1."""
    step = np.full(len(t), -1, dtype=np.int64)
    steps = annotations[annotations["name"].str.startswith("ProfilerStep#")] if len(annotations) else annotations
    if len(steps) and len(t):
        steps = steps.sort_values("ts_ns")
        numbers = steps["name"].str.slice(len("ProfilerStep#")).astype(np.int64).to_numpy()
        idx = np.searchsorted(steps["ts_ns"].to_numpy(), t, side="right") - 1
        ok = (idx >= 0) & (t <= steps["end_ns"].to_numpy()[np.maximum(idx, 0)])
        step = np.where(ok, numbers[np.maximum(idx, 0)], -1)
    return step


def is_region(names: pd.Series) -> np.ndarray:
    # Step markers are steps, module labels are modules, and "## ... ##" annotations are
    # torch.compile's own bookkeeping.
    n = names.astype(str)
    return (~n.str.startswith("ProfilerStep#") & ~n.str.startswith("## ")
            & ~n.str.startswith(MODULE_PREFIX) & ~n.str.startswith(ROOFSCOPE_PREFIX)).to_numpy()


def _assign_regions(kernels: pd.DataFrame, runtime: pd.DataFrame, annotations: pd.DataFrame) -> None:
    """Innermost record_function region around each kernel's launch (see :func:`regions_at`)."""
    launch = kernels["launch"].to_numpy()
    kernels["region"] = regions_at(annotations, take(runtime["thread"].to_numpy(), launch, -1),
                                   take(runtime["ts_ns"].to_numpy(), launch, 0),
                                   take(runtime["end_ns"].to_numpy(), launch, 0), launch >= 0)


def regions_at(annotations: pd.DataFrame, thread: np.ndarray, start: np.ndarray, end: np.ndarray,
               valid: np.ndarray) -> np.ndarray:
    """Name of the innermost region (user annotation) containing each query span, or "".

    The query thread's own regions come first; spans on other threads (autograd's
    backward thread) fall back to any thread's region covering them.
    """
    region = np.full(len(start), "", dtype=object)
    regions = annotations[is_region(annotations["name"])] if len(annotations) else annotations
    if not len(regions) or not valid.any():
        return region
    th, st, en = (regions[c].to_numpy() for c in ("thread", "ts_ns", "end_ns"))
    names = regions["name"].to_numpy(dtype=object)
    found = enclosing(th, st, en, interval_parents(th, st, en), thread, start, end)
    miss = valid & (found < 0)
    if miss.any():
        anywhere = np.zeros(len(th), dtype=np.int64)
        found[miss] = enclosing(anywhere, st, en, interval_parents(anywhere, st, en),
                                np.zeros(int(miss.sum()), dtype=np.int64), start[miss], end[miss])
    return np.where(valid & (found >= 0), take(names, found, ""), "")
