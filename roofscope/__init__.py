"""roofscope: roofline profiling and diagnosis for PyTorch.

Importing roofscope is cheap: torch, triton and pynvml are imported only by the
functions that need them, and nothing touches CUDA at import time. The facade's functions
import their module when called (the `# start-up time` imports): pandas and the analysis load
only for the program that analyzes.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from roofscope.collectors.regions import region
from roofscope.config import Collection
from roofscope.jsonsafe import json_safe
from roofscope.version import __version__

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.analyzers.model.result import Result
    from roofscope.context import Profile
    from roofscope.run import Run

__all__ = ["Result", "__version__", "analyze", "load", "profile", "region", "register_formula", "step"]


def analyze(path: Any, **kwargs: Any) -> "Result":
    """Analyze a trace (Kineto ``.json``/``.json.gz``) or a Run directory: the :class:`Result`
    (``.summary`` typed, ``.to_dict()`` summary.json, ``.kernels``, ``.by_kernel()``...; docs/api.md).
    Keywords are the command line's options: ``device``, ``peak_tflops``, ``peak_bandwidth_gbs``,
    ``ceilings`` (a file's path or a Ceilings), ``params``, ``graph_capture``, ``formulas``,
    ``attention_window``, ``run_meta``, ``telemetry``, ``use_cache``; see
    :func:`roofscope.analysis.analyze`. Bad input raises a :class:`~roofscope.errors.RoofscopeError`."""
    from roofscope.analysis import analyze as _analyze  # start-up time

    return _analyze(path, **kwargs)


def __getattr__(name: str) -> Any:
    # roofscope.Result names the type analyze() returns without loading pandas at `import roofscope`.
    if name == "Result":
        from roofscope.analyzers.model.result import Result  # start-up time

        return Result
    raise AttributeError(f"module 'roofscope' has no attribute {name!r}")


def load(path: Any) -> "Run":
    """Open a Run directory written by a collector; see :func:`roofscope.run.load`. Its
    ``summary()`` is recomputed from the trace when an older analysis wrote the stored one."""
    from roofscope.run import load as _load  # start-up time

    return _load(path, recompute=_fresh_summary)


def _fresh_summary(path: Any) -> dict:
    from roofscope.analysis import run as _run  # start-up time

    return json_safe(_run(path).to_dict())


def profile(steps: int = Collection.active, **kwargs: Any) -> "Profile":
    """Profile a loop in your own code; see :func:`roofscope.context.profile`."""
    from roofscope.context import profile as _profile  # start-up time

    return _profile(steps, **kwargs)


def register_formula(name: str, fn: Any = None, *, category: str = "other", replace: bool = False) -> Any:
    """Give the custom op ``name`` a cost formula, a function of its arguments' shapes (usable as a
    decorator); see :func:`roofscope.analyzers.cost.formulas.custom.register_formula` and docs/cost-model.md."""
    from roofscope.analyzers.cost.formulas.custom import register_formula as _register  # start-up time

    return _register(name, fn, category=category, replace=replace)


def step() -> None:
    """Mark a step boundary for the active roofscope profile; a no-op when none is active.

    Cheap enough to leave in a loop: nothing is imported until a profile is active.
    """
    session = sys.modules.get("roofscope.collectors.session")
    if session is not None:
        session.step()
