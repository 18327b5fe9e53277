"""Click options that cli.py's commands share and that a command re-reads: the ceiling options,
and `roofscope run`'s own, with which the counters pass parses a Run's recorded command.
They live here, below cli.py, so that commands can use them without importing the CLI."""
from __future__ import annotations

from typing import Any, Callable, TypeVar

import click

from ..reports.registry import names, renderer

F = TypeVar("F", bound=Callable[..., Any])
# `roofscope run SCRIPT --its-own-flags`: everything after SCRIPT belongs to the script.
RUN_CONTEXT = {"ignore_unknown_options": True, "allow_interspersed_args": False}


def ceiling_options(fn: F) -> F:
    """Options that choose the ceilings the roofline is drawn with (analyze, report, diff, run, merge)."""
    for opt in reversed((
        click.option("--datasheet", "--device", "device", metavar="KEY",
                     help="Datasheet device (key or name) to take ceilings from, instead of the trace's device "
                          "(`roofscope devices` lists them; --device is the old name)."),
        click.option("--peak-tflops", type=click.FloatRange(min=0, min_open=True),
                     help="Peak compute in TFLOP/s (used for every precision)."),
        click.option("--peak-bandwidth", type=click.FloatRange(min=0, min_open=True),
                     help="Peak memory bandwidth in GB/s."),
        click.option("--ceilings", "ceilings", type=click.Path(dir_okay=False, path_type=str),
                     help="Measured-ceilings JSON file (from `roofscope microbench --out`)."),
        click.option("--latency-floor-us", type=click.FloatRange(min=0),
                     help="Roofline floor time below which a kernel is latency-bound [default: 3]."),
        click.option("--underutilized-below", type=click.FloatRange(min=0, max=1),
                     help="Efficiency below which a kernel is under-utilized [default: 0.25]."),
        click.option("-f", "--force", is_flag=True, help="Overwrite existing output files."),
    )):
        fn = opt(fn)
    return fn


_RUN_OPTIONS: tuple[Callable[[Any], Any], ...] = (
    click.option("-m", "module", is_flag=True, help="TARGET is a module, run like `python -m TARGET`."),
    click.option("-o", "--out", type=click.Path(file_okay=False, path_type=str),
                 help="Run directory to write [default: roofscope-out/<script>-<timestamp>]."),
    click.option("--wait", type=click.IntRange(min=0), default=1, show_default=True,
                 help="Steps to skip before profiling (start-up, compilation)."),
    click.option("--warmup", type=click.IntRange(min=0), default=2, show_default=True,
                 help="Steps profiled but discarded (the profiler's own warm-up)."),
    click.option("--active", type=click.IntRange(min=1), default=3, show_default=True,
                 help="Steps recorded and analyzed."),
    click.option("--duration", type=click.FloatRange(min=0, min_open=True),
                 help="Profile a time window of SECONDS instead of steps (for scripts without steps)."),
    click.option("--delay", type=click.FloatRange(min=0), default=0.0, show_default=True,
                 help="With --duration: seconds to wait before the window opens."),
    click.option("--modules", is_flag=True, help="Label kernels with the nn.Module that launched them."),
    click.option("--nvml-hz", type=click.FloatRange(min=0), default=50.0, show_default=True,
                 help="NVML telemetry sampling rate (0: off)."),
    click.option("--tokens-per-step", type=click.FloatRange(min=0, min_open=True),
                 help="Tokens processed per step, for tokens/s."),
    click.option("--model-flops-per-step", type=click.FloatRange(min=0, min_open=True),
                 help="Model FLOPs per step (e.g. 6*params*tokens), for MFU."),
    click.option("--exit-after-profile", is_flag=True,
                 help="End the script (exit code 0) as soon as the profiled steps are recorded."),
    click.option("--no-report", is_flag=True, help="Do not render report.html."),
    click.option("--format", "formats", multiple=True, metavar="NAME",
                 help="Also render this output into the Run (repeatable): "
                      + ", ".join(f"{r.name} ({r.file_name})" for r in map(renderer, names())) + "."),
    click.option("--counters", type=click.Choice(["ncu", "cupti"]),
                 help="Also measure hardware counters of the recorded steps: `ncu` re-runs the script under "
                      "Nsight Compute after the Run is written (docs/counters.md)."),
    click.option("--sample", "--counters-sample", "counters_sample", type=click.IntRange(min=1), metavar="N",
                 help="With --counters ncu: profile only the first N kernel launches (bounds the replay cost; "
                      "as `roofscope counters --sample`; --counters-sample is the old name)."),
    ceiling_options,
    click.option("--top", type=click.IntRange(min=1), default=15, show_default=True,
                 help="Kernels listed in the terminal summary."),
    click.option("-q", "--quiet", is_flag=True, help="No terminal summary."),
    click.option("--merge-timeout", type=click.FloatRange(min=0), default=300.0, show_default=True, metavar="SECONDS",
                 help="Under torchrun/srun: how long rank 0 waits for the other ranks' parts before merging them "
                      "(0: do not wait; print the `roofscope merge` command)."),
    click.option("--step-on", metavar="forward|generate|MODULE.FUNC",
                 help="What one step is when the script has no optimizer or roofscope.step(): one outermost "
                      "nn.Module forward (the default then), one generate() call, or one call of MODULE.FUNC."),
    click.option("--formulas", multiple=True, metavar="FILE.py|MODULE",
                 help="Import cost formulas for custom ops (roofscope.register_formula; repeatable)."),
    click.argument("target"),
    click.argument("args", nargs=-1, type=click.UNPROCESSED),
)


def run_options(fn: F) -> F:
    """`roofscope run`'s options and arguments, in the order `--help` lists them."""
    for option in reversed(_RUN_OPTIONS):
        fn = option(fn)
    return fn


def parse_run_argv(argv: list[str]) -> dict[str, Any]:
    """The parameters `roofscope run ARGV...` would get; unknown or bad options are skipped, so a
    Run recorded by an older or newer roofscope still names its script."""
    command = click.command("run", context_settings=RUN_CONTEXT)(run_options(lambda **_: None))
    return command.make_context("run", list(argv), resilient_parsing=True).params
