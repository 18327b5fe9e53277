"""Step timing and throughput: step time, tokens/s and model FLOP utilization (MFU).

Steps are the ``ProfilerStep#N`` spans torch.profiler records around each step. MFU
is the user's *model* FLOPs per step (e.g. 6·N·tokens for training) per second of
median step time, over the peak of the precision that did most of the trace's FLOPs,
so it counts useful work only, unlike the attributed FLOPs of the kernels.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..devices import Ceilings
from .trace import Trace

_STEP = "ProfilerStep#"


def step_table(trace: Trace) -> pd.DataFrame:
    """One row per profiled step: ``step``, ``ts_ns``, ``end_ns``, ``dur_s`` (trace clock)."""
    a = trace.annotations
    s = a[a["name"].astype(str).str.startswith(_STEP)] if len(a) else a
    if not len(s):
        return pd.DataFrame({"step": pd.Series([], dtype=np.int64), "ts_ns": pd.Series([], dtype=np.int64),
                             "end_ns": pd.Series([], dtype=np.int64), "dur_s": pd.Series([], dtype=float)})
    t = pd.DataFrame({"step": s["name"].astype(str).str.slice(len(_STEP)).astype(np.int64).to_numpy(),
                      "ts_ns": s["ts_ns"].to_numpy(), "end_ns": s["end_ns"].to_numpy()})
    # Kineto can write a step's span twice (CPU and GPU views); keep the longest.
    t = t.sort_values(["step", "end_ns"]).drop_duplicates("step", keep="last")
    t["dur_s"] = (t["end_ns"] - t["ts_ns"]) / 1e9
    return t.reset_index(drop=True)


def to_unix_ns(trace: Trace, t_ns: int) -> int | None:
    """A trace-clock time (ns from the first event) as Unix ns, or None when the trace lacks a base."""
    base = trace.meta.get("baseTimeNanoseconds")
    t0_us = trace.meta.get("t0_us")
    if base is None or t0_us is None:
        return None
    return int(base) + int(round(float(t0_us) * 1000)) + int(t_ns)


def dominant_roof(kernels: pd.DataFrame, ceilings: Ceilings) -> tuple[str | None, float | None]:
    """The roof key and FLOP/s of the (dtype, unit) that did the most FLOPs."""
    k = kernels[kernels["flops"].fillna(0) > 0]
    if not len(k):
        return None, None
    by = k.groupby([k["dtype"].astype(str), k["tensor_core"].astype(bool)])["flops"].sum()
    dtype, tc = by.idxmax()
    return ceilings.roof_key(dtype, tc), ceilings.roof(dtype, tc)


def throughput(steps: pd.DataFrame, kernels: pd.DataFrame, ceilings: Ceilings,
               tokens_per_step: float | None = None, model_flops_per_step: float | None = None) -> dict[str, Any]:
    """Median step time and, given the user's per-step counts, tokens/s and MFU."""
    out: dict[str, Any] = {"steps": int(len(steps)), "step_time_s": None, "step_time_mean_s": None,
                           "step_time_max_s": None, "tokens_per_step": tokens_per_step, "tokens_per_s": None,
                           "model_flops_per_step": model_flops_per_step, "model_flops_per_s": None,
                           "mfu": None, "mfu_roof": None, "mfu_peak_flops": None}
    if not len(steps):
        return out
    median = float(np.median(steps["dur_s"]))
    out.update(step_time_s=median, step_time_mean_s=float(steps["dur_s"].mean()),
               step_time_max_s=float(steps["dur_s"].max()))
    if median <= 0:
        return out
    if tokens_per_step:
        out["tokens_per_s"] = tokens_per_step / median
    if model_flops_per_step:
        rate = model_flops_per_step / median
        key, peak = dominant_roof(kernels, ceilings)
        out.update(model_flops_per_s=rate, mfu_roof=key, mfu_peak_flops=peak,
                   mfu=rate / peak if peak else None)
    return out
