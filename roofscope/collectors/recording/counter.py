"""Step boundaries counted outside a Session, by the Session's rule: the counters pass's ncu runner
(counters/ncu_target.py) and verify's bootstrap (inject/bootstrap.py) must find the steps ``roofscope run``
found, from the same sources: ``roofscope.step()``, the first optimizer's ``step()``, the outermost forwards,
``generate()`` calls, the script's function (``--step-on __main__.FUNC``) or its loop (``--step-on FILE:LINE``,
what a Run stepped on its loop records)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from roofscope.collectors.loops import watch
from roofscope.collectors.loops.tracker import LoopTracker
from roofscope.collectors.recording.rules import StepRule
from roofscope.collectors.steps import SCRIPT, StepHooks, loop_spec, loop_target
from roofscope.errors import RoofscopeError

if TYPE_CHECKING:  # pragma: no cover
    from torch.optim import Optimizer


class StepCounter(ABC):
    """Each boundary :class:`StepRule` counts calls :meth:`advance`. :meth:`watching` installs the ways
    boundaries arrive while the program runs and takes them away after."""

    def __init__(self, step_on: str | None = None) -> None:
        self.rule = StepRule(step_on)

    @abstractmethod
    def advance(self) -> None:
        """One step boundary."""

    def step(self) -> None:
        """An explicit ``roofscope.step()``."""
        if self.rule.explicit():
            self.advance()

    def on_optimizer_step(self, optimizer: "Optimizer", args: Any, kwargs: Any) -> None:
        if self.rule.optimizer(optimizer):
            self.advance()

    def on_auto_step(self, source: str) -> None:
        """A forward, generate() or function boundary (collectors/steps.py StepHooks), or the Run's loop's."""
        if self.rule.automatic(source):
            self.advance()

    @contextmanager
    def watching(self, script: Path | None) -> Iterator[None]:
        """The boundaries' sources, installed for the block; a ``--step-on`` the script cannot take is a
        RoofscopeError before the program runs."""
        from torch.optim.optimizer import register_optimizer_step_post_hook  # start-up time

        from roofscope.collectors import session  # a cycle at load: the session's step() calls these listeners

        step_on = self.rule.forced
        tracker = LoopTracker(forced=loop_target(step_on)) if loop_spec(step_on) else None
        if tracker is not None:
            tracker.on_step = lambda loop: self.on_auto_step("loop")
        watcher = watch(tracker, script) if tracker is not None or (step_on or "").startswith(SCRIPT) else None
        forwards = StepHooks(step_on, self.on_auto_step, script=script,
                             defined=watcher.when_defined if watcher is not None else None)
        forwards.label = False   # no profiler here to read the forward annotations
        session.step_listeners.append(self.step)
        hook = register_optimizer_step_post_hook(self.on_optimizer_step)
        try:
            if watcher is not None and not watcher.start():
                raise RoofscopeError(f"--step-on {step_on}: {watcher.why}")
            forwards.install()
            yield
        finally:
            if watcher is not None:
                watcher.stop()
            forwards.remove()
            hook.remove()
            session.step_listeners.remove(self.step)
