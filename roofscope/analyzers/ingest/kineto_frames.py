"""Kineto (torch.profiler) Chrome-trace events into the Trace's tables (kineto_reader.py links
them and reads the metadata).

The file is read as a stream (kineto_stream.py), each region of events decoded with msgspec into
typed structs that keep only the fields the analysis reads (kineto.py: every type variant of real
traces, malformed events skipped and counted), and their fields taken into columns
(kineto_columns.py); here the columns' pieces become the tables. Shape arguments stay as raw JSON
bytes so that identical op signatures are deduplicated before anything is parsed (a million events
usually carry a few thousand distinct signatures). benchmarks/bench_ingest.py measures this
against json.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from itertools import chain
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from roofscope.analyzers.ingest.frames import thread_codes
from roofscope.analyzers.ingest.kineto import clean_meta
from roofscope.analyzers.ingest.kineto_columns import KERNEL_CATS, RUNTIME_CATS, Columns
from roofscope.analyzers.ingest.kineto_helper import read_columns
from roofscope.analyzers.ingest.kineto_prefetch import take
from roofscope.analyzers.model.trace import (ANNOTATION_COLUMNS, KERNEL_COLUMNS, OPS_COLUMNS,
                                             RUNTIME_COLUMNS, empty_comm_args)
from roofscope.errors import TraceError


def _to_ns(arr: np.ndarray, t0: float) -> np.ndarray:
    # Subtracting the origin before scaling keeps sub-µs digits of epoch-µs timestamps.
    return np.rint((arr - t0) * 1000.0).astype(np.int64)


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


def tables(columns: Columns) -> tuple[pd.DataFrame, ...]:
    """ops, signatures, runtime, kernels, annotations, comm_args (the Trace's raw tables)."""
    t0 = float(columns.t0)  # type: ignore[arg-type]
    threads: dict[tuple[str, str], int] = {}
    ops = _frame(columns.pieces("cpu_op"), OPS_COLUMNS, t0, names=(columns.op_names, True))
    ops["thread"] = thread_codes(ops["pid"], ops["tid"], threads)
    runtime = _frame([p for c in RUNTIME_CATS for p in columns.pieces(c)], RUNTIME_COLUMNS, t0,
                     names=(columns.runtime_names, False))
    runtime["thread"] = thread_codes(runtime["pid"], runtime["tid"], threads)
    runtime.insert(len(RUNTIME_COLUMNS), "size", runtime.pop("size"))
    kernels = _frame([p for c in KERNEL_CATS for p in columns.pieces(c)], KERNEL_COLUMNS, t0,
                     categorical=("cat",), names=(columns.kernel_names, False))
    # Kernels of all activity types in time order, whatever order the buckets were filled in.
    kernels = kernels.sort_values("ts_ns", kind="stable").reset_index(drop=True)
    annotations = _frame(columns.pieces("user_annotation"), ANNOTATION_COLUMNS, t0)
    annotations["thread"] = thread_codes(annotations["pid"], annotations["tid"], threads)
    comm = empty_comm_args()
    if columns.comm:
        values, ids = columns.comm_columns()
        comm = pd.DataFrame(values, index=pd.Index(ids, name="external_id", dtype=object))
    return ops, _signature_table(columns.sigs.rows), runtime, kernels, annotations, comm


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
    :class:`TraceError` for what is no Kineto trace. The columns come from the child the command line
    forked to read them at start-up (kineto_prefetch.py), else are read here (kineto_helper.py)."""
    path_s = str(path)
    read = take(path_s) or read_columns(path_s)
    columns, skipped = read.columns, read.skipped
    if columns.bad_ts:
        skipped["ts not a time"] += columns.bad_ts
    if columns.t0 is None:
        raise TraceError(f"{path_s}: no torch.profiler events (no cpu_op, kernel or runtime events);"
                         " is this a Kineto trace?")
    ops, signatures, runtime, kernels, annotations, comm_args = tables(columns)
    return KinetoFrames(ops=ops, signatures=signatures, runtime=runtime, kernels=kernels, annotations=annotations,
                        comm_args=comm_args, meta=clean_meta(read.meta), t0_us=columns.t0, events=columns.events,
                        skipped=dict(skipped))
