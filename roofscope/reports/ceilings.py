"""Measured ceilings as a terminal table (`roofscope microbench`): one row per benchmark beside
the datasheet, then the memory roofs, noisy and failed benchmarks, and how they were measured."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from roofscope.reports.phrases import memory_text
from roofscope.text import pct, si, si_scale, table

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.hardware.ceilings import Ceilings


def _unit(r: dict[str, Any]) -> str:
    return str(r.get("unit") or "")


def _fmt(v: Any, unit: str) -> str:
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
    factor, prefix = si_scale(vals[0])
    return "/".join(f"{v / factor:.3g}" for v in vals) + f" {prefix}{unit}"


def render_table(c: "Ceilings") -> str:
    """One row per benchmark: ceiling key, achieved value, datasheet, % of datasheet, spread, time."""
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
