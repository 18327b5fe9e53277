"""What the rules may read, and nothing else: :class:`DiagnosisInput`.

The orchestrator (analysis.py) builds it once from the pipeline's frames; a rule never reaches
back into the analysis that made them, so a rule's test needs only the frames it reads. The
engine (base.py) derives from it what every rule shares: the profiled kernels, the step's terms,
the share of the step the GPU is not starved (:class:`~roofscope.analyzers.diagnose.base.Context`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import pandas as pd

from roofscope.analyzers.model.trace import Trace
from roofscope.analyzers.place.roofline import RooflineParams
from roofscope.analyzers.views.timeline import Timeline
from roofscope.hardware.devices import Ceilings
from roofscope.run.schema import Optimizer, RunMeta


@dataclass(frozen=True)
class OptimizerFacts:
    """run.json's ``optimizer`` (collectors/session.py): the first optimizer the program stepped."""

    cls: str = ""                # its class name ("AdamW"); "" when unknown
    tensors: int | None = None   # parameter tensors it updates
    fused: bool = False
    foreach: bool = False

    @classmethod
    def of(cls, facts: Optimizer) -> OptimizerFacts:
        return cls(cls=facts.cls or "", tensors=facts.tensors, fused=bool(facts.fused), foreach=bool(facts.foreach))


@dataclass(frozen=True)
class RunFacts:
    """What the rules read of the Run the trace came from; a bare trace has none (the defaults)."""

    # Training frameworks loaded in the profiled process (collectors/frameworks.py); None when
    # run.json does not say (a bare trace, an older Run): then the trace's names decide alone.
    frameworks: tuple[str, ...] | None = None
    optimizer: OptimizerFacts | None = None
    # The program's own step time, without the profiler (analyzers/views/programtime.py's step_time): every
    # steady step's median, and the decode tokens' median when the steps were forward passes.
    unprofiled_step_s: float | None = None
    decode_step_s: float | None = None

    @classmethod
    def of(cls, run: RunMeta | None, step_time: Mapping[str, Any] | None = None) -> RunFacts:
        """From run.json, typed (``run``), and the step time derived from it."""
        own = step_time or {}
        return cls(frameworks=tuple(run.frameworks) if run is not None and run.frameworks is not None else None,
                   optimizer=OptimizerFacts.of(run.optimizer) if run is not None and run.optimizer is not None else None,
                   unprofiled_step_s=own.get("unprofiled_median_s"), decode_step_s=own.get("decode_median_s"))


@dataclass(frozen=True, eq=False)   # eq=False: frames do not compare to a bool, nor hash
class DiagnosisInput:
    """Everything a rule may read. Frames are shared with the analysis, not copied: read them only."""

    trace: Trace                 # ops, runtime calls, signatures, annotations, meta (blockers, shapes, idle)
    kernels: pd.DataFrame        # every placed kernel (the engine keeps those of the profiled steps: Context)
    steps: pd.DataFrame          # one row per recorded step (analyzers/views/metrics.py step_table)
    timeline: Timeline           # per-step busy/idle, idle gaps, host syncs, copies, capture steps
    ceilings: Ceilings
    params: RooflineParams       # the placement's thresholds (underutilized_below)
    run: RunFacts = field(default_factory=RunFacts)
    cpu_only: bool = False       # CPU ops as kernels: no rule runs
    inference: dict[str, Any] | None = None   # analyzers/views/inference.py's block; None when no step decodes
    telemetry: dict[str, Any] | None = None   # NVML telemetry summary; None without telemetry
    # One row per NCCL kernel of the profiled steps (analyzers/views/collectives.py kernel_collectives);
    # None when no kernel communicates.
    collectives: pd.DataFrame | None = None


__all__ = ["DiagnosisInput", "OptimizerFacts", "RunFacts"]
