"""A profiling session: torch.profiler + NVML + module labels from start to what they recorded.

``roofscope run`` and ``roofscope.profile()`` both drive one :class:`Session` through
roofscope/pipeline.py: :meth:`Session.start`, step boundaries (explicit ``step()`` calls, else
the first optimizer's ``step()``), then :meth:`Session.stop`, which stops every collector and
returns what they recorded (:class:`Collected`); the pipeline writes the Run from it, analyzes
and renders, then :meth:`Session.close` drops the session's temporary files.
Only one session may be active per process: Kineto has one profiler.
"""
from __future__ import annotations

import os
import shutil
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from roofscope.collectors import cupti, metadata
from roofscope.collectors.distributed import job_part
from roofscope.collectors.frameworks import loaded_frameworks
from roofscope.collectors.graphs import GraphRecorder
from roofscope.collectors.lifecycle import recording_dir
from roofscope.collectors.modules import ModuleLabels
from roofscope.collectors.nvml import NvmlSampler
from roofscope.collectors.steps import SCRIPT, StepHooks, looped_functions
from roofscope.collectors.steptimes import StepTimer
from roofscope.collectors.torchprof import Schedule, TorchCollector, enable_inductor_metadata
from roofscope.config import Collection
from roofscope.errors import OutputExistsError, RoofscopeError
from roofscope.run import TELEMETRY_FILE, directory
from roofscope.run.directory import Claim
from roofscope.run.telemetry import Telemetry

_lock = threading.Lock()
_active: "Session | None" = None


def _after_fork_in_child() -> None:
    # A child forked by the profiled program inherits the session, but the session is its
    # parent's: the child must never finish it, write its Run nor remove its files.
    global _active
    if _active is not None:
        _active.foreign = True
    _active = None


os.register_at_fork(after_in_child=_after_fork_in_child)


def _remove_tmp(path: str, pid: int) -> None:
    if os.getpid() == pid:  # never from a forked child at its exit
        shutil.rmtree(path, ignore_errors=True)


# The collector's phase while a step ran -> the step's phase in run.json's step_times.
STEP_PHASES = {"warmup": "warmup", "recording": "active"}


class SettleState:
    """When the wait ended and whether the bound on settling was reached (run.json's steps.settle)."""

    def __init__(self) -> None:
        self.since: float | None = None     # perf_counter when the wait ended
        self.since_step = 0                 # the first step that may count as settled
        self.boundaries = 0                 # boundaries seen since then
        self.outcome: str | None = None     # "settled", "never settled", "off"
        self.waited_steps = 0
        self.waited_s = 0.0

    @staticmethod
    def words(cfg: Collection) -> str:
        if cfg.settle <= 0:
            return ""
        return (f"{cfg.settle} steps within {100 * cfg.settle_tolerance:g}% of their median, at most "
                f"{cfg.settle_max_steps} steps or {cfg.settle_max_s:g} s")

    def check(self, timer: StepTimer, cfg: Collection) -> bool:
        now = time.perf_counter()
        if self.since is None:
            self.since, self.since_step = now, len(timer)
        else:
            self.boundaries += 1
        self.waited_steps, self.waited_s = self.boundaries, now - self.since
        if cfg.settle <= 0:
            self.outcome = "off"
        elif timer.settled(cfg.settle, cfg.settle_tolerance, self.since_step):
            self.outcome = "settled"
        elif self.boundaries >= cfg.settle_max_steps or now - self.since >= cfg.settle_max_s:
            self.outcome = "never settled"
        return self.outcome is not None

    def to_dict(self, cfg: Collection) -> dict[str, Any]:
        return {"k": cfg.settle, "tolerance": cfg.settle_tolerance, "max_steps": cfg.settle_max_steps,
                "max_s": cfg.settle_max_s, "outcome": self.outcome or "waiting",
                "waited_steps": self.waited_steps, "waited_s": round(self.waited_s, 3)}


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
    script: Path | None = None               # the file `roofscope run` runs as __main__ (--step-on __main__.FUNC)
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


# Called by every step() too: the counters pass (counters/ncu_target.py) counts steps without a Session.
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
        """Whether a forward / generate / function boundary counts. Unforced, the first of them
        seen is the only one: a looped function adopted as the step (Session._adopt_looped) and
        the forwards it makes would otherwise each end a step."""
        if not self.forced and (self.source in ("explicit", "optimizer") or self.first_optimizer is not None
                                or self.source not in ("none", source)):
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
    (analyzers/cost/hidden_args.py); torch's optimizers call those ops once per group and dtype."""
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
        self.foreign = False                 # in a child the program forked: the parent's session, hands off
        self.claim: Claim | None = None      # the output, reserved before the program runs (run/directory.py)
        self._tmp: Path | None = None
        self._tmp_cleanup: weakref.finalize | None = None
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
        self._aids_on = False          # NVML, labels and the graph recorder installed (_start_aids)
        self.timer: Any = None             # StepTimer: every step's own time (collectors/steptimes.py)
        self._settle = SettleState()
        self._provisional: Path | None = None   # a first generate() call's profile, kept until a later one's is complete
        self.rearmed: str | None = None
        self._looped: list[tuple[str, int]] = []   # the script's functions called in a loop (steps.looped_functions)
        self.adopted: tuple[str, str] | None = None  # the looped function made the step, and the warning (_adopt_looped)
        self._provisional_telemetry: Any = None
        self._settle_rearmed = False       # profiled again once the steps settled after the first profile
        self._round_rearmed = False        # profiled again in a second generate() call

    # -- start -------------------------------------------------------------------------------

    def start(self) -> "Session":
        global _active
        if self.part is not None:
            self.part.prepare(self.config.force)
        with _lock:
            if _active is not None:
                raise RoofscopeError("a roofscope profile is already active in this process"
                                     f" (writing {_active.out}); profiles cannot be nested or run concurrently")
            _active = self
        try:
            # Before the program runs: an unwritable, taken or non-Run output fails now, not after it.
            self.claim = self._claim(directory.claim_output)
            self._start_collectors()
        except BaseException:
            self._stop_collectors()
            self._release()
            _active = None
            raise
        return self

    def _claim(self, claim_output: Callable[[Path, bool], "Claim"]) -> "Claim":
        for _ in range(10):
            try:
                return claim_output(self.out, self.config.force)
            except OutputExistsError:
                if self.config.out is not None or self.part is not None:
                    raise
                # Another run took this default name in the same second: the next free one is ours.
                self.out = default_out(self.config.name)
        return claim_output(self.out, self.config.force)

    def _release(self) -> None:
        if self._collector is not None:
            self._collector.exports.close()
        if self._tmp_cleanup is not None:
            self._tmp_cleanup()
        if self.claim is not None:
            self.claim.release()

    def _start_collectors(self) -> None:
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._started_at = datetime.now().astimezone().isoformat(timespec="seconds")
        self._t0 = time.perf_counter()
        self.inductor = enable_inductor_metadata()
        # Not a TemporaryDirectory: its finalizer would also run in a forked child at exit.
        self._tmp = recording_dir(self.claim)   # inside the claimed Run directory, not TMPDIR
        self._tmp_cleanup = weakref.finalize(self, _remove_tmp, str(self._tmp), os.getpid())
        cupti.claim()
        self.timer = StepTimer(cuda=torch.cuda.is_available())
        self._collector = TorchCollector(self._tmp / "trace.json", self.config.schedule,
                                         self.config.duration, self.config.delay,
                                         experimental_config=self.config.experimental_config, ready=self._settled,
                                         stepless_after_s=self.config.stepless_after)
        self._collector.settle_words = self._settle.words(self.config)
        self._start_aids()
        self._hook = register_optimizer_step_post_hook(self._on_optimizer_step)
        self._step_hooks = StepHooks(self.config.step_on, self._on_auto_step, on_round=self._on_round,
                                     script=self.config.script)
        self._step_hooks.install()
        # Read now, not in the alarm's signal handler that adopts one (_adopt_looped), nor again at the end.
        self._looped = looped_functions(self.config.script)
        self._collector.on_no_window = self._adopt_looped
        self._collector.start()

    def _start_aids(self) -> None:
        """What runs beside the profiler while it may record: NVML, module labels, graph captures."""
        import torch

        if self.config.nvml_hz > 0 and torch.cuda.is_available():
            self._sampler = NvmlSampler(hz=self.config.nvml_hz,
                                        cuda_device=self.part.cuda_device() if self.part is not None else None)
            self._sampler.energy_every_pass = self._collector.recording_next or self._collector.windowed
            self._sampler.start()
            self.telemetry = None
        if self.config.modules:
            self._labels = ModuleLabels()
            self._labels.install()
        if torch.cuda.is_available():
            collector = self._collector
            # A rearm's recorder goes on numbering after the first one's captures, kept in the same folder.
            earlier = self._graphs
            self._graphs = GraphRecorder(self._tmp / "graphs", collector.make_room, collector.give_back_room)
            if earlier is not None:
                self._graphs.adopt(earlier)
            self._graphs.install()
            collector.held.on_hold = self._graphs.file_window
        self._aids_on = True

    # -- steps -------------------------------------------------------------------------------

    @property
    def step_source(self) -> str:
        return self.steps.source

    def step(self) -> None:
        """An explicit step boundary (see :class:`StepRule`)."""
        if self.steps.explicit():
            self._advance()

    def _adopt_looped(self) -> None:
        """No step-less window for this program (it compiles) and no step boundary yet: each call of
        the function the script calls in a loop becomes the step, the ``--step-on __main__.FUNC``
        the step-less hint would name (collectors/steps.looped_functions)."""
        found = self._looped
        if self.config.step_on or self._step_hooks is None or self.steps.source != "none" or not found:
            return
        (name, line), script = found[0], self.config.script
        self._step_hooks.adopt(name)
        # Said only if its calls did end the steps: an optimizer's step or a forward may come first.
        self.adopted = (SCRIPT + name, f"no step boundary arrived and the program compiles (no step-less time "
                        f"window): each call of {script.name if script else 'the script'}'s {name}() (called in a "
                        f"loop, line {line}) is a step, as --step-on {SCRIPT + name} makes it; pass --step-on to "
                        "choose another")

    def _adopted_step_on(self) -> str | None:
        """The looped function that ended the steps, if one did."""
        return self.adopted[0] if self.adopted is not None and self.steps.source == "function" else None

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
        if self.foreign:
            return
        if c is None or self._finished or (self._aids_on and self._graphs is not None and self._graphs.capturing):
            return
        hooks = self._step_hooks
        self.timer.mark(STEP_PHASES.get(c.phase, "unprofiled"), hooks.tokens if hooks is not None else None)
        if c.done:
            c.step()  # after the profile: the boundary is counted and timed, and the steps watched
            self._watch_settling()
            return
        window_open = c.fallback == "recording"
        c.step()
        if window_open:
            self.timer.restart()   # closing the step-less window is no step's time
        if self._sampler is not None and c.recording_next:
            self._sampler.energy_every_pass = True
        if c.done:
            # Keep the rest of the program free of profiling: only the step boundaries stay, timed.
            self._stop_aids()
            self.timer.restart()   # writing the trace out is no step's time
            if self.config.exit_after_profile:
                raise ProfileComplete()

    def _settled(self) -> bool:
        """The collector's steady-state test (collectors/steptimes.py), bounded in steps and seconds.
        Off for one rank of several: every rank must profile the same steps, and each would
        judge its own settling differently."""
        if self.part is not None:
            self._settle.outcome = "off"
            return True
        return self._settle.check(self.timer, self.config)

    def _watch_settling(self) -> None:
        """After the first profile (taken right after --wait, so that every script gets one): once
        the steps that follow it settle, that profile was of cold steps; it is kept aside and the
        schedule runs again from here, on steady steps. Steps that never settle keep it."""
        c = self._collector
        if self._settle_rearmed or self.rearmed or self.config.settle <= 0 or self.part is not None \
                or c is None or c.windowed or self._settle.outcome is not None:
            return
        if self._settle.check(self.timer, self.config) and self._settle.outcome == "settled":
            self._settle_rearmed = self._rearm(
                "the first profile began before the step times settled: profiled again once they did",
                "trace.before-settling.json", when_ready=False)

    def _on_round(self, calls: int) -> None:
        """A ``generate()`` call began. The first call's tokens are cold (cuBLAS handles, the
        allocator's first blocks for each new cache size): when a second call comes and the profile
        was made in the first, it is kept aside and the schedule runs again in this call, once its
        tokens settle."""
        c = self._collector
        if calls != 2 or c is None or self._finished or self._round_rearmed or c.windowed:
            return
        if c.phase == "idle" and c.begin is None and not c.trace_ready:
            return     # not profiled yet: the profile will be of this call
        self._round_rearmed = self._rearm(
            "the first generate() call was cold: its steps were profiled again in the second call",
            "trace.first-call.json", when_ready=True)

    def _rearm(self, why: str, keep_as: str, when_ready: bool) -> bool:
        """Keep the profile made so far aside (restored if the new one does not complete) and
        record the schedule again."""
        c = self._collector
        if c.phase == "recording":
            c.stop()   # cut short: kept only if the next one fails
        provisional = None
        if c.trace_ready:
            provisional = c.trace_path.with_name(keep_as)
            c.trace_path.replace(provisional)
        telemetry = self.telemetry
        if when_ready:  # a fresh test for the new profile; else the one that just settled is kept for run.json
            self._settle = SettleState()
        if not self._aids_on:
            self._start_aids()
        self.timer.relabel(("warmup", "active"), "dropped")
        if not c.rearm(when_ready):
            if provisional is not None:
                provisional.replace(c.trace_path)
            return False
        if provisional is not None:
            self._provisional, self._provisional_telemetry = provisional, telemetry
        self.rearmed = why
        return True

    # -- finish ------------------------------------------------------------------------------

    def _stop_aids(self) -> None:
        """Stop the profiler and what runs beside it; the step boundaries stay (timed only)."""
        # The recorder and the labeller stay for stop(): their captures and call counts go into run.json.
        if self._aids_on and self._graphs is not None:
            self._graphs.remove()
        if self._aids_on and self._labels is not None:
            self._labels.remove()
        self._aids_on = False
        if self._step_hooks is not None:
            self._step_hooks.label = False
        if self.part is not None:
            self.part.info.observe_backend()
        if self._collector is not None:
            self._collector.stop()
        # Also when the sampler never ran (no NVML) or its thread stopped: its notes say why.
        if self._sampler is not None:
            self.telemetry = self._sampler.stop()
            self._sampler = None

    def _stop_collectors(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self._step_hooks is not None:
            self._step_hooks.remove()
            self._step_hooks = None
        self._stop_aids()

    def stop(self, exit_status: dict[str, Any]) -> Collected:
        """Stop every collector; what they recorded. Call once, whatever ended the program."""
        if self._finished or self.foreign:
            raise RoofscopeError("this profile has already finished" if self._finished else
                                 "this profile belongs to the process that forked this one")
        self._finished = True
        self._stop_collectors()
        wall_s = time.perf_counter() - self._t0
        c = self._collector
        assert c is not None
        if self._adopted_step_on() is not None:
            self.warnings.append(self.adopted[1])  # type: ignore[index]
        shortfall = c.shortfall()
        if shortfall and self._provisional is not None:
            # The profile made again did not complete: the earlier one stands, cold as it was.
            self._provisional.replace(c.trace_path)
            self.telemetry = self._provisional_telemetry
            self.warnings.append("the program ended before the steps were profiled again (" + str(self.rearmed)
                                 + "): the profile is the earlier one, of steps that may be cold")
            self.rearmed = None
        elif shortfall:
            self.warnings.append(shortfall + ("" if c.unwritten else self._step_hint(exit_status)))
        elif self.config.settle > 0 and not self.rearmed and self.part is None and not c.windowed \
                and c.kept_window is None and c.trace_ready:
            self.warnings.append(
                "the profile is of the steps right after --wait, and the step times did not settle after it"
                + (f" ({self._settle.words(self.config)})" if self._settle.outcome == "never settled"
                   else " before the program ended") + ": they may be cold; run more steps or raise --wait")
        step_times = self.timer.finish() if self.timer is not None else []
        if not c.trace_path.exists():
            return Collected(trace=None, fields={}, telemetry=None, captures=[], warnings=self.warnings)
        g = self._graphs
        if g is not None:
            self.warnings.extend(g.notes())
        s = self.config.schedule
        fields: dict[str, Any] = dict(
            started=self._started_at, wall_s=round(wall_s, 3), exit_status=exit_status, device=metadata.device_metadata(),
            steps={"requested": ({"duration_s": self.config.duration, "delay_s": self.config.delay}
                                 if c.windowed else {"wait": s.wait, "warmup": s.warmup, "active": s.active}),
                   "boundaries_seen": c.steps, "source": self.step_source, "step_on": self.config.step_on or self._adopted_step_on(),
                   **({"delay_from": c.delay_from} if c.windowed else
                      {"profiled_from": (c.begin + s.warmup) if c.begin is not None else None,
                       "settle": self._settle.to_dict(self.config), "rearmed": self.rearmed}),
                   **({"stepless_window": c.kept_window} if c.kept_window else {})},
            step_times=step_times_columns(step_times, self.timer.dropped if self.timer is not None else 0),
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

    def keep_files(self) -> Path | None:
        """Keep the recorded files past :meth:`close` (no Run could be written anywhere); where they are."""
        if self._tmp_cleanup is not None:
            self._tmp_cleanup.detach()
        if self._collector is not None:
            self._collector.exports.keep()
        return self._tmp

    def close(self) -> None:
        """Drop the recorded files and let another session start; after the Run is written."""
        global _active
        self._release()
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
                    " forward without gradients): " + _looped_hint(self._looped, self.config.script) + "call roofscope.step()"
                    " once per iteration, pass --step-on forward|generate|MODULE.FUNC, or profile a time window"
                    " with --duration SECONDS")
        return "; lower --wait/--warmup/--active or run more steps"

    def _telemetry_block(self) -> dict[str, Any]:
        """run.json's `telemetry`: where the samples are kept (roofscope/run.py's file) or why there are none."""
        t = self.telemetry
        if t is not None:
            return {"file": TELEMETRY_FILE, "hz": self.config.nvml_hz, "samples": len(t.samples.get("t_unix_ns", [])),
                    "notes": t.notes}
        if self.config.nvml_hz == 0:
            return {"file": None, "notes": ["NVML telemetry turned off"]}
        return {"file": None, "notes": ["no CUDA device: no NVML telemetry"]}


def _looped_hint(found: list[tuple[str, int]], script: Path | None) -> str:
    """The --step-on that makes a step of each call of the script's own function called in a loop."""
    if not found or script is None:
        return ""
    (name, line), rest = found[0], [n for n, _ in found[1:3]]
    also = f"; also {', '.join(f'{n}()' for n in rest)}" if rest else ""
    return (f"{script.name} calls {name}() in a loop (line {line}{also}): --step-on __main__.{name} makes each"
            " of its calls a step; or ")


def step_times_columns(steps: list[Any], dropped: int) -> dict[str, Any] | None:
    """run.json's ``step_times``: the StepTimer's records column by column (run/schema.StepTimes)."""
    if not steps:
        return None
    return {"index": [t.index for t in steps], "phase": [t.phase for t in steps],
            "host_s": [round(t.host_s, 9) for t in steps], "gpu_s": [t.gpu_s for t in steps],
            "tokens": [t.tokens for t in steps], "dropped": dropped}
