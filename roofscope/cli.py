"""The `roofscope` command line: a click group whose commands live in roofscope/commands/.

Each command imports its module when it runs: `roofscope --help` and a mistyped option answer at once,
without pandas and the analysis (the `# start-up time` imports below).
"""
from __future__ import annotations

import atexit
import gc
import os
import sys
from typing import Any, Sequence

import click

from roofscope.commands.clickopts import RUN_CONTEXT, ceiling_options, config_options, run_options, yes_option
from roofscope.config import MergeWorkers, Presentation, VerifySettings
from roofscope.errors import RoofscopeError
from roofscope.fileio import collector_paused
from roofscope.run import TRACE_FILE, is_run_dir
from roofscope.text_safety import clean
from roofscope.version import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="roofscope")
def cli() -> None:
    """Roofline profiling and diagnosis for PyTorch."""


def analysis_inputs(f: Any) -> Any:
    """What `analyze` and `report` read beside the trace: graph captures, custom formulas, and the
    sliding window of attention layers that have one (no trace records it)."""
    f = click.option("--attention-window", "attention_window", type=click.IntRange(min=1), metavar="TOKENS",
                     help="The sliding window of the attention layers that have one (e.g. 128 for GPT-OSS): "
                          "the calls whose kernels show a window are costed over it instead of left "
                          "uncosted (docs/inference.md).")(f)
    f = click.option("--formulas", multiple=True, metavar="FILE.py|MODULE",
                     help="Import cost formulas for custom ops (roofscope.register_formula; repeatable).")(f)
    return click.option("--graph-capture", "graph_capture", multiple=True,
                        type=click.Path(dir_okay=False, path_type=str), metavar="CAPTURE_TRACE",
                        help="A profiler trace of CUDA-graph captures: costs the replayed kernels "
                             "(repeatable; docs/inference.md).")(f)


def read_ahead(trace: str) -> None:
    """A trace file's events (a Run's trace) read by a child while this process imports the analysis
    (0.3-0.45 s of pandas and the stages): in the program's own run only, not in a caller's process (a
    test, a notebook), whose state a fork would copy."""
    if (click.get_current_context().obj or {}).get("own"):
        from roofscope.analyzers.ingest.kineto_prefetch import start  # start-up time: `--help` imports no reader

        start(os.path.join(trace, TRACE_FILE) if is_run_dir(trace) else trace)


@cli.command("analyze")
@click.argument("trace", type=click.Path(dir_okay=True, path_type=str), metavar="RUN_OR_TRACE")
@ceiling_options
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=str, allow_dash=True),
              help="Write the summary and aggregate tables as JSON; '-' prints it instead of the terminal summary.")
@click.option("--csv", "csv_out", type=click.Path(dir_okay=False, path_type=str, allow_dash=True),
              help="Write one CSV row per kernel with all roofline columns; '-' prints it instead of the terminal "
                   "summary.")
@click.option("--perfetto", "perfetto_out", type=click.Path(dir_okay=False, path_type=str),
              help="Write the annotated trace (each kernel's roofline verdict and findings, counter tracks) for "
                   "Perfetto (ui.perfetto.dev) as gzipped Chrome JSON.")
@click.option("--markdown", "markdown_out", type=click.Path(dir_okay=False, path_type=str, allow_dash=True),
              help="Write a markdown summary (GitHub job summary, PR comment); '-' prints it instead of "
                   "the terminal summary.")
@config_options(Presentation, "top")
@click.option("-q", "--quiet", is_flag=True, help="No terminal summary.")
@analysis_inputs
def analyze_cmd(**kwargs: object) -> int:
    """Place every kernel of RUN_OR_TRACE on the roofline: a Run directory (from `roofscope run`) or a
    Kineto trace (.json or .json.gz from torch.profiler)."""
    read_ahead(str(kwargs["trace"]))
    with collector_paused():
        from roofscope.commands.analyze import AnalyzeOptions, run  # start-up time

    return run(AnalyzeOptions(**kwargs))  # type: ignore[arg-type]


# diff and the gate refuse a trace cut short (analyzers/compare/comparable.py) unless told.
allow_partial = click.option("--allow-partial", is_flag=True,
                             help="Compare a trace cut short (a process killed while writing it) on the part it"
                                  " holds, instead of refusing it.")


@cli.command("report")
@click.argument("trace", type=click.Path(dir_okay=True, path_type=str), metavar="RUN_OR_TRACE")
@click.option("-o", "--out", "--output", "html_out", type=click.Path(dir_okay=False, path_type=str),
              default="roofscope-report.html", show_default=True, help="HTML file to write (--output: the old name).")
@click.option("--open", "open_browser", is_flag=True, help="Open the report in the default browser.")
@click.option("--perfetto", "perfetto_out", type=click.Path(dir_okay=False, path_type=str),
              help="Write the annotated trace (each kernel's roofline verdict and findings, counter tracks) for "
                   "Perfetto (ui.perfetto.dev) as gzipped Chrome JSON.")
@click.option("--cdn", is_flag=True,
              help="Load plotly.js from a CDN (pinned by hash) instead of inlining it: ~1.2 MB smaller, "
                   "but the charts need the network.")
@ceiling_options
@analysis_inputs
def report_cmd(**kwargs: object) -> int:
    """Write a self-contained HTML report (roofline, classes, top kernels) for RUN_OR_TRACE: a Run
    directory or a Kineto trace (.json or .json.gz)."""
    read_ahead(str(kwargs["trace"]))
    with collector_paused():
        from roofscope.commands.analyze import AnalyzeOptions, run  # start-up time

    return run(AnalyzeOptions(quiet=True, **kwargs))  # type: ignore[arg-type]


@cli.command("diff")
@click.argument("run_a", type=click.Path(dir_okay=True, path_type=str))
@click.argument("run_b", type=click.Path(dir_okay=True, path_type=str))
@ceiling_options
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=str, allow_dash=True),
              help="Write the comparison as JSON ('-': print it instead of the terminal comparison).")
@click.option("--markdown", "markdown_out", type=click.Path(dir_okay=False, path_type=str, allow_dash=True),
              help="Write the comparison as markdown, e.g. for a pull request ('-': print it instead).")
@click.option("--applied", metavar="CHANGE",
              help="The change B applied (e.g. torch_compile), or a finding's rule id; checked against the"
                   " change's combined saving [default: the finding whose kernels lost most time].")
@click.option("--top", type=click.IntRange(min=1), default=Presentation.top, show_default=True,
              help="Kernel changes listed.")
@allow_partial
@click.option("--allow-other-device", is_flag=True,
              help="Compare runs of two devices (each on its own ceilings) instead of refusing them.")
@click.option("-q", "--quiet", is_flag=True, help="No terminal view.")
def diff_cmd(**kwargs: object) -> int:
    """Compare RUN_B against RUN_A (Run directories or Kineto traces): metrics, kernels per step, and
    whether A's predicted saving materialized in B."""
    from roofscope.commands.diff import DiffOptions, run  # start-up time

    return run(DiffOptions(**kwargs))  # type: ignore[arg-type]


@cli.command("run", context_settings=RUN_CONTEXT)
@run_options
def run_cmd(**kwargs: object) -> int:
    """Run SCRIPT (or -m MODULE) with ARGS under the profiler and write a Run directory.

    Steps come from roofscope.step() / the first optimizer's step(); the Run, its summary
    and report.html are written even when the script fails, exits or is interrupted, and
    roofscope exits with the script's own exit code.
    """
    from roofscope.commands.run import RunOptions, run  # start-up time

    argv = (click.get_current_context().obj or {}).get("argv") or sys.argv[1:]
    return run(RunOptions(argv=["roofscope", *argv], **kwargs))  # type: ignore[arg-type]


@cli.command("counters")
@click.argument("run", type=click.Path(file_okay=False, path_type=str))
@click.option("--sample", type=click.IntRange(min=1), metavar="N",
              help="Profile only the first N kernel launches of the recorded steps (ncu --launch-count N).")
@click.option("--skip", type=click.IntRange(min=0), default=0, metavar="K",
              help="Leave out the first K kernel launches of the recorded steps (ncu --launch-skip K).")
@click.option("--kernel-name", metavar="REGEX",
              help="Profile only kernels whose function name matches REGEX (ncu --kernel-name regex:REGEX).")
@click.option("--nvtx", metavar="RANGE",
              help="Profile only kernels inside the NVTX range / roofscope.region() RANGE (ncu --nvtx-include).")
@click.option("--from-csv", type=click.Path(dir_okay=False, path_type=str),
              help="Join this ncu CSV export (long or raw page) instead of running ncu.")
@click.option("-f", "--force", is_flag=True, help="Replace the Run's existing counters.")
@click.option("-q", "--quiet", is_flag=True, help="No join summary.")
@yes_option
def counters_cmd(**kwargs: object) -> int:
    """Add hardware counters (Nsight Compute) to RUN: re-run its script under ncu over the same
    steps, join the measured kernels to the trace's, and re-render the Run's summary and report."""
    from roofscope.commands.counters import CountersOptions, run  # start-up time

    return run(CountersOptions(**kwargs))  # type: ignore[arg-type]


@cli.command("verify")
@click.argument("run", type=click.Path(file_okay=False, path_type=str))
@config_options(VerifySettings, "top_fixes")
@click.option("--fix", "fixes", multiple=True, metavar="SPEC",
              help="Verify this fix instead of the Run's top ones: NAME[:ARG][;NAME[:ARG]...], e.g."
                   " compile:reduce-overhead, threads:4 (repeatable; docs/verify.md lists them).")
@config_options(VerifySettings, "pairs", "min_pairs", "steps", "warmup_steps", "compare_steps", "alternate", "budget_s",
                "precision", "rtol", "run_timeout_s")
@click.option("--fix-module", "fix_modules", multiple=True, metavar="FILE.py|MODULE",
              help="Import fixes of your own (roofscope.fixes.register; repeatable).")
@click.option("-f", "--force", is_flag=True, help="Replace the Run's verify.json.")
@click.option("-q", "--quiet", is_flag=True, help="No progress and no table of verdicts.")
@yes_option
def verify_cmd(**kwargs: object) -> int:
    """Check RUN's top recommendations in the program itself: run it again, alternately without and with
    each fix injected (no source edit), timing its own steps without the profiler, until the saving's
    interval is narrow or the budget spent; compare its losses or outputs too. Writes RUN/verify.json
    (each fix verified, mispredicted, no effect, slower, undecided, crashed, changes results or not
    applicable) and renders the Run's summary and report again with the verdicts (docs/verify.md)."""
    from roofscope.commands.verify import VerifyOptions, run  # start-up time

    for key in ("fixes", "fix_modules"):
        kwargs[key] = tuple(kwargs[key])  # type: ignore[call-overload]
    return run(VerifyOptions(**kwargs))  # type: ignore[arg-type]


@cli.command("microbench")
@click.option("--device", metavar="cuda|cuda:N|cpu",
              help="Device to measure [default: the one analyses will use: the GPU if there is one, else the CPU].")
@click.option("--quick", is_flag=True, help="Fewer, smaller repetitions (seconds instead of a minute).")
@click.option("-o", "--out", type=click.Path(dir_okay=False, path_type=str),
              help="Also write the ceilings file here (for `--ceilings FILE`).")
@click.option("-f", "--force", is_flag=True, help="Overwrite --out if it exists.")
@click.option("--no-cache", is_flag=True, help="Do not save the result to the ceilings cache.")
@click.option("--json", "json_out", is_flag=True, help="Print the ceilings file as JSON instead of the table.")
def microbench_cmd(**kwargs: object) -> int:
    """Measure this machine's ceilings (compute peaks, bandwidth, launch latency).

    The result is cached per device, driver and torch version; later analyses of a trace
    from the same device use it instead of the datasheet (ROOFSCOPE_NO_CACHE=1 turns that off).
    """
    from roofscope.commands.microbench import MicrobenchOptions, run  # start-up time

    return run(MicrobenchOptions(**kwargs))  # type: ignore[arg-type]


@cli.command("devices")
def devices_cmd() -> int:
    """List the datasheet devices and the ceilings cached by `roofscope microbench`."""
    from roofscope.commands.devices import run  # start-up time

    return run()


@cli.command("gate")
@click.argument("run", type=click.Path(dir_okay=True, path_type=str))
@click.argument("baseline_out", required=False, metavar="[BASELINE_OUT]")
@click.option("--write-baseline", is_flag=True, help="Write RUN's baseline to BASELINE_OUT instead of checking.")
@click.option("--baseline", type=click.Path(dir_okay=True, path_type=str),
              help="Baseline file (or a Run directory) to compare RUN against.")
@click.option("--max-regression", multiple=True, metavar="KEY=LIMIT,...",
              help="Regression limits, e.g. mfu=5%,step_time=2ms,idle_fraction=3pp,region:decode=10%,mbu=off "
                   "[defaults: 5%; idle_fraction 5pp; regions 10%].")
@click.option("--min-mfu", metavar="SHARE", help="Fail when the median MFU is below this: 35% (or 0.35).")
@click.option("--min-hfu", metavar="SHARE", help="Fail when the median HFU is below this: 35% (or 0.35).")
@click.option("--min-mbu", metavar="SHARE", help="Fail when the median MBU is below this: 35% (or 0.35).")
@click.option("--max-step-time", metavar="TIME", help="Fail when the median step time exceeds this: 120ms, 0.12s, 500us.")
@click.option("--max-step-time-ms", type=float, metavar="MS", help="The old spelling of --max-step-time, in ms.")
@click.option("--max-idle", "--max-idle-fraction", "max_idle_fraction", metavar="SHARE",
              help="Fail when the median GPU idle share exceeds this: 5% (or 0.05; --max-idle-fraction: the old name).")
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.05,
              show_default=True, help="Significance level of the rank test on per-step samples.")
@click.option("--junit", "junit_out", type=click.Path(dir_okay=False, path_type=str, allow_dash=True),
              help="Write JUnit XML (one testcase per check; '-': print it instead of the verdict table).")
@click.option("--markdown", "markdown_out", type=click.Path(dir_okay=False, path_type=str, allow_dash=True),
              help="Write the verdict as markdown ('-': print it instead of the verdict table).")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=str, allow_dash=True),
              help="Write the verdict as JSON ('-': print it instead of the verdict table).")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True,
              help="Kernels listed as evidence on failure.")
@click.option("-f", "--force", is_flag=True, help="Overwrite existing output files.")
@allow_partial
@click.option("-q", "--quiet", is_flag=True, help="No terminal verdict table.")
def gate_cmd(**kwargs: object) -> int:
    """Fail (exit 1) when RUN regressed against a baseline or breaks an absolute bound.

    RUN is a Run directory or a trace. A check fails when its limit is exceeded and a
    one-sided Mann-Whitney test on the per-step samples finds the shift clear at --alpha.
    Exit codes: 0 pass, 1 regression, 2 usage or input error, 3 undecided (steps too few
    or too scattered to tell: not a pass). With GITHUB_ACTIONS=true, failures are also
    printed as ::error annotations and the verdict appended to $GITHUB_STEP_SUMMARY.
    `roofscope gate --write-baseline RUN BASELINE.json` writes a baseline.
    """
    from roofscope.commands.gate import GateOptions, run  # start-up time

    return run(GateOptions(**kwargs))  # type: ignore[arg-type]


@cli.command("merge")
@click.argument("sources", nargs=-1, required=True, type=click.Path(dir_okay=True, path_type=str),
                metavar="RUN_OR_TRACE...")
@click.option("-o", "--out", type=click.Path(file_okay=False, path_type=str),
              help="Directory for job.json, summary.json and report.html [default: the job directory, when it is"
                   " the only source].")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=str),
              help="Also write the cross-rank summary as JSON here.")
@click.option("--baseline", type=click.Path(dir_okay=True, path_type=str),
              help="Single-GPU Run or trace of the same step, for the scaling tax.")
@config_options(MergeWorkers, "jobs", "scheduler")
@ceiling_options
@click.option("-q", "--quiet", is_flag=True, help="No terminal summary.")
@click.option("--allow-remote", is_flag=True,
              help="Read job.json parts that lie outside the job's folder or behind URLs.")
def merge_cmd(**kwargs: object) -> int:
    """One report for the ranks of a distributed job: RUN_OR_TRACE... are per-rank Run directories,
    Kineto traces, folders of rank traces, job directories (rank-NNNN/ Runs), or fsspec URLs of
    traces or folders (s3://bucket/job/). Per-rank step time and MFU, stragglers, NCCL collectives
    and exposed communication, recommendations."""
    from roofscope.commands.merge import MergeOptions, default_out, run  # start-up time

    kwargs["sources"] = list(kwargs["sources"])  # type: ignore[call-overload]
    kwargs["out"] = kwargs["out"] or default_out(kwargs["sources"])  # type: ignore[arg-type]
    return run(MergeOptions(**kwargs))  # type: ignore[arg-type]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: returns the exit code (0 ok, 1 finding such as a regression, 2 usage/input error)."""
    if argv is None:
        # The process ends when this returns: its last garbage collection would walk every object an
        # analysis left (0.1 s on a million events), none of which needs collecting by then.
        atexit.register(gc.freeze)
    try:
        args = list(argv) if argv is not None else sys.argv[1:]
        rv = cli.main(args=args, prog_name="roofscope", standalone_mode=False, obj={"argv": args, "own": argv is None})
    except RoofscopeError as e:
        click.echo(f"roofscope: error: {clean(e)}", err=True)  # one line, whatever a path or name holds
        return e.exit_code
    except click.exceptions.Abort:
        click.echo("roofscope: interrupted", err=True)
        return 130
    except click.ClickException as e:
        e.show()
        return 2 if e.exit_code == 1 else e.exit_code
    except click.exceptions.Exit as e:
        return e.exit_code
    except KeyboardInterrupt:
        click.echo("roofscope: interrupted", err=True)
        return 130
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
