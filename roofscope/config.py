"""Every user-facing option of a profile and an analysis, declared once: its default, its
command-line help and its valid range.

One dataclass per concern: :class:`Collection` (what the profiler records), :class:`RankMerge`
(rank 0's wait for a distributed job's parts), :class:`MergeWorkers` (where `roofscope merge`
analyzes the ranks), :class:`Presentation` (the terminal summary's length),
:class:`CeilingOverrides` (what the roofline is drawn with) and :class:`RooflineThresholds`
(where a kernel's bound class changes), :class:`VerifySettings` (how `roofscope verify` re-runs a
program with its fixes). Their fields are the options' canonical names.
commands/clickopts.py turns the fields' metadata into click options; the commands' options and
``SessionConfig`` inherit the dataclasses; ``Schedule``, ``roofscope.profile()`` and the
renderers read defaults off these classes (a dataclass field's default is also its class
attribute: ``Collection.nvml_hz == 50.0``). It imports only errors.py, and not click, so any
layer may import it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from roofscope.errors import RoofscopeError


def option(default: Any, help: str, *, flags: tuple[str, ...] = (), metavar: str | None = None,
           min: float | None = None, max: float | None = None, min_open: bool = False,
           path: bool = False) -> Any:
    """A field and the command-line option made from it.

    ``flags`` replaces the flag ``--field-name`` (an old spelling stays accepted by listing it
    too); ``min``/``max``/``min_open`` bound a number; ``path`` makes it a file path. A bool
    field becomes an on/off flag; a default other than None is shown in ``--help``.
    """
    return field(default=default, metadata={"help": help, "flags": flags, "metavar": metavar, "min": min,
                                            "max": max, "min_open": min_open, "path": path})


class Bounded:
    """Base of the config dataclasses: a value outside its field's bounds is refused on
    construction, as the command line's range types refuse it, for callers that bypass them
    (``roofscope.profile()``, ``SessionConfig``). None (an option not given) passes."""

    def __post_init__(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            lo, hi = f.metadata.get("min"), f.metadata.get("max")
            v = getattr(self, f.name) if lo is not None or hi is not None else None
            if v is None:
                continue
            if lo is not None and (v <= lo if f.metadata["min_open"] else v < lo):
                raise RoofscopeError(f"{f.name} must be {'>' if f.metadata['min_open'] else '>='} {lo:g}, got {v:g}")
            if hi is not None and v > hi:
                raise RoofscopeError(f"{f.name} must be <= {hi:g}, got {v:g}")


def values(cls: type, obj: Any) -> dict[str, Any]:
    """The options of the config dataclass ``cls`` as ``obj`` (an instance of a subclass) holds them."""
    return {f.name: getattr(obj, f.name) for f in fields(cls)}


@dataclass(kw_only=True)
class Collection(Bounded):
    """What a profile records: the step schedule (or time window), telemetry, labels and the
    per-step figures that metrics need. ``roofscope.profile()`` calls ``active`` ``steps``."""

    wait: int = option(1, "Steps to skip before profiling (start-up, compilation).", min=0)
    warmup: int = option(2, "Steps profiled but discarded (the profiler's own warm-up).", min=0)
    active: int = option(3, "Steps recorded and analyzed.", min=1)
    duration: float | None = option(None, "Profile a time window of SECONDS instead of steps (for scripts without "
                                          "steps).", min=0, min_open=True)
    delay: float = option(0.0, "With --duration: seconds to wait before the window opens.", min=0)
    modules: bool = option(False, "Label kernels with the nn.Module that launched them.")
    nvml_hz: float = option(50.0, "NVML telemetry sampling rate (0: off).", min=0)
    tokens_per_step: float | None = option(None, "Tokens processed per step, for tokens/s.", min=0, min_open=True)
    model_flops_per_step: float | None = option(None, "Model FLOPs per step (e.g. 6*params*tokens), for MFU.",
                                                min=0, min_open=True)
    settle: int = option(3, "Once this many consecutive steps after the first profile lie within --settle-tolerance "
                            "of their median, profile again on them: the first was of cold steps (0: keep the first "
                            "profile).", min=0)
    settle_tolerance: float = option(0.15, "How far (a fraction of their median) the settling steps may lie from "
                                           "their median.", min=0, min_open=True)
    settle_max_steps: int = option(30, "Keep the first profile if the steps after it have not settled within this "
                                       "many steps.", min=0)
    settle_max_s: float = option(60.0, "Keep the first profile if the steps after it have not settled within this "
                                       "many seconds.", min=0)
    exit_after_profile: bool = option(False, "End the script (exit code 0) as soon as the profiled steps are "
                                             "recorded.")
    stepless_after: float = option(10.0, "Without a step boundary this many seconds after the first GPU work, record "
                                         "a 5 s time window from there, replacing the one recorded from the first GPU "
                                         "work (0: no step-less windows at all).", metavar="SECONDS", min=0)
    step_on: str | None = option(None, "What one step is when the script has no optimizer or roofscope.step() (by "
                                       "default one iteration of the script's own loop that holds the work, or one "
                                       "outermost nn.Module forward where one comes every iteration): forward, "
                                       "generate (one generate() call), loop (the script's loop, even over forwards), "
                                       "FILE:LINE (the loop at that line), or one call of MODULE.FUNC (__main__.FUNC: "
                                       "a function of the script itself).",
                                 metavar="forward|generate|loop|FILE:LINE|MODULE.FUNC")


@dataclass(kw_only=True)
class RankMerge(Bounded):
    """What rank 0 of a distributed job does once its own part is written (pipeline.conclude)."""

    merge_timeout: float = option(300.0, "Under torchrun/srun: how long rank 0 waits for the other ranks' parts "
                                         "before merging them (0: do not wait; print the `roofscope merge` command).",
                                  metavar="SECONDS", min=0)


@dataclass(kw_only=True)
class MergeWorkers(Bounded):
    """Where `roofscope merge` analyzes the ranks (merge.analyze_parts)."""

    jobs: int | None = option(None, "Worker processes [default: one per CPU].", min=1)
    scheduler: str | None = option(None, "Analyze the ranks on a Dask distributed cluster: its scheduler address "
                                         "(tcp://host:8786), or 'local[:N]' for N worker processes here. Needs `pip "
                                         "install roofscope[distributed]`.", metavar="ADDRESS")


@dataclass(kw_only=True)
class Presentation(Bounded):
    """How much the terminal summary (and the outputs that follow it) lists."""

    top: int = option(15, "Kernels listed in the terminal summary.", min=1)


@dataclass(kw_only=True)
class CeilingOverrides(Bounded):
    """The ceilings a roofline is drawn with, when not the trace's device's (devices.resolve_ceilings)."""

    device: str | None = option(None, "Datasheet device (key or name) to take ceilings from, instead of the trace's "
                                      "device (`roofscope devices` lists them).",
                                flags=("--datasheet",), metavar="KEY")
    peak_tflops: float | None = option(None, "Peak compute in TFLOP/s (used for every precision).",
                                       min=0, min_open=True)
    peak_bandwidth_gbs: float | None = option(None, "Peak memory bandwidth in GB/s.", flags=("--peak-bandwidth",),
                                              min=0, min_open=True)
    ceilings: str | None = option(None, "Measured-ceilings JSON file (from `roofscope microbench --out`).",
                                  path=True)


@dataclass(kw_only=True)
class RooflineThresholds(Bounded):
    """Where a kernel's bound class changes (analyzers/place/roofline.py, docs/roofline.md)."""

    latency_floor_us: float = option(3.0, "Roofline floor time below which a kernel is latency-bound.", min=0)
    underutilized_below: float = option(0.25, "Efficiency below which a kernel is under-utilized.", min=0, max=1)


@dataclass(kw_only=True)
class VerifySettings(Bounded):
    """How `roofscope verify` measures fixes: runs alternated with and without each, the program's own
    steps timed, until the saving's interval is narrow or the budget spent (roofscope/verify/, docs/verify.md)."""

    top_fixes: int = option(3, "Verify the fixes of this many top recommendations that roofscope can inject.",
                            flags=("--top",), min=1)
    pairs: int = option(10, "At most this many pairs of runs (without and with a fix) per fix.", min=2)
    min_pairs: int = option(3, "At least this many pairs per fix before its interval may stop it.", min=2)
    steps: int = option(20, "Steps timed per run, after the warm-up; then the program is stopped.", min=1)
    warmup_steps: int = option(3, "Steps run before the timed ones (then until the step times settle).", min=0)
    compare_steps: int = option(3, "Steps whose losses (or the model's outputs) are compared between runs (0: none).",
                                min=0)
    alternate: int = option(2, "A fix that can be undone between steps (tf32, cudnn_benchmark, threads, compile "
                               "without CUDA graphs) is turned off and on inside each of its runs, in blocks of this "
                               "many timed steps (twice --steps in all): both sides of a pair then come from one "
                               "process (0: a run of its own, as other fixes).",
                            metavar="STEPS", min=0)
    budget_s: float = option(900.0, "Start no more pairs past this many seconds of runs (the --min-pairs always run).",
                             metavar="SECONDS", min=0, min_open=True)
    precision: float = option(0.02, "Stop a fix once its saving's 95% interval is this narrow (half-width, a "
                                    "fraction of the step without it).", min=0, min_open=True)
    rtol: float = option(0.01, "A fix whose losses or outputs move more than this (relative) changes results.",
                         min=0, min_open=True)
    run_timeout_s: float = option(600.0, "A run taking longer than this is stopped and counted as crashed.",
                                  metavar="SECONDS", min=0, min_open=True)
