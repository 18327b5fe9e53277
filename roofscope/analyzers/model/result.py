"""The Result: one trace placed on one device's roofline, everything its readers need, computed once.

roofscope/analysis.py builds it eagerly, stage by stage; every renderer, ``diff``, the gate and
the job read it and compute nothing of their own. ``to_dict()`` *is* summary.json: the typed
:class:`~roofscope.analyzers.model.summary.Summary` holds the headline figures in their written order, and
the frames beside it hold what the reports draw (kernels, steps, per-step samples, the timeline).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from roofscope.analyzers.model import kernels as kf
from roofscope.analyzers.model.kernels import RooflineParams
from roofscope.analyzers.model.summary import Summary

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.analyzers.model.findings import Diagnosis
    from roofscope.analyzers.model.timeline import Timeline
    from roofscope.analyzers.model.trace import Trace
    from roofscope.hardware.ceilings import Ceilings
    from roofscope.run.telemetry import Telemetry


@dataclass(frozen=True, eq=False)
class Result:
    """What :func:`roofscope.analysis.run` made of a trace or a Run (module docstring).

    ``kernels`` holds one row per GPU activity (kernel, memcpy, memset) with its cost, roofline
    placement and class (analyzers/model/kernels.py lists the columns); for a CPU-only trace, one row per
    costed CPU op without costed children (``device == "cpu"``).
    """

    summary: Summary
    trace: Trace
    ceilings: Ceilings
    params: RooflineParams
    kernels: pd.DataFrame
    cpu_only: bool
    steps: pd.DataFrame               # one row per profiled step, measured on the GPU (views/metrics.step_table)
    complete_steps: tuple[int, ...]   # the steps that ran to their end: what per-step figures use
    step_samples: pd.DataFrame        # per complete step: time, FLOPs, bytes, HFU/MFU/MBU, busy, regions
    program_samples: pd.DataFrame     # what diff and the gate compare: unprofiled steps where measured
    time_source: str                  # "unprofiled" or "profiled": where program_samples come from
    timeline: Timeline
    diagnosis: Diagnosis
    phases: pd.DataFrame              # per training phase (views/phases.phase_table)
    window_unix_ns: tuple[int | None, int | None]   # the profiled steps in Unix time, when the trace has a clock
    run_meta: dict[str, Any] | None = None   # run.json of the Run this came from, if any
    telemetry: Telemetry | None = None

    def to_dict(self) -> dict[str, Any]:
        """summary.json's content (NaN kept: writers pass it through json_safe)."""
        return self.summary.to_dict()

    def by_kernel(self) -> pd.DataFrame:
        return kf.aggregate(self.kernels, "name")

    def by_op(self) -> pd.DataFrame:
        return kf.by_op(self.kernels)

    def by_class(self) -> pd.DataFrame:
        return kf.by_class(self.kernels)

    def by_category(self) -> pd.DataFrame:
        return kf.aggregate(self.kernels, "category")

    def by_step(self) -> pd.DataFrame:
        return kf.by_step(self.kernels)

    def by_region(self) -> pd.DataFrame:
        return kf.by_region(self.kernels)

    def by_module(self, depth: int | None = None) -> pd.DataFrame:
        return kf.by_module(self.kernels, depth)
