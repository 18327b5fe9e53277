"""Named phases: ``with roofscope.region("decode"):`` or ``@roofscope.region("decode")``.

A region emits a ``record_function`` span, which torch.profiler records as a user
annotation (roofscope's per-region roofline reads those), and an NVTX range, so the
same phases show in Nsight Systems. NVTX comes from the ``nvtx`` package when it is
installed, else from ``torch.cuda.nvtx`` when CUDA is available, else is skipped.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable


def _nvtx_functions() -> tuple[Callable[[str], Any], Callable[[], Any]] | None:
    try:
        import nvtx

        return (lambda name: nvtx.push_range(message=name)), nvtx.pop_range
    except ImportError:
        pass
    import torch

    if torch.cuda.is_available():
        return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    return None


class region(contextlib.ContextDecorator):
    """A named phase of the workload (forward, backward, prefill, decode, ...)."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError("region name must be a non-empty string")
        self.name = name
        self._rf: Any = None
        self._nvtx: tuple[Callable[[str], Any], Callable[[], Any]] | None = None

    def _recreate_cm(self) -> "region":
        # Each decorated call gets its own span, so recursion and threads stay correct.
        return region(self.name)

    def __enter__(self) -> "region":
        import torch

        self._rf = torch.autograd.profiler.record_function(self.name)
        self._rf.__enter__()
        self._nvtx = _nvtx_functions()
        if self._nvtx is not None:
            self._nvtx[0](self.name)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._nvtx is not None:
            self._nvtx[1]()
        self._rf.__exit__(*exc)
