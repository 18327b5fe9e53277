"""Step metrics: step time, achieved FLOP/s, HFU, MFU, MBU, tokens/s, energy, throttling.

Steps are the ``ProfilerStep#N`` spans torch.profiler records around each step; the
headline figures use the median step (robust to one slow step) and per-step samples
are kept for statistics (the CI gate). With *peak* the roof of the precision that did
most of the counted FLOPs (``peak_roof`` names it) and *bandwidth* the memory ceiling:

* HFU = counted FLOPs per step / (step time × peak): the hardware's view, counting
  every FLOP the kernels did, recomputation included;
* MFU = model FLOPs per step / (step time × peak), the model FLOPs from
  :func:`roofscope.analyzers.cost.modelflops.model_flops` (``mfu_source`` names the source, ``mfu_formula``
  the formula); without any, MFU = HFU (``"op_counted"``).

MFU <= HFU by construction: the hardware does at least the model's FLOPs. When model FLOPs
exceed the count, one of the two figures is wrong and is adjusted (:func:`utilization_flops`;
:func:`utilization_note` says which, on screen): the user's ``--model-flops-per-step`` is
taken as right, so the count fell short (kernels without a cost) and HFU is raised to MFU
(``hfu_source: raised_to_mfu``); an estimate from the trace (3 × forward counts an input
gradient the first layer never computes) is capped at the count (MFU = HFU, ``mfu_formula``
ends in "capped at the counted FLOPs");
* MBU = compulsory bytes per step / (step time × bandwidth).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pandas as pd

from roofscope.analyzers.cost.modelflops import ModelFlops
from roofscope.analyzers.ingest.frames import is_region, is_step
from roofscope.analyzers.model.summary import CAPPED
from roofscope.analyzers.model.trace import Trace
from roofscope.hardware.devices import Ceilings

_STEP = "ProfilerStep#"


def step_table(trace: Trace, kernels: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per profiled step: ``step``, ``ts_ns``, ``end_ns``, ``dur_s`` (trace clock),
    and the CPU span ``cpu_ts_ns``/``cpu_end_ns``/``cpu_dur_s``.

    With ``kernels`` (rows with ``step``, ``ts_ns``, ``end_ns``), a step that launched GPU
    work is measured on the GPU: from its first activity's start to the next step's first
    activity (the last step: to the later of its last activity's end and its CPU span's
    end). The CPU only enqueues work: when the GPU is the bottleneck, the CPU's
    ``ProfilerStep`` spans measure launch time, not the step; when the host is, both agree.
    """
    a = trace.annotations
    s = a[is_step(a["name"])] if len(a) else a
    if not len(s):
        cols = ("ts_ns", "end_ns", "cpu_ts_ns", "cpu_end_ns")
        return pd.DataFrame({"step": pd.Series([], dtype=np.int64),
                             **{c: pd.Series([], dtype=np.int64) for c in cols},
                             "dur_s": pd.Series([], dtype=float), "cpu_dur_s": pd.Series([], dtype=float)})
    t = pd.DataFrame({"step": s["name"].astype(str).str.slice(len(_STEP)).astype(np.int64).to_numpy(),
                      "cpu_ts_ns": s["ts_ns"].to_numpy(), "cpu_end_ns": s["end_ns"].to_numpy()})
    # Kineto can write a step's span twice (CPU and GPU views); keep the longest.
    t = t.sort_values(["step", "cpu_end_ns"]).drop_duplicates("step", keep="last").reset_index(drop=True)
    t["cpu_dur_s"] = (t["cpu_end_ns"] - t["cpu_ts_ns"]) / 1e9
    ts, end = t["cpu_ts_ns"].to_numpy().copy(), t["cpu_end_ns"].to_numpy().copy()
    if kernels is not None and len(kernels):
        k = kernels[kernels["step"] >= 0]
        if "timed" in k:
            k = k[k["timed"].astype(bool)]
        g = k.groupby("step")
        first = g["ts_ns"].min().reindex(t["step"]).to_numpy(dtype=float)
        last = g["end_ns"].max().reindex(t["step"]).to_numpy(dtype=float)
        has = ~np.isnan(first)
        consecutive = np.r_[t["step"].to_numpy()[1:] == t["step"].to_numpy()[:-1] + 1, False]
        nxt = np.r_[first[1:], np.nan]
        gpu_end = np.where(consecutive & ~np.isnan(nxt), nxt, np.fmax(last, end))
        ts = np.where(has, first, ts).astype(np.int64)
        end = np.where(has, gpu_end, end).astype(np.int64)
    t.insert(1, "ts_ns", ts)
    t.insert(2, "end_ns", end)
    t.insert(3, "dur_s", (end - ts) / 1e9)
    return t


def to_unix_ns(trace: Trace, t_ns: int) -> int | None:
    """A trace-clock time (ns from the first event) as Unix ns, or None when the trace lacks a base."""
    base = trace.meta.clock_base_ns
    return None if base is None else base + int(t_ns)


def profiled_window(trace: Trace, steps: pd.DataFrame) -> tuple[int | None, int | None]:
    """Start of the first and end of the last step of the step table, in Unix ns (where telemetry
    samples are placed); None where the trace lacks a clock base or has no steps."""
    if not len(steps):
        return None, None
    return to_unix_ns(trace, int(steps["ts_ns"].min())), to_unix_ns(trace, int(steps["end_ns"].max()))


@dataclass(frozen=True)
class Roof:
    """What HFU, MFU and MBU divide by: the roof of the precision that did the most FLOPs (``key``
    and ``peak_flops``, None without FLOPs or a roof for them) and the memory ``bandwidth``."""

    key: str | None = None
    peak_flops: float | None = None
    bandwidth: float | None = None


def dominant_roof(kernels: pd.DataFrame, ceilings: Ceilings) -> tuple[str | None, float | None]:
    """The roof key and FLOP/s of the (dtype, unit) that did the most FLOPs."""
    k = kernels[kernels["flops"].fillna(0) > 0]
    if not len(k):
        return None, None
    if "roof_precision" in k:  # placed kernels: TF32 detection already chose the roof
        by = k.groupby(k["roof_precision"].astype(str))["flops"].sum()
        key = str(by.idxmax())
        if key and ceilings.peaks.get(key):
            return key, ceilings.peaks[key]
    by = k.groupby([k["dtype"].astype(str), k["tensor_core"].astype(bool)])["flops"].sum()
    dtype, tc = by.idxmax()
    return ceilings.roof_key(dtype, tc), ceilings.roof(dtype, tc)


def utilization_roof(kernels: pd.DataFrame, ceilings: Ceilings) -> Roof:
    """The :class:`Roof` of the placed ``kernels`` on ``ceilings``."""
    key, peak = dominant_roof(kernels, ceilings)
    return Roof(key, peak, ceilings.bandwidth)


def region_times(trace: Trace, steps: pd.DataFrame, kernels: pd.DataFrame | None = None) -> pd.DataFrame:
    """Seconds of each region (record_function annotation) in each step: index step, one
    column per region name. A region's time is the longer of its CPU time (union of its spans
    inside the step's CPU span) and the GPU extent of the kernels it launched in the step:
    the GPU runs behind the CPU, so either can be the one that takes longer."""
    a = trace.annotations
    idx = pd.Index(steps["step"].to_numpy(), name="step")
    if not len(a) or not len(steps):
        return pd.DataFrame(index=idx)
    r = a[is_region(a["name"])]
    cols: dict[str, np.ndarray] = {}
    st, en = steps["cpu_ts_ns"].to_numpy(), steps["cpu_end_ns"].to_numpy()
    for name, g in r.groupby(r["name"].astype(str), sort=True):
        # Union of the region's spans (recursion or several threads must not double-count).
        g = g.sort_values("ts_ns")
        s0, e0 = g["ts_ns"].to_numpy(), g["end_ns"].to_numpy()
        new = np.r_[True, s0[1:] > np.maximum.accumulate(e0)[:-1]]
        us, ue = s0[new], np.maximum.reduceat(e0, np.flatnonzero(new))
        # Overlap of every union interval with every step window (few steps: dense is fine).
        ov = np.clip(np.minimum(ue[None, :], en[:, None]) - np.maximum(us[None, :], st[:, None]), 0, None)
        cols[name] = ov.sum(axis=1) / 1e9
    out = pd.DataFrame(cols, index=idx)
    if kernels is not None and len(kernels) and len(out.columns):
        k = kernels[(kernels["step"] >= 0) & kernels["region"].isin(out.columns)]
        g = k.groupby(["step", "region"])
        extent = ((g["end_ns"].max() - g["ts_ns"].min()) / 1e9).unstack("region")
        out = np.fmax(out, extent.reindex(index=idx, columns=out.columns))
    return out


def utilization_flops(counted: Any, model: ModelFlops) -> tuple[Any, Any]:
    """(FLOPs for MFU, FLOPs for HFU) per step from the ``counted`` FLOPs (a number or a Series),
    MFU's never above HFU's (see the module docstring)."""
    mflops = model.per_step
    if not mflops:
        return counted, counted
    if model.source == "model_flops":
        return mflops, np.maximum(counted, mflops)
    return np.minimum(counted, mflops), counted


def step_samples(kernels: pd.DataFrame, steps: pd.DataFrame, roof: Roof, model: ModelFlops,
                 busy: pd.DataFrame | None, regions: pd.DataFrame) -> pd.DataFrame:
    """One row per step of the step table ``steps`` (index ``step``): step_time_s, the ``kernels``'
    flops and bytes in it, hfu, mfu, mbu (against ``roof``, MFU from ``model``), busy_s and
    idle_fraction (from the timeline's per-step ``busy`` table; NaN without one) and
    ``region:<name>`` seconds (from :func:`region_times`); the samples statistics should use."""
    idx = pd.Index(steps["step"].to_numpy(), name="step")
    k = kernels[kernels["step"] >= 0]
    out = pd.DataFrame({"step_time_s": steps["dur_s"].to_numpy()}, index=idx)
    out["flops"] = k.groupby("step")["flops"].sum().reindex(idx).fillna(0.0)
    out["bytes"] = k.groupby("step")["bytes"].sum().reindex(idx).fillna(0.0)
    peak, bandwidth = roof.peak_flops, roof.bandwidth
    dur = out["step_time_s"].where(out["step_time_s"] > 0)
    mfu_flops, hfu_flops = utilization_flops(out["flops"], model)
    out["hfu"] = hfu_flops / (dur * peak) if peak else np.nan
    out["mfu"] = mfu_flops / (dur * peak) if peak else np.nan
    out["mbu"] = out["bytes"] / (dur * bandwidth) if bandwidth else np.nan
    # The timeline's busy and wall are summed over GPUs: their ratio is the device average.
    if busy is not None and len(busy):
        out["busy_s"] = busy["busy_s"].reindex(idx)
        out["idle_fraction"] = 1.0 - busy["busy_s"].reindex(idx) / busy["wall_s"].reindex(idx)
    else:
        out["busy_s"] = out["idle_fraction"] = np.nan
    for name in regions.columns:
        out[f"region:{name}"] = regions[name].reindex(idx)
    return out


def _median(s: pd.Series) -> float | None:
    s = s.dropna()
    return float(s.median()) if len(s) else None


def metrics(samples: pd.DataFrame, roof: Roof, model: ModelFlops, tokens_per_step: float | None,
            step_time: Mapping[str, Any] | None, telemetry: Mapping[str, Any] | None) -> dict[str, Any]:
    """Headline step metrics (medians over the :func:`step_samples` ``samples``); None where unknown.
    ``step_time``: programtime.py's block (its unprofiled median, when the Run measured one, is the
    headline step time); ``telemetry``: telemetry_summary.py's summary (energy, throttling)."""
    key, peak, bandwidth = roof.key, roof.peak_flops, roof.bandwidth
    mflops, source, tokens = model.per_step, model.source, tokens_per_step
    n = int(len(samples))
    out: dict[str, Any] = dict.fromkeys((
        "step_time_s", "step_time_mean_s", "step_time_min_s", "step_time_max_s", "flops_per_step",
        "bytes_per_step", "achieved_flops_per_s", "hfu", "mfu", "mbu", "tokens_per_s", "busy_fraction",
        "idle_fraction", "energy_per_step_j", "energy_per_token_j", "throttled_fraction"))
    out.update(steps=n, peak_roof=key, peak_flops=peak, bandwidth=bandwidth,
               model_flops_per_step=mflops, mfu_source=(source or "op_counted") if peak else None,
               mfu_formula=model.formula if peak else None, hfu_source=None,
               tokens_per_step=tokens, regions={})
    if not n:
        return out
    t = samples["step_time_s"]
    step = float(t.median())
    # The headline is the program's own step time where the Run measured it (programtime.py).
    own = (step_time or {}).get("unprofiled_median_s")
    out["step_time_source"] = "unprofiled" if own else "profiled"
    out["profiled_step_time_s"] = step
    step = own or step
    out.update(step_time_s=step, step_time_mean_s=float(t.mean()), step_time_min_s=float(t.min()),
               step_time_max_s=float(t.max()), flops_per_step=float(samples["flops"].mean()),
               bytes_per_step=float(samples["bytes"].mean()))
    if step > 0:
        out["achieved_flops_per_s"] = out["flops_per_step"] / step
        mfu_flops, hardware = utilization_flops(out["flops_per_step"], model)
        if peak:
            out["hfu"], out["mfu"] = float(hardware) / step / peak, float(mfu_flops) / step / peak
            out["hfu_source"] = "raised_to_mfu" if hardware > out["flops_per_step"] else "counted"
            if mflops and mfu_flops < mflops:
                out["mfu_formula"] += CAPPED
        out["mbu"] = out["bytes_per_step"] / step / bandwidth if bandwidth else None
        out["tokens_per_s"] = tokens / step if tokens else None
    out["idle_fraction"] = _median(samples["idle_fraction"])
    out["busy_fraction"] = None if out["idle_fraction"] is None else 1.0 - out["idle_fraction"]
    # A region's median over the steps it ran in: prefill happens in one step of many.
    out["regions"] = {c.split(":", 1)[1]: _median(samples[c].where(samples[c] > 0))
                      for c in samples.columns if c.startswith("region:")}
    devices = (telemetry or {}).get("devices") or []
    energy = [d.get("energy_per_step_j") for d in devices]
    if devices and all(e is not None for e in energy):
        out["energy_per_step_j"] = float(sum(energy))
        out["energy_per_token_j"] = out["energy_per_step_j"] / tokens if tokens else None
    shares = [(d.get("throttle") or {}).get("throttled_share") for d in devices]
    if any(s is not None for s in shares):
        out["throttled_fraction"] = float(max(s for s in shares if s is not None))
    return out
