"""Nsight Compute CSV -> one row per profiled kernel launch, in bytes, ns and FLOPs.

ncu writes two CSV layouts: the *long* one (``ncu --csv``; one row per launch and metric,
with "Metric Name", "Metric Unit", "Metric Value" columns) and the *raw* page
(``--page raw``; one row per launch, one column per metric, a units row right after the
header). Both may come with ncu's ``==PROF==``/``==WARNING==`` lines and the application's
own output around them, values with thousands separators ("42,592"), ``n/a`` for metrics
the GPU cannot collect, and scaled units when ``--print-units base`` was not given.

The metric set roofscope collects lives here, next to the columns it becomes.
"""
from __future__ import annotations

import csv
import io
import re

import numpy as np
import pandas as pd

from roofscope.errors import RoofscopeError

TIME = "gpu__time_duration.sum"
DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
L2 = "lts__t_bytes.sum"
# CUDA-core instructions per precision; FLOPs = add + mul + 2 * fma.
SASS = {prec: tuple(f"smsp__sass_thread_inst_executed_op_{p}{op}_pred_on.sum" for op in ("add", "mul", "fma"))
        for prec, p in (("fp32", "f"), ("fp16", "h"), ("fp64", "d"))}
# Tensor-core operations (2 per multiply-add: a 4096^3 bf16 GEMM counts exactly 2*4096^3).
TENSOR = {
    "fp16": "sm__ops_path_tensor_src_fp16.sum",
    "bf16": "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
    "tf32": "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
    "fp8": "sm__ops_path_tensor_src_fp8.sum",
    "int8": "sm__ops_path_tensor_src_int8.sum",
    "fp64": "sm__ops_path_tensor_src_fp64.sum",
}
METRICS: tuple[str, ...] = (TIME, DRAM_READ, DRAM_WRITE, L2,
                            *(m for ms in SASS.values() for m in ms), *TENSOR.values())

COLUMNS: tuple[str, ...] = (
    "launch", "name", "block", "grid", "time_ns", "dram_read_bytes", "dram_write_bytes", "l2_bytes",
    "flops_fp32", "flops_fp16", "flops_fp64", *(f"tensor_flops_{p}" for p in TENSOR))

# Scaled units ncu prints without --print-units base (SI prefixes, as ncu uses them).
_UNIT_SCALE = {
    "": 1.0, "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
    "ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6,
    "s": 1e9, "second": 1e9,
    "inst": 1.0, "Kinst": 1e3, "Minst": 1e6, "Ginst": 1e9, "Tinst": 1e12,
}
_HEADER_START = '"ID",'
_HEADER = re.compile(r'^[ \t]*"ID",', re.M)
_ID, _NAME, _BLOCK, _GRID = "ID", "Kernel Name", "Block Size", "Grid Size"
_LONG = ("Metric Name", "Metric Unit", "Metric Value")


class NcuCsvError(RoofscopeError):
    """Text that is not an Nsight Compute CSV export."""


def parse_ncu_csv(text: str) -> pd.DataFrame:
    """One row per profiled launch in ID order, columns :data:`COLUMNS`; NaN where a metric was
    absent or ``n/a``. ``frame.attrs["na_metrics"]`` lists the metrics ncu reported as ``n/a``
    (in the raw format, only roofscope's own: that page also holds device attributes)."""
    df = _csv_frame(text)
    try:
        if all(c in df.columns for c in _LONG):
            ids, names, blocks, grids, values, units, na = _long(df)
        else:
            ids, names, blocks, grids, values, units, na = _raw(df)
        block_dims, grid_dims = _dims(blocks), _dims(grids)
    except ValueError as e:  # an ID or a launch dimension that is not a number, a metric given twice
        raise NcuCsvError(f"malformed Nsight Compute CSV ({e})") from None
    if len(ids) == 0:
        raise NcuCsvError("the Nsight Compute CSV has a header but no kernel launches")
    units = units.reindex(index=values.index, columns=values.columns).fillna("")
    bad = sorted(set(np.unique(units.to_numpy(dtype=str))) - set(_UNIT_SCALE))
    if bad:
        raise NcuCsvError(f"unknown ncu unit(s) {', '.join(map(repr, bad))}; export with --print-units base")
    scale = units.apply(lambda col: col.map(_UNIT_SCALE)).astype(float)
    m = (values * scale).reindex(columns=list(METRICS))
    out = pd.DataFrame({"launch": ids, "name": names, "block": block_dims, "grid": grid_dims,
                        "time_ns": m[TIME].to_numpy(), "dram_read_bytes": m[DRAM_READ].to_numpy(),
                        "dram_write_bytes": m[DRAM_WRITE].to_numpy(), "l2_bytes": m[L2].to_numpy()})
    for prec, (add, mul, fma) in SASS.items():
        out[f"flops_{prec}"] = (m[add] + m[mul] + 2.0 * m[fma]).to_numpy()
    for prec, metric in TENSOR.items():
        out[f"tensor_flops_{prec}"] = m[metric].to_numpy()
    out = out.sort_values("launch", kind="stable").reset_index(drop=True)
    out.attrs["na_metrics"] = na
    return out


def _csv_frame(text: str) -> pd.DataFrame:
    """The CSV's columns roofscope reads, as strings, without ncu's log lines or the
    application's output (pandas' C reader: a long export of 100k launches has 1.9M rows)."""
    found = _HEADER.search(text)
    if found is None:
        raise NcuCsvError('no Nsight Compute CSV header (a line starting with "ID","Process ID",...) found;'
                          " export with `ncu --import FILE.ncu-rep --csv --page raw --print-units base`")
    body = text[found.end() - len(_HEADER_START):]
    if "\r" in body:
        body = body.replace("\r\n", "\n")
    # ncu quotes every field, so any other line after the header is log or application output.
    # Exports are large (300 MB for 100k launches of the raw page): filter lines only when
    # some line does not start with a quote (C-speed counts say so).
    end = len(body)
    while end and body[end - 1] == "\n":
        end -= 1
    if body.count("\n", 0, end) != body.count('\n"', 0, end):
        body = "\n".join(line for line in map(str.lstrip, body.split("\n")) if line.startswith('"'))
        end = len(body)
    header_end = body.find("\n", 0, end)
    header = next(csv.reader([body[:end] if header_end < 0 else body[:header_end]]))
    missing = [c for c in (_NAME, _BLOCK, _GRID) if c not in header]
    if missing:
        raise NcuCsvError(f"the ncu CSV header has no {', '.join(map(repr, missing))} column")
    # ncu writes every row at the header's width; a short last row is a file cut off mid-write.
    last = next(csv.reader([body[body.rfind("\n", 0, end) + 1:end]])) if header_end >= 0 else header
    if len(last) != len(header):
        raise NcuCsvError(f"the ncu CSV ends inside a row ({len(last)} of {len(header)} fields): the file is "
                          "truncated")
    # The raw page has ~300 columns (device attributes, launch facts): read only ours.
    wanted = {_ID, _NAME, _BLOCK, _GRID, *_LONG, *METRICS}
    cols = [i for i, c in enumerate(header) if c in wanted and header.index(c) == i]
    return pd.read_csv(io.StringIO(body), usecols=cols, dtype=str, na_filter=False, on_bad_lines="skip",
                       engine="c")


def _numbers(raw: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Strings with thousands separators -> floats; ``n/a`` -> NaN, and which metrics had one."""
    stripped = raw.apply(lambda col: col.str.strip())
    is_na = stripped.eq("n/a")
    values = stripped.apply(lambda col: pd.to_numeric(col.str.replace(",", "", regex=False), errors="coerce"))
    return values, sorted(is_na.columns[is_na.any(axis=0).to_numpy()])


def _long(df: pd.DataFrame):
    df[_ID] = df[_ID].astype(int)
    first = df.drop_duplicates(_ID).set_index(_ID).sort_index()
    # ncu writes a launch's metrics together, launch after launch: the file's last launch with
    # fewer metrics than the others means the file was cut at a row boundary.
    per_launch = df.groupby(_ID, sort=False).size()
    last = df[_ID].iloc[-1]
    if per_launch[last] < per_launch.max():
        raise NcuCsvError(f"the last launch (ID {last}) has {per_launch[last]} of the {per_launch.max()} metrics "
                          "the others have: the ncu CSV is truncated")
    vals = df.pivot(index=_ID, columns="Metric Name", values="Metric Value").sort_index()
    units = df.pivot(index=_ID, columns="Metric Name", values="Metric Unit").sort_index()
    values, na = _numbers(vals.fillna(""))
    return (first.index.to_numpy(), first[_NAME].to_numpy(), first[_BLOCK].to_numpy(),
            first[_GRID].to_numpy(), values, units, na)


def _raw(df: pd.DataFrame):
    unit_rows = df[_ID].str.strip() == ""
    unit_row = df[unit_rows].iloc[0] if unit_rows.any() else pd.Series("", index=df.columns)
    df = df[~unit_rows].copy()
    df[_ID] = df[_ID].astype(int)
    df = df.set_index(_ID).sort_index()
    metrics = [c for c in df.columns if c in METRICS]
    values, na = _numbers(df[metrics])
    units = pd.DataFrame(np.repeat([unit_row[metrics].to_numpy()], len(df), axis=0),
                         index=df.index, columns=metrics)
    return (df.index.to_numpy(), df[_NAME].to_numpy(), df[_BLOCK].to_numpy(), df[_GRID].to_numpy(),
            values, units, na)


def _dims(texts: np.ndarray) -> np.ndarray:
    """``"(384, 1, 1)"`` -> ``[384, 1, 1]`` (the trace's form of grid and block), parsing each
    distinct text once: a run has few launch shapes."""
    codes, uniques = pd.factorize(pd.Series(texts, dtype=object))
    parsed = np.empty(len(uniques), dtype=object)
    parsed[:] = [[int(p) for p in str(t).strip("() ").split(",") if p.strip()] for t in uniques]
    return parsed[codes]
