"""NVML telemetry as a Run keeps it (``telemetry.json.gz``): the :class:`Telemetry` record the
sampler (collectors/nvml.py) fills and the analysis (analyzers/views/telemetry_summary.py) reads back, and the
clock-event reason bits both name."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from roofscope.run.schema import TELEMETRY_VERSION as SCHEMA_VERSION
from roofscope.run.schema import TelemetryDoc, read_versioned

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

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

# Reasons that lower clocks against the workload's will; idle and user-set application
# clocks are states, not throttling.
THROTTLE_REASONS: tuple[str, ...] = (
    "sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
)


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
        """The telemetry document (schema.TelemetryDoc), compact; NaN and infinite readings as null."""
        return msgspec.json.encode(TelemetryDoc(schema_version=SCHEMA_VERSION, interval_s=self.interval_s,
                                                devices=self.devices, samples=self.samples, notes=self.notes,
                                                cost=self.cost))

    @classmethod
    def from_json(cls, data: bytes | str, source: str = "telemetry JSON") -> "Telemetry":
        """Read ``to_json``'s document; a ValueError whose one-line message starts with ``source``."""
        doc = read_versioned(data.encode() if isinstance(data, str) else data, TelemetryDoc, key="schema_version",
                             current=SCHEMA_VERSION, what="telemetry", where=source, error=ValueError)
        samples = doc.samples
        missing = [f for f in FIELDS if not isinstance(samples.get(f), list)]
        if missing:
            raise ValueError(f"{source}: samples lack column(s): {', '.join(missing)}")
        if len({len(samples[f]) for f in FIELDS}) > 1:
            raise ValueError(f"{source}: sample columns differ in length")
        tel = cls(doc.interval_s, doc.devices, {f: samples[f] for f in FIELDS}, doc.notes, doc.cost)
        try:
            tel.frame()
        except (TypeError, ValueError, OverflowError) as e:
            raise ValueError(f"{source}: samples hold non-numeric values: {e}") from None
        return tel

    def frame(self) -> "pd.DataFrame":
        """One row per (pass, device); missing readings are NaN (``<NA>`` for the reasons bitmask)."""
        import pandas as pd   # start-up time: the profiled program (collectors/nvml.py) never needs it

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
