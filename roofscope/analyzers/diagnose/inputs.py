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
from roofscope.run import typed_meta
from roofscope.run.schema import Optimizer, RunMeta, Steps


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
class CpuFacts:
    """run.json's ``cpu`` (collectors/metadata.cpu_facts): the cores the process could run on, torch's
    threads, the machine's load, and the process's clocks over the profiled steps."""

    cores: int | None = None           # os.cpu_count()
    affinity: int | None = None        # the cores this process may run on (sched_getaffinity)
    threads: int | None = None         # torch.get_num_threads()
    load1: float | None = None         # the 1-minute load average as the session ended
    wall_s: float | None = None        # the window's wall time ...
    cpu_s: float | None = None         # ... the process's CPU time in it (every thread, user + system)
    run_delay_s: float | None = None   # ... and the time its threads waited, runnable, for a core
    switches: int | None = None        # involuntary context switches in the window
    env: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> CpuFacts:
        w = d.get("window") or {}
        load = d.get("load_avg") or [None]
        return cls(cores=d.get("cores"), affinity=d.get("affinity"), threads=d.get("torch_threads"), load1=load[0],
                   wall_s=w.get("wall_s"), cpu_s=w.get("cpu_s"), run_delay_s=w.get("run_delay_s"),
                   switches=w.get("involuntary_switches"), env=tuple(sorted((d.get("env") or {}).items())))

    @property
    def busy_cores(self) -> float | None:
        """Cores' worth of CPU the process got over the window, on average (its CPU time per wall second);
        None without its clocks (not Linux)."""
        return self.cpu_s / self.wall_s if self.cpu_s and self.wall_s else None

    @property
    def cores_free(self) -> float | None:
        """Cores left to this process: those it may use less the machine's other load (the load
        average less this process's own runnable threads over the window)."""
        if self.affinity is None or self.load1 is None:
            return None
        own = (self.cpu_s + (self.run_delay_s or 0.0)) / self.wall_s if self.wall_s and self.cpu_s is not None else 0.0
        other = max(0.0, self.load1 - own)
        return max(0.0, min(float(self.affinity), float(self.cores or self.affinity) - other))


@dataclass(frozen=True)
class ProgramMeta:
    """run.json's ``program`` (collectors/steps.StepHooks.facts) and the step source: what the program
    calls, so fixes name what it has."""

    root_module: str = ""              # the outermost module's class ("GPT2LMHeadModel")
    root_package: str = ""             # the package defining it ("transformers", "__main__")
    root_owner: str = ""               # the class of the module holding it, whose forward the steps never ran
    root_attr: str = ""                # the attribute the holder holds it by ("model" in self.model)
    wrappers: tuple[str, ...] = ()     # around it: "OptimizedModule" (torch.compile), "DistributedDataParallel"
    forwards: int | None = None        # its forwards over the whole run
    generate_calls: int | None = None  # its generate() calls (Hugging Face); None when not recorded
    backends: Mapping[str, Any] = field(default_factory=dict)   # cudnn_benchmark, float32_matmul_precision
    step_source: str = ""              # what ended the steps: optimizer, forward, generate, explicit, function
    step_on: str = ""                  # --step-on (or the looped function adopted): "__main__.train_step"
    boundaries: int | None = None      # step boundaries seen
    rearmed: str = ""

    @classmethod
    def of(cls, run: RunMeta) -> ProgramMeta:
        p, st = run.program or {}, run.steps or Steps()
        return cls(root_module=p.get("root_module") or "", root_package=p.get("root_package") or "",
                   root_owner=p.get("root_owner") or "", root_attr=p.get("root_attr") or "",
                   wrappers=tuple(p.get("wrappers") or ()), forwards=p.get("forwards"),
                   generate_calls=p.get("generate_calls") if "generate_calls" in p else None,
                   backends=p.get("backends") or {}, step_source=st.source or "",
                   step_on=st.step_on or "", boundaries=st.boundaries_seen, rearmed=st.rearmed or "")


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
    # The unprofiled steps' 90th percentile over their 10th: how steady the machine ran them.
    unprofiled_spread: float | None = None
    program: ProgramMeta = field(default_factory=ProgramMeta)
    cpu: CpuFacts | None = None

    @classmethod
    def of(cls, run: RunMeta | Mapping[str, Any] | None, step_time: Mapping[str, Any] | None = None) -> RunFacts:
        """From run.json, typed (``run``; a dict of its fields is typed first), and the step time derived
        from it."""
        own = step_time or {}
        p10, p90 = own.get("unprofiled_p10_s"), own.get("unprofiled_p90_s")
        times = {"unprofiled_step_s": own.get("unprofiled_median_s"), "decode_step_s": own.get("decode_median_s"),
                 "unprofiled_spread": p90 / p10 if p10 and p90 else None}
        if isinstance(run, Mapping):
            run = typed_meta(run)
        if run is None:
            return cls(**times)
        return cls(frameworks=tuple(run.frameworks) if run.frameworks is not None else None,
                   optimizer=OptimizerFacts.of(run.optimizer) if run.optimizer is not None else None,
                   program=ProgramMeta.of(run), cpu=CpuFacts.of(run.cpu) if run.cpu else None, **times)


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
    cpu_only: bool = False       # CPU ops as kernels: the CPU rules run (cpu.py)
    gpu_job: str = ""            # a CPU-only trace of a GPU job: what says so (ingest/gpujob.py); no rule runs
    inference: dict[str, Any] | None = None   # analyzers/views/inference.py's block; None when no step decodes
    telemetry: dict[str, Any] | None = None   # NVML telemetry summary; None without telemetry
    # One row per NCCL kernel of the profiled steps (analyzers/views/collectives.py kernel_collectives);
    # None when no kernel communicates.
    collectives: pd.DataFrame | None = None


__all__ = ["CpuFacts", "DiagnosisInput", "OptimizerFacts", "ProgramMeta", "RunFacts"]
