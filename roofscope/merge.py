"""A distributed job's merge: its ranks' parts found, analyzed and combined into one
:class:`~roofscope.analyzers.job.straggler.Job`, its summary printed, and ``job.json`` (the parts),
``summary.json`` (the cross-rank summary) and ``report.html`` written into the output directory.

`roofscope merge` (commands/merge.py) and rank 0 at the end of a profile under torchrun
(pipeline.conclude) both run it. Like the pipeline it is a workflow: it analyzes and renders
(through reports/registry.py), so it sits above both; nothing below imports it.

The output directory may already hold the ``rank-NNNN/`` Runs (the torchrun layout), but the
three files are replaced only with ``force``, and no output may replace an input or land
inside a Run.
"""
from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from roofscope.analysis import AnalysisSettings, run
from roofscope.analyzers.job.cluster import analyze_on_dask
from roofscope.analyzers.job.ranks import Part, RankResult, rank_result, resolve_parts
from roofscope.analyzers.job.straggler import Job, combine
from roofscope.analyzers.job.urls import fetched
from roofscope.config import CeilingOverrides, MergeWorkers, RooflineThresholds
from roofscope.errors import RoofscopeError
from roofscope.fileio import atomic_write, check_writable
from roofscope.reports.registry import JOB, RenderOptions, renderer
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
    _check_outputs(out, files + ([Path(json_out)] if json_out and json_out != "-" else []),
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
    summary = renderer(JOB, "json").render(job, RenderOptions())
    if json_out == "-":   # the summary instead of the terminal one (for a pipe)
        sys.stdout.write(summary)
    if not quiet and json_out != "-":
        sys.stdout.write(renderer(JOB, "console").render(job, RenderOptions()))
    else:  # missing ranks and left-out Runs are said even then
        for w in job.warnings:
            print(f"roofscope: warning: {clean(w)}", file=sys.stderr)
    if out:
        links = {rank: _rel(path, out) for rank, path in ((p.rank, p.report()) for p in parts) if path is not None}
        atomic_write(out / JOB_FILE, json.dumps(job_doc(parts, world, out), indent=1), force=force)
        atomic_write(out / SUMMARY_FILE, summary, force=force)
        atomic_write(out / REPORT_FILE, renderer(JOB, "html").render(job, RenderOptions(reports=links)), force=force)
        print(f"wrote {out / REPORT_FILE}", file=sys.stderr)
    if json_out and json_out != "-":
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


def analyze_part(part: Part, settings: AnalysisSettings) -> RankResult:
    """Analyze one part (in a worker process, a Dask worker or in-process); ``settings``
    are every rank's (one job, one set of ceilings). A URL part is read to a temporary file by the worker."""
    if part.url:
        with fetched(part.url) as local:
            return rank_result(part, run(local, settings))
    return rank_result(part, run(part.path, settings))


def analyze_parts(parts: list[Part], settings: AnalysisSettings, jobs: int | None = None,
                  scheduler: str | None = None) -> list[RankResult]:
    """Analyze ``parts`` in ``jobs`` processes (default: one per CPU; 1 runs in this process),
    or on the Dask cluster at ``scheduler`` (see :mod:`.cluster`).

    Workers come from a ``forkserver`` context preloaded with the analysis modules (no torch:
    analysis does not import it):
    each worker is a fork of a server that imported them once, so it starts in milliseconds
    (``spawn`` pays the ~2 s of imports per worker), and unlike plain ``fork`` it is safe when
    the caller holds CUDA or threads (rank 0 merging right after its own profile).
    """
    if scheduler:
        return analyze_on_dask(analyze_part, parts, settings, scheduler, jobs)
    jobs = min(jobs or os.cpu_count() or 1, len(parts))
    if jobs <= 1:
        return [analyze_part(p, settings) for p in parts]
    import multiprocessing as mp

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["roofscope.merge", "roofscope.analysis", "roofscope.analyzers.cost.costmodel",
                                "roofscope.analyzers.cost.formulas"])
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx)
    try:
        return list(pool.map(analyze_part, parts, [settings] * len(parts)))
    except BrokenProcessPool:
        raise RoofscopeError(f"a worker process analyzing the ranks died (out of memory?); retry with fewer"
                             f" --jobs than {jobs}") from None
    finally:
        # On the first bad part, drop the parts not yet started instead of analyzing them all first.
        pool.shutdown(wait=True, cancel_futures=True)
