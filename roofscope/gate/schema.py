"""The baseline file's structure, typed: a hand-edited or corrupt baseline is refused in one
line naming the first bad field (``$.kernels.rows[3].time_s``) before any of it is used.
Unknown keys are kept out (a newer minor writer may add some); missing optional keys default."""
from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

Count = Annotated[float, msgspec.Meta(ge=0)]   # calls and seconds per step: never negative


class _Doc(msgspec.Struct, kw_only=True):
    pass


class MetricEntry(_Doc, kw_only=True):
    samples: list[float | None]          # one per step; null: unknown in that step
    label: str | None = None
    unit: str | None = None
    higher_is_better: bool | None = None
    median: float | None = None


class KernelRow(_Doc, kw_only=True):
    name: str
    calls: Count
    time_s: Count
    cls: str | None = None
    category: str | None = None


class KernelTable(_Doc, kw_only=True):
    rows: list[KernelRow]
    kept: int | None = None
    total: int | None = None


class CeilingsEntry(_Doc, kw_only=True):
    source: str | None = None
    device: str | None = None
    peak_roof: str | None = None
    peak_flops: float | None = None
    bandwidth: float | None = None
    peaks: dict[str, float | None] = {}   # every precision's peak: MFU on the baseline's ceilings


class BaselineDoc(_Doc, kw_only=True):
    format: str
    version: int
    roofscope_version: str | None = None
    created: str | None = None
    source: str | None = None
    device: str | None = None
    environment: dict[str, str | None] = {}
    ceilings: CeilingsEntry = msgspec.field(default_factory=CeilingsEntry)
    steps: list[int] = []
    time_source: Literal["unprofiled", "profiled"] = "profiled"   # baselines before it: profiled
    cut_short: str | None = None         # written from a trace cut short (--allow-partial): its reader's reason
    throttle_reasons: list[str] = []
    metrics: dict[str, MetricEntry]
    summary_metrics: dict[str, Any] = {}
    kernels: KernelTable


class SummaryRead(_Doc, kw_only=True):
    """The headline figures the gate reads (the rest of ``summary_metrics`` is kept as written)."""

    mfu_source: str | None = None
    throttled_fraction: float | None = None


class _SummaryCheck(_Doc, kw_only=True):
    summary_metrics: SummaryRead = msgspec.field(default_factory=SummaryRead)


def validate(doc: Any) -> BaselineDoc:
    """``doc`` as a :class:`BaselineDoc`; ``msgspec.ValidationError`` names the first bad field."""
    msgspec.convert(doc, _SummaryCheck)
    return msgspec.convert(doc, BaselineDoc)
