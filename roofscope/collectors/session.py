"""A profiling session: torch.profiler + NVML + module labels from start to what they recorded.

``roofscope run`` and ``roofscope.profile()`` both drive one :class:`Session` through
roofscope/pipeline.py: :meth:`Session.start`, step boundaries (explicit ``step()`` calls, else
the first optimizer's ``step()``), then :meth:`Session.stop`, which stops every collector and
returns what they recorded (:class:`Collected`); the pipeline writes the Run from it, analyzes
and renders, then :meth:`Session.close` drops the session's temporary files.
Only one session may be active per process: Kineto has one profiler.
"""
from __future__ import annotations

import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..config import Collection
from ..errors import OutputExistsError, RoofscopeError
from .distributed import job_part
from .frameworks import loaded_frameworks
from .torchprof import Schedule, TorchCollector, enable_inductor_metadata

if TYPE_CHECKING:  # pragma: no cover
    from ..telemetry import Telemetry

_lock = threading.Lock()
_active: "Session | None" = None


class ProfileComplete(SystemExit):
    """Raised into the program at the step after profiling ends, with ``exit_after_profile``."""

    def __init__(self) -> None:
        super().__init__(0)


@dataclass(kw_only=True)
class SessionConfig(Collection):
    """A session's settings: the profile's options (roofscope/config.py: the schedule, time
    window, NVML rate (0 turns telemetry off), labels, per-step figures) and where it writes."""

    out: Path | None = None
    force: bool = False
    name: str = "profile"
    command: list[str] = field(default_factory=lambda: list(sys.argv))
    experimental_config: Any = None          # torch.profiler's, for --counters cupti on builds where it works
    schedule: Schedule = field(init=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.schedule = Schedule(self.wait, self.warmup, self.active)


@dataclass
class Collected:
    """What a stopped session recorded; its files stay in the session's temporary directory
    until :meth:`Session.close`."""

    trace: Path | None                 # the Kineto trace; None when the profiler wrote none
    fields: dict[str, Any]             # run.json fields the session knows, in run.json's order
    telemetry: "Telemetry | None"
    captures: list[Path]               # CUDA-graph capture traces (collectors/graphs.py); some may be missing
    warnings: list[str]                # also run.json's `warnings`: later additions land in both


def default_out(name: str, root: Path = Path("roofscope-out")) -> Path:
    """``roofscope-out/<name>-<YYYYmmdd-HHMMSS>``, suffixed ``-2``, ``-3``... if taken."""
    base = root / f"{name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    return out


# Called by every step() too: the counters pass (ncu_target.py) counts steps without a Session.
step_listeners: list[Callable[[], None]] = []


def step() -> None:
    """Mark a step boundary in the active session (a no-op when none is active)."""
    s = _active
    if s is not None:
        s.step()
    for listener in step_listeners:
        listener()


class StepRule:
    """Which calls mark a step boundary: every explicit ``roofscope.step()``, else the first
    optimizer's ``step()``, else (inference loops) each outermost gradient-free forward
    (collectors/steps.py). Only the first optimizer seen counts (a GAN's two optimizers make one
    step), and from the first explicit call on optimizer steps are ignored. ``forced`` (``--step-on``)
    makes its own kind the only one. Shared by the Session and the counters pass, which must find
    the same steps."""

    def __init__(self, forced: str | None = None) -> None:
        self.source = "none"
        self.forced = forced
        self.first_optimizer: "weakref.ref[Any] | None" = None

    def explicit(self) -> bool:
        if self.forced:
            return False
        self.source = "explicit"
        return True

    def optimizer(self, optimizer: Any) -> bool:
        """Whether this optimizer's ``step()`` is a boundary."""
        if self.first_optimizer is None:
            self.first_optimizer = weakref.ref(optimizer)
        elif self.first_optimizer() is not optimizer:
            return False
        if self.source == "explicit" or self.forced:
            return False
        self.source = "optimizer"
        return True

    def automatic(self, source: str) -> bool:
        """Whether a forward / generate / function boundary counts."""
        if not self.forced and (self.source in ("explicit", "optimizer") or self.first_optimizer is not None):
            return False
        self.source = source
        return True


def optimizer_facts(optimizer: Any) -> dict[str, Any]:
    """What the analysis needs to know of the training loop's optimizer: its parameter count
    (MFU from tokens) and whether it runs fused, foreach or per-parameter (the optimizer rule)."""
    tensors = [p for g in optimizer.param_groups for p in g["params"]]
    d = getattr(optimizer, "defaults", {}) or {}
    return {"class": type(optimizer).__name__, "tensors": len(tensors),
            "params": int(sum(p.numel() for p in tensors)),
            "fused": d.get("fused"), "foreach": d.get("foreach"), "groups": param_group_facts(optimizer)}


def param_group_facts(optimizer: Any) -> list[dict[str, int]]:
    """Per parameter group and element size: tensors, elements and bytes per element. The cost
    model sizes fused / foreach optimizer ops from them when the trace has no TensorList shapes
    (analyzers/hidden_args.py); torch's optimizers call those ops once per group and dtype."""
    out = []
    for g in optimizer.param_groups:
        sizes: dict[int, list[int]] = {}
        for p in g["params"]:
            acc = sizes.setdefault(int(p.element_size()), [0, 0])
            acc[0] += 1
            acc[1] += int(p.numel())
        out += [{"tensors": t, "numel": n, "itemsize": b} for b, (t, n) in sorted(sizes.items())]
    return out


class Session:
    def __init__(self, config: SessionConfig) -> None:
        self.config = config
        # One rank of several writes its part into the job directory (collectors/distributed.py).
        self.part = job_part(config.out, config.name)
        self.out = (self.part.path if self.part is not None
                    else config.out if config.out is not None else default_out(config.name))
        self.warnings: list[str] = []
        self.steps = StepRule(config.step_on)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._collector: TorchCollector | None = None
        self._sampler: Any = None
        self._labels: Any = None
        self._hook: Any = None
        self._started_at = ""
        self._t0 = 0.0
        self._finished = False
        self.inductor = ""
        self.telemetry: Any = None
        self.optimizer: dict[str, Any] | None = None
        self._step_hooks: Any = None
        self._graphs: Any = None

    # -- start -------------------------------------------------------------------------------

    def start(self) -> "Session":
        global _active
        if self.part is not None:
            self.part.prepare(self.config.force)
        if self.out.exists() and not self.config.force:
            raise OutputExistsError(f"{self.out} already exists; pass --force to overwrite it")
        with _lock:
            if _active is not None:
                raise RoofscopeError("a roofscope profile is already active in this process"
                                     f" (writing {_active.out}); profiles cannot be nested or run concurrently")
            _active = self
        try:
            self._start_collectors()
        except BaseException:
            self._stop_collectors()
            if self._tmp is not None:
                self._tmp.cleanup()
            _active = None
            raise
        return self

    def _start_collectors(self) -> None:
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._started_at = datetime.now().astimezone().isoformat(timespec="seconds")
        self._t0 = time.perf_counter()
        self.inductor = enable_inductor_metadata()
        self._tmp = tempfile.TemporaryDirectory(prefix="roofscope-")
        self._collector = TorchCollector(Path(self._tmp.name) / "trace.json", self.config.schedule,
                                         self.config.duration, self.config.delay,
                                         experimental_config=self.config.experimental_config)
        if self.config.nvml_hz > 0 and torch.cuda.is_available():
            from .nvml import NvmlSampler

            self._sampler = NvmlSampler(hz=self.config.nvml_hz,
                                        cuda_device=self.part.cuda_device() if self.part is not None else None)
            self._sampler.energy_every_pass = self._collector.recording_next or self._collector.windowed
            self._sampler.start()
        if self.config.modules:
            from .modules import ModuleLabels

            self._labels = ModuleLabels()
            self._labels.install()
        self._hook = register_optimizer_step_post_hook(self._on_optimizer_step)
        from .steps import StepHooks

        self._step_hooks = StepHooks(self.config.step_on, self._on_auto_step)
        self._step_hooks.install()
        if torch.cuda.is_available():
            from .graphs import GraphRecorder

            collector = self._collector
            self._graphs = GraphRecorder(Path(self._tmp.name) / "graphs", collector.make_room, collector.give_back_room)
            self._graphs.install()
        self._collector.start()

    # -- steps -------------------------------------------------------------------------------

    @property
    def step_source(self) -> str:
        return self.steps.source

    def step(self) -> None:
        """An explicit step boundary (see :class:`StepRule`)."""
        if self.steps.explicit():
            self._advance()

    def _on_auto_step(self, source: str) -> None:
        if self.steps.automatic(source):
            self._advance()

    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        # The first optimizer's facts are kept also when explicit steps mark the boundaries: MFU
        # from tokens needs its parameter count either way.
        first_seen = self.steps.first_optimizer is None
        boundary = self.steps.optimizer(optimizer)
        if first_seen:
            self.optimizer = optimizer_facts(optimizer)
        if boundary:
            self._advance()

    def _advance(self) -> None:
        c = self._collector
        if c is None or c.done or (self._graphs is not None and self._graphs.capturing):
            return
        c.step()
        if self._sampler is not None and c.recording_next:
            self._sampler.energy_every_pass = True
        if c.done:
            # Keep the rest of the program free of hooks and sampling.
            self._stop_collectors()
            if self.config.exit_after_profile:
                raise ProfileComplete()

    # -- finish ------------------------------------------------------------------------------

    def _stop_collectors(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        for extra in (self._step_hooks, self._graphs):
            if extra is not None:
                extra.remove()
        self._step_hooks = None
        if self._labels is not None:
            self._labels.remove()
        if self.part is not None:
            self.part.info.observe_backend()
        if self._collector is not None:
            self._collector.stop()
        # Also when the sampler never ran (no NVML) or its thread stopped: its notes say why.
        if self._sampler is not None and self.telemetry is None:
            self.telemetry = self._sampler.stop()

    def stop(self, exit_status: dict[str, Any]) -> Collected:
        """Stop every collector; what they recorded. Call once, whatever ended the program."""
        if self._finished:
            raise RoofscopeError("this profile has already finished")
        self._finished = True
        self._stop_collectors()
        wall_s = time.perf_counter() - self._t0
        c = self._collector
        assert c is not None
        shortfall = c.shortfall()
        if shortfall:
            self.warnings.append(shortfall + self._step_hint(exit_status))
        if not c.trace_path.exists():
            return Collected(trace=None, fields={}, telemetry=None, captures=[], warnings=self.warnings)
        from .metadata import device_metadata

        g = self._graphs
        if g is not None:
            self.warnings.extend(g.notes())
        s = self.config.schedule
        fields: dict[str, Any] = dict(
            started=self._started_at, wall_s=round(wall_s, 3), exit_status=exit_status, device=device_metadata(),
            steps={"requested": ({"duration_s": self.config.duration, "delay_s": self.config.delay}
                                 if c.windowed else {"wait": s.wait, "warmup": s.warmup, "active": s.active}),
                   "boundaries_seen": c.steps, "source": self.step_source, "step_on": self.config.step_on,
                   **({"delay_from": c.delay_from} if c.windowed else {})},
            tokens_per_step=self.config.tokens_per_step, model_flops_per_step=self.config.model_flops_per_step,
            inductor_benchmark_kernel=self.inductor, optimizer=self.optimizer,
            modules={"enabled": self.config.modules, "calls": self._labels.calls if self._labels is not None else 0},
            telemetry=self._telemetry_block(), warnings=self.warnings,
            graphs=({"captures": g.captures, "recorded": len(g.files), "skipped": g.skipped}
                    if g is not None else None))
        if self.part is not None:
            fields["distributed"] = self.part.meta()
        fields["frameworks"] = loaded_frameworks()
        return Collected(trace=c.trace_path, fields=fields, telemetry=self.telemetry,
                         captures=list(g.files) if g is not None else [], warnings=self.warnings)

    def close(self) -> None:
        """Drop the recorded files and let another session start; after the Run is written."""
        global _active
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        with _lock:
            if _active is self:
                _active = None

    def _step_hint(self, exit_status: dict[str, Any]) -> str:
        if self.config.duration is not None:
            return ""
        if exit_status.get("reason") not in (None, "ok", "stopped"):
            # The script failed or was stopped: a missing step marker is not what cut the run short.
            how = str(exit_status.get("detail") or exit_status.get("reason")).strip().splitlines()
            return f"; the script ended early ({how[-1] if how else exit_status.get('reason')})"
        if self.step_source == "none":
            return ("; no step boundary arrived (no optimizer.step(), roofscope.step(), prof.step() or outermost"
                    " forward without gradients): call roofscope.step() once per iteration, pass --step-on"
                    " forward|generate|MODULE.FUNC, or profile a time window with --duration SECONDS")
        return "; lower --wait/--warmup/--active or run more steps"

    def _telemetry_block(self) -> dict[str, Any]:
        """run.json's `telemetry`: where the samples are kept (roofscope/run.py's file) or why there are none."""
        from ..run import TELEMETRY_FILE

        t = self.telemetry
        if t is not None:
            return {"file": TELEMETRY_FILE, "hz": self.config.nvml_hz, "samples": len(t.samples.get("t_unix_ns", [])),
                    "notes": t.notes}
        if self.config.nvml_hz == 0:
            return {"file": None, "notes": ["NVML telemetry turned off"]}
        return {"file": None, "notes": ["no CUDA device: no NVML telemetry"]}
