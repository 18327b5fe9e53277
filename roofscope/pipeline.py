"""The one place that composes a profile: collect → write the Run → analyze → render.

``roofscope run`` (commands/run.py) and ``roofscope.profile()`` (roofscope/context.py) start a
:class:`~.collectors.session.Session`, let the program run, then call :func:`finish`: the
session stops and hands over what it recorded, this module writes the Run from it
(roofscope/run/), analyzes it (roofscope/analysis.py), renders report.html and any ``--format``
outputs into it (reports/registry.py), and :func:`announce` ends the profile on the terminal:
the summary, or for one rank of a distributed job its note and, on rank 0, the job's merge.
Collectors import none of this: they only record. Whatever signal comes while a profile ends
(collectors/lifecycle/), its recorded data is written whole: a signal skips the analysis only, and a
derived file the disk cannot take is a warning, the Run being whole without it.
"""
from __future__ import annotations

import gzip
import signal
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roofscope.analysis import AnalysisSettings, run
from roofscope.analyzers.ingest import read as load_trace
from roofscope.collectors.lifecycle import Guard, Interrupted, armed
from roofscope.config import CeilingOverrides, Presentation, RooflineThresholds
from roofscope.errors import RoofscopeError
from roofscope.hardware.ceilings import Ceilings, ceilings_text
from roofscope.microbench.cpu import ceilings_for_run
from roofscope.reports.registry import RESULT, RenderOptions, check_formats, renderer
from roofscope.run import (CEILINGS_FILE, META_FILE, REPORT_FILE, SUMMARY_FILE, TELEMETRY_FILE, Run, new_meta,
                           summary_text, update_meta, write_run)
from roofscope.run.layout import CAPTURE_FILES
from roofscope.run.manifest import add_files

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.analyzers.model.result import Result
    from roofscope.collectors.distributed import JobPart
    from roofscope.collectors.session import Collected, Session


@dataclass(kw_only=True)
class PipelineOptions(CeilingOverrides, RooflineThresholds):
    """What becomes of a session's recording: the ceilings and thresholds it is analyzed with
    (the command line's, config.py) and the outputs rendered into its Run."""

    report: bool = True                      # report.html
    formats: tuple[str, ...] = ()            # renderer names (reports/registry.py), each written into the Run
    top: int = Presentation.top              # rows of the console summary and its `console` output
    quiet: bool = False                      # no progress lines (a CPU's ceilings measured once)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_formats(RESULT, self.formats)

    def outputs(self) -> list[str]:
        """Renderer names to write into the Run: report.html unless turned off, then the formats asked for."""
        return list(dict.fromkeys((["html"] if self.report else []) + list(self.formats)))


@dataclass
class SessionResult:
    run: "Run | None"
    analysis: "Result | None"          # the analysis of the recorded trace
    warnings: list[str] = field(default_factory=list)
    error: str | None = None           # analysis failed (e.g. unknown GPU); the Run is still written
    interrupted: int | None = None     # the signal that stopped the analysis; the recorded Run is kept

    def problem(self) -> str | None:
        """What to report as an error when the profile ends, if anything."""
        if self.run is None:
            return "no trace was recorded, so no Run was written"
        if self.error:
            return (f"{self.error}; the Run was written without a summary: re-analyze it with"
                    f" `roofscope analyze {self.run.path} --peak-tflops ... --peak-bandwidth ...`")
        return None


def finish(session: "Session", exit_status: dict[str, Any], options: PipelineOptions,
           guard: Guard | None = None) -> SessionResult:
    """Stop ``session``, write its Run, analyze and render it; the session's files are dropped
    afterwards whatever happens. Call once, whatever ended the program. In a child the program
    forked, the session is the parent's: nothing is stopped, written or removed. ``guard`` is the
    profile's (``roofscope run`` holds one from the start); without one, one is held for the finish."""
    if session.foreign:
        return SessionResult(run=None, analysis=None)
    with ExitStack() as stack:
        guard = guard or stack.enter_context(Guard(redeliver=True))
        guard.finishing()
        try:
            return _complete(session, session.stop(exit_status), options, guard)
        finally:
            session.close()


def _complete(session: "Session", c: "Collected", options: PipelineOptions, guard: Guard) -> SessionResult:
    if c.trace is None:
        return SessionResult(run=None, analysis=None, warnings=c.warnings)
    files: dict[str, bytes | str] = {}
    if c.telemetry is not None:
        files[TELEMETRY_FILE] = gzip.compress(c.telemetry.to_json())
    for i, path in enumerate(c.captures):
        if path.exists():
            files[CAPTURE_FILES.format(i)] = gzip.compress(path.read_bytes(), compresslevel=6)
    meta = new_meta(session.config.command, **c.fields)
    # What was recorded is written first: a signal or a failed analysis never loses the profile.
    run = _write_recorded(session, meta, c, files)
    guard.writing = False
    try:
        with guard.armed():      # reading and computing only: a signal skips the rest
            result, error, ceilings = _analyze(session, c, meta, options, run.trace_path)
            outputs = render_outputs(result, options) if result is not None else {}
    except Interrupted as e:
        return SessionResult(run=run, analysis=None, warnings=c.warnings, interrupted=e.signum)
    run = _write_derived(run, meta, result, outputs, ceilings, c.warnings)
    return SessionResult(run=run, analysis=result, warnings=c.warnings, error=error)


def _write_derived(run: Run, meta: dict[str, Any], result: "Result | None", outputs: dict[str, bytes | str],
                   ceilings: "Ceilings | None", warnings: list[str]) -> Run:
    """The analysis's files beside the recorded data: the summary, the steps recorded, the ceilings, the
    rendered outputs. The Run is whole without them: a file that cannot be written (a full disk) is a
    warning, and the others are still tried, the small ones first."""
    files: dict[str, bytes | str] = {}
    steps = None
    if result is not None:
        summary = result.to_dict()
        files[SUMMARY_FILE] = summary_text(summary)
        steps = {**meta["steps"], "recorded": summary["steps"]}
        # Keep measured or user-given ceilings with the Run so it re-analyzes the same;
        # datasheet ones come back from the trace's device name.
        if result.ceilings.source not in ("datasheet", "none"):
            ceilings = result.ceilings
    if ceilings is not None:
        files[CEILINGS_FILE] = ceilings_text(ceilings)
    failed: list[tuple[str, str]] = []
    for name, content in {**files, **outputs}.items():
        try:
            add_files(run.path, {name: content})
        except (OSError, RoofscopeError) as e:
            failed.append((name, _why(e)))
    if steps is not None:
        try:
            run = update_meta(run, steps=steps)
        except (OSError, RoofscopeError) as e:
            failed.append((META_FILE + "'s recorded steps", _why(e)))
    if failed:
        warnings.append(f"the Run's recorded data is in {run.path}, but {', '.join(n for n, _ in failed)} could not"
                        f" be written there ({failed[0][1]}); `roofscope analyze {run.path}` reads it whole")
    return run


def _write_recorded(session: "Session", meta: dict[str, Any], c: "Collected", files: dict[str, bytes | str]) -> "Run":
    """The Run's recorded data (trace, run.json, telemetry, captures) into the claimed output; when that
    fails (a full disk, permissions changed while the program ran), into a rescue directory instead."""
    try:
        return write_run(session.out, meta=meta, trace=c.trace, files=files, force=session.config.force,
                         claim=session.claim)
    except (OSError, RoofscopeError) as e:
        why = _why(e)
    try:
        rescue = Path(tempfile.mkdtemp(prefix=f"roofscope-rescue-{session.config.name}-"))
        run = write_run(rescue, meta=meta, trace=c.trace, files=files, force=True)
    except (OSError, RoofscopeError) as e:
        session.keep_files()
        raise RoofscopeError(f"neither {session.out} ({why}) nor a rescue directory ({_why(e)}) took it; the"
                             f" recorded trace is kept in {c.trace.parent}") from None
    c.warnings.append(f"could not write the Run to {session.out} ({why}); it was saved to {rescue} instead")
    return run


def _why(e: BaseException) -> str:
    return e.strerror if isinstance(e, OSError) and e.strerror else str(e)


def render_outputs(result: "Result", options: PipelineOptions) -> dict[str, bytes | str]:
    """The Run's rendered files by name: each output's renderer under its default file name."""
    render_options = RenderOptions(top=options.top)
    return {r.file_name: r.render(result, render_options)
            for r in (renderer(RESULT, name) for name in options.outputs())}


def _analyze(session: "Session", c: "Collected", meta: dict[str, Any], options: PipelineOptions,
             trace_path: Path) -> tuple["Result | None", str | None, "Ceilings | None"]:
    """The analysis of the recorded trace, or the reason there is none; and the ceilings measured here."""
    trace = load_trace(c.trace)
    trace.path = str(trace_path)  # the summary and outputs name the trace the Run keeps, not the temporary one
    ceilings = None
    overridden = options.device or options.peak_tflops or options.peak_bandwidth_gbs or options.ceilings
    device = meta.get("device") or {}
    if len(trace.kernels) == 0 and device.get("type") == "cuda":
        return None, _no_gpu_kernels(session, meta), None
    if len(trace.kernels) == 0 and device.get("cuda_available"):
        c.warnings.append("this machine has a GPU that the program never used: profiled as a CPU program")
    if len(trace.kernels) == 0 and not overridden:
        ceilings = _cpu_ceilings(c.warnings, options.quiet)
    try:
        settings = AnalysisSettings.of(options, options, graph_capture=tuple(str(p) for p in c.captures))
        result = run(trace, settings, ceilings=ceilings, telemetry=c.telemetry, run_meta=meta)
    except RoofscopeError as e:
        return None, str(e), ceilings
    return result, None, ceilings


def _cpu_ceilings(warnings: list[str], quiet: bool) -> "Ceilings":
    """CPU-only: theoretical compute roofs and this machine's cached memory roofs, else measured
    here once, with progress on stderr (microbench/cpu.ceilings_for_run)."""
    import torch

    def progress(name: str, i: int, total: int) -> None:
        print(f"roofscope: measuring this CPU's ceilings once (cached for later runs): [{i + 1}/{total}] {name}",
              file=sys.stderr, flush=True)

    return ceilings_for_run(torch.get_num_threads(), torch.__version__, progress=None if quiet else progress,
                            warnings=warnings)


def _no_gpu_kernels(session: "Session", meta: dict[str, Any]) -> str:
    """A CUDA machine whose profiled window holds no GPU kernel: say so, never analyze it as a CPU trace."""
    steps = meta.get("steps", {})
    cfg = session.config
    if cfg.duration is not None:
        when = (f"the {cfg.duration:g} s window (opened {cfg.delay:g} s after the program's "
                f"{steps.get('delay_from', 'start')})")
        fix = ("open the window later or for longer (--delay/--duration), or drop them: inference loops get "
               "steps automatically (one per outermost forward; --step-on generate for whole generate() calls)")
    else:
        when = "the profiled steps"
        fix = ("check that the model and inputs are on the GPU, or choose the steps with --step-on "
               "forward|generate|MODULE.FUNC or roofscope.step()")
    return (f"NO GPU KERNEL was recorded on this CUDA machine: {when} held only host work (model "
            f"construction, loading, tokenization); the Run is not a CPU profile and was not analyzed. Fix: {fix}")


def announce(session: "Session", result: SessionResult, *, exit_code: int, merge_timeout_s: float, top: int = Presentation.top,
             quiet: bool = False, paths_when_quiet: bool = True,
             options: PipelineOptions | None = None) -> str | None:
    """End a profile on the terminal: the summary and the Run's paths (``paths_when_quiet``: also
    with ``quiet``), or for one rank of a job :func:`conclude`; then the warnings and the problem,
    which is returned."""
    if result.interrupted and result.run is not None:
        name = signal.Signals(result.interrupted).name
        print(f"roofscope: interrupted ({name}) before the analysis ended: the recorded profile is kept in"
              f" {result.run.path}; analyze it later with `roofscope analyze {result.run.path}`", file=sys.stderr)
        exit_code = exit_code or 128 + result.interrupted   # an interrupted rank 0 does not wait to merge
    if session.part is None:
        problem = result.problem()
        if paths_when_quiet or not quiet:
            sys.stdout.write(_session_text(result, top, quiet))
    else:
        problem = conclude(session.part, result, exit_code=exit_code, merge_timeout_s=merge_timeout_s, quiet=quiet,
                           settings=options)
    for w in result.warnings:
        print(f"roofscope: warning: {w}", file=sys.stderr)
    if problem:
        print(f"roofscope: error: {problem}", file=sys.stderr)
    return problem


def _session_text(result: SessionResult, top: int, quiet: bool) -> str:
    """The terminal summary (not with ``quiet``), then where the Run and its report are."""
    if result.run is None:
        return ""
    out = ""
    if result.analysis is not None and not quiet:
        out = renderer(RESULT, "console").render(result.analysis, RenderOptions(top=top)) + "\n"
    out += f"run:    {result.run.path}\n"
    report = result.run.path / REPORT_FILE
    if report.exists():
        out += f"report: {report}\n"
    return out


def _ranks(ranks: list[int]) -> str:
    shown = ", ".join(map(str, ranks[:16])) + (f", ... ({len(ranks)} in all)" if len(ranks) > 16 else "")
    return ("rank " if len(ranks) == 1 else "ranks ") + shown


def conclude(part: "JobPart", result: SessionResult, *, exit_code: int, merge_timeout_s: float,
             quiet: bool, settings: PipelineOptions | None = None) -> str | None:
    """After this rank's part is written: a one-line note on every rank but 0; rank 0 waits up to
    ``merge_timeout_s`` for the other parts and merges the job (0: only prints the command) with
    the ceilings and thresholds of ``settings``, which each rank was analyzed with. Returns the
    problem to report, as :meth:`SessionResult.problem` does."""
    problem = result.problem()
    if result.run is None:
        return problem
    info = part.info
    who = f"roofscope: rank {info.rank} of {info.world_size}: wrote {result.run.path}"
    if info.rank != 0:
        print(f"{who}; rank 0 merges the job in {part.job_dir}")
        return problem
    command = part.merge_command()
    if merge_timeout_s == 0 or exit_code != 0:
        # A failed rank 0 does not wait: its peers are likely failing or being torn down too.
        print(f"{who}; merge the ranks' parts with: {command}")
        return problem
    print(f"{who}; waiting up to {merge_timeout_s:g} s for the other ranks' parts", flush=True)
    try:
        with armed():    # waiting and merging write nothing of this rank's: a signal stops them
            return _merge_job(part, problem, merge_timeout_s, command, quiet, settings)
    except Interrupted as e:
        print(f"roofscope: interrupted ({signal.Signals(e.signum).name}) before the job was merged; once every"
              f" rank-* directory is on one machine, run: {command}", file=sys.stderr)
        return problem


def _merge_job(part: "JobPart", problem: str | None, merge_timeout_s: float, command: str, quiet: bool,
               settings: PipelineOptions | None) -> str | None:
    info = part.info
    missing = part.wait_for_parts(merge_timeout_s)
    if missing:
        print(f"roofscope: {_ranks(missing)} of {info.world_size} wrote no part in {part.job_dir} within"
              f" {merge_timeout_s:g} s; once every rank-* directory is on one machine, run: {command}",
              file=sys.stderr)
        return problem
    from roofscope.merge import merge  # the analysis and pandas: not loaded with the profiler

    try:
        merge([str(part.job_dir)], out=part.job_dir, force=True, quiet=quiet, ceilings=settings, thresholds=settings)
    except RoofscopeError as e:
        return problem or f"merging the ranks' parts failed: {e}; retry with: {command}"
    except Exception as e:  # noqa: BLE001  the ranks' Runs are written: a defect of the merge must not hide them
        print(f"roofscope: error: merging the ranks' parts failed inside roofscope ({type(e).__name__}: {e});"
              f" please report it; every rank's Run is written, retry with: {command}", file=sys.stderr)
        return problem or "the job was not merged"
    return problem
