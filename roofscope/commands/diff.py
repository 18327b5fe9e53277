"""`roofscope diff A B`: compare two Runs or traces of the same workload (B after a change)."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from roofscope.analysis import AnalysisSettings
from roofscope.analysis import run as analyze
from roofscope.analyzers.compare.diff import diff
from roofscope.commands.options import CeilingOptions
from roofscope.config import Presentation
from roofscope.commands.outputs import plan
from roofscope.fileio import atomic_write
from roofscope.reports.registry import DIFF, RenderOptions, renderer


@dataclass
class DiffOptions(CeilingOptions, Presentation):
    run_a: str
    run_b: str
    json_out: str | None = None
    markdown_out: str | None = None
    applied: str | None = None
    allow_partial: bool = False
    allow_other_device: bool = False
    quiet: bool = False


def run(opts: DiffOptions) -> int:
    # Refuse to clobber before spending time on two analyses.
    to_stdout, files = plan([(opts.json_out, "json"), (opts.markdown_out, "markdown")], opts.force)
    outputs = [(path, renderer(DIFF, name)) for path, name in files]
    # Both sides on the same ceilings options, so a kernel's class moves only when its timing does.
    settings = AnalysisSettings.of(opts, opts)
    a, b = (analyze(p, settings) for p in (opts.run_a, opts.run_b))
    d = diff(a, b, applied=opts.applied, allow_partial=opts.allow_partial, allow_other_device=opts.allow_other_device)
    for w in d.warnings:
        print(f"roofscope: warning: {w}", file=sys.stderr)
    options = RenderOptions(top=opts.top)
    if to_stdout or not opts.quiet:
        sys.stdout.write(renderer(DIFF, to_stdout or "console").render(d, options))
    for path, r in outputs:
        atomic_write(path, r.render(d, options), force=opts.force)
        print(f"wrote {Path(path)}", file=sys.stderr)
    return 0
