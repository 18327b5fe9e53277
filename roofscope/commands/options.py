"""Options shared by the commands that analyze: the ceilings and roofline thresholds of
`cli._ceiling_options`, carried by analyze, report, diff, merge and run alike."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(kw_only=True)
class CeilingOptions:
    device: str | None = None
    peak_tflops: float | None = None
    peak_bandwidth: float | None = None           # GB/s, as the flag takes it
    ceilings: str | None = None                   # a measured-ceilings file
    latency_floor_us: float | None = None
    underutilized_below: float | None = None
    force: bool = False

    def ceiling_kwargs(self) -> dict[str, Any]:
        """These options as `analyzers.analysis.analyze()` (and SessionConfig) name them."""
        from ..analyzers.roofline import params_from

        return {"device": self.device, "peak_tflops": self.peak_tflops, "peak_bandwidth_gbs": self.peak_bandwidth,
                "ceilings_file": self.ceilings,
                "params": params_from(self.latency_floor_us, self.underutilized_below)}

    def ceiling_options(self) -> dict[str, Any]:
        """These options under their own names, to hand them to another command's options."""
        return {"device": self.device, "peak_tflops": self.peak_tflops, "peak_bandwidth": self.peak_bandwidth,
                "ceilings": self.ceilings, "latency_floor_us": self.latency_floor_us,
                "underutilized_below": self.underutilized_below, "force": self.force}
