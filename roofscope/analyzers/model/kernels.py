"""The kernels frame: one row per GPU activity (kernel, memcpy, memset), or per costed CPU op of a
CPU-only trace, and the aggregations every reader of it shares.

Each stage adds its columns, in this order (the orchestrator in roofscope/analysis.py runs them):

======================  ===========================================================================
stage                   columns
======================  ===========================================================================
ingest (Trace.kernels)  name, cat, ts_ns, dur_ns, dur_s, timed, stream, device, grid, block, launch,
                        op, op_name, step, region, graph, correlation
cost (attribution)      flops, bytes, dtype, tensor_core, category, cost_source, cost_op,
                        cost_op_name, estimate, flops_lo, flops_hi, bytes_lo, bytes_hi,
                        unattributed, missing, attn_q; module; phase; io_bytes
place (roofline)        intensity, achieved_flops, achieved_bw, roof, roof_precision, roof_bw,
                        roof_level, ridge, attainable, floor_s, efficiency, compute_bound,
                        above_roof, tc_used, cls, cls_source, mbu
place (measured)        counter_flops, m_flops, m_bytes, flops_analytic, bytes_analytic,
                        flops_ratio, bytes_ratio, cls_analytic (Runs with Nsight Compute counters)
======================  ===========================================================================

Nothing here computes a roofline: these are the frame's contract and pure functions of it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from roofscope.config import RooflineThresholds

CLASSES = ("compute", "memory", "latency", "underutilized", "communication", "unknown")
# Timer rounding of a microsecond-long CPU op alone can put it a hair over its roof.
ABOVE_ROOF_TOLERANCE = 0.005
# The level of a kernel above a memory roof without cache levels (datasheet ceilings): data it found
# in L2 moved faster than memory allows (summary's above_roof.top[].level).
NO_CACHE_ROOF = "memory, no cache roof"


@dataclass(frozen=True)
class RooflineParams:
    """The thresholds in the analysis's units (seconds, not the options' microseconds)."""

    latency_floor_s: float = RooflineThresholds.latency_floor_us / 1e6
    underutilized_below: float = RooflineThresholds.underutilized_below

    @classmethod
    def from_thresholds(cls, thresholds: RooflineThresholds) -> RooflineParams:
        """Parameters from the options (``--latency-floor-us``, ``--underutilized-below``)."""
        return cls(latency_floor_s=thresholds.latency_floor_us / 1e6,
                   underutilized_below=thresholds.underutilized_below)


def aggregate(k: pd.DataFrame, by: str | list[str]) -> pd.DataFrame:
    """Totals per group: calls, time, FLOPs, bytes, derived rates, and the class holding most time.

    Rates (achieved FLOP/s and B/s, efficiency) divide the costed launches' FLOPs and bytes by
    the costed launches' time only: a GEMM launched 241 times, 73 of them outside any costed op,
    ran at 5.51 TFLOP over its 168 costed calls' time, not over all 241 calls'. ``costed_calls``
    and ``coverage`` (costed share of the group's time) say how much of the group the rates cover.
    """
    if len(k) == 0:
        return pd.DataFrame(columns=["calls", "time_s", "flops", "bytes", "intensity", "achieved_flops",
                                     "achieved_bw", "efficiency", "costed_calls", "coverage", "cls", "time_share"])
    keys = [by] if isinstance(by, str) else list(by)
    # Costed: the cost model gave FLOPs or bytes (a floor needs ceilings too; rates do not).
    costed = (k["flops"].notna() | k["bytes"].notna()) & k["dur_s"].notna()
    sub = k[keys + ["dur_s", "flops", "bytes", "floor_s"]].assign(_costed_s=k["dur_s"].where(costed), _costed=costed)
    g = sub.groupby(keys, observed=True, sort=False)
    sums = g[["dur_s", "flops", "bytes", "floor_s", "_costed_s"]].sum(min_count=1)
    out = pd.DataFrame({
        "calls": g.size(),
        "time_s": sums["dur_s"],
        "flops": sums["flops"],
        "bytes": sums["bytes"],
        "floor_s": sums["floor_s"],
        "costed_calls": g["_costed"].sum(),
        "costed_time_s": sums["_costed_s"],
    })
    out["mean_s"] = out["time_s"] / out["calls"]
    with np.errstate(divide="ignore", invalid="ignore"):
        out["intensity"] = out["flops"] / out["bytes"]
        out["achieved_flops"] = out["flops"] / out["costed_time_s"]
        out["achieved_bw"] = out["bytes"] / out["costed_time_s"]
        out["efficiency"] = out["floor_s"] / out["costed_time_s"]
        out["coverage"] = (out["costed_time_s"] / out["time_s"]).where(out["time_s"] > 0).fillna(0.0)
    if "cls" not in keys:
        cls_time = k.groupby(keys + ["cls"], observed=True, sort=False)["dur_s"].sum().reset_index()
        top = cls_time.sort_values("dur_s", ascending=False).drop_duplicates(keys).set_index(keys)["cls"]
        out["cls"] = top.reindex(out.index)
    total = k["dur_s"].sum()
    out["time_share"] = out["time_s"] / total if total > 0 else np.nan
    return out.sort_values(["time_s", "flops"], ascending=False, na_position="last")


def by_op(k: pd.DataFrame) -> pd.DataFrame:
    """Per op: the op whose cost a kernel carries, else the op that launched it."""
    key = k["cost_op_name"].where(k["cost_op_name"] != "", k["op_name"]).replace("", "(no op)")
    return aggregate(k.assign(op=key), "op")


def by_class(k: pd.DataFrame) -> pd.DataFrame:
    present = set(k["cls"].unique())  # not set(series): a Python loop over every kernel
    return aggregate(k, "cls").reindex([c for c in CLASSES if c in present])


def by_step(k: pd.DataFrame) -> pd.DataFrame:
    return aggregate(k[k["step"] >= 0], "step").sort_index()


def by_region(k: pd.DataFrame) -> pd.DataFrame:
    return aggregate(k.assign(region=k["region"].replace("", "(no region)")), "region")


def at_depth(modules: pd.Series, depth: int | None) -> pd.Series:
    """Truncate qualified names to their first ``depth`` components (``GPT.blocks.3.mlp`` at 3 -> ``GPT.blocks.3``)."""
    if depth is None:
        return modules
    if depth < 1:
        raise ValueError("depth must be at least 1")
    return modules.str.split(".").str[:depth].str.join(".")


def by_module(k: pd.DataFrame, depth: int | None = None) -> pd.DataFrame:
    """Per module (a run with ``--modules``); ``depth`` truncates names (:func:`at_depth`)."""
    return aggregate(k.assign(module=at_depth(k["module"], depth).replace("", "(no module)")), "module")
