"""The face ``roofscope.analyze`` returned before the Result, kept for library code written against it.

``roofscope.analyze`` returns a :class:`~roofscope.analyzers.model.result.Result`. Code that
still calls the old methods can wrap one (``Analysis(result)``) or call :func:`analyze` here;
either warns with a :class:`DeprecationWarning`. Every member reads the Result; none computes.
What each one became (docs/api.md has the same table):

    Analysis                      Result
    .summary()                    .to_dict()  (summary.json); typed: .summary
    .typed_summary()              .summary
    .metrics()                    .summary.metrics (typed; .to_dict() for the dict)
    .steps() .timeline() .diagnosis() .step_samples()     .steps .timeline .diagnosis .step_samples
    .complete_steps() .partial_steps()                    .complete_steps  .summary.partial_steps
    .program_samples()            (.program_samples, .time_source)
    .step_time() .inference()     .to_dict()["step_time"]  .summary.inference
    .telemetry_summary() .unattributed()                  .summary.telemetry  .summary.unattributed
    .by_phase()                   .phases
    .by_kernel() .by_op() ...     the same methods
"""
from __future__ import annotations

import os
import sys
import warnings
from typing import Any

import pandas as pd

from roofscope.analysis import analyze as _analyze
from roofscope.analyzers.model.findings import Diagnosis
from roofscope.analyzers.model.result import Result
from roofscope.analyzers.model.summary import Summary
from roofscope.analyzers.model.timeline import Timeline
from roofscope.analyzers.model.trace import Trace


def _warn() -> None:
    # Attributed to the caller's line: the first frame outside this module (analyze() builds an Analysis).
    frame, level = sys._getframe(2), 3
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame, level = frame.f_back, level + 1
    warnings.warn("roofscope.compat.Analysis is deprecated: roofscope.analyze() returns the Result, whose"
                  " attributes replace its methods (roofscope/compat/__init__.py lists them)", DeprecationWarning,
                  stacklevel=level)


class Analysis:
    """Deprecated: what ``roofscope.analyze`` returned before the :class:`Result`; ``.result`` is the
    Result it reads."""

    def __init__(self, result: Result) -> None:
        _warn()
        self.result = result

    trace = property(lambda self: self.result.trace)
    ceilings = property(lambda self: self.result.ceilings)
    kernels = property(lambda self: self.result.kernels)
    params = property(lambda self: self.result.params)
    cpu_only = property(lambda self: self.result.cpu_only)
    run_meta = property(lambda self: self.result.run_meta)
    telemetry = property(lambda self: self.result.telemetry)

    def summary(self) -> dict[str, Any]:
        return self.result.to_dict()

    def typed_summary(self) -> Summary:
        return self.result.summary

    def steps(self) -> pd.DataFrame:
        return self.result.steps

    def timeline(self) -> Timeline:
        return self.result.timeline

    def complete_steps(self) -> list[int]:
        return list(self.result.complete_steps)

    def partial_steps(self) -> list[int]:
        return list(self.result.summary.partial_steps)

    def step_samples(self) -> pd.DataFrame:
        return self.result.step_samples

    def program_samples(self) -> tuple[pd.DataFrame, str]:
        return self.result.program_samples, self.result.time_source

    def metrics(self) -> dict[str, Any]:
        return self.result.summary.metrics.to_dict()

    def step_time(self) -> dict[str, Any] | None:
        return self.result.summary.extra.get("step_time")

    def inference(self) -> dict[str, Any] | None:
        return self.result.summary.inference

    def telemetry_summary(self) -> dict[str, Any] | None:
        tel = self.result.summary.telemetry
        return tel.to_dict() if tel is not None else None

    def unattributed(self) -> dict[str, Any]:
        return self.result.summary.unattributed.to_dict()

    def diagnosis(self) -> Diagnosis:
        return self.result.diagnosis

    def by_phase(self) -> pd.DataFrame:
        return self.result.phases

    def by_kernel(self) -> pd.DataFrame:
        return self.result.by_kernel()

    def by_op(self) -> pd.DataFrame:
        return self.result.by_op()

    def by_class(self) -> pd.DataFrame:
        return self.result.by_class()

    def by_category(self) -> pd.DataFrame:
        return self.result.by_category()

    def by_step(self) -> pd.DataFrame:
        return self.result.by_step()

    def by_region(self) -> pd.DataFrame:
        return self.result.by_region()

    def by_module(self, depth: int | None = None) -> pd.DataFrame:
        return self.result.by_module(depth)


def analyze(source: str | os.PathLike | Trace, **kwargs: Any) -> Analysis:
    """Deprecated: ``roofscope.analyze`` (its keywords) returning the :class:`Analysis` face of the Result."""
    return Analysis(_analyze(source, **kwargs))
