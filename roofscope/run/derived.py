"""Files derived from a Run's own (summary.json, report.html): stamped with the analysis version
that computed them, so a reader can tell an outdated one from a current one.

:data:`ANALYSIS_VERSION` is bumped by any change that alters the analysis summary (a new
section, a changed figure); a stored summary with another stamp, or none (written before
stamps existed), is stale, and :meth:`Run.summary` recomputes it from the trace instead of
returning it. Reading never rewrites a Run (it may be read-only, or a committed fixture);
whatever writes summary.json writes :func:`summary_text`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from roofscope.jsonsafe import json_safe
from roofscope.run.layout import SUMMARY_FILE

# 4: the program's own time (step_time, diagnosis.program_time), costing of serving, optimizer and library
# ops, classes without a formula, blocked fixes (issues 25, 26, 29)
# 5: gathers read only their rows (an embedding fused with a cast); windowed attention beside full-context
# attention is uncosted (its window is not recorded) instead of costed over the whole context (issue 26)
# 6: the run block names the recorded steps on a Run's first analysis too (it had them only on re-analysis)
# 7: windowed attention costed over the window the user gives (--attention-window); the uncosted note says how;
# a kernel above a memory roof without cache levels names that level (above_roof.top[].level)
# 8: fixes written for the program (diagnosis.program, findings' fix.apply and kind, blocked compile and graph
# fixes), the CPU rules, a CPU-only trace of a GPU job named and given no ceilings (issue 37)
# 9: launch_fusion (a launch-bound step compiled without CUDA graphs), in torch_compile's change (issue 37)
# 10: diagnosis.program names the module holding the one the steps call (root_owner, root_attr) and a CPU
# run (cpu); the CPU loader rule spreads the process's CPU work over the free cores (issue 37)
# 11: fusion counts the cuDNN layout transposes torch.compile takes away (Inductor's layout optimization, issue 37)
# 12: a profiled step over 3x the median profiled step is left out of the diagnosis (diagnosis.outlier_steps)
# 13: the CPU fusion rule leaves a dropout's ops out of its chains and says so (fusion.figures.dropouts_per_step)
# 14: channels_last and compile price cuDNN's NCHW batch norm at the NHWC rate (figures.batch_norm_s); the CPU
# fusion rule applies compile with fallback_random where the model draws dropout masks (figures.dropout_s)
# and savings are held to the host's own time (program_time.host_floor_s) and not scaled up to an unsteady own step
ANALYSIS_VERSION = 14
STAMP = "analysis_version"   # the key summary.json carries the stamp under


def summary_text(summary: dict[str, Any]) -> str:
    """``summary`` as summary.json holds it: JSON (NaN as null), stamped."""
    return json.dumps({**json_safe(summary), STAMP: ANALYSIS_VERSION}, indent=1, allow_nan=False)


def read_summary(run_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The stored summary.json as written (stamp included), or None when the Run has none."""
    p = Path(run_dir) / SUMMARY_FILE
    return json.loads(p.read_text()) if p.exists() else None


def is_current(stored: dict[str, Any]) -> bool:
    return stored.get(STAMP) == ANALYSIS_VERSION


def unstamped(stored: dict[str, Any] | None) -> dict[str, Any] | None:
    """The summary as the analysis produced it, without the stamp."""
    return None if stored is None else {k: v for k, v in stored.items() if k != STAMP}

