"""Per-GPU summary of NVML telemetry over a time window: clocks, power, energy, throttling.

The window is usually the profiled steps, so ``sm_clock_ratio`` says how far below its
maximum clock the GPU ran while the roofline was measured, and ``throttle`` says why.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from roofscope.errors import RoofscopeError
from roofscope.fileio import read_maybe_gzip
from roofscope.run.telemetry import CLOCK_EVENT_REASONS, THROTTLE_REASONS, Telemetry

_THROTTLE_MASK = sum(bit for bit, name in CLOCK_EVENT_REASONS.items() if name in THROTTLE_REASONS)


class TelemetryError(RoofscopeError):
    """A telemetry file is missing or not readable as roofscope telemetry."""


def load(path: str | os.PathLike) -> Telemetry:
    """Read a file written from ``Telemetry.to_json()``, plain or gzip-compressed."""
    p = Path(path)
    data = read_maybe_gzip(p, TelemetryError, "expected a telemetry file")
    try:
        return Telemetry.from_json(data, source=str(p))
    except ValueError as e:
        raise TelemetryError(str(e)) from None


def _num(x: Any) -> float | None:
    """Plain float, or None for missing/NaN, so the result survives ``allow_nan=False``."""
    if x is None or x is pd.NA:
        return None
    x = float(x)
    return None if np.isnan(x) else x


def _trapezoid(t_ns: np.ndarray, power_w: np.ndarray) -> float | None:
    ok = ~np.isnan(power_w)
    if ok.sum() < 2:
        return None
    t_s = (t_ns[ok] - t_ns[ok][0]) / 1e9
    p = power_w[ok]
    return float(np.sum((p[1:] + p[:-1]) * 0.5 * np.diff(t_s)))


def _energy(t_ns: np.ndarray, energy_mj: np.ndarray, power_w: np.ndarray) -> tuple[float | None, str | None]:
    """Joules over the samples, from the hardware counter when usable, else integrated power.

    The sampler reads the counter only every ``ENERGY_INTERVAL_S``, so the window's first and
    last samples may lack it: the counter then covers its first to last reading inside the
    window and integrated power covers the two edges.
    """
    have = np.flatnonzero(~np.isnan(energy_mj))
    # A counter that went backwards was reset (driver reload) and is not trusted; one that
    # did not move has not been updated yet (it ticks every few tens of ms on an H200: a 20 ms
    # decode window read 0 J).
    if len(have) >= 2 and energy_mj[have[-1]] > energy_mj[have[0]]:
        a, b = have[0], have[-1]
        joules = float(energy_mj[b] - energy_mj[a]) / 1e3
        if a == 0 and b == len(t_ns) - 1:
            return joules, "counter"
        edges = [_trapezoid(t_ns[:a + 1], power_w[:a + 1]) if a else 0.0,
                 _trapezoid(t_ns[b:], power_w[b:]) if b < len(t_ns) - 1 else 0.0]
        if None not in edges:
            return joules + sum(edges), "counter+power_integral"
    joules = _trapezoid(t_ns, power_w)
    return (joules, "power_integral") if joules is not None else (None, None)


def _throttle(reasons: pd.Series) -> dict[str, float | None]:
    known = reasons.dropna().to_numpy(dtype=np.int64)
    if known.size == 0:
        return {**dict.fromkeys(CLOCK_EVENT_REASONS.values()), "throttled_share": None}
    out: dict[str, float | None] = {
        name: float(np.mean((known & bit) != 0)) for bit, name in CLOCK_EVENT_REASONS.items()
    }
    out["throttled_share"] = float(np.mean((known & _THROTTLE_MASK) != 0))
    return out


def _device_summary(dev: dict, rows: pd.DataFrame, steps: int | None) -> dict:
    # Fields with one statistic are plain numbers (mem clock mean, temp max, util mean,
    # memory max); those with several are dicts.
    rows = rows.sort_values("t_unix_ns", kind="stable")
    t_ns = rows["t_unix_ns"].to_numpy()
    sm = rows["sm_clock_mhz"]
    max_sm = _num(dev.get("max_sm_clock_mhz"))
    sm_mean = _num(sm.mean())
    energy_j, source = _energy(t_ns, rows["energy_mj"].to_numpy(), rows["power_w"].to_numpy())
    mem_used = _num(rows["mem_used_bytes"].max())
    return {
        "nvml_index": dev.get("nvml_index"),
        "cuda_index": dev.get("cuda_index"),
        "name": dev.get("name"),
        "samples": int(len(rows)),
        "duration_s": float((t_ns[-1] - t_ns[0]) / 1e9) if len(t_ns) else None,
        "sm_clock_mhz": {"mean": sm_mean, "min": _num(sm.min()), "max": _num(sm.max())},
        "max_sm_clock_mhz": max_sm,
        "sm_clock_ratio": sm_mean / max_sm if sm_mean is not None and max_sm else None,
        "mem_clock_mhz": _num(rows["mem_clock_mhz"].mean()),
        "power_w": {"mean": _num(rows["power_w"].mean()), "max": _num(rows["power_w"].max())},
        "power_limit_w": _num(dev.get("power_limit_w")),
        "energy_j": energy_j,
        "energy_source": source,
        "energy_per_step_j": energy_j / steps if energy_j is not None and steps else None,
        "temp_c": _num(rows["temp_c"].max()),
        "gpu_util_pct": _num(rows["gpu_util_pct"].mean()),
        "mem_used_bytes": None if mem_used is None else int(mem_used),
        "throttle": _throttle(rows["clock_event_reasons"]),
    }


def summarize(tel: Telemetry, start_unix_ns: int | None = None, end_unix_ns: int | None = None,
              steps: int | None = None) -> dict:
    """Summarize ``tel`` per device over ``[start_unix_ns, end_unix_ns]`` (bounds inclusive, None = open)."""
    if steps is not None and steps <= 0:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    df = tel.frame()
    t = df["t_unix_ns"]
    keep = np.ones(len(df), dtype=bool)
    if start_unix_ns is not None:
        keep &= (t >= start_unix_ns).to_numpy()
    if end_unix_ns is not None:
        keep &= (t <= end_unix_ns).to_numpy()
    window = df[keep]
    notes = list(tel.notes)
    if len(df) and not len(window):
        notes.append("no telemetry samples in the requested window")
    groups = {int(k): g for k, g in window.groupby("device", sort=False)}
    empty = window.iloc[:0]
    devices = [_device_summary(dev, groups.get(dev.get("nvml_index"), empty), steps) for dev in tel.devices]
    return {"devices": devices, "notes": notes, "samples": int(len(window)), "interval_s": float(tel.interval_s)}
