"""The two decisions a session's step policy (policy.py) asks for: which calls mark a step boundary
(:class:`StepRule`, shared with the counters pass, which must find the same steps) and whether the
step times have settled, within bounds (:class:`SettleState`, run.json's ``steps.settle``)."""
from __future__ import annotations

import time
import weakref
from typing import TYPE_CHECKING, Any

from roofscope.collectors.steptimes import StepTimer
from roofscope.config import Collection

if TYPE_CHECKING:  # pragma: no cover
    from torch.optim import Optimizer


class StepRule:
    """Which calls mark a step boundary: every explicit ``roofscope.step()``, else the first
    optimizer's ``step()``, else each outermost gradient-free forward (collectors/steps.py) or each
    iteration of the script's own loop (collectors/loops/), whichever the loop tracker says holds the
    work. Only the first optimizer seen counts (a GAN's two optimizers make one step), and from the
    first explicit call on optimizer steps are ignored. ``forced`` (``--step-on``) makes its own kind
    the only one. Shared by the Session and the counters pass, which must find the same steps."""

    def __init__(self, forced: str | None = None) -> None:
        self.source = "none"
        self.forced = forced
        self.first_optimizer: "weakref.ref[Optimizer] | None" = None

    def explicit(self) -> bool:
        if self.forced:
            return False
        self.source = "explicit"
        return True

    def optimizer(self, optimizer: "Optimizer") -> bool:
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
        """Whether a forward / generate / function / loop boundary counts. Unforced, the first of them
        seen is the only one: the script's loop and the forwards made in it would otherwise each end
        a step."""
        if not self.forced and (self.source in ("explicit", "optimizer") or self.first_optimizer is not None
                                or self.source not in ("none", source)):
            return False
        self.source = source
        return True

    def loop(self) -> bool:
        """Whether the script's loop takes the steps over: not once exact ones (explicit, an optimizer's)
        came; over forward steps too, which the tracker hands over only where forwards came less than
        once an iteration (a decode that calls ``model.forward`` directly, which module hooks do not see)."""
        if self.forced:
            return True
        if self.source in ("explicit", "optimizer") or self.first_optimizer is not None:
            return False
        self.source = "loop"
        return True


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
