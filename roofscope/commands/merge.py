"""`roofscope merge RUN_OR_TRACE...`: one report for the ranks of a distributed job.

Writes into DIR ``job.json`` (the parts), ``summary.json`` (the cross-rank summary) and
``report.html``, and the summary to ``--json``: the workflow is merge.py's.
"""
from __future__ import annotations

from dataclasses import dataclass

from roofscope.analyzers.job.ranks import is_job_dir
from roofscope.commands.options import CeilingOptions
from roofscope.config import MergeWorkers
from roofscope.merge import merge


@dataclass
class MergeOptions(CeilingOptions, MergeWorkers):
    sources: list[str]
    out: str | None = None
    json_out: str | None = None
    baseline: str | None = None
    quiet: bool = False
    allow_remote: bool = False


def default_out(sources: list[str]) -> str | None:
    """The output directory when none is given: the job directory, if it is the only source."""
    return sources[0] if len(sources) == 1 and is_job_dir(sources[0]) else None


def run(opts: MergeOptions) -> int:
    merge(opts.sources, out=opts.out, json_out=opts.json_out, baseline=opts.baseline, ceilings=opts, thresholds=opts,
          workers=opts, allow_remote=opts.allow_remote, force=opts.force, quiet=opts.quiet)
    return 0
