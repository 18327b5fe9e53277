"""Measured hardware counters (Nsight Compute) merged into the analysis' kernel frame.

``roofscope.run.counters.load(run_dir)`` gives one row per profiled kernel launch, joined to
a Kineto kernel through its CUPTI ``correlation`` id. Where a kernel has counters, its
``flops`` become the tensor-core + CUDA-core FLOPs that ran and its ``bytes`` the DRAM
bytes that moved, so the roofline, classes, HFU, rules and reports all use measured
values; the analytic ones stay beside them (``flops_analytic``, ``bytes_analytic``,
``cls_analytic``) so the cost model's accuracy can be read per kernel.

The precision of the roof follows the counters: an fp32 GEMM whose FLOPs ran as
tensor-core tf32 gets the tf32 roof, a matmul with no tensor-core FLOPs the CUDA-core
roof. ``tc_used`` answers "did this GEMM/conv/attention kernel use tensor cores?" (NA for
kernels without counters, non-matmul kernels, and kernels that ran no math at all, such as
cuDNN's layout transforms, which would otherwise read as tensor cores left unused).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

MATMUL_CATEGORIES = ("gemm", "conv", "attention")
# Counter column -> precision key of the roof its FLOPs run against (tensor-core roofs, then CUDA-core).
TENSOR_COLUMNS = {"tensor_flops_fp16": "fp16", "tensor_flops_bf16": "bf16", "tensor_flops_tf32": "tf32",
                  "tensor_flops_fp8": "fp8", "tensor_flops_int8": "int8", "tensor_flops_fp64": "fp64"}
CUDA_CORE_COLUMNS = {"flops_fp32": "fp32", "flops_fp16": "fp16", "flops_fp64": "fp64"}
MEASURED_COLUMNS = ("m_flops", "m_tensor_flops", "m_dram_bytes", "m_l2_bytes", "m_time_ns")


def _measured(table: pd.DataFrame) -> pd.DataFrame:
    """Per correlation id: the measured totals and the precision that did most FLOPs."""
    t = table[table["correlation"].fillna(-1).to_numpy(dtype=np.int64) >= 0].drop_duplicates("correlation")
    cols = [*TENSOR_COLUMNS, *CUDA_CORE_COLUMNS]
    flops = np.column_stack([t[c].to_numpy(dtype=np.float64) if c in t else np.zeros(len(t)) for c in cols])
    flops = np.nan_to_num(flops) if len(t) else np.zeros((0, len(cols)))
    top = flops.argmax(axis=1) if len(t) else np.zeros(0, dtype=np.int64)
    precisions = np.array([*TENSOR_COLUMNS.values(), *CUDA_CORE_COLUMNS.values()], dtype=object)
    n_tensor = len(TENSOR_COLUMNS)
    return pd.DataFrame({
        "correlation": t["correlation"].to_numpy(dtype=np.int64),
        "m_flops": flops.sum(axis=1),
        "m_tensor_flops": flops[:, :n_tensor].sum(axis=1),
        "m_dram_bytes": (t["dram_read_bytes"].to_numpy(dtype=np.float64)
                         + t["dram_write_bytes"].to_numpy(dtype=np.float64)),
        "m_l2_bytes": t["l2_bytes"].to_numpy(dtype=np.float64),
        "m_time_ns": t["time_ns"].to_numpy(dtype=np.float64),
        "m_dtype": precisions[top],
        "m_tensor_core": top < n_tensor,
    })


def apply_counters(kernels: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """A new kernel frame with measured values merged in by ``correlation``.

    ``kernels`` is the analytic frame as :func:`.roofline.place` left it (its ``cls``
    becomes ``cls_analytic``); the result needs placing again. ``table`` is
    ``roofscope.run.counters.Counters.table``.
    """
    k = kernels.drop(columns=[c for c in (*MEASURED_COLUMNS, "m_dtype", "m_tensor_core") if c in kernels])
    if "flops_analytic" not in k:  # attribution keeps the formula's FLOPs beside CUPTI counter ranges
        k["flops_analytic"] = k["flops"].to_numpy(dtype=np.float64)
    k["bytes_analytic"] = k["bytes"].to_numpy(dtype=np.float64)
    k["cls_analytic"] = k["cls"]
    corr = k["correlation"].astype("Int64").fillna(-1).to_numpy(dtype=np.int64)
    m = _measured(table)
    row = pd.Index(m["correlation"].to_numpy()).get_indexer(corr)
    has = (row >= 0) & (corr >= 0)
    pick = np.maximum(row, 0)
    for col in MEASURED_COLUMNS:
        k[col] = np.where(has, m[col].to_numpy()[pick] if len(m) else np.nan, np.nan)
    m_flops = k["m_flops"].to_numpy()
    math_done = has & (np.nan_to_num(m_flops) > 0)

    k["flops"] = np.where(has, m_flops, k["flops_analytic"].to_numpy())
    k["bytes"] = np.where(has, k["m_dram_bytes"].to_numpy(), k["bytes_analytic"].to_numpy())
    k["cost_source"] = np.where(has, "ncu", k["cost_source"].to_numpy(dtype=object))
    k["unattributed"] = np.where(has, "", k["unattributed"].to_numpy(dtype=object))
    # The counters name the unit and precision that did the work: they pick the roof.
    if len(m):
        k["dtype"] = np.where(math_done, m["m_dtype"].to_numpy()[pick], k["dtype"].to_numpy(dtype=object))
        k["tensor_core"] = np.where(math_done, m["m_tensor_core"].to_numpy()[pick],
                                    k["tensor_core"].to_numpy(dtype=bool))
    matmul = np.isin(k["category"].to_numpy(dtype=object), MATMUL_CATEGORIES)
    tensor = np.nan_to_num(k["m_tensor_flops"].to_numpy()) > 0
    tc = pd.array(tensor, dtype="boolean")
    tc[~(math_done & matmul)] = pd.NA
    # cuDNN runs layout transforms beside a tensor-core convolution under the same op: they are
    # helpers of a call that did use tensor cores, not GEMMs that left them unused.
    if "cost_op" in k:
        cost_op = k["cost_op"].to_numpy()
        op_used = pd.Series(tensor).groupby(cost_op).transform("max").to_numpy(dtype=bool)
        tc[(cost_op >= 0) & op_used & ~tensor] = pd.NA
    k["tc_used"] = tc
    with np.errstate(divide="ignore", invalid="ignore"):
        m_bytes = k["m_dram_bytes"].to_numpy()
        k["flops_ratio"] = np.where(m_flops > 0, k["flops_analytic"].to_numpy() / m_flops, np.nan)
        k["bytes_ratio"] = np.where(m_bytes > 0, k["bytes_analytic"].to_numpy() / m_bytes, np.nan)
        l2 = k["m_l2_bytes"].to_numpy()
        k["l2_intensity"] = np.where(l2 > 0, k["flops"].to_numpy() / l2, np.nan)
    return k


def _median(x: pd.Series) -> float | None:
    x = x.to_numpy(dtype=np.float64)
    x = x[np.isfinite(x)]
    return float(np.median(x)) if len(x) else None


def counters_summary(k: pd.DataFrame, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """The summary's ``counters`` block: coverage, tensor cores left unused, the analytic /
    measured ratios and how often the analytic class agrees with the measured one."""
    has = k["m_flops"].notna().to_numpy()
    dur = np.nan_to_num(k["dur_s"].to_numpy(dtype=np.float64))
    kernel_rows = (k["cat"].astype(str) == "kernel").to_numpy() if "cat" in k else np.ones(len(k), bool)
    total = float(dur[kernel_rows].sum())
    covered = float(dur[has].sum())
    unused = (k["tc_used"] == False).fillna(False).to_numpy(dtype=bool)  # noqa: E712 - NA-aware
    # Agreement is over kernels the cost model covers: an analytic "unknown" is a coverage gap
    # (reported in the summary's "unattributed"), not a wrong class.
    known = has & (k["cls_analytic"].astype(str).to_numpy() != "unknown")
    known_s = float(dur[known].sum())
    agree = known & (k["cls"].astype(str).to_numpy() == k["cls_analytic"].astype(str).to_numpy())
    return {
        "kernels": int(has.sum()),
        "kernels_total": int(kernel_rows.sum()),
        "time_s": covered,
        "time_share": covered / total if total > 0 else None,
        "tensor_cores_unused": {"kernels": int(unused.sum()), "time_s": float(dur[unused].sum())},
        "flops_ratio_median": _median(k.loc[has, "flops_ratio"]),
        "bytes_ratio_median": _median(k.loc[has, "bytes_ratio"]),
        "class_agreement": float(dur[agree].sum() / known_s) if known_s > 0 else None,
        "no_analytic_cost_time_s": covered - known_s,
        "ncu_version": (meta or {}).get("ncu_version"),
        "sample": (meta or {}).get("sample"),
        "skip": int((meta or {}).get("skip") or 0),
        "join": (meta or {}).get("join"),
    }
