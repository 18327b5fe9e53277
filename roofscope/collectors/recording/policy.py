"""A session's steps: which calls end one (rules.StepRule, through the optimizer's post-hook, the hooks
of collectors/steps.py and the script's own loop, collectors/loops/), what each boundary does to the
profiler (collectors/torchprof.py) and to the step timer (collectors/steptimes.py), and profiling
again where the steps run warm.

The first profile is taken right after ``--wait``, so that every script that reaches its steps gets
one. It is made again, the earlier one kept aside until the new one is complete, once: when the steps
after it settle (it was of cold steps); when a second ``generate()`` call begins (the first call's
tokens are cold); when a later stretch settles markedly faster than the profiled steps ran without
the profiler (:data:`WARMER`: a cold first round of a decode, a first epoch); and when the loop first
taken for the step is given up for another. :meth:`StepPolicy.finish` says what a profile that fell
short, or was of unsettled steps, lacks, and why.
"""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from roofscope.collectors import compiling, metadata
from roofscope.collectors.loops import watch
from roofscope.collectors.loops.model import Loop, Watcher
from roofscope.collectors.loops.tracker import LoopTracker
from roofscope.collectors.recording.recorders import Recorders
from roofscope.collectors.recording.rules import SettleState, StepRule
from roofscope.collectors.recording.runjson import optimizer_facts
from roofscope.collectors.steps import SCRIPT, StepHooks, direct_forward_calls, loop_spec, loop_target
from roofscope.collectors.steptimes import StepTimer
from roofscope.collectors.torchprof import TorchCollector
from roofscope.config import Collection
from roofscope.run.telemetry import Telemetry

if TYPE_CHECKING:  # pragma: no cover
    from torch.optim import Optimizer
    from torch.utils.hooks import RemovableHandle

    from roofscope.collectors.distributed import JobPart

# The collector's phase while a step ran -> the step's phase in run.json's step_times.
STEP_PHASES = {"warmup": "warmup", "recording": "active"}
# A later stretch whose settled steps take at most this share of the profiled steps' own time runs warm.
WARMER = 0.75


class ProfileComplete(SystemExit):
    """Raised into the program at the step after profiling ends, with ``exit_after_profile``."""

    def __init__(self) -> None:
        super().__init__(0)


class StepPolicy:
    """The step boundaries of one session (module docstring). ``live()`` is False once the session
    has finished, or belongs to the parent of a forked child: boundaries then do nothing."""

    def __init__(self, config: Collection, script: Path | None, collector: TorchCollector, timer: StepTimer,
                 recorders: Recorders, part: "JobPart | None", live: Callable[[], bool]) -> None:
        self.config = config
        self.script = script     # the file `roofscope run` runs as __main__ (its loops, --step-on __main__.FUNC)
        self.collector = collector
        self.timer = timer
        self.recorders = recorders
        self.part = part
        self.live = live
        self.rule = StepRule(config.step_on)
        self.settle = SettleState()
        self.optimizer: dict[str, Any] | None = None   # run.json's `optimizer`: the first one stepped
        self.hooks: StepHooks | None = None
        self.tracker: LoopTracker | None = None       # the script's loops (None: not watched for steps)
        self.watcher: Watcher | None = None
        self.loops_off = ""                           # why the script's loops are not watched
        self._optimizer_hook: "RemovableHandle | None" = None
        self._provisional: Path | None = None   # a first profile kept aside until the one made again is complete
        self._provisional_telemetry: Telemetry | None = None
        self.rearmed: str | None = None
        self._rearms: set[str] = set()          # the reasons for profiling again that have been used
        self._reference: float | None = None    # the profiled steps' own time, from the steps just before them
        self._after = 0                         # the timer's length when the kept profile ended
        self._loop_base = 0                     # boundaries before the step loop's first
        self._drop_next = False                 # a restart: the step ending at the next boundary is no one's
        self._root_forward: str | None = None   # the outermost module's forward, kept past the hooks (stop)
        self.program: dict[str, Any] | None = None   # StepHooks.facts(): run.json's program (read at stop)
        # The process's clocks where the profiled steps began and ended (metadata.cpu_snapshot): run.json's cpu.
        self.cpu_marks: dict[str, Any] = {}
        collector.ready = self.settled
        collector.settle_words = self.settle.words(config)

    def install(self) -> None:
        """Listen for boundaries: the optimizer's steps, the forward / generate / function hooks, the loops."""
        from torch.optim.optimizer import register_optimizer_step_post_hook  # start-up time: torch

        self._optimizer_hook = register_optimizer_step_post_hook(self._on_optimizer_step)
        compiling.watch_dynamo_import()   # a library that imports it is no program that compiles (windows.py)
        step_on = self.config.step_on
        if self.config.duration is not None:
            self.loops_off = "a time window (--duration) was asked for"
        elif self.part is not None:
            self.loops_off = "one rank of a job: every rank must profile the same steps"
        elif step_on is None or loop_spec(step_on):
            self.tracker = t = LoopTracker(lambda: self.hooks.free_forwards if self.hooks is not None else 0,
                                           forced=loop_target(step_on))
            t.on_step, t.on_choose, t.on_drop = self._on_loop_step, self._on_loop_chosen, self._on_loop_dropped
        if self.tracker is not None or (step_on or "").startswith(SCRIPT):
            self.watcher = watch(self.tracker, self.script)
            if self.tracker is not None and not self.watcher.start():
                self.loops_off, self.tracker = self.watcher.why, None
        self.hooks = StepHooks(step_on, self._on_auto_step, on_round=self._on_round, script=self.script,
                               defined=self.watcher.when_defined if self.watcher is not None else None)
        self.hooks.install()

    @property
    def source(self) -> str:
        return self.rule.source

    def explicit(self) -> None:
        """An explicit ``roofscope.step()`` (see :class:`StepRule`)."""
        was = self.source
        if self.rule.explicit():
            self._exact_over_loop(was, "roofscope.step()")
            self._advance()

    def _exact_over_loop(self, was: str, what: str) -> None:
        """Exact steps came after the loop's were taken (an inner loop of the first training step, chosen
        before the first optimizer.step()): the loop's steps, and a profile made of them, are dropped."""
        if was != "loop" or self.tracker is None:
            return
        loop = self.tracker.step
        self.tracker.finish()
        self._restart(f"{what} marks the steps: the iterations of {loop.describe() if loop else 'a loop'} taken"
                      " for them before it came are not", "trace.loop-steps.json")

    def decided(self) -> dict[str, Any]:
        """run.json's steps as this policy decided them (recording/runjson.py)."""
        loop = self.tracker.facts() if self.tracker is not None and self.source in ("loop", "forward") else None
        if loop is not None and loop["role"] == "step":
            loop["boundaries_before"] = self._loop_base   # the counters pass counts from the loop's first
        # A loop's steps: the loop itself (FILE:LINE), which the counters pass steps on again.
        step = self.tracker.step if self.tracker is not None and self.source == "loop" else None
        step_on = step.spec() if step is not None else self.config.step_on
        return {"source": self.source, "step_on": step_on, "settle": self.settle.to_dict(self.config),
                "rearmed": self.rearmed, **({"loop": loop} if loop is not None else {})}

    # -- boundaries ------------------------------------------------------------------------------

    def _on_auto_step(self, source: str) -> None:
        if self.rule.automatic(source):
            self._advance()

    def _on_loop_step(self, loop: Loop) -> None:
        if self.rule.automatic("loop"):
            self._advance(self.tracker.outer_index() if self.tracker is not None else None, tokens=False)
        elif self.tracker is not None:
            self.tracker.finish()      # exact steps came since: the loop is no longer watched

    def _on_loop_chosen(self, loop: Loop) -> bool:
        """The step loop takes the steps, unless exact ones came; forward steps seen so far are dropped."""
        was = self.source
        if not self.rule.loop():
            return False
        self._loop_base = self.collector.steps
        hooks = self.hooks
        if hooks is not None and hooks.forwards:
            loop.why += "; its iterations held fewer outermost forwards than iterations" + self._direct_calls()
        if was == "forward":
            self._restart(f"forward steps came less than once an iteration of {loop.describe()}: its iterations"
                          " are the steps", "trace.forward-steps.json")
        return True

    def _direct_calls(self) -> str:
        """``: the script calls model.forward(...) directly...`` when it does, in a loop: why module hooks
        saw fewer forwards than the decode made."""
        calls = direct_forward_calls(self.script)
        if not calls:
            return ""
        root = self.hooks.root_forward() if self.hooks is not None else None
        return (f": the script calls {', '.join(f'{text}(...) (line {line})' for text, line in calls[:2])} directly,"
                " which module hooks do not see" + (f" ({root.rsplit('.', 2)[-2]}.forward)" if root else ""))

    def _on_loop_dropped(self, loop: Loop) -> None:
        self._restart(f"{loop.describe()} was first taken for the step, then given up ({loop.why})",
                      "trace.first-loop.json")

    def _restart(self, why: str, keep_as: str) -> None:
        """The steps so far were of another kind than the ones from now on: none of them is the program's,
        and a profile made of them is made again."""
        c = self.collector
        self.timer.relabel(("unprofiled", "warmup", "active"), "dropped")
        self._drop_next = True   # the step ending at the next boundary began as one of the earlier kind
        if c.begin is not None or c.trace_ready:
            self._rearm(why, keep_as, when_ready=True, kind="restart")

    def _on_optimizer_step(self, optimizer: "Optimizer", args: Any, kwargs: Any) -> None:
        # The first optimizer's facts are kept also when explicit steps mark the boundaries: MFU
        # from tokens needs its parameter count either way.
        first_seen, was = self.rule.first_optimizer is None, self.source
        boundary = self.rule.optimizer(optimizer)
        if first_seen:
            self.optimizer = optimizer_facts(optimizer)
        if boundary:
            self._exact_over_loop(was, "optimizer.step()")
            self._advance()

    def _advance(self, outer: int | None = None, tokens: bool = True) -> None:
        """A boundary. ``tokens``: the latest outermost forward's tokens describe the step starting here
        (not for a loop's steps, whose forwards are not the hooks')."""
        c = self.collector
        if not self.live() or self.recorders.capturing:
            return
        hooks = self.hooks
        phase = "dropped" if self._drop_next else STEP_PHASES.get(c.phase, "unprofiled")
        self._drop_next = False
        self.timer.mark(phase, hooks.tokens if hooks is not None and tokens else None, outer)
        if c.done:
            c.step()  # after the profile: the boundary is counted and timed, and the steps watched
            self._watch_settling()
            self._watch_warmer()
            return
        window_open = c.fallback == "recording"
        c.step()
        self._mark_cpu(c.phase)
        if window_open:
            self.timer.restart()   # closing the step-less window is no step's time
        if c.recording_next:
            self.recorders.sample_energy_closely()
        if c.done:
            # Keep the rest of the program free of profiling: only the step boundaries stay, timed.
            self.stop_profiling()
            self.timer.restart()   # writing the trace out is no step's time
            # The profiled steps' own time: the unprofiled steps just before them (2k at most).
            s, k = self.collector.schedule, self.config.settle
            before = self.timer.recent(s.warmup + s.active + 2 * k)
            self._after, self._reference = len(self.timer), statistics.median(before) if before else None
            if self.config.exit_after_profile:
                raise ProfileComplete()

    def _mark_cpu(self, phase: str) -> None:
        """The process's clocks as the profiled steps begin (again, after a rearm) and end: run.json's cpu."""
        if phase == "recording" and self.cpu_marks.get("phase") != "recording":
            self.cpu_marks = {"phase": phase, "start": metadata.cpu_snapshot()}
        elif phase == "done" and self.cpu_marks.get("phase") == "recording":
            self.cpu_marks.update(phase=phase, end=metadata.cpu_snapshot())

    # -- profiling again ---------------------------------------------------------------------------

    def settled(self) -> bool:
        """The collector's steady-state test (collectors/steptimes.py), bounded in steps and seconds.
        Off for one rank of several: every rank must profile the same steps, and each would
        judge its own settling differently."""
        if self.part is not None:
            self.settle.outcome = "off"
            return True
        return self.settle.check(self.timer, self.config)

    def _again(self) -> bool:
        """Whether this session may profile again at all."""
        return self.config.settle > 0 and self.part is None and not self.collector.windowed

    def _watch_settling(self) -> None:
        """After the first profile (taken right after --wait, so that every script gets one): once
        the steps that follow it settle, that profile was of cold steps; it is kept aside and the
        schedule runs again from here, on steady steps. Steps that never settle keep it."""
        if "settle" in self._rearms or self.rearmed or not self._again() or self.settle.outcome is not None:
            return
        if self.settle.check(self.timer, self.config) and self.settle.outcome == "settled":
            self._rearm("the first profile began before the step times settled: profiled again once they did",
                        "trace.before-settling.json", when_ready=False, kind="settle")

    def _watch_warmer(self) -> None:
        """After the profile: a later stretch whose last k steps settled at a median of its last 2k at
        :data:`WARMER` of the profiled steps' own time or less runs warm (the profile was of a cold round):
        profiled once more there. 2k steps: a few lucky ones of a noisy machine are no stretch; looked at
        once every 2k boundaries, so that a host-bound loop's steps pay for it seldom."""
        k = self.config.settle
        if "warmer" in self._rearms or not self._again() or self.settle.outcome is None or not self._reference \
                or (len(self.timer) - self._after) % (2 * k):
            return
        later = self.timer.recent(2 * k, since=self._after)
        if len(later) < 2 * k or not self.timer.settled(k, self.config.settle_tolerance, since=self._after):
            return
        now = statistics.median(later)
        if now <= WARMER * self._reference:
            self._rearm(f"a later stretch ran {self._reference / now:.1f}x faster ({now * 1e3:.3g} ms/step against"
                        f" {self._reference * 1e3:.3g} ms before the profile): the profiled steps were cold;"
                        " profiled again there", "trace.cold-stretch.json", when_ready=False, kind="warmer")

    def _on_round(self, calls: int) -> None:
        """A ``generate()`` call began. The first call's tokens are cold (cuBLAS handles, the
        allocator's first blocks for each new cache size): when a second call comes and the profile
        was made in the first, it is kept aside and the schedule runs again in this call, once its
        tokens settle."""
        c = self.collector
        if calls != 2 or not self.live() or "round" in self._rearms or c.windowed:
            return
        if c.phase == "idle" and c.begin is None and not c.trace_ready:
            return     # not profiled yet: the profile will be of this call
        self._rearm("the first generate() call was cold: its steps were profiled again in the second call",
                    "trace.first-call.json", when_ready=True, kind="round")

    def _rearm(self, why: str, keep_as: str, when_ready: bool, kind: str) -> None:
        """Keep the profile made so far aside (restored if the new one does not complete) and
        record the schedule again."""
        c = self.collector
        self._rearms.add(kind)
        if c.phase == "recording":
            c.stop()   # cut short: kept only if the next one fails
        provisional = None
        if c.trace_ready:
            provisional = c.trace_path.with_name(keep_as)
            c.trace_path.replace(provisional)
        telemetry = self.recorders.telemetry
        if when_ready:  # a fresh test for the new profile; else the one that just settled is kept for run.json
            self.settle = SettleState()
        if not self.recorders.on:
            self.recorders.start()
        if self.hooks is not None:
            self.hooks.label = True
        self.timer.relabel(("warmup", "active"), "dropped")
        if not c.rearm(when_ready):
            if provisional is not None:
                provisional.replace(c.trace_path)
            return
        if provisional is not None:
            self._provisional, self._provisional_telemetry = provisional, telemetry
        self.rearmed = why

    # -- the end -----------------------------------------------------------------------------

    def stop_profiling(self) -> None:
        """Stop the profiler and what runs beside it; the step boundaries stay (timed only)."""
        self.recorders.remove()
        if self.hooks is not None:
            self.hooks.label = False
        if self.part is not None:
            self.part.info.observe_backend()
        self.collector.stop()
        self.recorders.stop_sampler()

    def stop(self) -> None:
        """Stop listening for boundaries, then stop profiling."""
        if self._optimizer_hook is not None:
            self._optimizer_hook.remove()
            self._optimizer_hook = None
        if self.hooks is not None:
            self._root_forward = self.hooks.root_forward()
            self.program = self.hooks.facts()   # read before the hooks go
            self.hooks.remove()
            self.hooks = None
        if self.watcher is not None:
            self.watcher.stop()
        compiling.unwatch_dynamo_import()
        self.stop_profiling()

    def finish(self, exit_status: dict[str, Any]) -> list[str]:
        """After :meth:`stop`: what the profile lacks, as run.json warnings. A profile made again
        that did not complete gives way to the earlier one, cold as it was."""
        c, said = self.collector, []
        shortfall = c.shortfall()
        if shortfall and self._provisional is not None:
            self._provisional.replace(c.trace_path)
            self.recorders.telemetry = self._provisional_telemetry
            said.append("the program ended before the steps were profiled again (" + str(self.rearmed)
                        + "): the profile is the earlier one, of steps that may be cold")
            self.rearmed = None
        elif shortfall:
            said.append(shortfall + ("" if c.unwritten else self._step_hint(exit_status)))
        elif self.config.settle > 0 and not self.rearmed and self.part is None and not c.windowed \
                and c.kept_window is None and c.trace_ready:
            said.append(
                "the profile is of the steps right after --wait, and the step times did not settle after it"
                + (f" ({self.settle.words(self.config)})" if self.settle.outcome == "never settled"
                   else " before the program ended") + ": they may be cold; run more steps or raise --wait")
        return said

    def _step_hint(self, exit_status: dict[str, Any]) -> str:
        if self.config.duration is not None:
            return ""
        if exit_status.get("reason") not in (None, "ok", "stopped"):
            # The script failed or was stopped: a missing step marker is not what cut the run short.
            how = str(exit_status.get("detail") or exit_status.get("reason")).strip().splitlines()
            return f"; the script ended early ({how[-1] if how else exit_status.get('reason')})"
        if self.source == "none":
            return ("; no step boundary arrived (no optimizer.step(), roofscope.step(), prof.step(), outermost forward"
                    " without gradients or loop of the script's own with repeating work): " + self._loops_said()
                    + "call roofscope.step() once per iteration, pass --step-on FILE:LINE (a loop), forward, generate"
                    " or MODULE.FUNC, or profile a time window with --duration SECONDS")
        calls, root = direct_forward_calls(self.script), self._root_forward
        if self.source == "forward" and calls and root:
            name, (text, line) = self.script.name if self.script else "the script", calls[0]
            return (f"; {name} calls {text}(...) directly (line {line}), which module hooks do not see: only calls"
                    f" through the module ({root.rsplit('.', 2)[-2]}(...)) ended steps; {self._loops_said()}pass"
                    f" --step-on {root}, or --step-on FILE:LINE for its loop")
        if self.source == "loop" and self.tracker is not None and self.tracker.step is not None:
            step = self.tracker.step
            return (f"; the steps are the iterations of {step.describe()}, which ran {step.edges} times: run more of"
                    " them or lower --wait/--warmup/--active")
        return "; lower --wait/--warmup/--active or run more steps"

    def _loops_said(self) -> str:
        """What became of the script's loops, for a hint that ends in what to do (so ``...; ``)."""
        off = self.loops_off or (self.watcher.why if self.watcher is not None and self.tracker is not None
                                 and not self.tracker.seen() else "")
        if self.tracker is None or off:
            return f"its loops were not watched ({off}); " if off else ""
        named = self.tracker.named
        if named is not None:
            return f"the outermost forwards in {named.describe()} were the steps; "
        seen = [loop for loop in self.tracker.seen() if loop.why]
        if not seen:
            return "the script ran no loop of its own with repeating work; "
        return "none of the script's loops was a step (" + "; ".join(f"{loop.describe()}: {loop.why}"
                                                                     for loop in seen[:2]) + "); "
