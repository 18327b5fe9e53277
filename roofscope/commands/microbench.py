"""`roofscope microbench`: measure the ceilings of this machine's GPU (or CPU), show them next
to the datasheet, and save them to the cache (used by later analyses) and/or a file."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

from roofscope.fileio import check_writable


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


def _unit(r: dict[str, Any]) -> str:
    return str(r.get("unit") or "")


def _fmt(v: Any, unit: str) -> str:
    from roofscope.render.console import si

    if not isinstance(v, (int, float)):
        return "-"
    if unit == "s":  # launch latency reads best in microseconds
        return f"{v * 1e6:.2f} us"
    return si(float(v), unit)


def _spread(r: dict[str, Any], unit: str) -> str:
    """'151/142/153 GFLOP/s': median/min/max in the median's SI prefix, so they compare at a glance."""
    vals = [r.get(k) for k in ("median", "min", "max")]
    if not all(isinstance(v, (int, float)) for v in vals):
        return "-"
    if unit == "s":
        return "/".join(f"{v * 1e6:.3g}" for v in vals) + " us"
    from roofscope.units import si_scale

    factor, prefix = si_scale(vals[0])
    return "/".join(f"{v / factor:.3g}" for v in vals) + f" {prefix}{unit}"


def render_table(c: Any) -> str:
    """One row per benchmark: ceiling key, achieved value, datasheet, % of datasheet, spread, time."""
    from roofscope.render.console import pct, table

    results = list(c.env.get("results") or [])
    rows = []
    for r in results:
        unit = _unit(r)
        value, ds = r.get("value"), r.get("datasheet")
        share = value / ds if isinstance(value, (int, float)) and isinstance(ds, (int, float)) and ds else None
        rows.append([str(r.get("key") or ""), str(r.get("name") or ""),
                     _fmt(value, unit) if not r.get("error") else "failed",
                     _fmt(ds, unit), pct(share), _spread(r, unit) + (" NOISY" if r.get("noisy") else ""),
                     f"{r['seconds']:.2f} s" if isinstance(r.get("seconds"), (int, float)) else "-"])
    lines = [f"roofscope microbench: {c.device}"]
    if c.datasheet is not None:
        lines.append(f"  datasheet  {c.datasheet.name} ({c.datasheet.key})")
    lines.append("")
    lines += ["  " + ln for ln in table(
        ["ceiling", "benchmark", "achieved", "datasheet", "% of sheet", "median/min/max", "time"],
        rows, "<<>>>><")]
    errors = [f"  {r.get('name')}: {r['error']}" for r in results if r.get("error")]
    if errors:
        lines += ["", "failed (no ceiling from these):", *errors]
    if c.levels:
        from roofscope.render.console import memory_text

        lines += ["", f"  roofs      {memory_text(c)} (by the working set a kernel touches)"]
    if c.env.get("noisy"):
        lines += ["", "  NOISY: best and median repetitions disagree by more than 25% for "
                  + ", ".join(c.env["noisy"]) + ": other work shared the device; these roofs may be low"]
    if c.env.get("theoretical"):  # CPU: the roofs are theoretical (the 'datasheet' column), the benchmarks achievable
        for kind in ("compute", "memory"):
            note = next((n for n in c.notes if n.startswith(f"{kind} roofs: ")), "")
            lines += ["", f"  {kind:<9}  {note.removeprefix(f'{kind} roofs: ')}"]
    runtime = c.env.get("runtime_s")
    lines.append("")
    lines.append(f"  runtime    {runtime:.1f} s" if isinstance(runtime, (int, float)) else "  runtime    -")
    if c.env.get("method"):
        lines.append(f"  method     {c.env['method']}")
    return "\n".join(lines) + "\n"


def run(opts: MicrobenchOptions) -> int:
    from roofscope.hardware.devices import ceilings_payload, save_ceilings_file
    from roofscope.errors import RoofscopeError
    from roofscope.microbench import cache, default_device, measure, parse_device

    device = default_device() if opts.device is None else opts.device
    parse_device(device)  # a typo fails before anything is measured
    if opts.out:
        check_writable(opts.out, opts.force)  # refuse to clobber before minutes of benchmarks
    c = measure(device, quick=opts.quick, progress=_progress)
    cached = None
    if not opts.no_cache and cache.enabled():
        try:
            cached = cache.save(c)
        except RoofscopeError as e:  # noisy: shown, used for --out/--json, never kept as the roof
            print(f"roofscope microbench: {e}", file=sys.stderr)
    if opts.out:
        save_ceilings_file(c, opts.out, force=opts.force)
    if opts.json_out:
        sys.stdout.write(json.dumps(ceilings_payload(c), indent=2) + "\n")
    else:
        sys.stdout.write(render_table(c))
    if cached is not None:
        print(f"cached {cached} (used by later analyses of {c.device!r})", file=sys.stderr)
    if opts.out:
        print(f"wrote {opts.out}", file=sys.stderr)
    return 0
