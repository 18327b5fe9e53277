"""`roofscope diff A B`: compare two Runs or traces of the same workload (B after a change)."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from roofscope.analysis import analyze
from roofscope.commands.options import CeilingOptions
from roofscope.compare.diff import diff
from roofscope.config import Presentation
from roofscope.fileio import atomic_write, check_writable
from roofscope.render.diffview import render_markdown, render_terminal


@dataclass
class DiffOptions(CeilingOptions, Presentation):
    run_a: str
    run_b: str
    json_out: str | None = None
    markdown_out: str | None = None
    applied: str | None = None
    quiet: bool = False


def run(opts: DiffOptions) -> int:
    outputs = [(path, render) for path, render in (
        (opts.json_out, lambda d: json.dumps(d.to_dict(), indent=1, allow_nan=False)),
        (opts.markdown_out, lambda d: render_markdown(d, top=opts.top))) if path]
    # Refuse to clobber before spending time on two analyses.
    for path, _ in outputs:
        check_writable(path, opts.force)
    # Both sides on the same ceilings options, so a kernel's class moves only when its timing does.
    kwargs = opts.ceiling_kwargs()
    a, b = (analyze(p, **kwargs) for p in (opts.run_a, opts.run_b))
    d = diff(a, b, applied=opts.applied)
    for w in d.warnings:
        print(f"roofscope: warning: {w}", file=sys.stderr)
    if not opts.quiet:
        sys.stdout.write(render_terminal(d, top=opts.top))
    for path, render in outputs:
        atomic_write(path, render(d), force=opts.force)
        print(f"wrote {Path(path)}", file=sys.stderr)
    return 0
