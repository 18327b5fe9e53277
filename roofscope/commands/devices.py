"""`roofscope devices`: the datasheet table and the ceilings cached by `roofscope microbench`."""
from __future__ import annotations

import sys

from roofscope.hardware.datasheets import known_devices
from roofscope.microbench import cache
from roofscope.text import si, table


def run() -> int:
    rows = [[s.key, s.name, si(s.peaks.get("bf16"), "FLOP/s"), si(s.peaks.get("fp32"), "FLOP/s"),
             si(s.bandwidth, "B/s")] for s in known_devices()]
    out = ["Datasheet devices (dense peaks):", ""]
    out += ["  " + ln for ln in table(["key", "name", "bf16", "fp32", "bandwidth"], rows, "<<>>>")]
    skipped: list[str] = []
    found = cache.entries(skipped)
    out += ["", f"Measured ceilings cached in {cache.cache_dir()}:"]
    if not cache.enabled():
        out.append("  (ROOFSCOPE_NO_CACHE is set: analyses ignore the cache)")
    if found:
        rows = [[e.device, e.measured_at or "-", e.driver or "-", e.torch or "-",
                 si(e.ceilings.bandwidth, "B/s"), si(e.ceilings.peaks.get("bf16"), "FLOP/s"), str(e.path)]
                for e in found]
        # Not fitted to the terminal: a file path cut in the middle could not be copied.
        out += ["", *("  " + ln for ln in table(
            ["device", "measured", "driver", "torch", "bandwidth", "bf16", "file"], rows, "<<<<>><",
            width=sys.maxsize))]
    else:
        out.append("  none yet: `roofscope microbench --device cuda` (or cpu) measures this machine")
    out += [f"  {s}" for s in skipped]
    sys.stdout.write("\n".join(out) + "\n")
    return 0
