"""The counters pass: add hardware counters to a Run (`roofscope counters RUN`, `roofscope run --counters ncu`).

It re-runs the Run's recorded command under ncu over the same steps (collectors/counters/ncu.py), or takes
a CSV the user exported from ncu (``from_csv``), joins the launches to the trace's kernels
(analyzers/ingest/ncujoin.py), stores them in the Run and re-renders its summary.json and report.html.
Like merge.py it is a workflow (it collects, analyzes and renders), so it sits above all three; the
command that starts it (commands/counters.py) says how to read a recorded command line (``target_of``).
"""
from __future__ import annotations

import shlex
import socket
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from roofscope.analysis import run as analyze
from roofscope.analyzers.ingest import read as read_trace
from roofscope.analyzers.ingest.ncujoin import check_join, join, kernel_filter
from roofscope.collectors.counters import cupti_probe
from roofscope.collectors.counters.ncu import Target, check_metrics, collect, find_ncu
from roofscope.collectors.counters.ncu_csv import METRICS, NcuCsvError, parse_ncu_csv
from roofscope.errors import OutputExistsError, RoofscopeError
from roofscope.fileio import read_maybe_gzip
from roofscope.reports.html import render_html
from roofscope.run import REPORT_FILE, SUMMARY_FILE, Run, load, summary_text
from roofscope.run.counters import COUNTERS_FILE, COUNTERS_REPORT, CountersError, save
from roofscope.run.manifest import add_files

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

# The Run's recorded `roofscope run` command → what ncu re-runs (commands/counters.recorded_target).
TargetOf = Callable[[dict[str, Any]], Target]


def confirm_recorded_command(meta: dict[str, Any], yes: bool) -> None:
    """The counters pass executes the command run.json records: a Run made on another machine (or one that
    does not say where) may carry any command, so it is shown and run only with ``yes`` or the user's
    answer at a terminal."""
    env = meta.get("environment")
    host = env.get("hostname") if isinstance(env, dict) else None
    if yes or host == socket.gethostname():
        return
    command = meta.get("command")
    shown = " ".join(shlex.quote(str(c)) for c in command) if isinstance(command, list) else repr(command)
    what = (f"this Run was recorded {f'on {host}' if host else 'on an unknown machine'}, not on this one"
            f" ({socket.gethostname()}); the counters pass would run its recorded command in"
            f" {meta.get('cwd') or '.'}: {shown}")
    if not sys.stdin or not sys.stdin.isatty():
        raise RoofscopeError(f"{what}; check it and pass --yes to run it")
    import click

    if not click.confirm(f"{what}\nRun it under ncu?", default=False, err=True):
        raise RoofscopeError("the recorded command was not run (not confirmed)")


def counters_pass(run_dir: str | Path, target_of: TargetOf, *, sample: int | None = None, skip: int = 0, from_csv: str | None = None,
                  force: bool = False, quiet: bool = False, kernel_name: str | None = None,
                  nvtx: str | None = None, yes: bool = False) -> int:
    """Collect (or read) counters, join, store, re-render; 0 on success. ``kernel_name`` / ``nvtx``
    filter the kernels (ncu's --kernel-name / --nvtx-include, and the join alike); ``yes``: run the
    recorded command of a Run made on another machine without asking."""
    kernel_filter(kernel_name)  # a bad regex fails before the (long) pass
    r = load(run_dir)
    # Before the (long) pass; save() checks again.
    if not force and ("counters" in r.meta or (r.path / COUNTERS_FILE).exists()):
        raise OutputExistsError(f"{r.path} already has counters ({COUNTERS_FILE}); pass --force to replace them")
    meta: dict[str, Any] = {"tool": "ncu", "ncu_version": None, "metrics": list(METRICS), "sample": sample,
                            "skip": skip, "kernel_name": kernel_name, "nvtx": nvtx}
    if from_csv:
        table = parse_ncu_csv(_read_text(from_csv))
        warnings = check_metrics(table)
        meta.update(source=str(Path(from_csv).resolve()), command=None)
        return _store(r, table, meta, warnings, None, force, quiet)
    target = target_of(r.meta)
    confirm_recorded_command(r.meta, yes)
    with tempfile.TemporaryDirectory(prefix="roofscope-ncu-") as tmp:
        res = collect(target, cwd=r.meta.get("cwd") or ".", workdir=Path(tmp), sample=sample, skip=skip,
                      kernel_name=kernel_name, nvtx=nvtx)
        meta.update(source="ncu", ncu_version=res.version, command=res.command)
        return _store(r, res.table, meta, res.warnings, res.report, force, quiet)


def _read_text(path: str) -> str:
    return read_maybe_gzip(path, NcuCsvError, "expected an ncu CSV export").decode(errors="replace")


def _store(r: "Run", table: "pd.DataFrame", meta: dict[str, Any], warnings: list[str], report: Path | None,
           force: bool, quiet: bool) -> int:
    kernel_name, nvtx = meta.get("kernel_name"), meta.get("nvtx")
    joined, stats = join(table, read_trace(r.trace_path), skip=int(meta.get("skip") or 0), kernel_name=kernel_name,
                         nvtx=nvtx)
    if stats.trace_kernels == 0 and (kernel_name is not None or nvtx is not None):
        raise CountersError(f"no kernel of the Run's recorded steps matches {_filter_text(kernel_name, nvtx)}"
                            " (the regex is searched in the kernel's function name; --nvtx names a roofscope.region())")
    warnings += check_join(stats)
    meta.update(join=asdict(stats), na_metrics=list(table.attrs.get("na_metrics", [])), warnings=warnings)
    path = save(r.path, joined, meta, report=report, force=force)
    warnings += rerender(r.path)
    if not quiet:
        sample, skip = meta.get("sample"), int(meta.get("skip") or 0)
        print(f"counters: {stats.ncu_kernels} kernel launches profiled, {stats.matched} matched to the trace's "
              f"{stats.trace_kernels} kernels ({stats.name_mismatches} name mismatches)")
        window = f"{'first ' if not skip else ''}{sample} launches" if sample else "all launches"
        only = f" matching {_filter_text(kernel_name, nvtx)}" if kernel_name is not None or nvtx is not None else ""
        print(f"sample:   {window}{only}{f' after the first {skip}' if skip else ''} of the recorded steps")
        print(f"wrote:    {path}")
        if report is not None:
            print(f"report:   {r.path / COUNTERS_REPORT} (open it in Nsight Compute)")
    for w in warnings:
        print(f"roofscope: warning: {w}", file=sys.stderr)
    return 0


def _filter_text(kernel_name: str | None, nvtx: str | None) -> str:
    return " and ".join(([f"--kernel-name {kernel_name!r}"] if kernel_name is not None else [])
                        + ([f"--nvtx {nvtx!r}"] if nvtx is not None else []))


def rerender(run_dir: Path) -> list[str]:
    """Rewrite the Run's summary.json (and report.html, if it has one) from a fresh analysis."""
    try:
        analysis = analyze(run_dir)
    except RoofscopeError as e:
        return [f"could not re-analyze the Run, so its summary and report predate the counters: {e}"]
    add_files(run_dir, {SUMMARY_FILE: summary_text(analysis.to_dict())})
    if (run_dir / REPORT_FILE).exists():
        add_files(run_dir, {REPORT_FILE: render_html(analysis)})
    return []


def check_before_run(kind: str | None, duration: float | None, sample: int | None, skip: int = 0,
                     kernel_name: str | None = None, nvtx: str | None = None) -> None:
    """``roofscope run --counters KIND``: fail before the script starts when the pass cannot work."""
    given = [flag for flag, v in (("--sample", sample is not None), ("--skip", bool(skip)),
                                  ("--kernel-name", kernel_name is not None), ("--nvtx", nvtx is not None)) if v]
    if given and kind != "ncu":
        raise RoofscopeError(f"{given[0]} needs --counters ncu")
    kernel_filter(kernel_name)
    if kind == "cupti":
        cupti_probe.require_cupti_counters()
        return
    if duration is not None:
        raise RoofscopeError("--counters ncu needs step boundaries to re-run the same steps under ncu;"
                             " it cannot follow a time window (--duration)")
    find_ncu()


def after_run(r: "Run | None", target_of: TargetOf, script_code: int, sample: int | None, quiet: bool, skip: int = 0,
              kernel_name: str | None = None, nvtx: str | None = None) -> int:
    """``roofscope run --counters ncu``: the counters pass on the Run just written; its exit code."""
    if r is None:
        return 0
    if script_code != 0:
        print(f"roofscope: warning: the script exited with code {script_code}: skipping the counters pass"
              f" (run `roofscope counters {r.path}` once it succeeds)", file=sys.stderr)
        return 0
    try:
        return counters_pass(r.path, target_of, sample=sample, skip=skip, quiet=quiet, kernel_name=kernel_name, nvtx=nvtx,
                             yes=True)  # the Run just made here
    except RoofscopeError as e:
        print(f"roofscope: error: counters pass: {e} (the Run {r.path} was written without counters)",
              file=sys.stderr)
        return e.exit_code
