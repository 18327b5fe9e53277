"""``with roofscope.profile(...) as prof:``: the in-code way to collect a Run.

    with roofscope.profile(steps=3, out="runs/gpt", tokens_per_step=8 * 1024) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()            # or rely on optimizer.step(), or roofscope.step()
    print(prof.summary())
    prof.analysis.summary.metrics.mfu, prof.analysis.by_kernel()

The output directory is claimed when the block starts (an unwritable or taken one fails there,
before the program runs); the Run is written when the block ends (roofscope/pipeline.py), also
when it ends with an exception (which then propagates unchanged, never replaced by roofscope's),
and when the program calls ``os._exit`` inside the block (the Run is written, then the process exits
with that code). Works in notebooks: signals are only handled while the finished profile is written
and analyzed (collectors/lifecycle/).
"""
from __future__ import annotations

import sys
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from roofscope.collectors.lifecycle import intercept_exit
from roofscope.collectors.session import Session, SessionConfig
from roofscope.config import CeilingOverrides, Collection, Presentation, RankMerge, RooflineThresholds
from roofscope.errors import RoofscopeError
from roofscope.pipeline import PipelineOptions, SessionResult, announce, finish
from roofscope.reports.registry import RESULT, RenderOptions, renderer

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.analyzers.model.result import Result


class Profile:
    """The object ``roofscope.profile()`` returns; a context manager, used once."""

    def __init__(self, config: SessionConfig, options: PipelineOptions, quiet: bool, merge_timeout_s: float) -> None:
        self._session = Session(config)
        self._options = options
        self._quiet = quiet
        self._merge_timeout_s = merge_timeout_s
        self._used = False
        self._exit = ExitStack()
        self.result: SessionResult | None = None

    def __enter__(self) -> "Profile":
        if self._used:
            raise RoofscopeError("a roofscope.profile() object can be used only once; create a new one")
        self._used = True
        self._session.start()
        self._exit.enter_context(intercept_exit(self._os_exit))
        return self

    def _os_exit(self, code: int) -> None:
        """The program called ``os._exit(code)`` inside the block: the profile ends first."""
        self._end({"code": code, "reason": "os._exit", "detail": f"os._exit({code})"}, None)

    def step(self) -> None:
        """Mark a step boundary (the end of one iteration)."""
        self._session.step()

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        self._exit.close()
        if self._session.foreign:
            return False  # a child the program forked leaves the block: the profile is its parent's
        return self._end(_status(exc), exc)

    def _end(self, status: dict[str, Any], exc: BaseException | None) -> bool:
        try:
            self.result = finish(self._session, status, self._options)
        except (RoofscopeError, OSError) as e:
            if exc is None:
                raise
            print(f"roofscope: error: {e}", file=sys.stderr)  # the user's exception matters more
            return False
        announce(self._session, self.result, exit_code=status["code"], merge_timeout_s=self._merge_timeout_s,
                 quiet=self._quiet, paths_when_quiet=False, options=self._options)
        return False

    def _done(self) -> SessionResult:
        if self.result is None:
            raise RoofscopeError("the profile has not finished yet: use its results after the `with` block")
        return self.result

    @property
    def analysis(self) -> "Result | None":
        """The profile's analysis, the :class:`~roofscope.analyzers.model.result.Result` that
        ``roofscope.analyze`` of its Run returns; None when there was nothing to analyze."""
        return self._done().analysis

    @property
    def run_dir(self) -> Path | None:
        run = self._done().run
        return run.path if run is not None else None

    def summary(self, top: int = Presentation.top) -> str:
        """The terminal summary as text."""
        a = self._done().analysis
        if a is None:
            raise RoofscopeError("nothing was analyzed (see the warnings printed when the profile ended)")
        return renderer(RESULT, "console").render(a, RenderOptions(top=top))


def _status(exc: BaseException | None) -> dict[str, Any]:
    if exc is None:
        return {"code": 0, "reason": "ok", "detail": None}
    if isinstance(exc, KeyboardInterrupt):
        return {"code": 130, "reason": "interrupted", "detail": "KeyboardInterrupt"}
    if isinstance(exc, SystemExit):
        return {"code": exc.code if isinstance(exc.code, int) else 1, "reason": "exit",
                "detail": f"sys.exit({exc.code!r})"}
    return {"code": 1, "reason": "exception", "detail": f"{type(exc).__name__}: {exc}"}


def profile(steps: int = Collection.active, *, wait: int = Collection.wait, warmup: int = Collection.warmup,
            out: str | Path | None = None, force: bool = False,
            tokens_per_step: float | None = Collection.tokens_per_step,
            model_flops_per_step: float | None = Collection.model_flops_per_step,
            modules: bool = Collection.modules, nvml_hz: float = Collection.nvml_hz,
            report: bool = True, quiet: bool = False, name: str | None = None,
            device: str | None = CeilingOverrides.device, peak_tflops: float | None = CeilingOverrides.peak_tflops,
            peak_bandwidth_gbs: float | None = CeilingOverrides.peak_bandwidth_gbs,
            ceilings: str | None = CeilingOverrides.ceilings,
            latency_floor_us: float = RooflineThresholds.latency_floor_us,
            underutilized_below: float = RooflineThresholds.underutilized_below,
            merge_timeout: float = RankMerge.merge_timeout, formats: Sequence[str] = (),
            settle: int = Collection.settle, settle_tolerance: float = Collection.settle_tolerance,
            settle_max_steps: int = Collection.settle_max_steps,
            settle_max_s: float = Collection.settle_max_s) -> Profile:
    """Profile ``steps`` steps after ``wait`` skipped and ``warmup`` discarded ones; once ``settle``
    steps after that profile lie within ``settle_tolerance`` of their median (watched for at most
    ``settle_max_steps`` steps or ``settle_max_s`` seconds), profile again on them (``settle=0``:
    keep the first). Every step is timed without the profiler too (docs/overhead.md).

    Step boundaries: ``prof.step()`` / ``roofscope.step()`` when called, else each
    ``step()`` of the first optimizer. ``out`` defaults to
    ``roofscope-out/<name>-<timestamp>``. ``tokens_per_step`` and ``model_flops_per_step``
    give tokens/s and MFU. ``modules`` labels kernels with their ``nn.Module``.
    Under torchrun (or srun, or an initialized ``torch.distributed``) each rank writes
    ``out/rank-NNNN`` and rank 0 merges them after waiting up to ``merge_timeout`` seconds
    for the others (0: it prints the ``roofscope merge`` command instead). ``formats`` names
    further outputs written into the Run (``console``, ``markdown``, ``json``, ``csv``, ``junit``,
    ``html``: reports/registry.py), each under its default file name. The ceiling and threshold
    options are the command line's (``--datasheet``, ``--peak-tflops``, ``--peak-bandwidth``,
    ``--ceilings``, ``--latency-floor-us``, ``--underutilized-below``; roofscope/config.py).
    """
    merge = RankMerge(merge_timeout=merge_timeout)   # the config classes refuse out-of-range values
    if name is None:
        main = sys.modules.get("__main__")
        main_file = getattr(main, "__file__", None)
        name = Path(main_file).stem if main_file else "profile"
    if isinstance(formats, str):  # formats="json" would otherwise ask for "j", "s", "o", "n"
        formats = [formats]
    options = PipelineOptions(device=device, peak_tflops=peak_tflops, peak_bandwidth_gbs=peak_bandwidth_gbs,
                              ceilings=ceilings, latency_floor_us=latency_floor_us,
                              underutilized_below=underutilized_below, report=report, formats=tuple(formats),
                              quiet=quiet)
    config = SessionConfig(out=Path(out) if out is not None else None, force=force, name=name, wait=wait,
                           warmup=warmup, active=steps, nvml_hz=nvml_hz, modules=modules,
                           tokens_per_step=tokens_per_step, model_flops_per_step=model_flops_per_step,
                           settle=settle, settle_tolerance=settle_tolerance, settle_max_steps=settle_max_steps,
                           settle_max_s=settle_max_s)
    return Profile(config, options, quiet, merge.merge_timeout)
