"""Series behind the HTML report's charts other than the roofline: GPU time per step by
class and category, one step's kernel timeline, and NVML telemetry over time.

Each function returns JSON-ready columns (or None when the trace has nothing to draw);
large inputs are bounded here (kernels shown in the timeline, telemetry points) so the
page stays light whatever the trace's size.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from roofscope.analyzers.model.kernels import CLASSES, aggregate
from roofscope.run.telemetry import THROTTLE_REASONS, decode_reasons
from roofscope.text import shorten

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.analyzers.model.result import Result

TIMELINE_MAX = 4000     # kernels drawn in the step timeline (the longest, when a step has more)
TELEMETRY_POINTS = 1500  # points per telemetry series; samples beyond are averaged in buckets

CLASS_COLORS = {"compute": "#2b8a3e", "memory": "#1971c2", "latency": "#e8590c",
                "underutilized": "#c2255c", "communication": "#7048e8", "unknown": "#868e96"}
CATEGORY_COLORS = {"gemm": "#2b8a3e", "conv": "#5c940d", "attention": "#0c8599", "elementwise": "#1971c2",
                   "reduction": "#3b5bdb", "normalization": "#6741d9", "softmax": "#9c36b5",
                   "optimizer": "#c2255c", "copy": "#e8590c", "embedding": "#f08c00", "memcpy": "#d9480f",
                   "memset": "#a61e4d", "communication": "#7048e8", "view": "#adb5bd", "other": "#868e96"}
# The diagnosis' binding terms: the classes' shares of busy time plus where the GPU waits.
BINDING_COLORS = {**CLASS_COLORS, "host": "#343a40", "sync": "#f08c00", "copy": "#d9480f", "clock": "#862e9c",
                  "occupancy": "#0c8599", "idle_other": "#ced4da"}


def _list(x: Any, digits: int = 6) -> list:
    x = np.round(np.asarray(x, dtype=np.float64), digits)
    return np.where(np.isnan(x), None, x).tolist()


def _step_table(k: pd.DataFrame, col: str, steps: np.ndarray, order: list[str]) -> dict[str, list]:
    """Milliseconds of GPU time per step for each value of ``col`` present."""
    if not len(k):
        return {}
    t = aggregate(k, ["step", col])["time_s"].unstack(fill_value=0.0).reindex(index=steps, fill_value=0.0)
    cols = [c for c in order if c in t.columns] + sorted(str(c) for c in t.columns if c not in order)
    return {str(c): _list(t[c].fillna(0.0) * 1e3) for c in cols}


def per_step(result: "Result") -> dict[str, Any] | None:
    """Per profiled step: wall time, GPU busy time and kernel time by class and by category."""
    steps = result.steps
    if not len(steps):
        return None
    ids = steps["step"].to_numpy(dtype=np.int64)
    k = result.kernels[result.kernels["step"] >= 0]
    samples = result.step_samples
    busy = samples["busy_s"].reindex(ids).to_numpy(dtype=np.float64) if "busy_s" in samples else None
    return {"steps": ids.tolist(), "wall_ms": _list(steps["dur_s"].to_numpy() * 1e3),
            "busy_ms": None if busy is None or np.isnan(busy).all() else _list(busy * 1e3),
            "classes": _step_table(k, "cls", ids, list(CLASSES)),
            "categories": _step_table(k, "category", ids, list(CATEGORY_COLORS))}


def _lanes(k: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Timeline rows: GPU streams (with the device when there are several), or CPU threads."""
    if "stream" not in k:
        codes, uniq = pd.factorize(k["tid"].astype(str), sort=True)
        return codes, [f"thread {t}" for t in uniq]
    dev = k["device"].astype("Int64").fillna(-1).astype(np.int64).astype(str)
    stream = k["stream"].astype("Int64").fillna(-1).astype(np.int64)
    many = dev.nunique() > 1
    label = ("GPU " + dev + " stream " if many else "stream ") + stream.astype(str)
    # Sorted by (device, stream number), not as text.
    order = pd.DataFrame({"d": dev, "s": stream, "l": label}).drop_duplicates("l").sort_values(["d", "s"])
    labels = order["l"].tolist()
    return pd.Index(labels).get_indexer(label), labels


def step_timeline(result: "Result") -> dict[str, Any] | None:
    """The kernels of the median-length profiled step (the whole trace without steps), in
    microseconds from the step's start, one row per stream."""
    k = result.kernels
    steps = result.steps
    if len(steps):
        row = steps.sort_values("dur_s", kind="stable").iloc[(len(steps) - 1) // 2]
        step, t0, step_ms = int(row["step"]), int(row["ts_ns"]), float(row["dur_s"]) * 1e3
        k = k[k["step"].to_numpy() == step]
    else:
        step, t0, step_ms = None, int(k["ts_ns"].min()) if len(k) else 0, None
    k = k[k["dur_s"].notna()]
    if not len(k):
        return None
    total = len(k)
    if total > TIMELINE_MAX:
        # Sub-pixel kernels vanish anyway: keep the longest, in time order.
        longest = np.argpartition(-k["dur_ns"].to_numpy(dtype=np.float64), TIMELINE_MAX)[:TIMELINE_MAX]
        k = k.iloc[np.sort(longest)]
    lane, lanes = _lanes(k)
    name, names = pd.factorize(k["name"].astype(str))
    op, ops = pd.factorize(k["op_name"].astype(str))
    return {"step": step, "step_ms": step_ms, "lanes": lanes, "lane": lane.tolist(),
            "start_us": _list((k["ts_ns"].to_numpy(dtype=np.float64) - t0) / 1e3, 3),
            "dur_us": _list(k["dur_ns"].to_numpy(dtype=np.float64) / 1e3, 3),
            "name": name.tolist(), "names": [shorten(n) for n in names],
            "op": op.tolist(), "ops": [str(o) for o in ops],
            "cls": pd.Categorical(k["cls"], categories=CLASSES).codes.tolist(),
            "shown": int(len(k)), "total": int(total)}


def _buckets(t: np.ndarray) -> np.ndarray:
    """Bucket index per sample (sorted times) so that at most TELEMETRY_POINTS remain."""
    if len(t) <= TELEMETRY_POINTS:
        return np.arange(len(t))
    span = t[-1] - t[0]
    b = np.floor((t - t[0]) / span * TELEMETRY_POINTS).astype(np.int64) if span > 0 else np.zeros(len(t), np.int64)
    return np.minimum(b, TELEMETRY_POINTS - 1)


def _device_series(rows: pd.DataFrame, origin: int, dev: dict) -> dict[str, Any]:
    rows = rows.sort_values("t_unix_ns", kind="stable")
    t = (rows["t_unix_ns"].to_numpy(dtype=np.int64) - origin) / 1e9
    b = _buckets(t)
    g = rows.assign(t_s=t, b=b).groupby("b", sort=True)
    # Clock dips and heat peaks matter more than their averages.
    out = {"t_s": _list(g["t_s"].mean()), "sm_clock_mhz": _list(g["sm_clock_mhz"].min(), 0),
           "mem_clock_mhz": _list(g["mem_clock_mhz"].mean(), 0), "power_w": _list(g["power_w"].mean(), 1),
           "temp_c": _list(g["temp_c"].max(), 0), "gpu_util_pct": _list(g["gpu_util_pct"].mean(), 1)}
    mask = rows["clock_event_reasons"].fillna(0).to_numpy(dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
    masks = np.bitwise_or.reduceat(mask, starts) if len(mask) else mask
    events = [(float(out["t_s"][i]), [r for r in decode_reasons(int(m)) if r in THROTTLE_REASONS])
              for i, m in enumerate(masks.tolist())]
    events = [(ts, r) for ts, r in events if r]
    return {"name": str(dev.get("name") or "GPU"), "index": dev.get("cuda_index", dev.get("nvml_index")),
            "max_sm_clock_mhz": dev.get("max_sm_clock_mhz"), "power_limit_w": dev.get("power_limit_w"),
            **out, "events": {"t_s": [e[0] for e in events], "reasons": [", ".join(e[1]) for e in events]}}


def telemetry_series(result: "Result") -> dict[str, Any] | None:
    """Per GPU: SM/memory clock, power, temperature and utilization over time, throttle
    events, and the profiled window, in seconds from the first profiled step."""
    tel = result.telemetry
    if tel is None:
        return None
    f = tel.frame()
    if not len(f):
        return None
    start, end = result.window_unix_ns
    origin = start if start is not None else int(f["t_unix_ns"].min())
    groups = {int(d): g for d, g in f.groupby("device", sort=False)}
    devices = [_device_series(groups[dev["nvml_index"]], origin, dev) for dev in tel.devices
               if dev.get("nvml_index") in groups]
    return {"devices": devices, "samples": int(len(f)), "interval_s": float(tel.interval_s),
            "origin": "first profiled step" if start is not None else "first sample",
            "window": [0.0, (end - origin) / 1e9] if start is not None and end is not None else None}
