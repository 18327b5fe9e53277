"""Machine-readable outputs: JSON summary with aggregate tables, per-kernel CSV."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pandas as pd

from roofscope.jsonsafe import json_safe
from roofscope.text_safety import csv_cell
from roofscope.version import __version__

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.analyzers.model.result import Result

SCHEMA_VERSION = 1
KERNEL_COLUMNS = ["name", "cat", "category", "device", "stream", "step", "region", "ts_ns", "dur_ns", "op_name",
                  "cost_op_name", "cost_source", "dtype", "tensor_core", "flops", "bytes", "intensity",
                  "achieved_flops", "achieved_bw", "roof", "roof_precision", "attainable", "floor_s",
                  "efficiency", "cls", "unattributed"]


def _records(df: pd.DataFrame, key: str, top: int | None) -> list[dict[str, Any]]:
    d = df.head(top) if top else df
    return json_safe(d.reset_index().rename(columns={d.index.name or "index": key}).to_dict("records"))


def to_json_dict(result: "Result", top: int = 50) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "roofscope_version": __version__,
        "summary": json_safe(result.to_dict()),
        "by_class": _records(result.by_class(), "class", None),
        "by_category": _records(result.by_category(), "category", None),
        "by_kernel": _records(result.by_kernel(), "kernel", top),
        "by_op": _records(result.by_op(), "op", top),
        "by_step": _records(result.by_step(), "step", None),
        "by_region": _records(result.by_region(), "region", None),
    }


def to_json(result: "Result", top: int = 50) -> str:
    return json.dumps(to_json_dict(result, top), indent=1, allow_nan=False)


def kernels_csv(result: "Result") -> str:
    cols = [c for c in KERNEL_COLUMNS if c in result.kernels.columns]
    df = result.kernels[cols]
    text = {c: _csv_text(df[c]) for c in cols if not pd.api.types.is_numeric_dtype(df[c])}
    return df.assign(**text).to_csv(index=False)


def _csv_text(col: pd.Series) -> pd.Series:
    """Text cells through text_safety.csv_cell, once per distinct value (names repeat a lot)."""
    return col.map({u: csv_cell(u) if isinstance(u, str) else u for u in col.dropna().unique()})
