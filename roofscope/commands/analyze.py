"""`roofscope analyze TRACE` and `roofscope report TRACE`: analyze an existing trace, then
print the terminal summary and/or write JSON, CSV and HTML outputs."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from roofscope.analysis import AnalysisSettings
from roofscope.analysis import run as run_analysis
from roofscope.analyzers.cost.formulas.custom import load_all
from roofscope.analyzers.cost.notes import window_notes
from roofscope.analyzers.job.ranks import is_job_dir
from roofscope.commands.options import CeilingOptions
from roofscope.config import Presentation
from roofscope.commands.outputs import plan
from roofscope.fileio import atomic_write
from roofscope.reports.registry import RESULT, RenderOptions, renderer


@dataclass
class AnalyzeOptions(CeilingOptions, Presentation):
    trace: str
    json_out: str | None = None
    csv_out: str | None = None
    html_out: str | None = None
    markdown_out: str | None = None     # "-" prints the markdown instead of the terminal summary
    perfetto_out: str | None = None     # the annotated trace (reports/perfetto.py)
    cdn: bool = False
    open_browser: bool = False
    quiet: bool = False
    graph_capture: tuple[str, ...] = ()
    formulas: tuple[str, ...] = ()
    attention_window: int | None = None


def run(opts: AnalyzeOptions) -> int:
    if is_job_dir(opts.trace):  # the ranks of a distributed job: the cross-rank summary
        from roofscope.commands.merge import MergeOptions  # start-up time: a trace's analysis needs no merge
        from roofscope.commands.merge import run as merge  # start-up time

        return merge(MergeOptions(sources=[opts.trace], json_out=opts.json_out, quiet=opts.quiet,
                                  **opts.ceiling_options()))
    # Refuse to clobber before spending time on the analysis.
    to_stdout, files = plan([(opts.json_out, "json"), (opts.csv_out, "csv"), (opts.html_out, "html"),
                             (opts.markdown_out, "markdown"), (opts.perfetto_out, "perfetto")], opts.force)
    outputs = [(path, renderer(RESULT, name)) for path, name in files]
    load_all(opts.formulas)
    result = run_analysis(opts.trace, AnalysisSettings.of(opts, opts, graph_capture=tuple(opts.graph_capture),
                                                         attention_window=opts.attention_window))
    if opts.attention_window is not None and not window_notes(result.kernels):
        print(f"roofscope: --attention-window {opts.attention_window}: no attention call here shows a sliding "
              "window (only vLLM's unified attention on AITER's kernels does): nothing was costed with it",
              file=sys.stderr)
    options = RenderOptions(top=opts.top, cdn=opts.cdn)
    if to_stdout or not opts.quiet:
        sys.stdout.write(renderer(RESULT, to_stdout or "console").render(result, options))
    for path, r in outputs:
        atomic_write(path, r.render(result, options), force=opts.force)
        print(f"wrote {Path(path)}", file=sys.stderr)
    if opts.open_browser and opts.html_out and to_stdout != "html":
        import webbrowser

        # open() says False when no browser could be started (a server, a container): say so.
        if not webbrowser.open(Path(opts.html_out).resolve().as_uri()):
            print(f"roofscope: no browser found to open the report; it is at {Path(opts.html_out).resolve()}",
                  file=sys.stderr)
    return 0
