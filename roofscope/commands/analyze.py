"""`roofscope analyze TRACE`: place every kernel of an existing trace on the roofline."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from ..fileio import atomic_write, check_writable


@dataclass
class AnalyzeOptions:
    trace: str
    device: str | None = None
    peak_tflops: float | None = None
    peak_bandwidth: float | None = None
    ceilings: str | None = None
    json_out: str | None = None
    csv_out: str | None = None
    top: int = 15
    force: bool = False
    latency_floor_us: float | None = None
    underutilized_below: float | None = None
    quiet: bool = False


def run(opts: AnalyzeOptions) -> int:
    from ..analyzers.analysis import analyze
    from ..analyzers.roofline import RooflineParams
    from ..reports.console import render_summary
    from ..reports.export import kernels_csv, to_json

    # Refuse to clobber before spending time on the analysis.
    for out in (opts.json_out, opts.csv_out):
        if out:
            check_writable(out, opts.force)
    defaults = RooflineParams()
    params = RooflineParams(
        latency_floor_s=defaults.latency_floor_s if opts.latency_floor_us is None else opts.latency_floor_us * 1e-6,
        underutilized_below=defaults.underutilized_below if opts.underutilized_below is None
        else opts.underutilized_below)
    a = analyze(opts.trace, device=opts.device, peak_tflops=opts.peak_tflops,
                peak_bandwidth_gbs=opts.peak_bandwidth, ceilings_file=opts.ceilings, params=params)
    if not opts.quiet:
        sys.stdout.write(render_summary(a, top=opts.top))
    if opts.json_out:
        atomic_write(opts.json_out, to_json(a), force=opts.force)
        print(f"wrote {Path(opts.json_out)}", file=sys.stderr)
    if opts.csv_out:
        atomic_write(opts.csv_out, kernels_csv(a), force=opts.force)
        print(f"wrote {Path(opts.csv_out)}", file=sys.stderr)
    return 0
