"""Markdown summary of a Result, for a GitHub job summary or a pull-request comment.

It reads what the terminal summary reads (``Result.summary`` and the aggregate tables)
and adds nothing computed of its own. Names from the trace go into code spans (where
neither markdown nor HTML is interpreted) and free text is escaped, so a kernel called
``</script><img src=x onerror=alert(1)>`` stays text on GitHub too.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from roofscope.analyzers.model.summary import AboveRoof
from roofscope.hardware.ceilings import Ceilings
from roofscope.reports.phrases import (above_roof_text, ceilings_kind, memory_text, unplaced, utilization_note,
                                       verdict_text)
from roofscope.text import md_code, md_table, md_text, ms, pct, shorten, si

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.analyzers.model.result import Result

def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _metric_rows(s: dict[str, Any]) -> list[list[str]]:
    m = s.get("metrics") or {}
    rows = []
    own = s.get("step_time") or {}
    if _num(own.get("unprofiled_median_s")):
        rows.append([f"step time without the profiler, median of {own.get('unprofiled_steps')}",
                     f"{ms(own['unprofiled_median_s'])} ms ({ms(own.get('unprofiled_p10_s'))} to"
                     f" {ms(own.get('unprofiled_p90_s'))}, p10 to p90)"])
        if _num(own.get("profiled_median_s")):
            rows.append(["step time profiled", f"{ms(own['profiled_median_s'])} ms ({own['inflation']:.2f}x)"])
    elif _num(m.get("step_time_s")):
        spread = (f" ({ms(m['step_time_min_s'])} to {ms(m['step_time_max_s'])})"
                  if _num(m.get("step_time_min_s")) and _num(m.get("step_time_max_s")) else "")
        one = m.get("steps") == 1
        rows.append(["step time (profiled), " + ("1 step" if one else f"median of {m.get('steps')}"),
                     f"{ms(m['step_time_s'])} ms" + ("" if one else spread)])
    if _num(m.get("tokens_per_s")):
        rows.append(["tokens/s", si(m["tokens_per_s"])])
    for key, label in (("mfu", "MFU"), ("hfu", "HFU"), ("mbu", "MBU"), ("busy_fraction", "GPU busy"),
                       ("throttled_fraction", "throttled (share of NVML samples)")):
        if _num(m.get(key)):
            note = f" ({md_text(m['mfu_source'])})" if key == "mfu" and m.get("mfu_source") else ""
            if key == "hfu" and _num(m.get("peak_flops")):
                note = f" ({si(m['hfu'] * m['peak_flops'], 'FLOP/s')} of the {md_text(m.get('peak_roof'))} peak" \
                       f" {si(m['peak_flops'], 'FLOP/s')})"
            rows.append([label, pct(m[key]) + note])
    if utilization_note(m):
        rows.append(["MFU/HFU adjusted", md_text(utilization_note(m))])
    if not _num(m.get("peak_flops")) and _num(m.get("achieved_flops_per_s")):
        rows.append(["achieved", si(m["achieved_flops_per_s"], "FLOP/s") + " (no ceilings: no MFU, HFU or MBU)"])
    if _num(m.get("energy_per_step_j")):
        per_token = f", {m['energy_per_token_j']:.3g} J/token" if _num(m.get("energy_per_token_j")) else ""
        rows.append(["energy per step", f"{m['energy_per_step_j']:.3g} J{per_token}"])
    total = s["kernel_time_s"]
    rows.append(["CPU op time" if s["cpu_only"] else "GPU kernel time", f"{ms(total)} ms, {s['kernels']:,} activities"])
    share = s["unattributed"]["share"]
    rows.append(["costed by the cost model", f"{pct(1.0 - share)} of non-communication time ({pct(share)} without)"])
    return rows


def _ceilings(s: dict[str, Any]) -> str:
    c = s["ceilings"]
    peaks = ", ".join(f"{k} {si(v, 'FLOP/s')}" for k, v in sorted(c["peaks"].items(), key=lambda kv: -kv[1]))
    line = f"{md_text(ceilings_kind(Ceilings.from_dict(c)))} ceilings: {peaks}; {md_text(memory_text(Ceilings.from_dict(c)))}"
    above = AboveRoof.from_dict(s.get("above_roof") or {})
    return line + (f"\n\n> **warning:** {md_text(above_roof_text(above))}" if above.kernels else "")


def _finding_rows(findings: list[dict[str, Any]], verified: bool) -> list[list[str]]:
    rows = []
    for i, f in enumerate(findings, 1):
        saving = ("blocked" if f.get("status") == "blocked" else "advice" if f.get("kind") == "advice" else
                  f"{ms(f['saving_s'])} ms ({pct(f.get('saving_pct'))})" if _num(f.get("saving_s")) else "-")
        fix = (f.get("fix") or {}).get("text") or ""
        rows.append([str(f.get("rank", i)), f"**{md_text(f['title'])}**<br>{md_text(f.get('summary', ''))}",
                     saving, md_text(f.get("confidence", "")), md_text(fix)]
                    + ([md_text(verdict_text(f["verify"])) if f.get("verify") else "-"] if verified else []))
    return rows


def render_markdown(result: "Result", top: int = 10) -> str:
    """Headline metrics, recommendations, time by class and the top kernels as GitHub markdown."""
    s = result.to_dict()
    spec = result.ceilings.datasheet
    out = [f"## roofscope: {md_text(s['device'])}", "",
           f"{md_code(s['trace'])}" + (f" · datasheet {md_text(spec.name)}" if spec is not None else ""), "",
           _ceilings(s), ""]
    out += md_table(["metric", "value"], _metric_rows(s), "<>") + [""]
    findings = s.get("findings") or []
    verified = "verification" in s
    if findings:
        out += ["### Recommendations (estimated saving per step; savings overlap)", ""]
        out += md_table(["#", "recommendation", "saving / step", "confidence", "fix"]
                        + (["re-run with the fix (roofscope verify)"] if verified else []),
                        _finding_rows(findings[:top], verified), "><><<" + ("<" if verified else "")) + [""]
    others = unplaced(s.get("verification"))
    if others:
        out += ["### Fixes re-run in the program (roofscope verify: saving per step, 95% interval)", ""]
        out += md_table(["fix", "status", "why"], [[md_code(v.get("fix") or "(source edit)"), md_text(v.get("status")),
                                                   md_text(v.get("reason"))] for v in others], "<<<") + [""]
    rows = [[md_text(c), ms(v["time_s"]), pct(v["share"])] for c, v in s["time_by_class"].items() if v["time_s"] > 0]
    if rows:
        out += ["### Time by class", ""] + md_table(["class", "time ms", "share"], rows, "<>>") + [""]
    agg = result.by_kernel().head(top)
    if not len(agg):
        return "\n".join(out) + "\n"
    first_op = result.kernels.drop_duplicates("name").set_index("name")["op_name"] if len(result.kernels) else {}
    rows = [[ms(r["time_s"]), pct(r["time_share"]), f"{int(r['calls']):,}", md_text(r["cls"]), pct(r["efficiency"]),
             si(r["achieved_flops"], "FLOP/s"), si(r["achieved_bw"], "B/s"),
             "-" if math.isnan(r["intensity"]) else f"{r['intensity']:.3g}",
             pct(r["coverage"]), md_code(shorten(str(name))), md_code(first_op.get(name, ""))]
            for name, r in agg.iterrows()]
    what = "CPU ops" if result.cpu_only else "kernels"
    out += [f"### Top {len(agg)} {what} by time", "",
            "Rates are over the costed launches; *costed* is their share of the time.", ""]
    out += md_table(["time ms", "share", "calls", "class", "eff", "achieved", "bandwidth", "FLOP/B", "costed", "kernel",
                     "op"], rows, ">>><>>>>><<") + [""]
    return "\n".join(out) + "\n"
