"""Kineto (torch.profiler) Chrome-trace events into the Trace's tables (kineto_reader.py links
them and reads the metadata).

The JSON is decoded with msgspec into typed structs that keep only the fields the
analysis reads (kineto.py: every type variant of real traces, malformed events skipped
and counted); shape arguments stay as raw JSON bytes so that identical op signatures
are deduplicated before anything is parsed (a million events usually carry a few
thousand distinct signatures). benchmarks/bench_ingest.py measures this against json
and orjson.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from itertools import chain
from typing import Any, Union

import msgspec
import numpy as np
import pandas as pd

from roofscope.analyzers.ingest.frames import thread_codes
from roofscope.analyzers.ingest.kineto import META_KEYS, TraceFile, as_dims, as_int, clean_meta
from roofscope.analyzers.ingest.kineto import Args as _Args
from roofscope.analyzers.ingest.kineto import Event as _Event
from roofscope.analyzers.ingest.kineto import decode as _decode
from roofscope.analyzers.ingest.source import read_bytes
from roofscope.analyzers.model.trace import (ANNOTATION_COLUMNS, COMM_ARG_COLUMNS, KERNEL_COLUMNS, OPS_COLUMNS,
                                             RUNTIME_COLUMNS, empty_comm_args)
from roofscope.errors import TraceError

# Older Kineto wrote "Kernel"/"Memcpy"/"Memset"; map them onto the modern names.
_CAT_ALIASES = {"Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset",
                "Runtime": "cuda_runtime", "Operator": "cpu_op"}


def _to_ns(arr: np.ndarray, t0: float) -> np.ndarray:
    # Subtracting the origin before scaling keeps sub-µs digits of epoch-µs timestamps.
    return np.rint((arr - t0) * 1000.0).astype(np.int64)


def _dur_ns(values: list[float | None]) -> np.ndarray:
    arr = np.asarray([0.0 if v is None else v for v in values], dtype=np.float64)
    # Corrupt durations (negative, NaN, centuries) become 0 or the timestamp limit.
    return np.rint(np.clip(np.nan_to_num(arr), 0.0, _TS_LIMIT_US) * 1000.0).astype(np.int64)


def _opt_ints(values: list) -> tuple[np.ndarray, np.ndarray]:
    """Optional ints (int or None) as values and a missing mask: what pd.array(..., "Int64")
    makes of the list, without its per-element type inference. An id beyond int64 is corrupt:
    unknown."""
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    missing = np.equal(arr, None)
    arr[missing] = 0
    try:
        return arr.astype(np.int64), missing
    except (OverflowError, TypeError, ValueError):
        missing = np.asarray([not (type(v) is int and -2**63 <= v < 2**63) for v in values], dtype=bool)
        arr[missing] = 0
        return arr.astype(np.int64), missing


def _ids(values: list) -> np.ndarray | list:
    """Process/thread ids: an int64 array when every id is an int (what pandas would infer),
    else the list as it is (strings, None: pandas infers the column from it)."""
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except (TypeError, ValueError, OverflowError):
        return values


def _floats(values: list) -> np.ndarray:
    return np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)


def _codes(values: list[str], registry: dict[str, int]) -> np.ndarray:
    """Codes of ``values`` in ``registry`` (order of first appearance, grown as needed)."""
    add = registry.setdefault
    return np.asarray([add(v, len(registry)) for v in values], dtype=np.int64)


def _categorical(codes: np.ndarray, registry: dict[str, int], text: bool) -> pd.Categorical:
    """What ``pd.Categorical`` makes of the values these codes stand for (categories sorted; of
    dtype str when built from a list of strings, ``text``, else object), without hashing every
    value again."""
    names = list(registry)
    order = sorted(range(len(names)), key=names.__getitem__)
    rank = np.empty(len(names), dtype=np.int64)
    rank[order] = np.arange(len(names))
    categories = pd.Index([names[i] for i in order], dtype="str" if text and names else object)
    return pd.Categorical.from_codes(rank[codes] if len(names) else codes, categories=categories)


def _interval_piece(evs: list[_Event], names: dict[str, int] | None = None) -> dict[str, Any]:
    """Columns common to every table, from one batch of events (timestamps still in µs:
    the trace's origin is known only once every batch is read); names as codes in ``names``
    for the tables whose name column is categorical."""
    name_list = [e.name for e in evs]
    return {"name": name_list if names is None else _codes(name_list, names),
            "pid": _ids([e.pid for e in evs]), "tid": _ids([e.tid for e in evs]),
            "ts_us": np.asarray([e.ts for e in evs], dtype=np.float64), "dur_ns": _dur_ns([e.dur for e in evs])}


def _ops_piece(evs: list[_Event], sig_ids: dict[tuple, int], names: dict[str, int]) -> dict[str, Any]:
    sig_col = []
    for e in evs:
        a = e.args
        key = (e.name, bytes(a.input_dims), bytes(a.input_types), bytes(a.input_strides),
               bytes(a.concrete_inputs))
        sig_col.append(sig_ids.setdefault(key, len(sig_ids)))
    args = [e.args for e in evs]
    return {**_interval_piece(evs, names),
            "external_id": _opt_ints([a.external_id for a in args]), "rf_id": _opt_ints([a.rf_id for a in args]),
            "seq": _opt_ints([a.seq for a in args]), "sig": np.asarray(sig_col, dtype=np.int64),
            "kernel_num_gb": _floats([a.kernel_num_gb for a in args]),
            "kernel_flop": _floats([a.kernel_flop for a in args])}


def _runtime_piece(evs: list[_Event], names: dict[str, int]) -> dict[str, Any]:
    return {**_interval_piece(evs, names), "correlation": _opt_ints([e.args.correlation for e in evs]),
            "external_id": _opt_ints([e.args.external_id for e in evs]), "size": _floats([e.args.size for e in evs])}


def _annotation_piece(evs: list[_Event]) -> dict[str, Any]:
    return {**_interval_piece(evs), "external_id": _opt_ints([e.args.external_id for e in evs])}


def _kernel_piece(evs: list[_Event], names: dict[str, int]) -> dict[str, Any]:
    return {**_interval_piece(evs, names),
            "correlation": _opt_ints([e.args.correlation for e in evs]),
            "external_id": _opt_ints([e.args.external_id for e in evs]),
            "cat": [_CAT_ALIASES.get(e.cat, e.cat) for e in evs],
            "device": _opt_ints([as_int(e.args.device) if e.args.device is not None else
                                 (e.pid if type(e.pid) is int else None) for e in evs]),
            "stream": _opt_ints([as_int(e.args.stream) if e.args.stream is not None else
                                 (e.tid if type(e.tid) is int else None) for e in evs]),
            "bytes": _floats([e.args.bytes for e in evs]),
            "counter_flops": np.asarray([_counter_flops(e.args) for e in evs], dtype=np.float64),
            "grid": [as_dims(e.args.grid) for e in evs], "block": [as_dims(e.args.block) for e in evs]}


_OPT_INT = {"external_id", "rf_id", "seq", "correlation", "device", "stream"}
_OBJECT = {"name", "pid", "tid", "grid", "block", "cat"}


def _frame(pieces: list[dict[str, Any]], columns: tuple[str, ...], t0: float,
           categorical: tuple[str, ...] = (), names: tuple[dict[str, int], bool] | None = None) -> pd.DataFrame:
    """The pieces of one table joined, in the table's column order, with ns times from ``t0``;
    text columns are object, ``categorical`` ones categoricals of the list, and with ``names``
    (the registry the pieces' name codes refer to, and whether the original was a list of str)
    the name column a categorical from its codes."""
    cols: dict[str, Any] = {}
    for c in columns:
        if c in ("ts_ns", "end_ns"):
            continue
        parts = [p[c] for p in pieces]
        if c == "name" and names is not None:
            codes = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
            cols[c] = _categorical(codes, *names)
        elif c in ("pid", "tid") and all(isinstance(part, np.ndarray) for part in parts):
            cols[c] = np.concatenate(parts) if parts else []
        elif c in _OBJECT:
            cols[c] = list(chain.from_iterable(part.tolist() if isinstance(part, np.ndarray) else part
                                               for part in parts))
        elif c in _OPT_INT:
            values = np.concatenate([v for v, _ in parts]) if parts else np.zeros(0, dtype=np.int64)
            missing = np.concatenate([m for _, m in parts]) if parts else np.zeros(0, dtype=bool)
            cols[c] = pd.Series(pd.arrays.IntegerArray(values, missing))
        else:
            cols[c] = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float64 if c != "sig" else np.int64)
    ts = _to_ns(np.concatenate([p["ts_us"] for p in pieces]) if pieces else np.zeros(0), t0)
    dur = cols["dur_ns"] if len(cols["dur_ns"]) else np.zeros(0, dtype=np.int64)
    cols["dur_ns"] = dur.astype(np.int64)
    out = {}
    for c in columns:
        out[c] = ts if c == "ts_ns" else ts + cols["dur_ns"] if c == "end_ns" else cols[c]
    for c in ("name", "cat"):
        if c in out and not (c == "name" and names is not None):
            out[c] = pd.Categorical(out[c]) if c in categorical else pd.Series(out[c], dtype=object)
    return pd.DataFrame(out)


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


# Timestamps (µs) beyond this are corrupt: their ns offsets would not fit in int64.
_TS_LIMIT_US = 4e15
# Events decoded at a time: the typed structs of one batch live only while its columns are taken.
BATCH_EVENTS = 1 << 16
_KERNEL_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_profiler_range")
_RUNTIME_CATS = ("cuda_runtime", "cuda_driver")


class _Columns:
    """The tables' columns, filled one batch of events at a time (so that a million events
    never exist as a million typed structs at once)."""

    def __init__(self) -> None:
        self.t0: float | None = None
        self.bad_ts = 0
        self.events = 0
        self.sig_ids: dict[tuple, int] = {}
        self.op_names: dict[str, int] = {}
        self.kernel_names: dict[str, int] = {}
        self.runtime_names: dict[str, int] = {}
        self.pieces: dict[str, list[dict[str, Any]]] = {c: [] for c in
                                                        ("cpu_op", "user_annotation", *_RUNTIME_CATS, *_KERNEL_CATS)}
        self.comm: list[pd.DataFrame] = []

    def add(self, evs: list[_Event]) -> None:
        self.events += len(evs)
        buckets: dict[str, list[_Event]] = {c: [] for c in self.pieces}
        # GPU-side annotation spans make no table; they count for the trace's origin only.
        buckets["gpu_user_annotation"] = []
        t0 = self.t0
        for e in evs:
            ts = e.ts
            if e.ph != "X" or ts is None:
                continue
            cat = _CAT_ALIASES.get(e.cat, e.cat)
            bucket = buckets.get(cat)
            if bucket is not None:
                if not -_TS_LIMIT_US <= ts <= _TS_LIMIT_US:  # also false for NaN
                    self.bad_ts += 1
                    continue
                bucket.append(e)
                if t0 is None or ts < t0:
                    t0 = ts
        self.t0 = t0
        build = {"cpu_op": lambda b: _ops_piece(b, self.sig_ids, self.op_names), "user_annotation": _annotation_piece,
                 **{c: lambda b: _runtime_piece(b, self.runtime_names) for c in _RUNTIME_CATS},
                 **{c: lambda b: _kernel_piece(b, self.kernel_names) for c in _KERNEL_CATS}}
        for cat, fn in build.items():
            if buckets[cat]:
                self.pieces[cat].append(fn(buckets[cat]))
        comm = _comm_frame(buckets["cpu_op"])
        if len(comm):
            self.comm.append(comm)

    def tables(self) -> tuple[pd.DataFrame, ...]:
        """ops, signatures, runtime, kernels, annotations, comm_args (the Trace's raw tables)."""
        t0 = float(self.t0)  # type: ignore[arg-type]
        threads: dict[tuple[str, str], int] = {}
        ops = _frame(self.pieces.pop("cpu_op"), OPS_COLUMNS, t0, names=(self.op_names, True))
        ops["thread"] = thread_codes(ops["pid"], ops["tid"], threads)
        runtime = _frame([p for c in _RUNTIME_CATS for p in self.pieces.pop(c)], RUNTIME_COLUMNS, t0,
                         names=(self.runtime_names, False))
        runtime["thread"] = thread_codes(runtime["pid"], runtime["tid"], threads)
        runtime.insert(len(RUNTIME_COLUMNS), "size", runtime.pop("size"))
        kernels = _frame([p for c in _KERNEL_CATS for p in self.pieces.pop(c)], KERNEL_COLUMNS, t0,
                         categorical=("cat",), names=(self.kernel_names, False))
        # Kernels of all activity types in time order, whatever order the buckets were filled in.
        kernels = kernels.sort_values("ts_ns", kind="stable").reset_index(drop=True)
        annotations = _frame(self.pieces.pop("user_annotation"), ANNOTATION_COLUMNS, t0)
        annotations["thread"] = thread_codes(annotations["pid"], annotations["tid"], threads)
        comm = empty_comm_args()
        if self.comm:
            comm = pd.concat(self.comm)
            comm.index = comm.index.astype(object)
        return ops, _signature_table(self.sig_ids), runtime, kernels, annotations, comm


class _Unclean(Exception):
    """The fast batched decoding met something only the whole-file decoder handles."""


class _RawEvents(TraceFile):
    """The file with its events left as raw JSON slices: one C pass finds every event's bytes."""

    traceEvents: Union[list[msgspec.Raw], None] = None


_RAW_DECODER = msgspec.json.Decoder(Union[_RawEvents, list[msgspec.Raw]], strict=False)
_BATCH_DECODER = msgspec.json.Decoder(list[_Event], strict=False)


def _decode_batched(data: bytes, columns: _Columns) -> tuple[TraceFile, Counter]:
    """Decode a clean file batch by batch into ``columns``; raises :class:`_Unclean` for anything
    the whole-file decoder (kineto.decode: repairs, skipped events, refusals) must see."""
    try:
        loose = _RAW_DECODER.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        raise _Unclean from None
    raws = loose if isinstance(loose, list) else loose.traceEvents
    if not raws:
        raise _Unclean
    for i in range(0, len(raws), BATCH_EVENTS):
        try:
            batch = _BATCH_DECODER.decode(b"[" + b",".join(raws[i:i + BATCH_EVENTS]) + b"]")
        except (msgspec.DecodeError, UnicodeDecodeError):
            raise _Unclean from None
        columns.add(batch)
    meta = TraceFile() if isinstance(loose, list) else TraceFile(**{k: getattr(loose, k) for k in META_KEYS})
    return meta, Counter()


@dataclass
class KinetoFrames:
    """A Kineto file's tables before linking, and what its top level and decoding said."""

    ops: pd.DataFrame
    signatures: pd.DataFrame
    runtime: pd.DataFrame
    kernels: pd.DataFrame
    annotations: pd.DataFrame
    comm_args: pd.DataFrame
    meta: dict[str, Any]             # the top-level keys, checked (kineto.clean_meta)
    t0_us: float                     # the first event's timestamp: the tables' time 0
    events: int
    skipped: dict[str, int]          # malformed events skipped, by reason


def read_frames(path: str | os.PathLike) -> KinetoFrames:
    """Decode a Kineto trace (``.json`` or ``.json.gz``) into its tables; one-line
    :class:`TraceError` for what is no Kineto trace."""
    path_s = str(path)
    data = read_bytes(path)
    columns = _Columns()
    try:
        doc, skipped = _decode_batched(data, columns)
    except _Unclean:
        columns = _Columns()
        decoded = _decode(path_s, data)
        doc, skipped, events = decoded.doc, decoded.skipped, decoded.doc.traceEvents
        del decoded
        for i in range(0, len(events), BATCH_EVENTS):
            columns.add(events[i:i + BATCH_EVENTS])
        doc.traceEvents = None
        del events
    del data
    if columns.bad_ts:
        skipped["ts not a time"] += columns.bad_ts
    if columns.t0 is None:
        raise TraceError(f"{path_s}: no torch.profiler events (no cpu_op, kernel or runtime events);"
                         " is this a Kineto trace?")
    ops, signatures, runtime, kernels, annotations, comm_args = columns.tables()
    return KinetoFrames(ops=ops, signatures=signatures, runtime=runtime, kernels=kernels, annotations=annotations,
                        comm_args=comm_args, meta=clean_meta(doc), t0_us=columns.t0, events=columns.events,
                        skipped=dict(skipped))
