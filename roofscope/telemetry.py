"""NVML telemetry as a Run keeps it (``telemetry.json.gz``): the :class:`Telemetry` record the
sampler (collectors/nvml.py) fills and the analysis (analyzers/telemetry.py) reads back, and the
clock-event reason bits both name."""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

SCHEMA_VERSION = 1

FIELDS: tuple[str, ...] = (
    "t_unix_ns", "device", "sm_clock_mhz", "mem_clock_mhz", "power_w", "energy_mj",
    "temp_c", "gpu_util_pct", "mem_util_pct", "mem_used_bytes", "clock_event_reasons",
)

CLOCK_EVENT_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}

def decode_reasons(mask: int) -> list[str]:
    """Names of the clock-event bits set in ``mask``, lowest bit first; unknown bits are dropped."""
    return [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]


@dataclass
class Telemetry:
    """What one sampling session saw: device facts, column-oriented samples, notes, own cost."""

    interval_s: float
    devices: list[dict] = field(default_factory=list)
    samples: dict[str, list] = field(default_factory=lambda: {f: [] for f in FIELDS})
    notes: list[str] = field(default_factory=list)
    cost: dict = field(default_factory=dict)

    def to_json(self) -> bytes:
        doc = {"schema_version": SCHEMA_VERSION, **asdict(self)}
        try:
            text = json.dumps(doc, separators=(",", ":"), allow_nan=False)
        except ValueError:
            # Only reached when a reading was NaN/inf; scrubbing every cell up front would
            # cost a Python-level pass over millions of cells on long runs.
            text = json.dumps(_scrub(doc), separators=(",", ":"), allow_nan=False)
        return text.encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> "Telemetry":
        try:
            doc = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"telemetry is not valid JSON: {e}") from None
        if not isinstance(doc, dict):
            raise ValueError("telemetry JSON must be an object")
        if doc.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"unsupported telemetry schema_version {doc.get('schema_version')!r} "
                             f"(expected {SCHEMA_VERSION})")
        interval = doc.get("interval_s")
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not interval > 0:
            raise ValueError("telemetry interval_s must be a positive number")
        devices, samples, notes, cost = (doc.get(k) for k in ("devices", "samples", "notes", "cost"))
        if not isinstance(devices, list) or not all(isinstance(d, dict) for d in devices):
            raise ValueError("telemetry devices must be a list of objects")
        if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
            raise ValueError("telemetry notes must be a list of strings")
        if not isinstance(cost, dict):
            raise ValueError("telemetry cost must be an object")
        if not isinstance(samples, dict):
            raise ValueError("telemetry samples must be an object of columns")
        missing = [f for f in FIELDS if not isinstance(samples.get(f), list)]
        if missing:
            raise ValueError(f"telemetry samples lack column(s): {', '.join(missing)}")
        if len({len(samples[f]) for f in FIELDS}) > 1:
            raise ValueError("telemetry sample columns differ in length")
        tel = cls(float(interval), devices, {f: samples[f] for f in FIELDS}, notes, cost)
        try:
            tel.frame()
        except (TypeError, ValueError, OverflowError) as e:
            raise ValueError(f"telemetry samples hold non-numeric values: {e}") from None
        return tel

    def frame(self) -> pd.DataFrame:
        """One row per (pass, device); missing readings are NaN (``<NA>`` for the reasons bitmask)."""
        s = self.samples
        cols: dict[str, Any] = {
            "t_unix_ns": np.asarray(s["t_unix_ns"], dtype=np.int64),
            "device": np.asarray(s["device"], dtype=np.int64),
        }
        for f in FIELDS[2:-1]:
            # float64 is exact for every counter here (energy in mJ, bytes) up to 2**53.
            cols[f] = np.asarray(s[f], dtype=np.float64)
        cols["clock_event_reasons"] = pd.array(s["clock_event_reasons"], dtype="Int64")
        return pd.DataFrame(cols, columns=list(FIELDS))


def _scrub(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _scrub(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_scrub(v) for v in obj]
    return obj
