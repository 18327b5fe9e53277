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
import re
import stat
import zlib
from collections import Counter
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any, Union

import msgspec
import numpy as np
import pandas as pd

from roofscope.errors import RoofscopeError, TraceError
from roofscope.ingest.kineto import META_KEYS, TraceFile, as_dims, as_int, clean_meta
from roofscope.ingest.kineto import Args as _Args
from roofscope.ingest.kineto import Event as _Event
from roofscope.ingest.kineto import decode as _decode
from roofscope.ingest.linking import enclosing, interval_parents, take
from roofscope.ingest.runtime_names import KERNEL_LAUNCHES

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
    # record_param_comms arguments by External id, as recorded (any JSON type; views/collectives.py
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
        """Name of the GPU the kernels ran on (see :attr:`device_props`); in a trace without
        deviceProperties, the one its distributedInfo names (``device_name``, ``deviceName`` or
        ``gpu_name``); None when none does (and for CPU-only traces)."""
        p = self.device_props
        name = p.get("name") if p else None
        info = self.meta.get("distributedInfo")
        if p is None and len(self.kernels) and isinstance(info, dict):
            name = next((info[k] for k in ("device_name", "deviceName", "gpu_name") if isinstance(info.get(k), str)),
                        None)
        return name if isinstance(name, str) else None

    @property
    def device_memory(self) -> int | None:
        p = self.device_props
        mem = p.get("totalGlobalMem") if p else None
        return mem if isinstance(mem, (int, float)) and not isinstance(mem, bool) else None


# A trace's JSON (after gunzip) may hold this many bytes; ROOFSCOPE_MAX_TRACE_SIZE raises or
# lowers it ("8G", "500M", bytes). Analysis needs about twice the JSON's size in memory, so
# the bound is what keeps a gzip bomb or a huge sparse file from taking the machine's memory.
MAX_TRACE_ENV = "ROOFSCOPE_MAX_TRACE_SIZE"
DEFAULT_MAX_TRACE = 4 << 30
# Unless the bound is set, a gzip stream may also inflate only this many times its size (real
# traces: up to 30x; a gzip bomb: ~1000x) beyond a floor, so that a 1 MB bomb stops at 256 MiB.
GZIP_RATIO = 250
_GZIP_FLOOR = 256 << 20
# The first bytes say whether a file can be JSON at all, before the rest is read.
_HEAD_BYTES = 1 << 16
_GZIP_MAGIC = b"\x1f\x8b"


def max_trace_bytes() -> int:
    """The size bound of a trace's JSON: ``$ROOFSCOPE_MAX_TRACE_SIZE``, else 4 GiB."""
    raw = os.environ.get(MAX_TRACE_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_TRACE
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?", raw, re.I)
    if not m:
        raise RoofscopeError(f"{MAX_TRACE_ENV}={raw!r}: expected a size such as 8G, 500M or a number of bytes")
    return int(float(m.group(1)) * 1024 ** "_kmgt".index(m.group(2).lower() or "_"))


def _too_big(path: Path, what: str, limit: int, why: str = "the limit for a trace") -> TraceError:
    size = f"{limit / 2**30:.3g} GiB" if limit >= 2**30 else f"{limit / 2**20:.3g} MiB"
    return TraceError(f"{path}: {what} more than {size} of JSON, {why}; set"
                      f" {MAX_TRACE_ENV} (e.g. {MAX_TRACE_ENV}=16G) to analyze a larger one")


def read_bytes(path: str | os.PathLike) -> bytes:
    """The trace file's JSON bytes, gunzipped when needed. Refused in one line: what is not a
    regular file (a FIFO, /dev/zero), what does not start like JSON, and what holds more than
    :func:`max_trace_bytes`. A gzip stream cut short (a process killed while writing
    ``.json.gz``) gives what it holds; the decoder then reads the JSON up to its last complete
    event and reports the cut."""
    p = Path(path)
    limit = max_trace_bytes()
    try:
        st = p.stat()
        if stat.S_ISDIR(st.st_mode):
            raise TraceError(f"{p}: is a directory, neither a trace file nor a roofscope Run")
        if not stat.S_ISREG(st.st_mode):
            raise TraceError(f"{p}: not a regular file (a device, pipe or socket), so not a trace")
        if st.st_size > limit:
            raise _too_big(p, "holds", limit)
        with open(p, "rb") as f:
            head = f.read(_HEAD_BYTES)
            if head[:2] == _GZIP_MAGIC:
                head = _gunzip_head(head)
            _check_head(p, head)
            f.seek(0)
            data = f.read()
    except FileNotFoundError:
        raise TraceError(f"{p}: no such file") from None
    except OSError as e:
        raise TraceError(f"{p}: cannot read: {e.strerror}") from None
    if data[:2] != _GZIP_MAGIC:
        return data
    bomb = max(_GZIP_FLOOR, GZIP_RATIO * len(data))
    if bomb < limit and not os.environ.get(MAX_TRACE_ENV, "").strip():
        return _gunzip(p, data, bomb, f"{GZIP_RATIO} times its compressed size (a gzip bomb?)")
    return _gunzip(p, data, limit)


def _check_head(path: Path, head: bytes) -> None:
    first = head.lstrip(b" \t\r\n")[:16]
    if first and first[:1] not in b"{[":
        raise TraceError(f"{path}: not valid JSON (it begins {first!r}), so not a trace")


def _gunzip_head(data: bytes) -> bytes:
    try:
        return zlib.decompressobj(wbits=31).decompress(data, _HEAD_BYTES)
    except zlib.error:
        return b""  # corrupt from the start: _gunzip says so


def _gunzip(path: Path, data: bytes, limit: int, why: str = "the limit for a trace") -> bytes:
    """The members of a gzip file, decompressed to at most ``limit`` bytes. Each member is
    decompressed in one call (one output buffer, as gzip.decompress); a damaged or cut stream
    gives what decompresses before the damage."""
    members: list[bytes] = []
    total = 0
    rest = data
    while rest:
        d = zlib.decompressobj(wbits=31)
        try:
            out = d.decompress(rest, limit - total + 1)
        except zlib.error as e:
            members.append(_gzip_prefix(rest, limit - total))
            if total + len(members[-1]) > limit:
                raise _too_big(path, "decompresses to", limit, why) from None
            error = str(e)
            break
        total += len(out)
        if total > limit:
            raise _too_big(path, "decompresses to", limit, why)
        members.append(out)
        if not d.eof:
            error = "the stream is cut short"
            break
        rest = d.unused_data
    else:
        return b"".join(members)
    head = b"".join(members)
    if not head.strip():
        raise TraceError(f"{path}: truncated or corrupt gzip ({error})")
    return head


def _gzip_prefix(data: bytes, limit: int) -> bytes:
    """What a damaged gzip member decompresses to before the damage (at most ``limit`` bytes and
    one step: 64 KiB of input inflates to 64 MiB at most)."""
    d = zlib.decompressobj(wbits=31)
    out: list[bytes] = []
    total = 0
    for i in range(0, len(data), _HEAD_BYTES):
        try:
            out.append(d.decompress(data[i:i + _HEAD_BYTES]))
        except zlib.error:
            break
        total += len(out[-1])
        if total > limit:
            break
    return b"".join(out)


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


def _plain(ids: pd.Series) -> np.ndarray:
    # int64 ids factorize as integers; anything else (str, None, mixed) as Python objects
    return ids.to_numpy() if ids.dtype == np.int64 else ids.to_numpy(dtype=object)


def _thread_codes(pids: pd.Series, tids: pd.Series, registry: dict[tuple[str, str], int]) -> np.ndarray:
    """Integer code per (pid, tid), shared through ``registry`` by every table of one trace,
    so ops, runtime calls and annotations on one thread compare equal (ids compare as text:
    4515 and "4515" are one thread; codes in order of first appearance)."""
    if not len(pids):
        return np.zeros(0, dtype=np.int64)
    # The text keys of the few distinct (pid, tid) pairs, not of every row.
    pc, pu = pd.factorize(_plain(pids), use_na_sentinel=False)
    tc, tu = pd.factorize(_plain(tids), use_na_sentinel=False)
    pair, first = pd.factorize(pc.astype(np.int64) * len(tu) + tc)
    first_p, first_t = first // len(tu), first % len(tu)
    keys = pd.MultiIndex.from_arrays([pd.Series(np.asarray(pu, dtype=object)[first_p], dtype=object).astype(str),
                                      pd.Series(np.asarray(tu, dtype=object)[first_t], dtype=object).astype(str)])
    codes, uniques = pd.factorize(keys)
    remap = np.asarray([registry.setdefault(u, len(registry)) for u in uniques], dtype=np.int64)
    return remap[codes][pair]


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


_OPS_COLUMNS = ("name", "pid", "tid", "ts_ns", "dur_ns", "end_ns", "external_id", "rf_id", "seq", "sig",
                "kernel_num_gb", "kernel_flop")
_INTERVAL_COLUMNS = ("name", "pid", "tid", "ts_ns", "dur_ns", "end_ns", "correlation", "external_id")
_KERNEL_COLUMNS = ("name", "ts_ns", "dur_ns", "end_ns", "correlation", "external_id", "cat", "device", "stream",
                   "bytes", "counter_flops", "grid", "block")


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
        self.gpu_annotations = 0
        self.comm: list[pd.DataFrame] = []

    def add(self, evs: list[_Event]) -> None:
        self.events += len(evs)
        buckets: dict[str, list[_Event]] = {c: [] for c in self.pieces}
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
        self.gpu_annotations += len(buckets["gpu_user_annotation"])
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
        ops = _frame(self.pieces.pop("cpu_op"), _OPS_COLUMNS, t0, names=(self.op_names, True))
        ops["thread"] = _thread_codes(ops["pid"], ops["tid"], threads)
        runtime = _frame([p for c in _RUNTIME_CATS for p in self.pieces.pop(c)], _INTERVAL_COLUMNS + ("size",), t0,
                         names=(self.runtime_names, False))
        runtime["thread"] = _thread_codes(runtime["pid"], runtime["tid"], threads)
        runtime.insert(len(_INTERVAL_COLUMNS) + 1, "size", runtime.pop("size"))
        kernels = _frame([p for c in _KERNEL_CATS for p in self.pieces.pop(c)], _KERNEL_COLUMNS, t0,
                         categorical=("cat",), names=(self.kernel_names, False))
        # Kernels of all activity types in time order, whatever order the buckets were filled in.
        kernels = kernels.sort_values("ts_ns", kind="stable").reset_index(drop=True)
        annotations = _frame(self.pieces.pop("user_annotation"),
                             tuple(c for c in _INTERVAL_COLUMNS if c != "correlation"), t0)
        annotations["thread"] = _thread_codes(annotations["pid"], annotations["tid"], threads)
        comm = _comm_frame([])
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


def load_trace(path: str | os.PathLike) -> Trace:
    """Read a Kineto trace (``.json`` or ``.json.gz``) into a linked :class:`Trace`."""
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
    meta = clean_meta(doc)
    meta.update(path=path_s, t0_us=columns.t0, events=columns.events, skipped_events=dict(skipped),
                gpu_annotations=columns.gpu_annotations)
    _link(ops, runtime, kernels, annotations)
    return Trace(path=path_s, ops=ops, signatures=signatures, kernels=kernels, runtime=runtime,
                 annotations=annotations, meta=meta, comm_args=comm_args)


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
