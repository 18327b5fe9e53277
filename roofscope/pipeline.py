"""The one place that composes a profile: collect → write the Run → analyze → render.

``roofscope run`` (commands/run.py) and ``roofscope.profile()`` (roofscope/context.py) start a
:class:`~.collectors.session.Session`, let the program run, then call :func:`finish`: the
session stops and hands over what it recorded, this module writes the Run from it
(roofscope/run/), analyzes it (roofscope/analysis.py), renders report.html and any ``--format``
outputs into it (reports/registry.py), and :func:`announce` ends the profile on the terminal:
the summary, or for one rank of a distributed job its note and, on rank 0, the job's merge.
Collectors import none of this: they only record.
"""
from __future__ import annotations

import gzip
import signal
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roofscope.analysis import AnalysisSettings, run
from roofscope.analyzers.ingest import read as load_trace
from roofscope.config import CeilingOverrides, Presentation, RooflineThresholds
from roofscope.errors import RoofscopeError
from roofscope.fileio import atomic_write
from roofscope.hardware.ceilings import Ceilings, save_ceilings_file
from roofscope.microbench.cpu import ceilings_for_run
from roofscope.reports.registry import RESULT, RenderOptions, check_formats, renderer
from roofscope.run import (CEILINGS_FILE, REPORT_FILE, SUMMARY_FILE, TELEMETRY_FILE, Run, new_meta, summary_text,
                           update_meta, write_run)
from roofscope.run.layout import CAPTURE_FILES

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


class Interrupted(BaseException):
    """Raised by :class:`_Signals` into the analysis: a BaseException, so no ``except Exception`` holds it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _Signals:
    """SIGINT and SIGTERM while a finished program's profile is stopped, written and analyzed. Until
    :meth:`arm` (the recorded data being written) a signal waits, so the data is written whole; once
    armed, the first signal (or the one that waited) raises :class:`Interrupted` into the analysis,
    which is skipped with the Run's data kept. A signal that skipped nothing (none armed any more, or
    a second one) is delivered again, to the handlers before, on leaving. Outside the main thread (no
    handlers there) signals act as before."""

    def __init__(self) -> None:
        self.pending: int | None = None
        self._armed = False
        self._old: dict[int, Any] = {}

    def __enter__(self) -> "_Signals":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                old = signal.getsignal(sig)
                if old not in (signal.SIG_IGN, None):  # ignored (nohup) stays ignored; None: not Python's
                    self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self._armed:
            self._armed = False
            raise Interrupted(signum)
        if self.pending is None:
            print(f"roofscope: {signal.Signals(signum).name} received: the recorded profile is being written;"
                  " stopping right after", file=sys.stderr, flush=True)
        self.pending = self.pending or signum

    def arm(self, armed: bool = True) -> None:
        """From now on the first signal raises (``armed``), or waits for the end again."""
        self._armed = armed
        if armed and self.pending is not None:
            signum, self.pending, self._armed = self.pending, None, False
            raise Interrupted(signum)

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        if self.pending is not None and self._old:
            signal.raise_signal(self.pending)


def finish(session: "Session", exit_status: dict[str, Any], options: PipelineOptions) -> SessionResult:
    """Stop ``session``, write its Run, analyze and render it; the session's files are dropped
    afterwards whatever happens. Call once, whatever ended the program. In a child the program
    forked, the session is the parent's: nothing is stopped, written or removed."""
    if session.foreign:
        return SessionResult(run=None, analysis=None)
    with _Signals() as signals:
        try:
            return _complete(session, session.stop(exit_status), options, signals)
        finally:
            session.close()


def _complete(session: "Session", c: "Collected", options: PipelineOptions, signals: _Signals) -> SessionResult:
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
    result = None
    try:
        signals.arm()
        result, error, ceilings = _analyze(session, c, meta, options, run.trace_path)
        if result is not None:
            summary = result.to_dict()
            # Keep measured or user-given ceilings with the Run so it re-analyzes the same;
            # datasheet ones come back from the trace's device name.
            if result.ceilings.source not in ("datasheet", "none"):
                ceilings = result.ceilings
            outputs = render_outputs(result, options)
            for name, content in outputs.items():
                atomic_write(run.path / name, content, force=True)
            atomic_write(run.path / SUMMARY_FILE, summary_text(summary), force=True)
            run = update_meta(run, steps={**meta["steps"], "recorded": summary["steps"]})
        if ceilings is not None:
            save_ceilings_file(ceilings, run.path / CEILINGS_FILE)
        signals.arm(False)   # the Run is complete: a signal from here on must not escape as Interrupted
    except Interrupted as e:
        return SessionResult(run=run, analysis=None, warnings=c.warnings, interrupted=e.signum)
    return SessionResult(run=run, analysis=result, warnings=c.warnings, error=error)


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
        raise RoofscopeError(f"neither {session.out} ({why}) nor a rescue directory ({_why(e)}) took it; the"
                             f" recorded trace is kept in {session.keep_files()}") from None
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
    return problem
