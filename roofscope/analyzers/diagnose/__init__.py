"""Diagnosis rules (see base.py for the engine, inputs.py for what rules read, and
docs/diagnosis.md for each rule)."""
from __future__ import annotations

from roofscope.analyzers.diagnose.base import Context, Rule, run_rules
from roofscope.analyzers.diagnose.communication import ExposedCommunication
from roofscope.analyzers.diagnose.fusion import ElementwiseFusion, UnfusedAttention, UnfusedOptimizer
from roofscope.analyzers.diagnose.hardware import SmallGrid, Throttling, Underutilized
from roofscope.analyzers.diagnose.idle import IdleOther
from roofscope.analyzers.diagnose.inference import KvBoundDecode, LaunchBoundDecode, WeightBoundDecode
from roofscope.analyzers.diagnose.inputs import DiagnosisInput, OptimizerFacts, RunFacts
from roofscope.analyzers.diagnose.overhead import CudaGraphs, HostCopies, HostSyncs
from roofscope.analyzers.diagnose.precision import Alignment, Tf32, WeightBoundGemm
from roofscope.analyzers.model.findings import Diagnosis, Finding

RULES: list[Rule] = [CudaGraphs(), HostSyncs(), HostCopies(), ElementwiseFusion(), UnfusedAttention(),
                     UnfusedOptimizer(), Tf32(), Alignment(), WeightBoundGemm(), Throttling(), SmallGrid(),
                     Underutilized(), ExposedCommunication(), IdleOther(), WeightBoundDecode(), KvBoundDecode(),
                     LaunchBoundDecode()]


def diagnose(inp: DiagnosisInput, rules: list[Rule] | None = None) -> Diagnosis:
    """:func:`.base.run_rules` with every rule unless ``rules`` names some."""
    return run_rules(inp, RULES if rules is None else rules)


__all__ = ["RULES", "Context", "Diagnosis", "DiagnosisInput", "Finding", "OptimizerFacts", "Rule", "RunFacts",
           "diagnose"]
