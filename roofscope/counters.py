"""Hardware counters stored in a Run, joined to the trace's kernels.

``counters.json.gz`` holds one row per kernel launch ncu profiled (columns of
:data:`roofscope.collectors.ncu_csv.COLUMNS` plus ``correlation``, the CUPTI correlation id
of the trace kernel it matched, -1 when none), columnar::

    {"version": 1, "tool": "ncu", "ncu_version": ..., "metrics": [...], "sample": N | null,
     "join": {JoinStats}, "columns": {column: [values]}, ...}

``counters.ncu-rep`` is ncu's own report of the same pass, for the Nsight Compute UI.
run.json gets a ``counters`` entry (file, tool, ncu_version, kernels, matched, sample, command).

The join: ncu numbers launches in the order the process issued them, which is the order
of the trace's runtime launch events, so both sides are aligned in that order; the kernel
name (normalized, since ncu and Kineto demangle differently) checks the alignment, and a
sequence alignment keeps a few extra or missing launches from shifting all the rest.
"""
from __future__ import annotations

import difflib
import gzip
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from .errors import OutputExistsError, RoofscopeError
from .fileio import atomic_write

if TYPE_CHECKING:  # pragma: no cover
    from .analyzers.trace import Trace

COUNTERS_FILE = "counters.json.gz"
COUNTERS_REPORT = "counters.ncu-rep"
VERSION = 1
# Anonymous namespaces are spelled "(anonymous namespace)" by Kineto and "<unnamed>" by ncu;
# both would otherwise end the name at their bracket.
_ANON = re.compile(r"\(anonymous namespace\)::|<unnamed>::")
_CUT = re.compile(r"[<(]")


class CountersError(RoofscopeError):
    """Counters that cannot be read or stored."""


@dataclass(frozen=True)
class JoinStats:
    ncu_kernels: int
    trace_kernels: int
    matched: int            # pairs, name mismatches included
    unmatched_ncu: int
    unmatched_trace: int
    name_mismatches: int    # pairs aligned by position whose names differ


@dataclass
class Counters:
    table: pd.DataFrame
    meta: dict[str, Any]


def normalize_names(names: pd.Series) -> pd.Series:
    """``void at::native::vectorized_elementwise_kernel<4, ...>(...)`` and ncu's
    ``void at::vectorized_elementwise_kernel<4, ...>(...)`` -> ``vectorized_elementwise_kernel``."""
    s = names.astype(str).str.removeprefix("void ").str.replace(_ANON, "", regex=True)
    s = s.str.split(_CUT, n=1, regex=True).str[0]
    return s.str.rsplit("::", n=1).str[-1].str.strip()


def trace_kernels(trace: "Trace") -> pd.DataFrame:
    """The trace's kernels in the recorded steps, in launch order (ncu profiles no memcpy/memset)."""
    k = trace.kernels
    k = k[(k["cat"] == "kernel") & (k["step"] >= 0)]
    launch = k["launch"].to_numpy()
    launch_ts = trace.runtime["ts_ns"].to_numpy()
    t = np.where(launch >= 0, launch_ts[np.maximum(launch, 0)] if len(launch_ts) else 0, k["ts_ns"].to_numpy())
    corr = k["correlation"].fillna(-1).to_numpy(np.int64)
    order = np.lexsort((corr, t))
    return pd.DataFrame({"name": k["name"].to_numpy()[order], "correlation": corr[order]})


def join(ncu: pd.DataFrame, trace: "Trace") -> tuple[pd.DataFrame, JoinStats]:
    """``ncu`` (parse_ncu_csv's frame) plus the ``correlation`` of the trace kernel each launch matched."""
    tk = trace_kernels(trace)
    a = normalize_names(ncu["name"]).tolist()
    b = normalize_names(tk["name"]).tolist()
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    pairs_a: list[np.ndarray] = []
    pairs_b: list[np.ndarray] = []
    mismatches = 0
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        # Equal runs match by name; a replaced run of the same length on both sides is the same
        # launches under names the normalization did not reconcile: paired, and counted.
        if op == "equal" or (op == "replace" and i2 - i1 == j2 - j1):
            pairs_a.append(np.arange(i1, i2))
            pairs_b.append(np.arange(j1, j2))
            if op == "replace":
                mismatches += i2 - i1
    ia = np.concatenate(pairs_a) if pairs_a else np.empty(0, np.int64)
    ib = np.concatenate(pairs_b) if pairs_b else np.empty(0, np.int64)
    corr = np.full(len(ncu), -1, np.int64)
    corr[ia] = tk["correlation"].to_numpy()[ib]
    out = ncu.reset_index(drop=True).copy()
    out["correlation"] = corr
    stats = JoinStats(ncu_kernels=len(a), trace_kernels=len(b), matched=len(ia), unmatched_ncu=len(a) - len(ia),
                      unmatched_trace=len(b) - len(ib), name_mismatches=mismatches)
    return out, stats


def _columns(table: pd.DataFrame) -> dict[str, list[Any]]:
    cols: dict[str, list[Any]] = {}
    for name in table.columns:
        col = table[name]
        if pd.api.types.is_float_dtype(col):
            v = col.to_numpy(dtype=float)
            cols[name] = [None if np.isnan(x) else x for x in v.tolist()]
        elif pd.api.types.is_integer_dtype(col):
            cols[name] = col.to_numpy(np.int64).tolist()
        else:
            cols[name] = [list(x) if isinstance(x, (list, tuple, np.ndarray)) else x for x in col]
    return cols


def save(run_dir: str | os.PathLike, table: pd.DataFrame, meta: dict[str, Any], *,
         report: str | os.PathLike | None = None, force: bool = False) -> Path:
    """Store ``table`` (join's frame) and ``meta`` in the Run; ``report`` (an .ncu-rep) is moved in.

    ``meta`` holds tool, ncu_version, metrics, sample, join (JoinStats as a dict) and command.
    Existing counters are replaced only with ``force``.
    """
    from .run import META_FILE, load

    run = load(run_dir)
    path = run.path / COUNTERS_FILE
    if (path.exists() or "counters" in run.meta) and not force:
        raise OutputExistsError(f"{path} already exists; pass --force to replace the Run's counters")
    doc = {"version": VERSION, **meta, "columns": _columns(table)}
    atomic_write(path, gzip.compress(json.dumps(doc, allow_nan=False).encode(), compresslevel=6), force=True)
    rep = run.path / COUNTERS_REPORT
    if report is not None:
        shutil.move(str(report), rep)
    else:
        rep.unlink(missing_ok=True)  # it would belong to the counters just replaced
    join_stats = meta.get("join", {})
    entry = {"file": COUNTERS_FILE, "tool": meta.get("tool", "ncu"), "ncu_version": meta.get("ncu_version"),
             "kernels": int(len(table)), "matched": join_stats.get("matched"), "sample": meta.get("sample"),
             "command": meta.get("command"), "report": COUNTERS_REPORT if report is not None else None}
    atomic_write(run.path / META_FILE, json.dumps({**run.meta, "counters": entry}, indent=1, default=str),
                 force=True)
    return path


def load(run_dir: str | os.PathLike) -> Counters | None:
    """The Run's counters, or None when it has none."""
    path = Path(run_dir) / COUNTERS_FILE
    if not path.exists():
        return None
    try:
        doc = json.loads(gzip.decompress(path.read_bytes()))
        columns = doc.pop("columns")
    except (OSError, ValueError, KeyError, EOFError) as e:
        raise CountersError(f"{path}: unreadable counters ({e})") from None
    if not isinstance(doc.get("version"), int) or doc["version"] > VERSION:
        raise CountersError(f"{path}: counters version {doc.get('version')!r} is not one this roofscope reads")
    table = pd.DataFrame(columns)
    for name in table.columns:
        if name not in ("name", "block", "grid", "launch", "correlation"):
            table[name] = pd.to_numeric(table[name], errors="coerce").astype(float)
    return Counters(table=table, meta=doc)
