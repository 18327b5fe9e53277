"""`roofscope microbench`: measure the ceilings of this machine's GPU (or CPU), show them next
to the datasheet, and save them to the cache (used by later analyses) and/or a file."""
from __future__ import annotations

import sys
from dataclasses import dataclass

from roofscope import microbench
from roofscope.errors import RoofscopeError
from roofscope.fileio import check_writable
from roofscope.hardware.devices import save_ceilings_file
from roofscope.microbench import cache
from roofscope.reports.registry import CEILINGS, RenderOptions, renderer


@dataclass
class MicrobenchOptions:
    device: str | None = None      # None: the device analyses will use (the GPU if there is one, else the CPU)
    quick: bool = False
    out: str | None = None
    force: bool = False
    no_cache: bool = False
    json_out: bool = False


def _progress(name: str, i: int, total: int) -> None:
    # ``i`` is 0-based (the contract of measure_cpu and measure_gpu).
    print(f"roofscope microbench: [{i + 1}/{total}] {name}", file=sys.stderr, flush=True)


def run(opts: MicrobenchOptions) -> int:
    device = microbench.default_device() if opts.device is None else opts.device
    microbench.parse_device(device)  # a typo fails before anything is measured
    if opts.out:
        check_writable(opts.out, opts.force)  # refuse to clobber before minutes of benchmarks
    c = microbench.measure(device, quick=opts.quick, progress=_progress)
    cached = None
    if not opts.no_cache and cache.enabled():
        try:
            cached = cache.save(c)
        except RoofscopeError as e:  # noisy: shown, used for --out/--json, never kept as the roof
            print(f"roofscope microbench: {e}", file=sys.stderr)
    if opts.out:
        save_ceilings_file(c, opts.out, force=opts.force)
    sys.stdout.write(renderer(CEILINGS, "json" if opts.json_out else "console").render(c, RenderOptions()))
    if cached is not None:
        print(f"cached {cached} (used by later analyses of {c.device!r})", file=sys.stderr)
    if opts.out:
        print(f"wrote {opts.out}", file=sys.stderr)
    return 0
