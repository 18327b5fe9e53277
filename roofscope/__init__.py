"""roofscope: roofline profiling and diagnosis for PyTorch.

Importing roofscope is cheap: torch, triton and pynvml are imported only by the
functions that need them, and nothing touches CUDA at import time.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

from .collectors.regions import region

if TYPE_CHECKING:  # pragma: no cover
    from .analyzers.analysis import Analysis
    from .run import Run

__all__ = ["__version__", "analyze", "load", "region"]


def analyze(path: Any, **kwargs: Any) -> "Analysis":
    """Analyze a Kineto trace (``.json``/``.json.gz``); see :func:`roofscope.analyzers.analysis.analyze`."""
    from .analyzers.analysis import analyze as _analyze

    return _analyze(path, **kwargs)


def load(path: Any) -> "Run":
    """Open a Run directory written by a collector; see :func:`roofscope.run.load`."""
    from .run import load as _load

    return _load(path)
