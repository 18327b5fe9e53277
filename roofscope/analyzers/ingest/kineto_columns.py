"""Kineto events into the tables' columns, straight from the decoder's typed structs.

Each batch of events (a region of kineto_stream.py, about 1,300 events) is routed to its tables by
phase and activity type, and each field a table keeps is taken in one list comprehension while the
batch's structs are still in the processor's cache: no per-event branches. The values wait as Python
lists and become arrays every :data:`FLUSH_EVENTS` events of a table (a piece), while the values are
still in the processor's cache; kineto_frames.py joins the pieces.
Names and op signatures are numbered by hashing each value once (``dict.fromkeys``).
"""
from __future__ import annotations

from operator import attrgetter, itemgetter
from typing import Any, Sequence

import msgspec
import numpy as np

from roofscope.analyzers.ingest.kineto import Event, as_dims, as_int
from roofscope.analyzers.model.trace import COMM_ARG_COLUMNS

# Older Kineto wrote "Kernel"/"Memcpy"/"Memset"; map them onto the modern names.
CAT_ALIASES = {"Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset",
               "Runtime": "cuda_runtime", "Operator": "cpu_op"}
KERNEL_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_profiler_range")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
# The tables' activity types, then GPU-side annotation spans (they make no table; they count for
# the trace's origin only), by their number in Columns.add.
_CATS = ("cpu_op", "user_annotation", *RUNTIME_CATS, *KERNEL_CATS, "gpu_user_annotation")
_CAT_CODES = {**{c: i for i, c in enumerate(_CATS)}, **{old: _CATS.index(new) for old, new in CAT_ALIASES.items()}}
_COMM_OP = "record_param_comms"
# Timestamps (µs) beyond this are corrupt: their ns offsets would not fit in int64.
TS_LIMIT_US = 4e15
# A piece's block of the file (not a column: the kernels' "block" is their launch's).
PART = "file block"
# Events of one table converted to arrays at a time: a region's or two, while the values the decoder
# made are in the cache (a million of them cold cost 30-85 ns each to convert, each a cache miss):
# decoding and tabulating 109k events took 0.127-0.130 s of CPU against 0.147-0.150 s converting
# 65,536 at a time (and 0.132-0.135 s converting every batch, whose fixed costs then count).
FLUSH_EVENTS = 1 << 9
# Events of a batch routed at a time (a whole file decoded at once comes as one batch).
SUB = 4096
_SASS = attrgetter("sass_dadd", "sass_dmul", "sass_dfma", "sass_hadd", "sass_hmul", "sass_hfma",
                   "sass_fadd", "sass_fmul", "sass_ffma")
_NO_SASS = (None,) * 9
_NONE = type(None)


def floats(values: list) -> np.ndarray:
    """Optional floats as an array, None as NaN."""
    if values and values[0] is None and values.count(None) == len(values):  # a field no event has
        return np.full(len(values), np.nan)
    return np.fromiter(values, dtype=np.float64, count=len(values))


def _dur_ns(values: list[float | None]) -> np.ndarray:
    # Corrupt durations (missing, negative, NaN, centuries) become 0 or the timestamp limit.
    return np.rint(np.clip(np.nan_to_num(floats(values)), 0.0, TS_LIMIT_US) * 1000.0).astype(np.int64)


def _opt_ints(values: list) -> tuple[np.ndarray, np.ndarray]:
    """Optional ints (int or None) as values and a missing mask: what pd.array(..., "Int64")
    makes of the list, without its per-element type inference. An id beyond int64 is corrupt:
    unknown."""
    n = len(values)
    if values and values[0] is None and values.count(None) == n:  # a field no event has
        return np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool)
    try:
        return np.fromiter(values, dtype=np.int64, count=n), np.zeros(n, dtype=bool)
    except (OverflowError, TypeError, ValueError):
        pass  # some are missing (None), or beyond int64
    try:  # as floats, exact below 2**53: what real ids are
        f = np.fromiter(values, dtype=np.float64, count=n)
    except OverflowError:
        f = np.full(n, np.inf)
    missing = np.isnan(f)
    if np.abs(f[~missing]).max() < 2**53:
        return np.where(missing, 0.0, f).astype(np.int64), missing
    arr = np.empty(n, dtype=object)
    arr[:] = values
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


def codes(values: list, registry: dict) -> np.ndarray:
    """Codes of ``values`` in ``registry`` (order of first appearance, grown as needed), hashing
    each value once."""
    for v in dict.fromkeys(values):
        registry.setdefault(v, len(registry))
    return np.fromiter(map(registry.__getitem__, values), dtype=np.int64, count=len(values))


def _where(values: list, fallbacks: list) -> list:
    """A kernel's device (stream) as an int: its args' value ("0x0" read as a number), else its
    pid (tid) when that is an int, else None."""
    if set(map(type, values)) == {int}:
        return values
    return [as_int(v) if v is not None else (f if type(f) is int else None) for v, f in zip(values, fallbacks)]


def _dims(values: list) -> list:
    """Launch dimensions as lists of ints (kineto.as_dims), None when absent or unreadable."""
    return values if set(map(type, values)) <= {list, _NONE} else [as_dims(v) for v in values]


def _counter_flops(counts: list[tuple[float | None, ...]]) -> np.ndarray:
    """FLOPs from CUPTI range-profiler SASS counts (kineto.Args), NaN where an event has none."""
    if counts.count(_NO_SASS) == len(counts):
        return np.full(len(counts), np.nan)
    return np.asarray([_flops(c) for c in counts], dtype=np.float64)


def _flops(counts: tuple[float | None, ...]) -> float:
    if counts == _NO_SASS:
        return np.nan
    c = [x or 0.0 for x in counts]
    return c[0] + c[1] + 2 * c[2] + c[3] + c[4] + 2 * c[5] + c[6] + c[7] + 2 * c[8]


def _parse_raw(raw: bytes) -> Any:
    return msgspec.json.decode(raw) if raw else None


class Signatures:
    """Op signatures (name and the four shape arguments' raw JSON) numbered in order of first
    appearance. An op's shapes are one bytes key (joined by NUL, a byte raw JSON never holds)
    numbered together with its name's code."""

    def __init__(self) -> None:
        self.shapes: dict[bytes, int] = {}
        self.ids: dict[int, int] = {}
        self.rows: list[tuple[str, bytes, bytes, bytes, bytes]] = []

    def codes(self, names: list[str], name_codes: np.ndarray, shapes: list[bytes]) -> np.ndarray:
        pairs = (name_codes << 32) + codes(shapes, self.shapes)
        keys = pairs.tolist()
        ids = self.ids
        if any(k not in ids for k in dict.fromkeys(keys)):
            # New ones numbered in order of first appearance: a loop over a piece's 512 keys costs less
            # than np.unique and np.isin against every number so far (4 ms of 109k events' 125).
            for i, k in enumerate(keys):
                if k not in ids:
                    ids[k] = len(self.rows)
                    self.rows.append((names[i], *shapes[i].split(b"\0")))
        return np.fromiter(map(ids.__getitem__, keys), dtype=np.int64, count=len(keys))

    def adopt(self, other: Signatures, name_codes: dict[str, int]) -> np.ndarray:
        """``other``'s signatures numbered here (their op names' codes in ``name_codes``, grown as
        needed): the new number of each of ``other``'s."""
        out = np.empty(len(other.rows), dtype=np.int64)
        for i, (name, *shapes) in enumerate(other.rows):
            shape = self.shapes.setdefault(b"\0".join(shapes), len(self.shapes))
            key = (name_codes.setdefault(name, len(name_codes)) << 32) + shape
            if key not in self.ids:
                self.ids[key] = len(self.rows)
                self.rows.append(other.rows[i])
            out[i] = self.ids[key]
        return out

    def renumber(self, pieces: list[dict[str, Any]]) -> None:
        """Signatures numbered again in order of first appearance in ``pieces`` (the ops' pieces in
        file order), as one process reading the file numbers them."""
        sig = np.concatenate([p["sig"] for p in pieces]) if pieces else np.zeros(0, dtype=np.int64)
        unique, first = np.unique(sig, return_index=True)
        order = unique[np.argsort(first, kind="stable")]
        new = np.empty(len(self.rows), dtype=np.int64)
        new[order] = np.arange(len(order))
        for p in pieces:
            p["sig"] = new[p["sig"]]
        self.rows = [self.rows[i] for i in order.tolist()]
        self.ids = {k: int(new[v]) for k, v in self.ids.items()}


class _Table:
    """One table's values waiting as lists, and its pieces (dicts of column arrays) so far."""

    def __init__(self, cat: str) -> None:
        self.cat = cat
        self.lists: dict[str, list] = {}
        self.ts: list[np.ndarray] = []
        self.n = 0
        self.pieces: list[dict[str, Any]] = []

    def extend(self, columns: dict[str, list], ts_us: np.ndarray) -> None:
        for c, values in columns.items():
            self.lists.setdefault(c, []).extend(values)
        self.ts.append(ts_us)
        self.n += len(ts_us)


class Columns:
    """The tables' columns, filled a batch of events at a time: a million events never exist as a
    million typed structs at once, nor as a million Python values per column."""

    def __init__(self) -> None:
        self.t0: float | None = None
        self.bad_ts = 0
        self.events = 0
        self.sigs = Signatures()
        self.op_names: dict[str, int] = {}
        self.kernel_names: dict[str, int] = {}
        self.runtime_names: dict[str, int] = {}
        self.tables = {c: _Table(c) for c in _CATS[:-1]}
        self.comm: list[tuple[Any, ...]] = []
        # The block of the file being read: pieces and collective rows carry it, so that two
        # processes' columns merge in file order (kineto_helper.py).
        self.block = 0

    def add(self, evs: list[Event]) -> None:
        for i in range(0, len(evs), SUB):
            self._add(evs[i:i + SUB] if len(evs) > SUB else evs)

    def _add(self, evs: list[Event]) -> None:
        n = len(evs)
        self.events += n
        get = _CAT_CODES.get
        cat = np.fromiter([get(e.cat, -1) if e.ph == "X" else -1 for e in evs], dtype=np.int64, count=n)
        ts_list = [e.ts for e in evs]
        ts = floats(ts_list)
        keep = cat >= 0
        unknown = np.flatnonzero(keep & np.isnan(ts))
        keep[unknown[[ts_list[i] is None for i in unknown]]] = False  # no time: no event
        bad = keep & ~((ts >= -TS_LIMIT_US) & (ts <= TS_LIMIT_US))  # also true for NaN
        if bad.any():
            self.bad_ts += int(bad.sum())
            keep &= ~bad
        if not keep.any():
            return
        first = float(ts[keep].min())
        self.t0 = first if self.t0 is None or first < self.t0 else self.t0
        for code in np.unique(cat[keep]).tolist():
            if code == len(_CATS) - 1:  # GPU-side annotations: the origin only
                continue
            rows = np.flatnonzero(keep & (cat == code))
            batch = evs if len(rows) == n else [evs[rows[0]]] if len(rows) == 1 else itemgetter(*rows.tolist())(evs)
            table = self.tables[_CATS[code]]
            table.extend(self._columns(table.cat, batch), ts[rows])
            if table.n >= FLUSH_EVENTS:
                self._flush(table)

    def _columns(self, cat: str, evs: Sequence[Event]) -> dict[str, list]:
        """The fields table ``cat`` keeps, of ``evs``, as lists."""
        args = [e.args for e in evs]
        out = {"name": [e.name for e in evs], "pid": [e.pid for e in evs], "tid": [e.tid for e in evs],
               "dur": [e.dur for e in evs], "external_id": [a.external_id for a in args]}
        if cat == "cpu_op":
            out.update(rf_id=[a.rf_id for a in args], seq=[a.seq for a in args],
                       shapes=[b"\0".join((a.input_dims, a.input_types, a.input_strides, a.concrete_inputs))
                               for a in args],
                       kernel_num_gb=[a.kernel_num_gb for a in args], kernel_flop=[a.kernel_flop for a in args])
            if _COMM_OP in out["name"]:
                # A handful of events per step: decoding their raw values one by one costs nothing.
                self.comm += [(self.block, a.external_id, *(_parse_raw(v) for v in (a.comm_collective, a.comm_in_nelems,
                                                                         a.comm_out_nelems, a.comm_dtype,
                                                                         a.comm_group_size)))
                              for e, a in zip(evs, args) if e.name == _COMM_OP and a.comm_in_nelems]
        elif cat in RUNTIME_CATS:
            out.update(correlation=[a.correlation for a in args], size=[a.size for a in args])
        elif cat in KERNEL_CATS:
            out.update(correlation=[a.correlation for a in args], device=[a.device for a in args],
                       stream=[a.stream for a in args], bytes=[a.bytes for a in args],
                       sass=list(map(_SASS, args)), grid=[a.grid for a in args], block=[a.block for a in args])
        return out

    def _flush(self, table: _Table) -> None:
        """The table's waiting values as a piece of arrays."""
        if not table.n:
            return
        v, cat = table.lists, table.cat
        piece: dict[str, Any] = {"pid": _ids(v["pid"]), "tid": _ids(v["tid"]), "ts_us": np.concatenate(table.ts),
                                 "dur_ns": _dur_ns(v["dur"]), "external_id": _opt_ints(v["external_id"])}
        if cat == "user_annotation":
            piece["name"] = v["name"]
        elif cat == "cpu_op":
            piece["name"] = codes(v["name"], self.op_names)
            piece.update(rf_id=_opt_ints(v["rf_id"]), seq=_opt_ints(v["seq"]),
                         sig=self.sigs.codes(v["name"], piece["name"], v["shapes"]),
                         kernel_num_gb=floats(v["kernel_num_gb"]), kernel_flop=floats(v["kernel_flop"]))
        elif cat in RUNTIME_CATS:
            piece.update(name=codes(v["name"], self.runtime_names), correlation=_opt_ints(v["correlation"]),
                         size=floats(v["size"]))
        else:
            piece.update(name=codes(v["name"], self.kernel_names), correlation=_opt_ints(v["correlation"]),
                         cat=[cat] * table.n, device=_opt_ints(_where(v["device"], v["pid"])),
                         stream=_opt_ints(_where(v["stream"], v["tid"])), bytes=floats(v["bytes"]),
                         counter_flops=_counter_flops(v["sass"]), grid=_dims(v["grid"]), block=_dims(v["block"]))
        piece[PART] = self.block
        table.pieces.append(piece)
        table.lists, table.ts, table.n = {}, [], 0

    def end_block(self) -> None:
        """The block read so far ends: its waiting values become pieces of it."""
        for table in self.tables.values():
            self._flush(table)

    def handed(self) -> dict[str, list[dict[str, Any]]]:
        """The pieces made so far, by table, taken out: a helper hands them over block by block
        (kineto_helper.py)."""
        out = {cat: table.pieces for cat, table in self.tables.items() if table.pieces}
        for cat in out:
            self.tables[cat].pieces = []
        return out

    def received(self, pieces: dict[str, list[dict[str, Any]]]) -> None:
        """Pieces :meth:`handed` over, put back (before the merge sorts them by block)."""
        for cat, made in pieces.items():
            self.tables[cat].pieces += made

    def merge(self, other: Columns) -> None:
        """``other``'s columns (another process's blocks of the same file) merged into these, in
        file order: names and signatures numbered here, pieces and rows sorted by block."""
        self.end_block()
        registries = {"cpu_op": self.op_names, **dict.fromkeys(RUNTIME_CATS, self.runtime_names),
                      **dict.fromkeys(KERNEL_CATS, self.kernel_names)}
        theirs = {"cpu_op": other.op_names, **dict.fromkeys(RUNTIME_CATS, other.runtime_names),
                  **dict.fromkeys(KERNEL_CATS, other.kernel_names)}
        sigs = self.sigs.adopt(other.sigs, self.op_names)
        for cat, table in self.tables.items():
            pieces = other.pieces(cat)
            if cat in registries:
                remap = np.fromiter((registries[cat].setdefault(n, len(registries[cat])) for n in theirs[cat]),
                                    dtype=np.int64, count=len(theirs[cat]))
                for p in pieces:
                    p["name"] = remap[p["name"]]
                    if cat == "cpu_op":
                        p["sig"] = sigs[p["sig"]]
            table.pieces = sorted(table.pieces + pieces, key=itemgetter(PART))
        self.sigs.renumber(self.tables["cpu_op"].pieces)
        self.comm = sorted(self.comm + other.comm, key=itemgetter(0))
        self.t0 = min(t for t in (self.t0, other.t0) if t is not None) if other.t0 is not None else self.t0
        self.bad_ts += other.bad_ts
        self.events += other.events

    def pieces(self, cat: str) -> list[dict[str, Any]]:
        """Table ``cat``'s pieces, everything waiting converted."""
        self._flush(self.tables[cat])
        return self.tables[cat].pieces

    def comm_columns(self) -> tuple[dict[str, np.ndarray], list]:
        """record_param_comms' collective arguments by column, and their ops' External ids."""
        # The trailing None keeps numpy from building a 2-D array when every value is a list.
        return ({c: np.array([row[i + 2] for row in self.comm] + [None], dtype=object)[:-1]
                 for i, c in enumerate(COMM_ARG_COLUMNS)}, [row[1] for row in self.comm])
