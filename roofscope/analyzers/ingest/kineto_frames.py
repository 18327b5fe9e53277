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
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter, itemgetter
from typing import Any, Sequence

import msgspec
import numpy as np
import pandas as pd

from roofscope.analyzers.ingest.frames import thread_codes
from roofscope.analyzers.ingest.kineto import as_dims, as_int, clean_meta
from roofscope.analyzers.ingest.kineto import Args as _Args
from roofscope.analyzers.ingest.kineto import Event as _Event
from roofscope.analyzers.ingest.kineto_stream import Stream
from roofscope.analyzers.ingest.source import read_chunks
from roofscope.analyzers.model.trace import (ANNOTATION_COLUMNS, COMM_ARG_COLUMNS, KERNEL_COLUMNS, OPS_COLUMNS,
                                             RUNTIME_COLUMNS, empty_comm_args)
from roofscope.errors import TraceError

# Older Kineto wrote "Kernel"/"Memcpy"/"Memset"; map them onto the modern names.
_CAT_ALIASES = {"Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset",
                "Runtime": "cuda_runtime", "Operator": "cpu_op"}


def _to_ns(arr: np.ndarray, t0: float) -> np.ndarray:
    # Subtracting the origin before scaling keeps sub-µs digits of epoch-µs timestamps.
    return np.rint((arr - t0) * 1000.0).astype(np.int64)


def _floats(values: list) -> np.ndarray:
    """Optional floats as an array, None as NaN."""
    if values.count(None) == len(values):
        return np.full(len(values), np.nan)
    return np.fromiter(values, dtype=np.float64, count=len(values))


def _dur_ns(values: list[float | None]) -> np.ndarray:
    # Corrupt durations (missing, negative, NaN, centuries) become 0 or the timestamp limit.
    return np.rint(np.clip(np.nan_to_num(_floats(values)), 0.0, _TS_LIMIT_US) * 1000.0).astype(np.int64)


def _opt_ints(values: list) -> tuple[np.ndarray, np.ndarray]:
    """Optional ints (int or None) as values and a missing mask: what pd.array(..., "Int64")
    makes of the list, without its per-element type inference. An id beyond int64 is corrupt:
    unknown."""
    n = len(values)
    if values.count(None) == n:
        return np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool)
    try:
        return np.fromiter(values, dtype=np.int64, count=n), np.zeros(n, dtype=bool)
    except (OverflowError, TypeError, ValueError):
        pass  # some are missing (None), or beyond int64
    arr = np.empty(n, dtype=object)
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


def _codes(values: list, registry: dict) -> np.ndarray:
    """Codes of ``values`` in ``registry`` (order of first appearance, grown as needed), hashing
    each value once."""
    for v in dict.fromkeys(values):
        registry.setdefault(v, len(registry))
    return np.fromiter(map(registry.__getitem__, values), dtype=np.int64, count=len(values))


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


def _interval_piece(evs: Sequence[_Event], ts_us: np.ndarray, names: dict[str, int] | None = None) -> dict[str, Any]:
    """Columns common to every table, from one batch of events (timestamps still in µs:
    the trace's origin is known only once every batch is read); names as codes in ``names``
    for the tables whose name column is categorical."""
    name_list = [e.name for e in evs]
    return {"name": name_list if names is None else _codes(name_list, names),
            "pid": _ids([e.pid for e in evs]), "tid": _ids([e.tid for e in evs]),
            "ts_us": ts_us, "dur_ns": _dur_ns([e.dur for e in evs])}


class _Signatures:
    """Op signatures (name and the four shape arguments' raw JSON) numbered in order of first
    appearance. Each op's shapes are joined into one bytes key in C and numbered with its name's
    code; a signature's own bytes are copied out only for its first op."""

    def __init__(self) -> None:
        self.shapes: dict[bytes, int] = {}
        self.ids: dict[int, int] = {}
        self.rows: list[tuple[str, bytes, bytes, bytes, bytes]] = []

    def codes(self, names: list[str], name_codes: np.ndarray, args: list[_Args]) -> np.ndarray:
        shapes = _codes([b"\0".join((a.input_dims, a.input_types, a.input_strides, a.concrete_inputs)) for a in args],
                        self.shapes)
        pairs = (name_codes << 32) + shapes
        keys = pairs.tolist()
        if any(k not in self.ids for k in dict.fromkeys(keys)):
            unique, first = np.unique(pairs, return_index=True)
            for i in np.sort(first[~np.isin(unique, np.fromiter(self.ids, np.int64, len(self.ids)))]).tolist():
                a = args[i]
                self.ids[keys[i]] = len(self.rows)
                self.rows.append((names[i], bytes(a.input_dims), bytes(a.input_types), bytes(a.input_strides),
                                  bytes(a.concrete_inputs)))
        return np.fromiter(map(self.ids.__getitem__, keys), dtype=np.int64, count=len(keys))


def _ops_piece(evs: Sequence[_Event], ts_us: np.ndarray, sigs: _Signatures, names: dict[str, int]) -> dict[str, Any]:
    args = [e.args for e in evs]
    piece = _interval_piece(evs, ts_us, names)
    return {**piece,
            "external_id": _opt_ints([a.external_id for a in args]), "rf_id": _opt_ints([a.rf_id for a in args]),
            "seq": _opt_ints([a.seq for a in args]), "sig": sigs.codes([e.name for e in evs], piece["name"], args),
            "kernel_num_gb": _floats([a.kernel_num_gb for a in args]),
            "kernel_flop": _floats([a.kernel_flop for a in args])}


def _runtime_piece(evs: Sequence[_Event], ts_us: np.ndarray, names: dict[str, int]) -> dict[str, Any]:
    args = [e.args for e in evs]
    return {**_interval_piece(evs, ts_us, names), "correlation": _opt_ints([a.correlation for a in args]),
            "external_id": _opt_ints([a.external_id for a in args]), "size": _floats([a.size for a in args])}


def _annotation_piece(evs: Sequence[_Event], ts_us: np.ndarray) -> dict[str, Any]:
    return {**_interval_piece(evs, ts_us), "external_id": _opt_ints([e.args.external_id for e in evs])}


def _kernel_piece(evs: Sequence[_Event], ts_us: np.ndarray, names: dict[str, int], cat: str) -> dict[str, Any]:
    args = [e.args for e in evs]
    return {**_interval_piece(evs, ts_us, names),
            "correlation": _opt_ints([a.correlation for a in args]),
            "external_id": _opt_ints([a.external_id for a in args]),
            "cat": [cat] * len(evs),
            "device": _opt_ints(_where([a.device for a in args], evs, "pid")),
            "stream": _opt_ints(_where([a.stream for a in args], evs, "tid")),
            "bytes": _floats([a.bytes for a in args]),
            "counter_flops": _counter_flops(args),
            "grid": _dims([a.grid for a in args]), "block": _dims([a.block for a in args])}


_NONE = type(None)


def _where(values: list, evs: Sequence[_Event], fallback: str) -> list:
    """A kernel's device (stream) as an int: its args' value ("0x0" read as a number), else its
    pid (tid) when that is an int, else None."""
    if set(map(type, values)) == {int}:
        return values
    return [as_int(v) if v is not None else (getattr(e, fallback) if type(getattr(e, fallback)) is int else None)
            for v, e in zip(values, evs)]


def _dims(values: list) -> list:
    """Launch dimensions as lists of ints (kineto.as_dims), None when absent or unreadable."""
    return values if set(map(type, values)) <= {list, _NONE} else [as_dims(v) for v in values]


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


def _signature_table(rows: list[tuple[str, bytes, bytes, bytes, bytes]]) -> pd.DataFrame:
    return pd.DataFrame({
        "name": [r[0] for r in rows],
        "input_dims": [_parse_raw(r[1]) for r in rows],
        "input_types": [_parse_raw(r[2]) for r in rows],
        "input_strides": [_parse_raw(r[3]) for r in rows],
        "concrete_inputs": [_parse_raw(r[4]) for r in rows],
    }, index=pd.RangeIndex(len(rows), name="sig"))


def _comm_frame(evs: Sequence[_Event]) -> pd.DataFrame:
    """The collective arguments of record_param_comms ops (``evs``). A handful of events per step:
    decoding their raw values one by one costs nothing."""
    rows = [e.args for e in evs if e.args.comm_in_nelems]
    raw = {"collective": [a.comm_collective for a in rows], "in_nelems": [a.comm_in_nelems for a in rows],
           "out_nelems": [a.comm_out_nelems for a in rows], "dtype": [a.comm_dtype for a in rows],
           "group_size": [a.comm_group_size for a in rows]}
    # The trailing None keeps numpy from building a 2-D array when every value is a list.
    return pd.DataFrame({c: np.array([_parse_raw(v) for v in raw[c]] + [None], dtype=object)[:-1]
                         for c in COMM_ARG_COLUMNS},
                        index=pd.Index([a.external_id for a in rows], name="external_id", dtype=object))


_SASS = attrgetter("sass_dadd", "sass_dmul", "sass_dfma", "sass_hadd", "sass_hmul", "sass_hfma",
                   "sass_fadd", "sass_fmul", "sass_ffma")
_NO_SASS = (None,) * 9


def _counter_flops(args: list[_Args]) -> np.ndarray:
    """FLOPs from CUPTI range-profiler SASS counts (kineto.Args), NaN where an event has none."""
    counts = list(map(_SASS, args))
    if counts.count(_NO_SASS) == len(counts):
        return np.full(len(counts), np.nan)
    return np.asarray([_flops(c) for c in counts], dtype=np.float64)


def _flops(counts: tuple[float | None, ...]) -> float:
    if counts == _NO_SASS:
        return np.nan
    c = [x or 0.0 for x in counts]
    return c[0] + c[1] + 2 * c[2] + c[3] + c[4] + 2 * c[5] + c[6] + c[7] + 2 * c[8]


# Timestamps (µs) beyond this are corrupt: their ns offsets would not fit in int64.
_TS_LIMIT_US = 4e15
_KERNEL_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_profiler_range")
_RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
# The tables' activity types, then GPU-side annotation spans (they make no table; they count for
# the trace's origin only), by their number in _Columns.add.
_CATS = ("cpu_op", "user_annotation", *_RUNTIME_CATS, *_KERNEL_CATS, "gpu_user_annotation")
_CAT_CODES = {**{c: i for i, c in enumerate(_CATS)}, **{old: _CATS.index(new) for old, new in _CAT_ALIASES.items()}}
_COMM_OP = "record_param_comms"
SUB = 4096


def _pick(evs: list[_Event], rows: np.ndarray) -> Sequence[_Event]:
    if len(rows) == len(evs):
        return evs
    return [evs[rows[0]]] if len(rows) == 1 else itemgetter(*rows.tolist())(evs)


class _Columns:
    """The tables' columns, filled one batch of events at a time (so that a million events
    never exist as a million typed structs at once), each column of a batch in one pass."""

    def __init__(self) -> None:
        self.t0: float | None = None
        self.bad_ts = 0
        self.events = 0
        self.sigs = _Signatures()
        self.op_names: dict[str, int] = {}
        self.kernel_names: dict[str, int] = {}
        self.runtime_names: dict[str, int] = {}
        self.pieces: dict[str, list[dict[str, Any]]] = {c: [] for c in _CATS[:-1]}
        self.comm: list[pd.DataFrame] = []

    def add(self, evs: list[_Event]) -> None:
        for i in range(0, len(evs), SUB):
            self._add(evs[i:i + SUB])

    def _add(self, evs: list[_Event]) -> None:
        n = len(evs)
        self.events += n
        get = _CAT_CODES.get
        cat = np.fromiter([get(e.cat, -1) if e.ph == "X" else -1 for e in evs], dtype=np.int64, count=n)
        ts_list = [e.ts for e in evs]
        ts = _floats(ts_list)
        keep = cat >= 0
        unknown = np.flatnonzero(keep & np.isnan(ts))
        keep[unknown[[ts_list[i] is None for i in unknown]]] = False  # no time: no event
        bad = keep & ~((ts >= -_TS_LIMIT_US) & (ts <= _TS_LIMIT_US))  # also true for NaN
        if bad.any():
            self.bad_ts += int(bad.sum())
            keep &= ~bad
        if keep.any():
            first = float(ts[keep].min())
            self.t0 = first if self.t0 is None or first < self.t0 else self.t0
        for code, name in enumerate(_CATS[:-1]):
            rows = np.flatnonzero(keep & (cat == code))
            if not len(rows):
                continue
            batch, at = _pick(evs, rows), ts[rows]
            if name == "cpu_op":
                piece = _ops_piece(batch, at, self.sigs, self.op_names)
                comm = self.op_names.get(_COMM_OP)
                if comm is not None and (piece["name"] == comm).any():
                    self.comm.append(_comm_frame(_pick(evs, rows[piece["name"] == comm])))
            elif name == "user_annotation":
                piece = _annotation_piece(batch, at)
            elif name in _RUNTIME_CATS:
                piece = _runtime_piece(batch, at, self.runtime_names)
            else:
                piece = _kernel_piece(batch, at, self.kernel_names, name)
            self.pieces[name].append(piece)

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
        return ops, _signature_table(self.sigs.rows), runtime, kernels, annotations, comm


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
    columns = _Columns()
    stream = Stream(path_s, read_chunks(path))
    stream.read(columns.add)
    skipped = stream.skipped
    if columns.bad_ts:
        skipped["ts not a time"] += columns.bad_ts
    if columns.t0 is None:
        raise TraceError(f"{path_s}: no torch.profiler events (no cpu_op, kernel or runtime events);"
                         " is this a Kineto trace?")
    ops, signatures, runtime, kernels, annotations, comm_args = columns.tables()
    return KinetoFrames(ops=ops, signatures=signatures, runtime=runtime, kernels=kernels, annotations=annotations,
                        comm_args=comm_args, meta=clean_meta(stream.meta), t0_us=columns.t0, events=columns.events,
                        skipped=dict(skipped))
