"""Diagnosis rules (see base.py for the engine and docs/diagnosis.md for each rule)."""
from __future__ import annotations

from .base import Context, Diagnosis, Finding, Rule, diagnose
from .communication import ExposedCommunication
from .fusion import ElementwiseFusion, UnfusedAttention, UnfusedOptimizer
from .hardware import SmallGrid, Throttling, Underutilized
from .idle import IdleOther
from .inference import KvBoundDecode, LaunchBoundDecode, WeightBoundDecode
from .overhead import CudaGraphs, HostCopies, HostSyncs
from .precision import Alignment, Tf32, WeightBoundGemm

RULES: list[Rule] = [CudaGraphs(), HostSyncs(), HostCopies(), ElementwiseFusion(), UnfusedAttention(),
                     UnfusedOptimizer(), Tf32(), Alignment(), WeightBoundGemm(), Throttling(), SmallGrid(),
                     Underutilized(), ExposedCommunication(), IdleOther(), WeightBoundDecode(), KvBoundDecode(),
                     LaunchBoundDecode()]

__all__ = ["RULES", "Context", "Diagnosis", "Finding", "Rule", "diagnose"]
