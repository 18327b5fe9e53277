"""Diagnosis rules (see base.py for the engine, inputs.py for what rules read, program.py for what the
program is, and docs/diagnosis.md for each rule)."""
from __future__ import annotations

from roofscope.analyzers.diagnose.base import Context, Rule, run_cpu_rules, run_rules
from roofscope.analyzers.diagnose.communication import ExposedCommunication
from roofscope.analyzers.diagnose.cpu import CpuChannelsLast, CpuFusion, CpuThreads
from roofscope.analyzers.diagnose.fusion import ElementwiseFusion, LaunchFusion, UnfusedAttention, UnfusedOptimizer
from roofscope.analyzers.diagnose.hardware import ChannelsLast, SmallGrid, Throttling, Underutilized
from roofscope.analyzers.diagnose.idle import IdleOther
from roofscope.analyzers.diagnose.inference import KvBoundDecode, LaunchBoundDecode, WeightBoundDecode
from roofscope.analyzers.diagnose.inputs import CpuFacts, DiagnosisInput, OptimizerFacts, ProgramMeta, RunFacts
from roofscope.analyzers.diagnose.overhead import CudaGraphs, DataLoaderWorkers, HostCopies, HostSyncs
from roofscope.analyzers.diagnose.precision import Alignment, Tf32, WeightBoundGemm
from roofscope.analyzers.model.findings import Diagnosis, Finding

RULES: list[Rule] = [CudaGraphs(), LaunchFusion(), HostSyncs(), HostCopies(), DataLoaderWorkers(), ElementwiseFusion(),
                     UnfusedAttention(), UnfusedOptimizer(), Tf32(), Alignment(), WeightBoundGemm(), Throttling(),
                     SmallGrid(), ChannelsLast(), Underutilized(), ExposedCommunication(), IdleOther(),
                     WeightBoundDecode(), KvBoundDecode(), LaunchBoundDecode()]
# On a CPU-only trace (its ops are the kernels): threads, layout, fusion, the input pipeline.
CPU_RULES: list[Rule] = [CpuThreads(), CpuChannelsLast(), CpuFusion(), DataLoaderWorkers()]


def diagnose(inp: DiagnosisInput, rules: list[Rule] | None = None) -> Diagnosis:
    """:func:`.base.run_rules` with every rule unless ``rules`` names some; a CPU-only trace gets the
    CPU rules (:func:`.base.run_cpu_rules`)."""
    if inp.cpu_only:
        return run_cpu_rules(inp, CPU_RULES if rules is None else rules)
    return run_rules(inp, RULES if rules is None else rules)


__all__ = ["CPU_RULES", "RULES", "Context", "CpuFacts", "Diagnosis", "DiagnosisInput", "Finding", "OptimizerFacts",
           "ProgramMeta", "Rule", "RunFacts", "diagnose"]
