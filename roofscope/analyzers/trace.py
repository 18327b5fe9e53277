"""Kineto (torch.profiler) Chrome-trace ingestion into pandas DataFrames.

The JSON is decoded with msgspec into typed structs that keep only the fields the
analysis reads (kineto.py: every type variant of real traces, malformed events skipped
and counted); shape arguments stay as raw JSON bytes so that identical op signatures
are deduplicated before anything is parsed (a million events usually carry a few
thousand distinct signatures). benchmarks/bench_ingest.py measures this against json
and orjson.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from ..errors import TraceError
from ..fileio import read_maybe_gzip
from .kineto import Args as _Args
from .kineto import Decoded, as_dims, as_int, clean_meta
from .kineto import Event as _Event
from .kineto import decode as _decode
from .linking import enclosing, interval_parents, take
from .runtime_names import KERNEL_LAUNCHES

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
    def device_props(self) -> dict[str, Any] | None:
        """deviceProperties entry of the GPU the kernels ran on, None for CPU-only traces.

        Kernels name their device by id; when no listed id matches (ROCm traces number
        devices differently in kernels and in deviceProperties) and only one device is
        listed, that one is it; otherwise the first listed device.
        """
        props = self.meta.get("deviceProperties") or []
        if not props:
            return None
        used = self.kernels["device"].dropna().astype(int) if len(self.kernels) else pd.Series([], dtype=int)
        ids = used.value_counts().index.tolist()
        for i in ids:
            for p in props:
                if p.get("id") == i:
                    return p
        return props[0]

    @property
    def device_name(self) -> str | None:
        """Name of the GPU the kernels ran on (see :attr:`device_props`), None for CPU-only."""
        p = self.device_props
        name = p.get("name") if p else None
        return name if isinstance(name, str) else None

    @property
    def device_memory(self) -> int | None:
        p = self.device_props
        mem = p.get("totalGlobalMem") if p else None
        return mem if isinstance(mem, (int, float)) and not isinstance(mem, bool) else None


def read_bytes(path: str | os.PathLike) -> bytes:
    """The trace file's JSON bytes, gunzipped when needed."""
    return read_maybe_gzip(path, TraceError, "neither a trace file nor a roofscope Run")


def _to_ns(values: list[float | None], t0: float) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    # Subtracting the origin before scaling keeps sub-µs digits of epoch-µs timestamps.
    return np.rint((arr - t0) * 1000.0).astype(np.int64)


def _dur_ns(values: list[float | None]) -> np.ndarray:
    arr = np.asarray([0.0 if v is None else v for v in values], dtype=np.float64)
    # Corrupt durations (negative, NaN, centuries) become 0 or the timestamp limit.
    return np.rint(np.clip(np.nan_to_num(arr), 0.0, _TS_LIMIT_US) * 1000.0).astype(np.int64)


def _opt_int(values: list) -> pd.Series:
    try:
        return pd.Series(pd.array(values, dtype="Int64"))
    except (OverflowError, TypeError, ValueError):  # an id beyond int64 is corrupt: unknown
        return pd.Series(pd.array([v if type(v) is int and -2**63 <= v < 2**63 else None for v in values],
                                  dtype="Int64"))


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
    df["device"] = _opt_int([as_int(e.args.device) if e.args.device is not None else
                             (e.pid if type(e.pid) is int else None) for e in evs])
    df["stream"] = _opt_int([as_int(e.args.stream) if e.args.stream is not None else
                             (e.tid if type(e.tid) is int else None) for e in evs])
    df["bytes"] = np.asarray([np.nan if e.args.bytes is None else e.args.bytes for e in evs],
                             dtype=np.float64)
    df["counter_flops"] = np.asarray([_counter_flops(e.args) for e in evs], dtype=np.float64)
    df["grid"] = [as_dims(e.args.grid) for e in evs]
    df["block"] = [as_dims(e.args.block) for e in evs]
    # Kernels of all activity types in time order, whatever order the buckets were filled in.
    return df.drop(columns=["pid", "tid", "thread"]).sort_values("ts_ns", kind="stable").reset_index(drop=True)


# Timestamps (µs) beyond this are corrupt: their ns offsets would not fit in int64.
_TS_LIMIT_US = 4e15


def load_trace(path: str | os.PathLike) -> Trace:
    """Read a Kineto trace (``.json`` or ``.json.gz``) into a linked :class:`Trace`."""
    path_s = str(path)
    decoded = _decode(path_s, read_bytes(path))
    doc = decoded.doc
    buckets: dict[str, list[_Event]] = {"cpu_op": [], "user_annotation": [], "gpu_user_annotation": [],
                                       "cuda_runtime": [], "cuda_driver": [], "kernel": [],
                                       "gpu_memcpy": [], "gpu_memset": [], "cuda_profiler_range": []}
    t0 = None
    bad_ts = 0
    for e in doc.traceEvents:
        ts = e.ts
        if e.ph != "X" or ts is None:
            continue
        cat = _CAT_ALIASES.get(e.cat, e.cat)
        bucket = buckets.get(cat)
        if bucket is not None:
            if not -_TS_LIMIT_US <= ts <= _TS_LIMIT_US:  # also false for NaN
                bad_ts += 1
                continue
            bucket.append(e)
            if t0 is None or ts < t0:
                t0 = ts
    if bad_ts:
        decoded.skipped["ts not a time"] += bad_ts
    if t0 is None:
        raise TraceError(f"{path_s}: no torch.profiler events (no cpu_op, kernel or runtime events);"
                         " is this a Kineto trace?")
    threads: dict[tuple[str, str], int] = {}
    ops, signatures = _build_ops(buckets["cpu_op"], t0, threads)
    runtime = _build_intervals(buckets["cuda_runtime"] + buckets["cuda_driver"], t0, threads)
    runtime["size"] = np.asarray([np.nan if e.args.size is None else e.args.size
                                  for e in buckets["cuda_runtime"] + buckets["cuda_driver"]], dtype=np.float64)
    kernels = _build_kernels(buckets["kernel"] + buckets["gpu_memcpy"] + buckets["gpu_memset"]
                             + buckets["cuda_profiler_range"], t0)
    annotations = _build_intervals(buckets["user_annotation"], t0, threads).drop(columns=["correlation"])
    comm_args = _comm_frame(buckets["cpu_op"])
    meta = _meta_of(decoded, path_s, t0)
    meta["gpu_annotations"] = len(buckets["gpu_user_annotation"])
    del doc, decoded, buckets

    _link(ops, runtime, kernels, annotations)
    return Trace(path=path_s, ops=ops, signatures=signatures, kernels=kernels, runtime=runtime,
                 annotations=annotations, meta=meta, comm_args=comm_args)


def _meta_of(decoded: Decoded, path: str, t0: float) -> dict[str, Any]:
    meta = clean_meta(decoded.doc)
    meta.update(path=path, t0_us=t0, events=len(decoded.doc.traceEvents),
                skipped_events=dict(decoded.skipped))
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
        # Counter ranges carry no correlation id; they follow kernel launch calls one to one,
        # in launch order. Link them only when the counts agree.
        launches = runtime.index[runtime["name"].isin(KERNEL_LAUNCHES)]
        launches = runtime.loc[launches].sort_values("ts_ns").index.to_numpy()
        rows = np.flatnonzero(ranges)
        rows = rows[np.argsort(kernels["ts_ns"].to_numpy()[rows], kind="stable")]
        if len(launches) == len(rows):
            launch[rows] = launches
    kernels["launch"] = launch
    kernels["timed"] = ~ranges
    # ROCm copies carry no bytes of their own; their runtime call (hipMemcpy*) has the size.
    nbytes = kernels["bytes"].to_numpy()
    copies = np.isnan(nbytes) & kernels["cat"].isin(("gpu_memcpy", "gpu_memset")).to_numpy() & (launch >= 0)
    if copies.any():
        nbytes = nbytes.copy()
        nbytes[copies] = runtime["size"].to_numpy()[launch[copies]]
        kernels["bytes"] = nbytes
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


def is_step(names: pd.Series) -> np.ndarray:
    """Which annotation names are step markers, ``ProfilerStep#N`` with an integer N."""
    return names.astype(str).str.fullmatch(r"ProfilerStep#\d{1,18}").to_numpy(dtype=bool)


def steps_at(annotations: pd.DataFrame, t: np.ndarray) -> np.ndarray:
    """``N`` of the ``ProfilerStep#N`` annotation spanning each time, or -1."""
    step = np.full(len(t), -1, dtype=np.int64)
    steps = annotations[is_step(annotations["name"])] if len(annotations) else annotations
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
