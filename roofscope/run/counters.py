"""Hardware counters stored in a Run: ``counters.json.gz`` and ncu's report beside it.

``counters.json.gz`` holds one row per kernel launch ncu profiled (columns of
:data:`roofscope.collectors.counters.ncu_csv.COLUMNS` plus ``correlation``, the CUPTI correlation id
of the trace kernel it matched, -1 when none: analyzers/ingest/ncujoin.py), columnar::

    {"version": 1, "tool": "ncu", "ncu_version": ..., "metrics": [...], "sample": N | null, "skip": K,
     "join": {JoinStats}, "columns": {column: [values]}, ...}

``counters.ncu-rep`` is ncu's own report of the same pass, for the Nsight Compute UI.
run.json gets a ``counters`` entry (file, tool, ncu_version, kernels, matched, sample, command).
"""
from __future__ import annotations

import gzip
import os
import shutil
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pandas as pd

from roofscope.errors import OutputExistsError, RoofscopeError
from roofscope.run.directory import load as load_run
from roofscope.run.directory import update_meta
from roofscope.run.layout import COUNTERS_FILE, COUNTERS_REPORT
from roofscope.run.manifest import add_files, record
from roofscope.run.schema import COUNTERS_VERSION, CountersEntry, CountersHeader, check_version


class CountersError(RoofscopeError):
    """Counters that cannot be read or stored."""


@dataclass
class Counters:
    table: pd.DataFrame
    meta: dict[str, Any]


def _columns(table: pd.DataFrame) -> dict[str, list[Any]]:
    # Plain lists per column; msgspec writes NaN (a metric ncu did not report) as null.
    return {name: table[name].to_numpy().tolist() for name in table.columns}


def save(run_dir: str | os.PathLike, table: pd.DataFrame, meta: dict[str, Any], *,
         report: str | os.PathLike | None = None, force: bool = False) -> Path:
    """Store ``table`` (join's frame) and ``meta`` in the Run; ``report`` (an .ncu-rep) is moved in.

    ``meta`` holds tool, ncu_version, metrics, sample, join (JoinStats as a dict) and command.
    Existing counters are replaced only with ``force``.
    """
    run = load_run(run_dir)
    path = run.path / COUNTERS_FILE
    if (path.exists() or run.info.counters is not None) and not force:
        raise OutputExistsError(f"{path} already exists; pass --force to replace the Run's counters")
    doc = {"version": COUNTERS_VERSION, **meta}
    header = msgspec.convert(doc, CountersHeader)   # the typed fields run.json's entry is made of
    doc["columns"] = _columns(table)
    add_files(run.path, {COUNTERS_FILE: gzip.compress(msgspec.json.encode(doc), compresslevel=6)})
    rep = run.path / COUNTERS_REPORT
    if report is not None:
        record(run.path, [COUNTERS_REPORT])
        # From a temporary directory, often on another file system: copy beside, then rename.
        partial = rep.with_name(f".{rep.name}.tmp")
        shutil.move(str(report), partial)
        os.replace(partial, rep)
    else:
        rep.unlink(missing_ok=True)  # it would belong to the counters just replaced
    entry = CountersEntry(file=COUNTERS_FILE, tool=header.tool, ncu_version=header.ncu_version, kernels=len(table),
                          matched=(header.join or {}).get("matched"), sample=header.sample, skip=header.skip,
                          command=header.command, report=COUNTERS_REPORT if report is not None else None)
    update_meta(run, counters=entry)
    return path


def load(run_dir: str | os.PathLike) -> Counters | None:
    """The Run's counters, or None when it has none."""
    path = Path(run_dir) / COUNTERS_FILE
    if not path.exists():
        return None
    try:
        doc = msgspec.json.decode(gzip.decompress(path.read_bytes()))
        columns = doc.pop("columns")
        check_version(doc.get("version"), COUNTERS_VERSION, "counters", str(path), key="version",
                      error=CountersError)
        table = pd.DataFrame(columns)
        missing = {"correlation", "time_ns", "dram_read_bytes", "dram_write_bytes", "l2_bytes"} - set(table.columns)
    except (OSError, ValueError, KeyError, TypeError, EOFError, AttributeError, zlib.error) as e:
        raise CountersError(f"{path}: unreadable counters ({e})") from None
    if missing:
        raise CountersError(f"{path}: counters without column(s) {', '.join(sorted(missing))}")
    for name in table.columns:
        if name not in ("name", "block", "grid", "launch", "correlation"):
            table[name] = pd.to_numeric(table[name], errors="coerce").astype(float)
    return Counters(table=table, meta=doc)
