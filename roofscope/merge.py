"""A distributed job's merge: its ranks' parts found, analyzed and combined into one
:class:`~roofscope.job.straggler.Job`, its summary printed, and ``job.json`` (the parts),
``summary.json`` (the cross-rank summary) and ``report.html`` written into the output directory.

`roofscope merge` (commands/merge.py) and rank 0 at the end of a profile under torchrun
(pipeline.conclude) both run it. Like the pipeline it is a workflow: it analyzes and renders
(through render/registry.py), so it sits above both; nothing below imports it.

The output directory may already hold the ``rank-NNNN/`` Runs (the torchrun layout), but the
three files are replaced only with ``force``, and no output may replace an input or land
inside a Run.
"""
from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from roofscope.analysis import AnalysisSettings, run
from roofscope.config import CeilingOverrides, MergeWorkers, RooflineThresholds
from roofscope.errors import RoofscopeError
from roofscope.fileio import atomic_write, check_writable
from roofscope.job.ranks import Part, analyze_parts, resolve_parts
from roofscope.job.straggler import Job, combine
from roofscope.render.registry import JOB, RenderOptions, renderer
from roofscope.run import is_run_dir
from roofscope.run.layout import COMBINED_FILES, JOB_FILE, REPORT_FILE, SUMMARY_FILE
from roofscope.run.schema import JOB_SCHEMA_VERSION
from roofscope.text_safety import clean


def merge(sources: list[str], *, out: str | Path | None = None, json_out: str | None = None,
          baseline: str | None = None, ceilings: CeilingOverrides | None = None,
          thresholds: RooflineThresholds | None = None, workers: MergeWorkers | None = None,
          allow_remote: bool = False, force: bool = False, quiet: bool = False) -> Job:
    """Merge the parts named by ``sources`` (Runs, traces, job directories, URLs) into one Job,
    each analyzed with ``ceilings`` and ``thresholds``; print its summary (``quiet``: only its
    warnings, on stderr); write the job's files into ``out`` and the summary to ``json_out``."""
    out = Path(out) if out else None
    files = [out / n for n in COMBINED_FILES] if out else []
    # Parts first (they only read run.json and trace heads), so that no output can overwrite one;
    # both checks come before the analysis.
    parts, world, warnings = resolve_parts(sources, allow_remote=allow_remote)
    _check_outputs(out, files + ([Path(json_out)] if json_out else []),
                   [p.path for p in parts if not p.url] + ([Path(baseline)] if baseline else []), force)
    settings = AnalysisSettings.of(ceilings, thresholds)
    base_step = None
    if baseline:
        base_step = run(baseline, settings).summary.metrics.step_time_s
        if not base_step:
            warnings.append(f"baseline {baseline} has no profiled steps: no scaling tax")
    workers = workers or MergeWorkers()
    job = combine(analyze_parts(parts, settings, jobs=workers.jobs, scheduler=workers.scheduler), world, base_step,
                  warnings)
    if not quiet:
        sys.stdout.write(renderer(JOB, "console").render(job, RenderOptions()))
    else:  # missing ranks and left-out Runs are said even then
        for w in job.warnings:
            print(f"roofscope: warning: {clean(w)}", file=sys.stderr)
    summary = renderer(JOB, "json").render(job, RenderOptions())
    if out:
        links = {rank: _rel(path, out) for rank, path in ((p.rank, p.report()) for p in parts) if path is not None}
        atomic_write(out / JOB_FILE, json.dumps(job_doc(parts, world, out), indent=1), force=force)
        atomic_write(out / SUMMARY_FILE, summary, force=force)
        atomic_write(out / REPORT_FILE, renderer(JOB, "html").render(job, RenderOptions(reports=links)), force=force)
        print(f"wrote {out / REPORT_FILE}", file=sys.stderr)
    if json_out:
        atomic_write(json_out, summary, force=force)
        print(f"wrote {json_out}", file=sys.stderr)
    return job


def _check_outputs(out: Path | None, outputs: list[Path], inputs: list[Path], force: bool) -> None:
    """Refuse outputs that would replace an input (a part, the baseline) or land inside a Run,
    even with ``force``: a merge never modifies what it reads. Then, without ``force``, outputs
    that exist."""
    if out is not None and is_run_dir(out):
        raise RoofscopeError(f"{out} is a Run directory: write the job's report beside the Runs"
                             " (-o JOB_DIR), not into one")
    read = {p.resolve() for p in inputs}
    targets = [p.resolve() for p in outputs]
    for path, target in zip(outputs, targets):
        if target in read or target.parent in read:
            raise RoofscopeError(f"{path} would replace an input of this merge: choose another path")
    if len(set(targets)) < len(targets):
        raise RoofscopeError("--json names one of the files written into the -o directory: choose another path")
    for path in outputs:
        check_writable(path, force)


def _rel(path: Path, base: Path | None) -> str:
    if base is not None:
        try:
            return os.path.relpath(path.resolve(), base.resolve())
        except ValueError:  # another drive (Windows)
            pass
    return str(path.resolve())


def job_doc(parts: list[Part], world: int, out: Path | None) -> dict[str, Any]:
    """job.json: the parts with their ranks, paths relative to ``out`` where they lie inside it."""
    def rel(p: Path) -> str:
        inside = out is not None and p.resolve().is_relative_to(out.resolve())
        return _rel(p, out) if inside else str(p.resolve())

    return {"schema_version": JOB_SCHEMA_VERSION, "kind": "roofscope-job", "world_size": world,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "parts": [{"rank": p.rank, "path": p.url or rel(p.path), "node": p.node,
                       "kind": "run" if p.is_run else "trace"}
                      for p in parts]}
