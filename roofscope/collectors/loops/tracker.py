"""Which of the program's loops is the step, from the iterations it sees (docs/steps.md).

A source of iterations (monitoring.py, marks.py) hands every iteration of a loop of the program's own
code to :meth:`LoopTracker.edge`. The step is the innermost loop whose iterations hold repeating work
and which iterates more times at a stretch than the loop around it:

* a loop whose iterations are shorter than :data:`MIN_ITERATION_S` holds no work (a Python loop over a
  list), one in a generator holds its consumer's, one reached through an ``nn.Module``'s forward is the
  model's own (its layers), one reached through a DataLoader's fetch builds a batch (a dataset's
  ``__getitem__``): none of them is ever the step, and their iterations stop being watched;
* a loop with no loop around it is the step after :data:`RUN_TOP` timed iterations in a row; one inside
  another loop after :data:`RUN_NESTED`, and more than its outer loop has made so far: the tokens of a
  decode's round, the batches of an epoch;
* a loop whose outer loop has iterated more times than it ever did in one go is a part of each of its
  outer loop's iterations (a function's own loop over its 4 sub-steps, a loop over a batch's fields):
  never the step, and a step loop found to be one gives way to its outer loop;
* when outermost forwards (collectors/steps.py) came once per iteration or more, they are the steps
  and the loop only names them;
* a step loop that stopped iterating (a set-up loop before the work) gives way to a loop that has run
  longer than it did since it was chosen.

The loops around the step loop name the stretch each step is in (a round of a decode, an epoch).
"""
from __future__ import annotations

import statistics
import sys
import threading
import time
from types import FrameType
from typing import Any, Callable

from roofscope.collectors.loops.model import NAMED, OFF, OUTER, STEP, WATCHING, Loop

MIN_ITERATION_S = 5e-6       # a kernel launch's own cost: a shorter iteration launches nothing
TRIVIAL_AFTER = 32           # iterations timed before a loop can be judged too short
RUN_TOP = 3                  # timed iterations in a row that make a loop with no loop around it the step
RUN_NESTED = 8               # ... and one inside another loop, within one iteration of that one
_MODULE_CALLS = frozenset(("forward", "_call_impl", "_wrapped_call_impl"))


# A DataLoader's fetch (torch/utils/data/_utils/fetch.py) calls the dataset's __getitem__ and the collate_fn.
_DATA_LOADING = ("torch/utils/data/", "torch\\utils\\data\\")
_LOADING_WHY = "reached through a DataLoader's fetch: the data loading's own loop"


def _data_loading(frame: FrameType) -> bool:
    """The frame is torch's DataLoader code: what it calls builds a batch (a dataset's ``__getitem__``)."""
    return any(part in frame.f_code.co_filename for part in _DATA_LOADING)


def _module_call(frame: FrameType) -> bool:
    """The frame runs an nn.Module's forward (directly, or through ``__call__``)."""
    if frame.f_code.co_name not in _MODULE_CALLS:
        return False
    nn = sys.modules.get("torch.nn")
    return nn is not None and isinstance(frame.f_locals.get("self"), nn.Module)


class LoopTracker:
    """Chooses the step loop and calls ``on_step(loop)`` at each of its back-edges.

    ``forwards()`` counts the outermost forwards so far; ``forced``: a ``FILE:LINE`` that is the step
    whatever is seen, or ``"loop"`` (the loop is the step even where forwards came once per iteration).
    The policy's ``on_choose(loop)`` says whether a loop may take the steps (not once exact ones came);
    ``on_drop(loop)`` hears of a step loop given up, ``on_done()`` that nothing need be watched any more.
    The source sets ``enclosing(frame)``: the program's loop around a frame's current position, or None.
    """

    def __init__(self, forwards: Callable[[], int] = lambda: 0, forced: str | None = None) -> None:
        self.forwards = forwards
        self.forced = forced
        self.on_step: Callable[[Loop], None] = lambda loop: None
        self.on_choose: Callable[[Loop], bool] = lambda loop: True
        self.on_drop: Callable[[Loop], None] = lambda loop: None
        self.on_done: Callable[[], None] = lambda: None
        self.enclosing: Callable[[FrameType], Loop | None] = lambda frame: None
        self.step: Loop | None = None
        self.named: Loop | None = None      # the loop whose iterations held the forward steps
        self.dropped: list[Loop] = []       # step loops given up
        self._seen: list[Loop] = []
        self.first_edge = 0                 # the step loop's back-edges when it was chosen
        self.chosen_at = 0.0                # perf_counter at the start of the activation it was chosen in
        self.done = False
        self.thread = threading.get_ident()
        # The source calls edge() at the start of each iteration (marks.py), not at its end (a back-edge):
        # the outer loop's count then includes the iteration under way.
        self.at_start = False

    @property
    def exact(self) -> bool:
        """``forced`` names one loop (``FILE:LINE``): nothing is judged."""
        return self.forced not in (None, "loop")

    # -- the hot path ------------------------------------------------------------------------

    def step_edge(self, loop: Loop) -> None:
        """An iteration of the step loop ended (the source checks ``loop is tracker.step`` first): a boundary."""
        loop.edges += 1
        loop.last = time.perf_counter()   # a loop that may take over waits until this one stopped
        self.on_step(loop)

    def edge(self, loop: Loop, frame: FrameType) -> bool:
        """An iteration of ``loop`` ended in ``frame``; False: stop watching it."""
        if loop is self.step:
            self.step_edge(loop)
            return True
        if loop.state not in (WATCHING, OUTER) or self.done:
            return False
        if threading.get_ident() != self.thread:
            return True      # another thread's loop (a data loader's): not the program's steps
        now = time.perf_counter()
        if not loop.placed:
            self._seen.append(loop)
            self._place(loop, frame)
            if loop.state == OFF:
                return False
        self._time(loop, frame, now)
        loop.edges += 1
        for child in loop.children:
            self._judge(child, loop)
        keep = loop.state == OUTER or self._consider(loop, now)
        loop.last = time.perf_counter()   # the tracker's own time is no iteration's
        return keep

    def _time(self, loop: Loop, frame: FrameType, now: float) -> None:
        parent_edges = loop.parent.edges if loop.parent is not None else 0
        if loop.edges and id(frame) == loop.frame and parent_edges == loop.parent_edges:
            loop.recent.append(now - loop.last)
            loop.run += 1
            loop.timed += 1
            loop.most = max(loop.most, loop.run)
        else:   # a new activation: the loop entered again, or in a new iteration of its outer loop
            loop.run, loop.run_start, loop.forwards = 0, now, self.forwards()
        loop.last, loop.frame, loop.parent_edges = now, id(frame), parent_edges

    # -- choosing ----------------------------------------------------------------------------

    def _place(self, loop: Loop, frame: FrameType) -> None:
        """Find the loop around ``loop`` (known already when in the same code) and whether a module's
        forward lies between them; rule out what can never be the step."""
        loop.placed = True
        inside = _module_call(frame)
        loading = loop.parent is not None and loop.parent.why == _LOADING_WHY
        if loop.parent is None:
            f = frame.f_back
            while f is not None:
                around = self.enclosing(f)
                if around is not None:
                    loop.parent = around
                    break
                inside = inside or _module_call(f)
                loading = loading or _data_loading(f)
                f = f.f_back
        if self.exact:
            if loop.spec() != self.forced:
                loop.state = OFF
        elif self.step is not None and self._inside(loop, self.step):
            loop.state, loop.why = OFF, f"a part of each iteration of the step loop {self.step.describe()}"
        elif loop.generator:
            loop.state, loop.why = OFF, "in a generator: its iterations wait on its consumer's work"
        elif loop.comprehension:
            loop.state, loop.why = OFF, "a comprehension: it builds a value, and is no step"
        elif inside:
            loop.state, loop.why = OFF, "reached through an nn.Module's forward: the model's own loop"
        elif loading:   # a dataset's __getitem__ (a tokenizer's loop over characters) builds the batch
            loop.state, loop.why = OFF, _LOADING_WHY
        if loop.parent is not None and loop.state != OFF:
            loop.parent.children.append(loop)

    def _judge(self, child: Loop, parent: Loop) -> None:
        """``parent`` iterated again: a ``child`` it has now outnumbered is a part of its iterations."""
        if child.state not in (WATCHING, STEP) or parent.run <= child.most or self.exact:
            return
        was_step = child.state == STEP
        child.state, child.why = OFF, (f"a part of each iteration of {parent.describe()}: it iterates {child.most + 1}"
                                       " times at a stretch, and that loop more")
        if was_step:
            self._give_up(child)

    def _consider(self, loop: Loop, now: float) -> bool:
        if self.exact:
            self._choose(loop, "--step-on names it")
            return True
        step = self.step
        # A step loop that stopped iterating gives way to one that has run longer than it ever did.
        stopped = step is not None and step.last < loop.run_start and now - loop.run_start > step.last - self.chosen_at
        judged = loop.timed > 0 and loop.timed % TRIVIAL_AFTER == 0
        outer = loop.parent
        ready = (loop.run >= RUN_TOP if outer is None else loop.run >= RUN_NESTED and loop.run > outer.run) \
            and (step is None or stopped)
        if not (judged or ready):
            return True
        median = statistics.median(loop.recent) if loop.recent else 0.0
        if median < MIN_ITERATION_S:
            if judged:
                loop.state, loop.why = OFF, "its iterations are too short to hold work"
            return not judged
        if not ready:
            return True
        if step is None:
            self._choose(loop, f"{loop.run} iterations in a row of {median * 1e3:.3g} ms")
        else:
            step.state, step.why = OFF, f"it stopped iterating, and {loop.describe()} has run longer than it did"
            self._give_up(step)
            self._choose(loop, f"{loop.run} iterations in a row of {median * 1e3:.3g} ms, after {step.describe()}"
                         " stopped")
        return True

    def _choose(self, loop: Loop, why: str) -> None:
        if self.forced is None and self.forwards() - loop.forwards >= max(1, loop.run):
            # Forwards came once per iteration or more: they are the steps (prefill and decode told apart).
            loop.state, loop.why, self.named = NAMED, "its iterations each held an outermost forward", loop
            self.finish()
            return
        loop.why = why           # the policy may add to it
        if not self.on_choose(loop):
            self.finish()       # exact steps (the optimizer's, roofscope.step()) came first
            return
        loop.state = STEP
        self.step, self.first_edge, self.chosen_at = loop, loop.edges, loop.run_start
        for inner in self._seen:   # the loops inside its iterations are parts of each step
            if inner.state == WATCHING and self._inside(inner, loop):
                inner.state, inner.why = OFF, f"a part of each iteration of the step loop {loop.describe()}"
        outer = loop.parent
        while outer is not None:
            outer.state = OUTER
            outer = outer.parent

    @staticmethod
    def _inside(loop: Loop, outer: Loop) -> bool:
        p = loop.parent
        while p is not None and p is not outer:
            p = p.parent
        return p is outer

    def _give_up(self, loop: Loop) -> None:
        """A chosen step loop turned out a helper, or stopped: another loop may be the step instead."""
        self.step = None
        self.dropped.append(loop)
        outer = loop.parent
        while outer is not None:
            outer.state = WATCHING
            outer = outer.parent
        self.on_drop(loop)

    def finish(self) -> None:
        """Nothing more to watch: the steps are another source's (or the forwards the loop holds)."""
        if not self.done:
            self.done = True
            self.on_done()

    def seen(self) -> list[Loop]:
        """The loops whose iterations were seen, in the order first seen."""
        return list(self._seen)

    # -- what run.json says --------------------------------------------------------------------

    def outer_index(self) -> int | None:
        """The iteration of the step loop's outer loop a step is in (its back-edges so far), if any."""
        step = self.step
        return step.parent.edges - self.at_start if step is not None and step.parent is not None else None

    def facts(self) -> dict[str, Any] | None:
        """run.json's ``steps.loop``: the step loop (or the one whose iterations held the forward steps),
        why, and the loops around it."""
        loop = self.step or self.named
        if loop is None:
            return None
        outer, p = [], loop.parent
        while p is not None:
            outer.append(p.to_dict())
            p = p.parent
        return {**loop.to_dict(), "role": "step" if loop is self.step else "holds the forward steps",
                "why": loop.why, "first_edge": self.first_edge if loop is self.step else None, "outer": outer,
                "dropped": [d.to_dict() | {"why": d.why} for d in self.dropped]}
