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
    from roofscope.analysis import Analysis
    from roofscope.context import Profile
    from roofscope.run import Run

__all__ = ["__version__", "analyze", "load", "profile", "region", "register_formula", "step"]


def analyze(path: Any, **kwargs: Any) -> "Analysis":
    """Analyze a Kineto trace (``.json``/``.json.gz``); see :func:`roofscope.analysis.analyze`."""
    from roofscope.analysis import analyze as _analyze  # start-up time

    return _analyze(path, **kwargs)


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
