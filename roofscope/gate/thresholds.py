"""The gate's metrics and the limits set on them.

Metrics are columns of ``Result.step_samples``: step time, MFU, HFU, MBU, GPU idle
fraction, and the seconds each region covers per step. A *regression limit* bounds how
much worse the run's median may be than the baseline's:

* ``5%``: relative to the baseline (MFU 0.40 -> 0.38 is 5 % worse; step time 10 -> 10.5 ms too);
* ``2pp``: percentage points, for fractions (idle 0.03 -> 0.05 is 2 pp worse);
* ``1.5ms`` / ``200us`` / ``0.01s``: absolute time, for step and region times;
* ``off``: not checked.

``--max-regression`` takes ``KEY=LIMIT`` pairs separated by commas, where KEY is a metric
name, ``region:NAME`` or ``region:*`` (every region without its own limit). Keys not given
keep :data:`DEFAULT_LIMITS`. An *absolute bound* (``--min-mfu 35%``, ``--max-step-time 120ms``)
needs no baseline; shares are written as in the limits (``35%``; ``0.35`` reads the same).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np

from roofscope.errors import RoofscopeError

REGION_PREFIX = "region:"
ALL_REGIONS = "region:*"
# The largest plausible sample of each kind of metric; a larger one is no measurement. No profiled
# step lasts a day (the profiler's buffers would not hold it). Utilizations above 100% do happen,
# against stale ceilings or for data in a cache faster than the memory roof (a CPU's L1 is some
# 50-100x its DRAM), but not a thousandfold.
MAX_TIME_S = 86_400.0
MAX_UTILIZATION = 1_000.0


class ThresholdError(RoofscopeError):
    """A limit or bound that does not parse or does not fit its metric."""


@dataclass(frozen=True)
class Metric:
    name: str                 # as written in limits: step_time, mfu, region:decode
    column: str               # its column in Result.step_samples
    higher_is_better: bool
    unit: str                 # "s" (times) or "fraction"
    label: str
    most: float = MAX_TIME_S  # the largest plausible sample (the least is 0)

    @property
    def is_time(self) -> bool:
        return self.unit == "s"

    def format(self, value: float | None) -> str:
        if value is None or math.isnan(value):
            return "-"
        return f"{value * 1e3:,.3f} ms" if self.is_time else f"{100 * value:.2f}%"

    def implausible(self, values: np.ndarray) -> str | None:
        """Why some of ``values`` (NaN: unknown, allowed) are no measurement of this metric, or None."""
        # A nanosecond or a billionth either side is rounding (an idle share of 1 - busy / wall).
        bad = values[~np.isnan(values) & ((values < -1e-9) | ~(values <= self.most + 1e-9))]
        if not len(bad):
            return None
        v = float(bad[0])
        head = f"a sample of {self.name} is"
        if v < 0:
            return f"{head} a negative {'time' if self.is_time else 'share'} ({v:.4g})"
        if math.isinf(v):
            return f"{head} infinite"
        if self.is_time:
            return f"{head} {v:.4g} s: no profiled step lasts a day"
        return f"{head} {v:.4g}: no {self.label} exceeds {self.format(self.most)}, not even on stale ceilings"


CORE_METRICS: tuple[Metric, ...] = (
    Metric("step_time", "step_time_s", False, "s", "step time"),
    Metric("mfu", "mfu", True, "fraction", "MFU", MAX_UTILIZATION),
    Metric("hfu", "hfu", True, "fraction", "HFU", MAX_UTILIZATION),
    Metric("mbu", "mbu", True, "fraction", "MBU", MAX_UTILIZATION),
    Metric("idle_fraction", "idle_fraction", False, "fraction", "GPU idle", 1.0),
)
_CORE = {m.name: m for m in CORE_METRICS}


def metric(name: str) -> Metric:
    """The metric named ``name`` (``region:NAME`` for a region); :class:`ThresholdError` if unknown."""
    if name in _CORE:
        return _CORE[name]
    if name.startswith(REGION_PREFIX) and len(name) > len(REGION_PREFIX):
        region = name[len(REGION_PREFIX):]
        return Metric(name, name, False, "s", f"region {region}")
    raise ThresholdError(f"unknown metric {name!r}; known: {', '.join(_CORE)}, region:NAME, region:*")


def metrics_for(columns: Iterable[str]) -> list[Metric]:
    """The gate's metrics among step-sample ``columns``: the core ones, then regions by name."""
    cols = list(columns)
    regions = sorted(c for c in cols if c.startswith(REGION_PREFIX))
    return [m for m in CORE_METRICS if m.column in cols] + [metric(c) for c in regions]


@dataclass(frozen=True)
class Limit:
    """How much worse than the baseline a metric may get."""

    value: float      # a share of the baseline when relative, else seconds or a fraction
    relative: bool
    text: str         # normalized spelling: 5%, 2pp, 1.5ms

    def exceeded_by(self, base: float, run: float, m: Metric) -> tuple[float, bool]:
        """(how much worse the run is, in this limit's terms; whether that is past the limit)."""
        worse = (base - run) if m.higher_is_better else (run - base)
        if self.relative:
            worse = worse / abs(base) if base else (math.inf if worse > 0 else 0.0)
        return worse, worse > self.value


DEFAULT_LIMITS: dict[str, Limit] = {
    "step_time": Limit(0.05, True, "5%"),
    "mfu": Limit(0.05, True, "5%"),
    "hfu": Limit(0.05, True, "5%"),
    "mbu": Limit(0.05, True, "5%"),
    # Idle is often a few percent of the step: relative changes of it are mostly noise.
    "idle_fraction": Limit(0.05, False, "5pp"),
    # Regions are shorter than steps, so relatively noisier.
    ALL_REGIONS: Limit(0.10, True, "10%"),
}

_LIMIT = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(%|pp|ms|us|µs|s)\s*$")
_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}


def parse_limit(key: str, text: str) -> Limit | None:
    """One ``LIMIT`` for metric ``key`` (``None`` for ``off``)."""
    m_ = metric(key)  # region:* parses as a region: a time
    if text.strip().lower() == "off":
        return None
    match = _LIMIT.match(text)
    if not match:
        raise ThresholdError(f"--max-regression {key}={text}: expected a number with %, pp, ms, us or s, or off")
    number, unit = float(match.group(1)), match.group(2)
    if unit == "%":
        return Limit(number / 100.0, True, f"{number:g}%")
    if unit == "pp":
        if m_.is_time:
            raise ThresholdError(f"--max-regression {key}={text}: pp (percentage points) is for fractions;"
                                 f" use % or a time such as 2ms")
        return Limit(number / 100.0, False, f"{number:g}pp")
    if not m_.is_time:
        raise ThresholdError(f"--max-regression {key}={text}: {key} is a fraction; use % or pp")
    return Limit(number * _TIME_UNITS[unit], False, f"{number:g}{'us' if unit == 'µs' else unit}")


def parse_limits(spec: str | Iterable[str] | Mapping[str, str | Limit | None] | None) -> dict[str, Limit | None]:
    """:data:`DEFAULT_LIMITS` updated by ``spec``: ``"mfu=5%,region:decode=10%"``, several such
    strings, or a mapping of keys to limit strings, :class:`Limit` objects or None (off)."""
    limits: dict[str, Limit | None] = dict(DEFAULT_LIMITS)
    if spec is None:
        return limits
    if isinstance(spec, Mapping):
        for key, value in spec.items():
            metric(key)
            limits[key] = value if value is None or isinstance(value, Limit) else parse_limit(key, str(value))
        return limits
    for text in [spec] if isinstance(spec, str) else spec:
        for item in filter(None, (part.strip() for part in text.split(","))):
            key, sep, value = item.partition("=")
            if not sep or not key.strip() or not value.strip():
                raise ThresholdError(f"--max-regression {item!r}: expected KEY=LIMIT such as mfu=5% or step_time=2ms")
            limits[key.strip()] = parse_limit(key.strip(), value)
    return limits


def limit_for(m: Metric, limits: Mapping[str, Limit | None]) -> Limit | None:
    if m.name in limits:
        return limits[m.name]
    return limits.get(ALL_REGIONS) if m.name.startswith(REGION_PREFIX) else None


@dataclass(frozen=True)
class Bound:
    """An absolute bound on the run's median: a floor for higher-is-better metrics, else a ceiling."""

    metric: Metric
    value: float

    @property
    def text(self) -> str:
        return f"{'>=' if self.metric.higher_is_better else '<='} {self.metric.format(self.value)}"

    def violated(self, run: float) -> bool:
        return run < self.value if self.metric.higher_is_better else run > self.value


_SHARE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(%?)\s*$")
_TIME = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|us|µs|s)\s*$")


def parse_share(option: str, value: float | str) -> float:
    """A share as the gate's options take it, in the limits' terms: ``35%``, or a fraction ``0.35``."""
    if isinstance(value, (int, float)):
        number, percent = float(value), False
    else:
        m = _SHARE.match(value)
        if not m:
            raise ThresholdError(f"{option} {value}: expected a percentage such as 35% (or a fraction such as 0.35)")
        number, percent = float(m.group(1)), bool(m.group(2))
    share = number / 100.0 if percent else number
    if not 0.0 <= share <= 1.0:
        raise ThresholdError(f"{option} {value}: expected a share between 0% and 100% (35% or 0.35)")
    return share


def parse_time(option: str, value: float | str, shown: object = None) -> float:
    """Seconds from ``120ms``, ``0.12s``, ``500us`` (a bare number is seconds; errors quote ``shown``
    when given, the value as the user wrote it)."""
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        m = _TIME.match(value)
        if not m:
            raise ThresholdError(f"{option} {value}: expected a time with its unit, such as 120ms, 0.12s or 500us")
        seconds = float(m.group(1)) * _TIME_UNITS[m.group(2)]
    # An infinite bound (or one past any step's length) would pass every run: it checks nothing.
    if not 0 < seconds <= MAX_TIME_S:
        written = value if shown is None else shown
        raise ThresholdError(f"{option} {written}: expected a positive time of at most a day"
                             + (" (an infinite bound would pass every run)" if math.isinf(seconds) else ""))
    return seconds


def bounds(min_mfu: float | str | None = None, min_hfu: float | str | None = None,
           min_mbu: float | str | None = None, max_step_time_ms: float | None = None,
           max_idle_fraction: float | str | None = None, max_step_time: float | str | None = None) -> list[Bound]:
    """The absolute bounds given: shares as ``35%`` or ``0.35``, the step time as ``120ms`` (or
    seconds; ``max_step_time_ms`` is the older spelling in milliseconds)."""
    out = []
    for name, value, option in (("mfu", min_mfu, "--min-mfu"), ("hfu", min_hfu, "--min-hfu"),
                                ("mbu", min_mbu, "--min-mbu"), ("idle_fraction", max_idle_fraction, "--max-idle")):
        if value is not None:
            out.append(Bound(_CORE[name], parse_share(option, value)))
    if max_step_time is not None and max_step_time_ms is not None:
        raise ThresholdError("--max-step-time and --max-step-time-ms are one bound: give one of them")
    if max_step_time is not None:
        out.append(Bound(_CORE["step_time"], parse_time("--max-step-time", max_step_time)))
    elif max_step_time_ms is not None:
        ms = float(max_step_time_ms)
        out.append(Bound(_CORE["step_time"], parse_time("--max-step-time-ms", ms / 1e3, shown=f"{ms:g}")))
    return out
