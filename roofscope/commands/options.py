"""Options shared by the commands that analyze: the ceilings and roofline thresholds
(roofscope/config.py declares them; clickopts.ceiling_options makes their flags), carried by
analyze, report, diff, merge and run alike."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roofscope.config import CeilingOverrides, RooflineThresholds, values
from roofscope.place.roofline import params_from


@dataclass(kw_only=True)
class CeilingOptions(CeilingOverrides, RooflineThresholds):
    force: bool = False

    def ceiling_kwargs(self) -> dict[str, Any]:
        """These options as `analyzers.analysis.analyze()` (and PipelineOptions) name them."""
        return {"device": self.device, "peak_tflops": self.peak_tflops, "peak_bandwidth_gbs": self.peak_bandwidth_gbs,
                "ceilings_file": self.ceilings, "params": params_from(self)}

    def ceiling_options(self) -> dict[str, Any]:
        """These options under their own names, to hand them to another command's options."""
        return values(CeilingOptions, self)
