"""Files derived from a Run's own (summary.json, report.html): stamped with the analysis version
that computed them, so a reader can tell an outdated one from a current one.

:data:`ANALYSIS_VERSION` is bumped by any change that alters the analysis summary (a new
section, a changed figure); a stored summary with another stamp, or none (written before
stamps existed), is stale, and :meth:`Run.summary` recomputes it from the trace instead of
returning it. Reading never rewrites a Run (it may be read-only, or a committed fixture):
:func:`store_derived` is what refreshes the files.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..fileio import atomic_write
from .layout import REPORT_FILE, SUMMARY_FILE

if TYPE_CHECKING:  # pragma: no cover
    from ..analyzers.analysis import Analysis

ANALYSIS_VERSION = 1
STAMP = "analysis_version"   # the key summary.json carries the stamp under


def summary_text(summary: dict[str, Any]) -> str:
    """``summary`` as summary.json holds it: JSON (NaN as null), stamped."""
    from ..reports.export import json_safe

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


def store_derived(run_dir: str | os.PathLike, analysis: "Analysis", *, report: bool | None = None) -> None:
    """Write ``analysis``'s summary.json, and its report.html when ``report`` (None: when the Run
    already has one), each atomically."""
    d = Path(run_dir)
    atomic_write(d / SUMMARY_FILE, summary_text(analysis.summary()), force=True)
    if report if report is not None else (d / REPORT_FILE).exists():
        from ..reports.html import render_html

        atomic_write(d / REPORT_FILE, render_html(analysis), force=True)
