"""A typed view of summary.json (``Result.to_dict()``): the fields the terminal summary and the gate read.

The summary dict stays the one source of the JSON output, summary.json and the reports that
read it by key; :class:`Summary` is built from it (``Summary.from_dict``,
``Result.summary``) for readers that want attributes instead of string keys.

Every part keeps what it does not type in ``extra``, and the source dict's key order in
``source_keys``, so ``to_dict()`` gives back the very dict it was built from: the same keys in
the same order, typed fields the source lacked left out (a summary.json written by an older
analysis, a gate baseline's metrics), values passed through untouched (NaN stays the same object).
"""
from __future__ import annotations

import types
from dataclasses import dataclass, field, fields
from functools import cache
from typing import Any, Mapping, TypeVar, get_args, get_origin, get_type_hints

# mfu_formula ends with this when MFU was capped at the counted FLOPs (analyzers/views/metrics.py).
CAPPED = ", capped at the counted FLOPs"
P = TypeVar("P", bound="Part")
_OWN = ("extra", "source_keys")


@dataclass(kw_only=True)
class Part:
    """A dict with typed fields for the keys readers use (see the module docstring)."""

    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    source_keys: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_dict(cls: type[P], d: Mapping[str, Any]) -> P:
        if not isinstance(d, Mapping):   # a hand-edited file: TypeError is what dict(d) raised
            raise TypeError(f"{cls.__name__}: expected an object, got {type(d).__name__}")
        kinds = _kinds(cls)
        return cls(**{k: _load(kinds[k], v) for k, v in d.items() if k in kinds},
                   extra={k: v for k, v in d.items() if k not in kinds}, source_keys=tuple(d))

    def to_dict(self) -> dict[str, Any]:
        kinds = _kinds(type(self))
        order = self.source_keys if self.source_keys is not None else (*kinds, *self.extra)
        return {k: _dump(kinds[k], getattr(self, k)) if k in kinds else self.extra[k] for k in order}


# How a field's value is converted: ("plain", None), or a Part type alone ("part"), in a list
# ("list") or as a dict's values ("dict"); None converts to None whatever the kind.
_Kind = tuple[str, Any]


@cache
def _kinds(cls: type[Part]) -> dict[str, _Kind]:
    hints = get_type_hints(cls)
    return {f.name: _kind(hints[f.name]) for f in fields(cls) if f.name not in _OWN}


def _is_part(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, Part)


def _kind(t: Any) -> _Kind:
    if get_origin(t) is types.UnionType:          # T | None
        t = next(a for a in get_args(t) if a is not type(None))
    if _is_part(t):
        return "part", t
    args = get_args(t)
    if get_origin(t) is list and args and _is_part(args[0]):
        return "list", args[0]
    if get_origin(t) is dict and len(args) == 2 and _is_part(args[1]):
        return "dict", args[1]
    return "plain", None


def _load(kind: _Kind, v: Any) -> Any:
    how, part = kind
    if v is None or how == "plain":
        return v
    if how == "part":
        return part.from_dict(v)
    if how == "list":
        return [part.from_dict(x) for x in v]
    return {k: part.from_dict(x) for k, x in v.items()}


def _dump(kind: _Kind, v: Any) -> Any:
    how = kind[0]
    if v is None or how == "plain":
        return v
    if how == "part":
        return v.to_dict()
    if how == "list":
        return [x.to_dict() for x in v]
    return {k: x.to_dict() for k, x in v.items()}


# -- the parts ------------------------------------------------------------------------------------

@dataclass(kw_only=True)
class Metrics(Part):
    """Headline step metrics (analyzers/views/metrics.py), in the order metrics() writes them; None where unknown."""

    step_time_s: float | None = None
    step_time_mean_s: float | None = None
    step_time_min_s: float | None = None
    step_time_max_s: float | None = None
    flops_per_step: float | None = None
    bytes_per_step: float | None = None
    achieved_flops_per_s: float | None = None
    hfu: float | None = None
    mfu: float | None = None
    mbu: float | None = None
    tokens_per_s: float | None = None
    busy_fraction: float | None = None
    idle_fraction: float | None = None
    energy_per_step_j: float | None = None
    energy_per_token_j: float | None = None
    throttled_fraction: float | None = None
    steps: int = 0
    peak_roof: str | None = None
    peak_flops: float | None = None
    bandwidth: float | None = None
    model_flops_per_step: float | None = None
    mfu_source: str | None = None
    mfu_formula: str | None = None
    hfu_source: str | None = None
    tokens_per_step: float | None = None
    regions: dict[str, float | None] = field(default_factory=dict)


@dataclass(kw_only=True)
class ClassTime(Part):
    """One roofline class's kernel time (``time_by_class``)."""

    time_s: float = 0.0
    share: float = 0.0


@dataclass(kw_only=True)
class ReasonTime(Part):
    """Kernel time without a cost for one reason (``unattributed.by_reason``)."""

    time_s: float = 0.0
    share: float = 0.0
    kernels: int = 0


@dataclass(kw_only=True)
class Unattributed(Part):
    share: float = 0.0
    time_s: float = 0.0
    non_communication_time_s: float = 0.0
    by_reason: dict[str, ReasonTime] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class AboveRoofKernel(Part):
    name: str = ""
    efficiency: float = 0.0
    level: str = ""


@dataclass(kw_only=True)
class AboveRoof(Part):
    """Kernels that ran faster than their roof allows (roofline.above_roof)."""

    kernels: int = 0
    calls: int = 0
    time_s: float = 0.0
    top: list[AboveRoofKernel] = field(default_factory=list)


@dataclass(kw_only=True)
class CeilingsBlock(Part):
    """``Ceilings.to_dict()``: the roofs the analysis used."""

    device: str | None = None
    source: str | None = None
    peaks: dict[str, float] = field(default_factory=dict)
    bandwidth: float | None = None
    launch_latency_s: float | None = None
    notes: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class TelemetryDevice(Part):
    """One GPU's NVML figures over the profiled steps (analyzers/views/telemetry_summary.py)."""

    nvml_index: int | None = None
    cuda_index: int | None = None
    samples: int = 0
    sm_clock_mhz: dict[str, float | None] | None = None      # mean, min, max
    sm_clock_ratio: float | None = None
    power_w: dict[str, float | None] | None = None           # mean, max
    energy_per_step_j: float | None = None
    temp_c: float | None = None
    throttle: dict[str, float] | None = None                 # clock-event reason -> share of samples


@dataclass(kw_only=True)
class TelemetryBlock(Part):
    devices: list[TelemetryDevice] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class KernelTime(Part):
    kernels: int = 0
    time_s: float = 0.0


@dataclass(kw_only=True)
class CountersBlock(Part):
    """Coverage and agreement of measured counters (analyzers/place/measured.py), in Runs that have them."""

    kernels: int = 0
    kernels_total: int = 0
    time_share: float | None = None
    tensor_cores_unused: KernelTime = field(default_factory=KernelTime)
    class_agreement: float | None = None
    ncu_version: str | None = None


@dataclass(kw_only=True)
class Fix(Part):
    text: str = ""
    snippet: str = ""
    framework: str = ""
    apply: str = ""     # the fix as roofscope injects it (analyzers/model/findings.APPLY_NAMES), "" for a source edit


@dataclass(kw_only=True)
class Recommendation(Part):
    """One finding as ``model/findings.Finding.to_dict()`` writes it."""

    rule: str = ""
    title: str = ""
    binding: str = ""
    saving_s: float = 0.0
    saving_pct: float = 0.0
    confidence: str = ""
    summary: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)   # kernels, figures
    fix: Fix = field(default_factory=Fix)
    change: str = ""
    rank: int = 0
    status: str = "ok"     # "blocked": a precondition fails (its blockers say which); no saving claimed
    kind: str = "fix"      # "advice": a step that finds out more, saving nothing by itself


@dataclass(kw_only=True)
class SkippedRule(Part):
    rule: str = ""
    reason: str = ""


@dataclass(kw_only=True)
class DiagnosisBlock(Part):
    """``model/findings.Diagnosis.to_dict()``: what binds the step and the rules that did not run."""

    step_s: float = 0.0
    terms_s: dict[str, float] = field(default_factory=dict)
    binding: dict[str, float] = field(default_factory=dict)
    skipped: list[SkippedRule] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)
    frameworks: list[str] = field(default_factory=list)
    capture_steps: list[int] = field(default_factory=list)


@dataclass(kw_only=True)
class Summary(Part):
    """summary.json (analysis.py assembles it), typed where the console and the gate read it."""

    trace: str | None = None
    device: str | None = None
    cpu_only: bool = False
    gpu_job_host_only: str | None = None    # a CPU-only trace of a GPU job: the names that say so
    ceilings: CeilingsBlock = field(default_factory=CeilingsBlock)
    events: int | None = None
    skipped_events: dict[str, Any] = field(default_factory=dict)
    kernels: int = 0
    kernel_time_s: float = 0.0
    communication_time_s: float = 0.0
    total_flops: float = 0.0
    total_bytes: float = 0.0
    time_by_class: dict[str, ClassTime] = field(default_factory=dict)
    untimed_kernels: int = 0
    counter_flops: float = 0.0
    steps: list[int] = field(default_factory=list)
    partial_steps: list[int] = field(default_factory=list)
    unattributed: Unattributed = field(default_factory=Unattributed)
    above_roof: AboveRoof = field(default_factory=AboveRoof)
    distributed: dict[str, Any] | None = None                # the trace's distributedInfo, as recorded
    modules: bool = False
    inference: dict[str, Any] | None = None                  # analyzers/views/inference.py's block
    counters: CountersBlock | None = None
    metrics: Metrics = field(default_factory=Metrics)
    telemetry: TelemetryBlock | None = None
    findings: list[Recommendation] = field(default_factory=list)
    diagnosis: DiagnosisBlock = field(default_factory=DiagnosisBlock)
