"""The step any program has: the loop of its own code whose iterations hold the work (docs/steps.md).

``model.py`` says which code is the program's own and names its loops; ``tracker.py`` chooses the
step loop from the iterations it sees and marks a step boundary at each of its back-edges; the
iterations reach it from ``sys.monitoring`` where Python has it (``monitoring.py``, 3.12+), else from
marks compiled into the script's own loops (``marks.py``). :func:`watch` gives the one this Python has.
"""
from __future__ import annotations

import sys
from pathlib import Path

from roofscope.collectors.loops.marks import Marks
from roofscope.collectors.loops.model import Watcher
from roofscope.collectors.loops.monitoring import Monitoring
from roofscope.collectors.loops.tracker import LoopTracker


def watch(tracker: LoopTracker | None, script: Path | None) -> Watcher:
    """The source of the program's loop iterations for this Python (not started yet); without a
    tracker, one that only waits for the script to bind a name (``--step-on __main__.FUNC``)."""
    return Monitoring(tracker, script) if sys.version_info >= (3, 12) else Marks(tracker, script)
