"""Diagnosis rules (see base.py for the engine and docs/diagnosis.md for each rule)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from roofscope.diagnose.base import Context, Diagnosis, Finding, Rule, run_rules
from roofscope.diagnose.communication import ExposedCommunication
from roofscope.diagnose.fusion import ElementwiseFusion, UnfusedAttention, UnfusedOptimizer
from roofscope.diagnose.hardware import SmallGrid, Throttling, Underutilized
from roofscope.diagnose.idle import IdleOther
from roofscope.diagnose.inference import KvBoundDecode, LaunchBoundDecode, WeightBoundDecode
from roofscope.diagnose.overhead import CudaGraphs, HostCopies, HostSyncs
from roofscope.diagnose.precision import Alignment, Tf32, WeightBoundGemm

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.analysis import Analysis

RULES: list[Rule] = [CudaGraphs(), HostSyncs(), HostCopies(), ElementwiseFusion(), UnfusedAttention(),
                     UnfusedOptimizer(), Tf32(), Alignment(), WeightBoundGemm(), Throttling(), SmallGrid(),
                     Underutilized(), ExposedCommunication(), IdleOther(), WeightBoundDecode(), KvBoundDecode(),
                     LaunchBoundDecode()]


def diagnose(a: "Analysis", rules: list[Rule] | None = None) -> Diagnosis:
    """:func:`.base.run_rules` with every rule unless ``rules`` names some."""
    return run_rules(a, RULES if rules is None else rules)


__all__ = ["RULES", "Context", "Diagnosis", "Finding", "Rule", "diagnose"]
