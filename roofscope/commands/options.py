"""Options shared by the commands that analyze: the ceilings and roofline thresholds
(roofscope/config.py declares them; clickopts.ceiling_options makes their flags), carried by
analyze, report, diff, merge and run alike."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roofscope.config import CeilingOverrides, RooflineThresholds, values


@dataclass(kw_only=True)
class CeilingOptions(CeilingOverrides, RooflineThresholds):
    force: bool = False

    def ceiling_options(self) -> dict[str, Any]:
        """These options under their own names, to hand them to another command's options."""
        return values(CeilingOptions, self)
