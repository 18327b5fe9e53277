"""How a profiled process ends, and what of its profile survives whatever ends it.

``signals`` (SIGINT, SIGTERM, SIGHUP: raised into the script while it runs, noted while roofscope writes the
Run, and given back to a forked child), ``exits`` (``os._exit`` ends the profile first), ``recording`` (the
profile recorded inside its Run directory, TMPDIR only when that will not do).
"""
from __future__ import annotations

from roofscope.collectors.lifecycle.exits import intercept_exit
from roofscope.collectors.lifecycle.recording import Exports, recording_dir
from roofscope.collectors.lifecycle.signals import (Guard, Interrupted, Terminated, armed, current, replace_handler,
                                                    restore_handler)

__all__ = ["Exports", "Guard", "Interrupted", "Terminated", "armed", "current", "intercept_exit", "recording_dir",
           "replace_handler", "restore_handler"]
