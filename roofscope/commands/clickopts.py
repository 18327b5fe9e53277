"""Click options that cli.py's commands share and that a command re-reads: the ceiling options,
and `roofscope run`'s own, with which the counters pass parses a Run's recorded command.
They live here, below cli.py, so that commands can use them without importing the CLI.
Options declared in roofscope/config.py get their flag, default, range and help from there."""
from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable, TypeVar, get_args, get_type_hints

import click

from roofscope.config import CeilingOverrides, Collection, Presentation, RankMerge, RooflineThresholds
from roofscope.errors import RoofscopeError
from roofscope.reports.registry import RESULT, names, renderer

F = TypeVar("F", bound=Callable[..., Any])
# `roofscope run SCRIPT --its-own-flags`: everything after SCRIPT belongs to the script.
RUN_CONTEXT = {"ignore_unknown_options": True, "allow_interspersed_args": False}


def stack(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    """One decorator applying ``decorators`` so that `--help` lists them in the order given."""
    def apply(fn: F) -> F:
        for decorator in reversed(decorators):
            fn = decorator(fn)
        return fn
    return apply


def config_options(cls: type, *names: str, callbacks: dict[str, Callable[..., Any]] | None = None
                   ) -> Callable[[F], F]:
    """The click options of the fields ``names`` of the config dataclass ``cls``, in that order."""
    declared = {f.name: f for f in fields(cls)}
    hints = get_type_hints(cls)
    return stack(*(_click_option(name, declared[name].default, declared[name].metadata, hints[name],
                                 (callbacks or {}).get(name)) for name in names))


def _click_option(name: str, default: Any, meta: Any, hint: Any,
                  callback: Callable[..., Any] | None = None) -> Callable[[F], F]:
    kind = next(t for t in (get_args(hint) or (hint,)) if t is not type(None))
    kwargs: dict[str, Any] = {"help": meta["help"], "callback": callback}
    if meta["metavar"]:
        kwargs["metavar"] = meta["metavar"]
    if kind is bool:
        kwargs["is_flag"] = True
    elif meta["path"]:
        kwargs["type"] = click.Path(dir_okay=False, path_type=str)
    elif kind in (int, float):
        bounded = meta["min"] is not None or meta["max"] is not None
        rng = click.IntRange if kind is int else click.FloatRange
        kwargs["type"] = rng(min=meta["min"], max=meta["max"], min_open=meta["min_open"]) if bounded else kind
    if default is not None and kind is not bool:
        kwargs.update(default=default, show_default=True)
    flags = meta["flags"] or ("--" + name.replace("_", "-"),)
    return click.option(*flags, name, **kwargs)


_DATASHEET_ALIAS = "roofscope.datasheet_alias"


def _device_alias(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    # --device once named the datasheet here; it means the device to run or measure on
    # (`roofscope microbench --device cpu`, the examples), so the old spelling only warns.
    if value is not None:
        click.echo("roofscope: warning: --device KEY is deprecated here: use --datasheet KEY (--device names the "
                   "device to measure or run on, as in `roofscope microbench --device cpu`)", err=True)
        ctx.meta[_DATASHEET_ALIAS] = value


def _datasheet(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    return value if value is not None else ctx.meta.get(_DATASHEET_ALIAS)


# Options that choose the ceilings the roofline is drawn with (analyze, report, diff, run, merge).
ceiling_options = stack(
    config_options(CeilingOverrides, "device", "peak_tflops", "peak_bandwidth_gbs", "ceilings",
                   callbacks={"device": _datasheet}),
    # Eager, so it is read before --datasheet's callback, given or not.
    click.option("--device", "device_alias", metavar="KEY", hidden=True, is_eager=True, expose_value=False,
                 callback=_device_alias),
    config_options(RooflineThresholds, "latency_floor_us", "underutilized_below"),
    click.option("-f", "--force", is_flag=True, help="Overwrite existing output files."),
)


# The commands that run a Run's recorded command again (counters, verify).
yes_option = click.option("-y", "--yes", is_flag=True,
                          help="Run the Run's recorded command even when the Run was made on another machine (else"
                               " shown and asked; refused without a terminal).")


# `roofscope run`'s options and arguments, in the order `--help` lists them.
run_options = stack(
    click.option("-m", "module", is_flag=True, help="TARGET is a module, run like `python -m TARGET`."),
    click.option("-o", "--out", type=click.Path(file_okay=False, path_type=str),
                 help="Run directory to write [default: roofscope-out/<script>-<timestamp>]."),
    config_options(Collection, "wait", "warmup", "active", "settle", "settle_tolerance", "settle_max_steps",
                   "settle_max_s", "duration", "delay", "modules", "nvml_hz",
                   "tokens_per_step", "model_flops_per_step", "exit_after_profile"),
    click.option("--no-report", is_flag=True, help="Do not render report.html."),
    click.option("--format", "formats", multiple=True, metavar="NAME",
                 help="Also render this output into the Run (repeatable): "
                      + ", ".join(f"{r.name} ({r.file_name})" for r in (renderer(RESULT, n) for n in names(RESULT)))
                      + "."),
    click.option("--verify", is_flag=True,
                 help="Then verify the top fixes in the program: `roofscope verify RUN` with its defaults "
                      "(docs/verify.md)."),
    click.option("--counters", type=click.Choice(["ncu", "cupti"]),
                 help="Also measure hardware counters of the recorded steps: `ncu` re-runs the script under "
                      "Nsight Compute after the Run is written (docs/counters.md)."),
    click.option("--sample", "--counters-sample", "counters_sample", type=click.IntRange(min=1), metavar="N",
                 help="With --counters ncu: profile only the first N kernel launches (bounds the replay cost; "
                      "as `roofscope counters --sample`; --counters-sample is the old name)."),
    click.option("--skip", "--counters-skip", "counters_skip", type=click.IntRange(min=0), default=0, metavar="K",
                 help="With --counters ncu: leave out the first K kernel launches of the recorded steps (ncu "
                      "--launch-skip), to sample later in the step."),
    click.option("--kernel-name", "counters_kernel_name", metavar="REGEX",
                 help="With --counters ncu: profile only kernels whose function name matches REGEX (ncu "
                      "--kernel-name regex:REGEX)."),
    click.option("--nvtx", "counters_nvtx", metavar="RANGE",
                 help="With --counters ncu: profile only kernels inside the NVTX range / roofscope.region() "
                      "RANGE (ncu --nvtx-include)."),
    ceiling_options,
    config_options(Presentation, "top"),
    click.option("-q", "--quiet", is_flag=True, help="No terminal summary."),
    config_options(RankMerge, "merge_timeout"),
    config_options(Collection, "step_on", "stepless_after"),
    click.option("--formulas", multiple=True, metavar="FILE.py|MODULE",
                 help="Import cost formulas for custom ops (roofscope.register_formula; repeatable)."),
    click.argument("target"),
    click.argument("args", nargs=-1, type=click.UNPROCESSED),
)


def parse_run_argv(argv: list[str]) -> dict[str, Any]:
    """The parameters `roofscope run ARGV...` would get; unknown or bad options are skipped, so a
    Run recorded by an older or newer roofscope still names its script."""
    command = click.command("run", context_settings=RUN_CONTEXT)(run_options(lambda **_: None))
    return command.make_context("run", list(argv), resilient_parsing=True).params


def recorded_run(meta: dict[str, Any], cannot: str) -> dict[str, Any]:
    """The `roofscope run` parameters of a Run's recorded command (its script in ``target``);
    :class:`RoofscopeError` ending in ``cannot`` when a command other than `roofscope run` made the Run."""
    command = meta.get("command")
    command = [str(c) for c in command] if isinstance(command, list) else []
    if command[1:2] != ["run"]:
        raise RoofscopeError(f"this Run was not recorded by `roofscope run` (its command: {' '.join(command)!r}),"
                             f" so {cannot}")
    # roofscope run's own parser reads the recorded options, whatever options it has gained since.
    params = parse_run_argv(command[2:])
    if not params.get("target"):
        raise RoofscopeError(f"no script in the Run's recorded command {' '.join(command)!r}")
    return params

