"""What the gate keeps of one run, and the baseline file that stores it.

A :class:`Snapshot` holds a run's device, software versions, ceilings, throttling, the
per-step samples of every gate metric and the per-step kernel table of the diff
(``analyzers.diff.per_step_kernels``). The run being gated and its baseline are both
snapshots, so they compare field by field, and a baseline needs no trace to explain
a regression kernel by kernel.

The baseline file is JSON (``format: roofscope-gate-baseline``, ``version`` 1), indented to
be read and reviewed in a pull request: headline metrics, per-metric samples and medians,
and the top :data:`KERNELS_KEPT` kernels by time per step.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from roofscope.analysis import run
from roofscope.analyzers.compare.comparable import refuse_cut_short
from roofscope.analyzers.compare.diff import per_step_kernels
from roofscope.analyzers.model.result import Result
from roofscope.analyzers.model.summary import Metrics
from roofscope.errors import RoofscopeError
from roofscope.gate.schema import validate
from roofscope.gate.thresholds import metric, metrics_for
from roofscope.jsonsafe import json_safe
from roofscope.run import is_run_dir
from roofscope.run.schema import check_version
from roofscope.run.telemetry import THROTTLE_REASONS
from roofscope.version import __version__

FORMAT = "roofscope-gate-baseline"
VERSION = 1
KERNELS_KEPT = 200
ENVIRONMENT_KEYS = ("roofscope", "torch", "cuda", "python")
KERNEL_COLUMNS = ("calls", "time_s", "cls", "category")
# The metrics whose samples are a Run's unprofiled steps where it measured them
# (views/programtime.program_samples): step time and the utilizations over it. The rest (GPU idle,
# regions) are the profiled steps', whose number --active sets.
UNPROFILED_METRICS = frozenset(("step_time", "mfu", "hfu", "mbu"))
_NUMBER_LIST = re.compile(r"\[\s*((?:-?[0-9][0-9.eE+-]*|null)(?:,\s*(?:-?[0-9][0-9.eE+-]*|null))*)\s*\]")


class GateInputError(RoofscopeError):
    """A run the gate cannot use, or a baseline file it cannot read."""


@dataclass
class Snapshot:
    """One run as the gate sees it (see the module docstring); a baseline file holds one."""

    source: str
    device: str | None
    environment: dict[str, str | None]
    ceilings: dict[str, Any]                 # source, device, peak_roof, peak_flops, bandwidth, peaks
    steps: list[int]
    samples: dict[str, np.ndarray]           # metric name -> one value per step (NaN unknown)
    metrics: Metrics                         # the summary's headline figures
    throttle_reasons: list[str]              # telemetry throttle reasons seen while profiling
    kernels: pd.DataFrame                    # per_step_kernels(): index name; calls, time_s, cls, category
    kernels_total: int                       # distinct kernels in the run (kernels may keep fewer)
    created: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    # Whose time the step-time and utilization samples are: "unprofiled" (the program's own, measured
    # without the profiler: programtime.py) or "profiled" (an older Run, a bare trace)
    time_source: str = "profiled"
    cut_short: str | None = None             # the trace was cut short (TraceMeta.cut_short): what its reader said

    def median(self, name: str) -> float | None:
        v = self.samples.get(name)
        v = v[~np.isnan(v)] if v is not None else None
        return float(np.median(v)) if v is not None and len(v) else None

    def unprofiled(self, name: str) -> bool:
        """Whether metric ``name``'s samples are steps run without the profiler (not --active's)."""
        return self.time_source == "unprofiled" and name in UNPROFILED_METRICS

    def implausible(self) -> str | None:
        """Why a sample is no measurement (negative, infinite, past a day or a thousandfold share), or None."""
        return implausible(self.samples)

    @property
    def kernel_cutoff_s(self) -> float | None:
        """Time per step of the smallest kernel kept, when kernels were dropped; smaller ones are unknown."""
        if len(self.kernels) >= self.kernels_total or not len(self.kernels):
            return None
        return float(self.kernels["time_s"].min())

    @classmethod
    def from_result(cls, result: "Result", source: str | os.PathLike | None = None, *,
                    allow_partial: bool = False) -> "Snapshot":
        """``result``'s snapshot; a trace cut short is refused (exit 2) unless ``allow_partial``."""
        samples = result.step_samples
        # Step time and utilizations in the program's own time where the Run measured it (a sample
        # per unprofiled step: many more than the profiled ones); the rest from the profiled steps.
        own, time_source = (result.program_samples, result.time_source)
        where = str(source if source is not None else result.trace.path)
        cut = result.trace.meta.cut_short
        refuse_cut_short(where, cut, allow_partial)
        if not len(samples):
            raise GateInputError(f"{where}: no profiled steps (ProfilerStep#N spans); the gate compares per-step"
                                 " samples: profile with `roofscope run` or a torch.profiler schedule")
        s = result.summary
        m = s.metrics
        env = (result.run_meta or {}).get("environment") or {}
        devices = s.telemetry.devices if s.telemetry is not None else []
        reasons = sorted({r for d in devices for r, share in (d.throttle or {}).items()
                          if r in THROTTLE_REASONS and share})
        kernels = per_step_kernels(result).sort_values("time_s", ascending=False, kind="stable")
        return cls(source=where, device=s.device,
                   environment={k: env.get(k) for k in ENVIRONMENT_KEYS},
                   ceilings={"source": result.ceilings.source, "device": result.ceilings.device,
                             "peak_roof": m.peak_roof, "peak_flops": m.peak_flops, "bandwidth": m.bandwidth,
                             "peaks": dict(result.ceilings.peaks)},
                   steps=[int(i) for i in samples.index],
                   samples={mt.name: (own if mt.column in own else samples)[mt.column].to_numpy(dtype=np.float64)
                            for mt in metrics_for(samples.columns)},
                   metrics=m, throttle_reasons=reasons,
                   kernels=kernels[list(KERNEL_COLUMNS)], kernels_total=int(len(kernels)),
                   time_source=time_source, cut_short=cut)

    def to_dict(self, kernels_kept: int = KERNELS_KEPT) -> dict[str, Any]:
        k = self.kernels.head(kernels_kept)
        metrics = {}
        for name, values in self.samples.items():
            mt = metric(name)
            metrics[name] = {"label": mt.label, "unit": mt.unit, "higher_is_better": mt.higher_is_better,
                             "median": self.median(name), "samples": [float(v) for v in values]}
        return json_safe({
            "format": FORMAT, "version": VERSION, "roofscope_version": __version__, "created": self.created,
            "source": self.source, "device": self.device, "environment": self.environment,
            "ceilings": self.ceilings, "steps": self.steps, "time_source": self.time_source,
            **({"cut_short": self.cut_short} if self.cut_short else {}),
            "throttle_reasons": self.throttle_reasons,
            "metrics": metrics, "summary_metrics": self.metrics.to_dict(),
            "kernels": {"kept": int(len(k)), "total": self.kernels_total,
                        "rows": k.rename_axis("name").reset_index().to_dict("records")},
        })

    def to_json(self, kernels_kept: int = KERNELS_KEPT) -> str:
        text = json.dumps(self.to_dict(kernels_kept), indent=1, allow_nan=False)
        # Lists of plain numbers (samples, steps) on one line each: a reviewer reads them across.
        return _NUMBER_LIST.sub(lambda m: "[" + ", ".join(v.strip() for v in m.group(1).split(",")) + "]", text) + "\n"

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "baseline") -> "Snapshot":
        """A baseline file's document; a :class:`GateInputError` (exit 2, one line) names what is wrong
        with a corrupt one, as a corrupt baseline must never read as a regression (exit 1) or a pass."""
        import msgspec

        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise GateInputError(f"{where}: not a roofscope gate baseline (write one with"
                                 " `roofscope gate --write-baseline RUN BASELINE.json`)")
        check_version(d.get("version"), VERSION, "baseline", where, key="version", error=GateInputError)
        try:
            doc = validate(d)
            for name in doc.metrics:
                metric(name)
            summary = Metrics.from_dict(doc.summary_metrics)
        except (msgspec.ValidationError, TypeError, ValueError, RoofscopeError) as e:
            raise GateInputError(f"{where}: malformed baseline ({e})") from None
        samples = {name: np.array([math.nan if v is None else v for v in entry.samples], dtype=np.float64)
                   for name, entry in doc.metrics.items()}
        why = implausible(samples)
        if why:
            raise GateInputError(f"{where}: malformed baseline ({why})")
        if not any(np.isfinite(v).any() for v in samples.values()):
            raise GateInputError(f"{where}: the baseline holds no samples (every metric's are empty or null):"
                                 " nothing to compare with; write it again with `roofscope gate --write-baseline`")
        rows = doc.kernels.rows
        kernels = pd.DataFrame({"calls": [r.calls for r in rows], "time_s": [r.time_s for r in rows],
                                "cls": [r.cls for r in rows], "category": [r.category for r in rows]},
                               index=pd.Index([r.name for r in rows], name="name"), columns=list(KERNEL_COLUMNS))
        return cls(source=str(doc.source), device=doc.device,
                   environment={k: doc.environment.get(k) for k in ENVIRONMENT_KEYS},
                   ceilings=msgspec.structs.asdict(doc.ceilings), steps=list(doc.steps), samples=samples,
                   metrics=summary, throttle_reasons=list(doc.throttle_reasons), kernels=kernels,
                   kernels_total=doc.kernels.total if doc.kernels.total is not None else len(rows),
                   created=str(doc.created), time_source=doc.time_source, cut_short=doc.cut_short)


def implausible(samples: dict[str, np.ndarray]) -> str | None:
    """Why a sample of ``samples`` (metric name -> values) is no measurement, or None."""
    return next(filter(None, (metric(name).implausible(v) for name, v in samples.items())), None)


def _read_json(p: Path) -> Any:
    if not p.is_file():
        raise GateInputError(f"{p}: no such baseline file" if not p.exists() else f"{p}: not a file")
    try:
        return json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise GateInputError(f"{p}: not readable as JSON ({e})") from None


def load_baseline(path: str | os.PathLike) -> Snapshot:
    """Read a baseline file written by :func:`roofscope.gate.write_baseline`."""
    p = Path(path)
    return Snapshot.from_dict(_read_json(p), where=str(p))


def snapshot_of(source: "str | os.PathLike | Snapshot | Result", *, baseline: bool = False,
                allow_partial: bool = False) -> Snapshot:
    """A snapshot of ``source``: a Snapshot, a Result, a Run directory or a trace, or (with ``baseline``)
    a baseline file: a plain ``.json`` file that is not a Kineto trace. A trace cut short, or a baseline
    written from one, is refused unless ``allow_partial``."""
    if isinstance(source, Result):
        return Snapshot.from_result(source, allow_partial=allow_partial)
    if isinstance(source, Snapshot):
        snap, where = source, source.source
    elif not isinstance(source, (str, os.PathLike)):
        raise GateInputError(f"{type(source).__name__}: expected a Run directory, a trace, a baseline file, a Result"
                             " or a Snapshot")
    else:
        p = Path(source)
        doc = _read_json(p) if baseline and not is_run_dir(p) and p.suffix != ".gz" else {"traceEvents": None}
        if isinstance(doc, dict) and "traceEvents" in doc:
            return Snapshot.from_result(run(p), source=p, allow_partial=allow_partial)
        snap = Snapshot.from_dict(doc, where=str(p))
        where = f"baseline {p} (of {snap.source})"
    refuse_cut_short(where, snap.cut_short, allow_partial)
    return snap
