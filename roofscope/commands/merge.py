"""`roofscope merge RUN_OR_TRACE...`: one report for the ranks of a distributed job.

Writes into DIR ``job.json`` (the parts), ``summary.json`` (the cross-rank summary) and
``report.html``; DIR may already hold the ``rank-NNNN/`` Runs (the torchrun layout), but
these three files are replaced only with ``--force``, and no output may replace an input or
land inside a Run.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roofscope.config import MergeWorkers
from roofscope.errors import RoofscopeError
from roofscope.fileio import atomic_write, check_writable
from roofscope.run import is_run_dir
from roofscope.run.layout import COMBINED_FILES, JOB_FILE, REPORT_FILE, SUMMARY_FILE
from roofscope.run.schema import JOB_SCHEMA_VERSION
from roofscope.text_safety import clean
from roofscope.commands.options import CeilingOptions

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.job.ranks import Part
    from roofscope.job.straggler import Job


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
    from roofscope.job.ranks import is_job_dir

    return sources[0] if len(sources) == 1 and is_job_dir(sources[0]) else None


def _check_outputs(out: Path | None, outputs: list[Path], inputs: list[Path], force: bool) -> None:
    """Refuse outputs that would replace an input (a part, the baseline) or land inside a Run,
    even with --force: a merge never modifies what it reads. Then, without --force, outputs
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


def job_doc(parts: list["Part"], world: int, out: Path | None) -> dict[str, Any]:
    """job.json: the parts with their ranks, paths relative to ``out`` where they lie inside it."""
    def rel(p: Path) -> str:
        inside = out is not None and p.resolve().is_relative_to(out.resolve())
        return _rel(p, out) if inside else str(p.resolve())

    return {"schema_version": JOB_SCHEMA_VERSION, "kind": "roofscope-job", "world_size": world,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "parts": [{"rank": p.rank, "path": p.url or rel(p.path), "node": p.node,
                       "kind": "run" if p.is_run else "trace"}
                      for p in parts]}


def run(opts: MergeOptions) -> int:
    from roofscope.analysis import AnalysisSettings, run as analyze
    from roofscope.job.ranks import analyze_parts, resolve_parts
    from roofscope.job.straggler import combine
    from roofscope.jsonsafe import json_safe

    out = Path(opts.out) if opts.out else None
    files = [out / n for n in COMBINED_FILES] if out else []
    # Parts first (they only read run.json and trace heads), so that no output can overwrite one;
    # both checks come before the analysis.
    parts, world, warnings = resolve_parts(opts.sources, allow_remote=opts.allow_remote)
    _check_outputs(out, files + ([Path(opts.json_out)] if opts.json_out else []),
                   [p.path for p in parts if not p.url] + ([Path(opts.baseline)] if opts.baseline else []),
                   opts.force)
    settings = AnalysisSettings.of(opts)
    baseline = None
    if opts.baseline:
        baseline = analyze(opts.baseline, settings).summary.metrics.step_time_s
        if not baseline:
            warnings.append(f"baseline {opts.baseline} has no profiled steps: no scaling tax")
    results = analyze_parts(parts, settings, jobs=opts.jobs, scheduler=opts.scheduler)
    job = combine(results, world, baseline, warnings)
    summary = job.to_dict()
    if not opts.quiet:
        sys.stdout.write(render_console(job))
    else:  # missing ranks and left-out Runs are said even then
        for w in job.warnings:
            print(f"roofscope: warning: {clean(w)}", file=sys.stderr)
    reports = {p.rank: p.report() for p in parts}
    if out:
        from roofscope.render.multirank import render_multirank

        doc = job_doc(parts, world, out)
        links = {r: _rel(p, out) for r, p in reports.items() if p is not None}
        atomic_write(out / JOB_FILE, json.dumps(doc, indent=1), force=opts.force)
        atomic_write(out / SUMMARY_FILE, json.dumps(json_safe(summary), indent=1), force=opts.force)
        atomic_write(out / REPORT_FILE, render_multirank(job, links), force=opts.force)
        print(f"wrote {out / REPORT_FILE}", file=sys.stderr)
    if opts.json_out:
        atomic_write(opts.json_out, json.dumps(json_safe(summary), indent=1), force=opts.force)
        print(f"wrote {opts.json_out}", file=sys.stderr)
    return 0


def render_console(job: "Job", top: int = 5) -> str:
    """Terminal summary of a job: per-rank table, straggler verdict, collectives, recommendations."""
    from roofscope.model.summary import Recommendation
    from roofscope.render.console import _finding_lines, pct, shorten, table

    def ms(x: float) -> str:
        return "-" if x != x else f"{x * 1e3:.2f}"

    out = [f"roofscope job: {len(job.results)} of {job.world_size} ranks, "
           + ", ".join(sorted({r.device for r in job.results})) + f"; median step {ms(job.step_s)} ms", ""]
    out += [f"warning: {w}" for w in job.warnings]
    rows = [[str(r.rank), ms(r.step_s), pct(r.mfu), pct(r.busy_s / r.step_s if r.step_s > 0 else None),
             ms(r.comm_s), ms(r.comm_exposed_s), ms(r.self_s)] for r in job.ranks.itertuples()]
    out += table(["rank", "step ms", "MFU", "busy", "comm ms", "exposed ms", "self ms"], rows, ">>>>>>>") + [""]
    if job.stragglers:
        for s in job.stragglers:
            ker = "; ".join(f"{shorten(k['name'], 48)} +{k['excess_ms']:.2f} ms" for k in s.kernels[:3])
            out.append(f"straggler: rank {s.rank}, +{s.excess_s * 1e3:.2f} ms/step of own work in"
                       f" {100 * s.positive_share:.0f}% of steps (noise {job.noise_s * 1e3:.2f} ms)"
                       + (f"; slower: {ker}" if ker else "")
                       + (f"; host idle +{s.host_idle_excess_s * 1e3:.2f} ms" if s.host_idle_excess_s > 0 else ""))
    elif job.noise_s == job.noise_s:
        out.append(f"no straggler: every rank's own work is within the noise ({job.noise_s * 1e3:.2f} ms/step)")
    else:
        out.append("straggler test needs two ranks with common steps")
    out.append("")
    c = job.collectives
    if len(c):
        def gb(x: float) -> str:
            return "-" if x != x else f"{x / 1e9:.1f}"

        crow = [[r.collective, f"{r.count:.1f}", ms(r.time_s), "-" if r.bytes != r.bytes else f"{r.bytes / 1e6:.2f}",
                 gb(r.algbw), gb(r.busbw), r.algorithms or "-"] for r in c.itertuples()]
        out += ["Collectives (median over ranks, per step)"]
        out += table(["collective", "calls", "ms", "MB/call", "algbw GB/s", "busbw GB/s", "algorithm"], crow,
                     "<>>>>><") + [""]
    if job.scaling:
        t = job.scaling
        out.append(f"scaling tax vs baseline {ms(t['baseline_step_s'])} ms: +{ms(t['tax_s'])} ms/step"
                   f" (exposed comm {ms(t['exposed_comm_s'])}, straggler wait {ms(t['straggler_wait_s'])},"
                   f" other {ms(t['other_s'])}); scaling efficiency {pct(t['efficiency'])}")
        out.append("")
    out += _finding_lines([Recommendation.from_dict(f.to_dict()) for f in job.findings], top)
    return "\n".join(map(clean, out)) + "\n"
