"""`roofscope gate RUN --baseline B.json [limits]` and `roofscope gate --write-baseline RUN B.json`.

Exit codes: 0 pass, 1 regression, 2 usage or input error (raised as RoofscopeError), 3 undecided."""
from __future__ import annotations

import sys
from dataclasses import dataclass

from roofscope.errors import RoofscopeError
from roofscope.commands.outputs import plan
from roofscope.fileio import atomic_write
from roofscope.gate import KERNELS_KEPT, check, write_baseline
from roofscope.gate.stats import ALPHA
from roofscope.reports.github import append_step_summary, in_actions
from roofscope.reports.registry import GATE, RenderOptions, renderer


class GateUsageError(RoofscopeError):
    """Options of `roofscope gate` that do not go together."""


@dataclass
class GateOptions:
    run: str
    baseline_out: str | None = None
    write_baseline: bool = False
    baseline: str | None = None
    min_mfu: str | None = None
    min_hfu: str | None = None
    min_mbu: str | None = None
    max_step_time: str | None = None
    max_step_time_ms: float | None = None
    max_idle_fraction: str | None = None
    max_regression: tuple[str, ...] = ()
    alpha: float = ALPHA
    junit_out: str | None = None
    markdown_out: str | None = None
    json_out: str | None = None
    top: int = 10
    force: bool = False
    allow_partial: bool = False
    quiet: bool = False

    def check_options(self) -> list[str]:
        given = (("--baseline", self.baseline), ("--min-mfu", self.min_mfu), ("--min-hfu", self.min_hfu),
                 ("--min-mbu", self.min_mbu), ("--max-step-time", self.max_step_time),
                 ("--max-step-time-ms", self.max_step_time_ms), ("--max-idle", self.max_idle_fraction), ("--max-regression", self.max_regression or None),
                 ("--junit", self.junit_out), ("--markdown", self.markdown_out), ("--json", self.json_out))
        return [name for name, value in given if value is not None]


def _write_baseline(opts: GateOptions) -> int:
    if not opts.baseline_out:
        raise GateUsageError("--write-baseline needs the file to write:"
                             " roofscope gate --write-baseline RUN BASELINE.json")
    if opts.check_options():
        raise GateUsageError(f"--write-baseline only writes the baseline; {', '.join(opts.check_options())}"
                             " belong to a check run")
    snap = write_baseline(opts.run, opts.baseline_out, force=opts.force, allow_partial=opts.allow_partial)
    medians = ", ".join(f"{name} {snap.median(name):.4g}" for name in ("step_time", "mfu", "mbu")
                        if snap.median(name) is not None)
    # The step-time samples may be the steps run without the profiler, not the profiled ones: say which.
    n_time = len(snap.samples["step_time"]) if "step_time" in snap.samples else 0
    times = (f"; step time and utilizations from {n_time} steps without the profiler"
             if snap.unprofiled("step_time") else "")
    print(f"wrote baseline {opts.baseline_out}: {snap.device}, {len(snap.steps)} profiled steps{times},"
          f" {len(snap.samples)} metrics ({medians}), {min(KERNELS_KEPT, snap.kernels_total)} of"
          f" {snap.kernels_total} kernels", file=sys.stderr)
    if snap.cut_short:
        print(f"roofscope: warning: the trace was cut short ({snap.cut_short}): the baseline holds the part it"
              " recorded, and every check against it needs --allow-partial", file=sys.stderr)
    return 0


def run(opts: GateOptions) -> int:
    if opts.write_baseline:
        return _write_baseline(opts)
    if opts.baseline_out:
        raise GateUsageError(f"unexpected argument {opts.baseline_out!r}: compare with --baseline FILE, or write"
                             " one with --write-baseline RUN FILE")
    to_stdout, files = plan([(opts.junit_out, "junit"), (opts.markdown_out, "markdown"), (opts.json_out, "json")],
                            opts.force)
    outputs = [(path, renderer(GATE, name)) for path, name in files]
    result = check(opts.run, opts.baseline, min_mfu=opts.min_mfu, min_hfu=opts.min_hfu, min_mbu=opts.min_mbu,
                   max_step_time_ms=opts.max_step_time_ms, max_idle_fraction=opts.max_idle_fraction,
                   max_step_time=opts.max_step_time,
                   max_regression=opts.max_regression, alpha=opts.alpha, top_kernels=opts.top,
                   allow_partial=opts.allow_partial)
    options = RenderOptions()
    if to_stdout or not opts.quiet:
        sys.stdout.write(renderer(GATE, to_stdout or "console").render(result, options))
    if in_actions():
        sys.stdout.write(renderer(GATE, "github").render(result, options))
        append_step_summary(renderer(GATE, "markdown").render(result, options))
    for path, r in outputs:
        atomic_write(path, r.render(result, options), force=opts.force)
        print(f"wrote {path}", file=sys.stderr)
    return result.exit_code
