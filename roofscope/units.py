"""SI-prefixed numbers for people (3.35e12 B/s -> "3.35 TB/s"): the reports print them, and so do
the microbenchmarks while they measure, which sit below the reports."""
from __future__ import annotations

import math


def si_scale(value: float) -> tuple[float, str]:
    """The SI factor and prefix for ``value``: 3.35e12 -> (1e12, "T")."""
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return factor, prefix
    return 1.0, ""


def si(value: float | None, unit: str = "", digits: int = 3) -> str:
    """3.35e12, "B/s" -> "3.35 TB/s"; NaN -> "-"."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    factor, prefix = si_scale(value)
    return f"{value / factor:.{digits}g} {prefix}{unit}".rstrip()


def ms(seconds: float | None) -> str:
    """Seconds as milliseconds with three decimals ("1,234.567"); "-" when unknown."""
    return "-" if seconds is None or math.isnan(seconds) else f"{seconds * 1e3:,.3f}"
