"""Compact terminal summary of a Result."""
from __future__ import annotations

import math
import textwrap
from typing import TYPE_CHECKING, Any

from roofscope.analyzers.model.findings import OUTLIER_STEP
from roofscope.analyzers.model.kernels import ABOVE_ROOF_TOLERANCE
from roofscope.config import Presentation
from roofscope.reports.phrases import (above_roof_text, ceilings_kind, ceilings_sentences, finding_lines,
                                       program_note, savings_note, step_time_lines, unplaced, utilization_note,
                                       verification_lines)
from roofscope.text import field_lines, ms, pct, prose_width, shorten, si, step_range, table
from roofscope.text_safety import clean

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.analyzers.model.result import Result
    from roofscope.analyzers.model.summary import AboveRoof, CountersBlock, Summary


# What the util line calls the peak it divides by (ceilings_kind's words; "user" reads as the flags' figure).
_PEAK_WORD = {"theoretical": "theoretical", "measured": "measured", "datasheet": "datasheet", "user": "given"}


def _wrapped(lines: list[str]) -> list[str]:
    """The header's ``  label     text`` lines wrapped to the terminal, each continuation under its text."""
    out: list[str] = []
    for line in lines:
        if len(line) <= prose_width() or not line.startswith("  "):
            out.append(line)
            continue
        label, text = line[2:12].strip(), line[12:] if line[2:12].strip() else line.strip()
        out += field_lines(label, text)
    return out


def render_summary(result: "Result", top: int = Presentation.top) -> str:
    s = result.summary
    k = result.kernels
    out: list[str] = []
    what = "CPU ops (CPU-only trace)" if result.cpu_only else "GPU activities"
    out.append(f"roofscope analyze: {result.trace.path}")
    spec = result.ceilings.datasheet
    out.append(f"  device    {s.device}" + (f" (datasheet: {spec.name})" if spec is not None else ""))
    for i, sentence in enumerate(ceilings_sentences(result.ceilings)):
        out += field_lines("ceilings" if i == 0 else "", sentence)
    steps = s.steps
    partial = s.partial_steps
    step_txt = (f", {step_range(steps)}" if steps else "") + (
        f" ({step_range(partial)} cut short by the script's end: left out of step figures)" if partial else "")
    dist = s.distributed or {}
    rank_txt = f", rank {dist.get('rank')}/{dist.get('world_size')}" if "rank" in dist and "world_size" in dist else ""
    out.append(f"  trace     {s.events:,} events, {s.kernels:,} {what}{step_txt}{rank_txt}")
    total = s.kernel_time_s
    comm = s.communication_time_s
    out.append(f"  time      {ms(total)} ms summed over {what}"
               + (f" ({pct(comm / total)} communication)" if total > 0 and comm > 0 else ""))
    out.append(f"  work      {si(s.total_flops, 'FLOP')}, {si(s.total_bytes, 'B')} attributed")
    if s.gpu_job_host_only:
        out.append(f"  note      the CPU side of a GPU job ({s.gpu_job_host_only}): its GPU activity was not recorded")
    if s.skipped_events:
        out.append(f"  note      {skipped_line(s.skipped_events)}")
    out += _run_lines(s, ceilings_kind(result.ceilings))
    if (not result.cpu_only or result.run_meta) and s.kernels:
        out += step_time_lines(s.extra.get("step_time"), (result.run_meta or {}).get("steps"))
    if s.above_roof.kernels:
        out += above_roof_lines(s.above_roof)
    if s.counters is not None:
        out.append(_counters_line(s.counters))
    if s.untimed_kernels:
        out.append(f"  note      {s.untimed_kernels:,} GPU activities are CUPTI counter ranges recorded in "
                   f"counter-replay mode: {si(s.counter_flops, 'FLOP')} measured by hardware counters, "
                   "but no kernel timings, so they are not placed on the roofline")
    out = _wrapped(out) + [""]
    if not s.kernels:
        return "\n".join(out + _nothing_lines(result) + [""])

    rows = [[c, ms(v.time_s), pct(v.share)] for c, v in s.time_by_class.items() if v.time_s > 0]
    out.append("Time by class")
    out += ["  " + r for r in table(["class", "time ms", "share"], rows, "<>>")]
    out.append("")

    regions = result.by_region()
    if len(regions) > 1 or (len(regions) == 1 and regions.index[0] != "(no region)"):
        rows = [[str(name)[:48], ms(r["time_s"]), pct(r["time_share"]), f"{int(r['calls']):,}", str(r["cls"])]
                for name, r in regions.head(8).iterrows()]
        out.append("Time by region (record_function)")
        out += ["  " + r for r in table(["region", "time ms", "share", "kernels", "class"], rows, "<>>><")]
        out.append("")

    if s.modules:
        mods = result.by_module().head(10)
        rows = [[str(name)[-56:], ms(r["time_s"]), pct(r["time_share"]), f"{int(r['calls']):,}", str(r["cls"])]
                for name, r in mods.iterrows()]
        out.append("Time by module (innermost; backward kernels count toward their forward module)")
        out += ["  " + r for r in table(["module", "time ms", "share", "kernels", "class"], rows, "<>>><")]
        out.append("")

    out += finding_lines(s.findings)
    if s.findings:
        out += savings_note(s.diagnosis.extra.get("program_time"))
        out += program_note(s.diagnosis.extra.get("program"))
    out += verification_lines(unplaced(s.extra.get("verification")))
    if s.diagnosis.capture_steps:
        out += [f"  {step_range(s.diagnosis.capture_steps).capitalize()} captured a CUDA graph (warm-up): left out"
                " of these estimates", ""]
    if s.diagnosis.extra.get("outlier_steps"):
        out += [f"  {step_range(s.diagnosis.extra['outlier_steps']).capitalize()} ran over"
                f" {OUTLIER_STEP:g}x the median profiled step (a busy machine, a collection): left out of these"
                " estimates", ""]
    out += _skipped_lines(s)

    if s.inference:
        out += inference_lines(s.inference) + [""]
    elif s.extra.get("inference_note"):
        out += [str(s.extra["inference_note"]), ""]

    u = s.unattributed
    # The costed share first: "coverage 0.0%" read as nothing costed when it was the uncosted share.
    out.append(f"Cost coverage: {pct(1.0 - u.share)} of non-communication time costed ({pct(u.share)} without a"
               " cost model)")
    rows = [[r, ms(v.time_s), pct(v.share), f"{v.kernels:,}"] for r, v in u.by_reason.items() if v.kernels]
    if rows:
        out += ["  " + r for r in table(["reason", "time ms", "share", "kernels"], rows, "<>>>")]
    out += ["  " + n for n in u.notes]
    out.append("")

    agg = result.by_kernel().head(top)
    out.append(f"Top {len(agg)} kernels by time" if not result.cpu_only else f"Top {len(agg)} CPU ops by time")
    first_op = k.drop_duplicates("name").set_index("name")["op_name"] if len(k) else {}
    # Rates cover the costed launches only: where a kernel also ran uncosted, say how much was costed.
    partly = bool(len(agg)) and bool((agg["coverage"] < 0.9995).any())
    rows = []
    for name, r in agg.iterrows():
        # Above 100% is never shown bare: "!" points at the warning line above.
        eff = pct(r["efficiency"]) + ("!" if r["efficiency"] > 1.0 + ABOVE_ROOF_TOLERANCE else "")
        rates = [eff, si(r["achieved_flops"], "FLOP/s"), si(r["achieved_bw"], "B/s"),
                 "-" if math.isnan(r["intensity"]) else f"{r['intensity']:.3g}"]
        rows.append([ms(r["time_s"]), pct(r["time_share"]), f"{int(r['calls']):,}", str(r["cls"]), *rates]
                    + ([pct(r["coverage"])] if partly else []) + [shorten(str(name)), shorten(str(first_op.get(name, "")), 32)])
    head = ["time ms", "share", "calls", "class", "eff", "achieved", "bandwidth", "FLOP/B"]
    out += ["  " + r for r in table(head + (["costed"] if partly else []) + ["kernel", "op"], rows,
                                     ">>><>>>>" + (">" if partly else "") + "<<")]
    if partly:
        out.append("  (eff, achieved, bandwidth: over the costed launches only; costed: their share of the time)")
    # Names from the trace reach every line: each line is cleaned as one (text_safety.py).
    return "\n".join(map(clean, out)) + "\n"


def above_roof_lines(above: "AboveRoof") -> list[str]:
    return textwrap.wrap(above_roof_text(above), 78, initial_indent="  warning   ", subsequent_indent=" " * 12)


def _counters_line(c: "CountersBlock") -> str:
    """Coverage and agreement of the measured counters (analyzers/place/measured.py)."""
    tool = "ncu" + (f" {c.ncu_version}" if c.ncu_version else "")
    unused = c.tensor_cores_unused
    return (f"  counters  {tool}: {c.kernels:,} of {c.kernels_total:,} kernels ({pct(c.time_share)} of kernel time);"
            f" class as analytic on {pct(c.class_agreement)} of it; tensor cores unused on"
            f" {ms(unused.time_s)} ms of matmul time ({unused.kernels:,} kernels)")


def _nothing_lines(result: "Result") -> list[str]:
    """A trace without one op or kernel: no tables of nothing, one line on why (a script that ended first)."""
    status = (result.run_meta or {}).get("exit_status") or {}
    code = status.get("code") if isinstance(status, dict) else None
    why = (f": the script ended ({status.get('reason', 'exit')}, code {code}) before doing any"
           if isinstance(code, int) and code != 0 else "")
    what = "CPU op" if result.cpu_only else "GPU kernel or CPU op"
    return field_lines("nothing", f"to analyze: the trace holds no {what}{why}")


def _run_lines(s: "Summary", kind: str) -> list[str]:
    """Step time, throughput and NVML telemetry lines, where the summary has them; ``kind``: what the peak is."""
    out = []
    m = s.metrics
    if m.step_time_s:
        extra = [f"{si(m.tokens_per_s, 'tokens/s')}"] if m.tokens_per_s else []
        if m.busy_fraction is not None:
            extra.append(f"GPU busy {pct(m.busy_fraction)}")
        what = (f"{m.steps} profiled, median" if m.steps != 1 else "1 profiled,") \
            if m.extra.get("step_time_source") != "unprofiled" else "without the profiler, median"
        out.append(f"  steps     {what} {ms(m.step_time_s)} ms/step" + (f" ({', '.join(extra)})" if extra else ""))
        if m.peak_flops:
            mfu = f"MFU {pct(m.mfu)}" + (" (op-counted)" if m.mfu_source == "op_counted" else "")
            # HFU's own rate, so that the ratio printed is the HFU printed (raised or counted).
            rate = m.hfu * m.peak_flops if m.hfu is not None else m.achieved_flops_per_s
            out.append(f"  util      {mfu}, HFU {pct(m.hfu)}, MBU {pct(m.mbu)}; HFU is {si(rate, 'FLOP/s')}"
                       f" of the {_PEAK_WORD.get(kind, '')} {m.peak_roof} peak {si(m.peak_flops, 'FLOP/s')}")
            note = utilization_note(m.to_dict())
            if note:
                out += textwrap.wrap(note, 78, initial_indent=" " * 12, subsequent_indent=" " * 12)
        elif m.achieved_flops_per_s is not None:
            out.append(f"  util      achieved {si(m.achieved_flops_per_s, 'FLOP/s')}"
                       + (f", {si(m.bytes_per_step / m.step_time_s, 'B/s')}" if m.bytes_per_step else "")
                       + "; MFU, HFU and MBU need ceilings (--datasheet, --peak-tflops/--peak-bandwidth or --ceilings)")
    for d in s.telemetry.devices if s.telemetry is not None else []:
        if not d.samples:
            continue
        clock = d.sm_clock_mhz or {}
        power = d.power_w or {}
        parts = []
        if clock.get("mean") is not None:
            parts.append(f"SM {clock['mean']:.0f} MHz mean (min {clock['min']:.0f}"
                         + (f", {pct(d.sm_clock_ratio)} of max" if d.sm_clock_ratio is not None else "")
                         + ")")
        if power.get("mean") is not None:
            parts.append(f"{power['mean']:.0f} W mean")
        if d.energy_per_step_j is not None:
            parts.append(f"{d.energy_per_step_j:.3g} J/step")
        if d.temp_c is not None:
            parts.append(f"{d.temp_c:.0f} °C max")
        # NVML's clock-event reasons, by share of samples: Hopper sets sw_power_cap often, even
        # far below the power limit, so each reason is named rather than summed into "throttled".
        events = [f"{name} {pct(share)}" for name, share in (d.throttle or {}).items()
                  if name not in ("throttled_share", "gpu_idle") and share]
        if events:
            parts.append("clock events: " + ", ".join(events))
        out.append(f"  gpu {d.cuda_index}     " + ", ".join(parts) + f" [{d.samples} NVML samples]")
    return out


def _skipped_lines(s: "Summary") -> list[str]:
    """Rules that did not run, with their reasons; collapsed to one line when they share it."""
    skipped = s.diagnosis.skipped
    if not skipped:
        return []
    reasons = {r.reason for r in skipped}
    head = "No recommendations: " if not s.findings else "Rules not applied: "
    if len(reasons) == 1:
        return textwrap.wrap(f"{head}{len(skipped)} rules skipped: {reasons.pop()}", 80,
                             subsequent_indent="  ") + [""]
    return [head.rstrip(": ") + f" ({len(skipped)} rules skipped)"] + [
        f"  {r.rule}: {r.reason}" for r in skipped] + [""]


def skipped_line(skipped: dict[str, int]) -> str:
    """The trace's malformed events in one line: ``skipped 12 events: args.bytes not a number``."""
    n = sum(skipped.values())
    reasons = sorted(skipped.items(), key=lambda kv: -kv[1])
    detail = "; ".join(f"{r} ({c})" if len(reasons) > 1 else r for r, c in reasons[:3])
    more = f"; {len(reasons) - 3} more reasons" if len(reasons) > 3 else ""
    return f"skipped {n} malformed event{'s' if n != 1 else ''}: {detail}{more}"


def inference_lines(inf: dict[str, Any]) -> list[str]:
    """Prefill and decode side by side (analyzers/views/inference.py)."""
    def ms3(v: Any) -> str:
        return "-" if v is None else f"{v * 1e3:.3f} ms"

    d, p = inf["decode"], inf["prefill"]
    lines = ["Inference (prefill vs decode)"]
    head = f"  TTFT {ms3(inf['ttft_s'])}   time per output token {ms3(inf['tpot_s'])}"
    if inf["tokens_per_s"]:
        head += f"   {inf['tokens_per_s']:,.0f} tokens/s at batch {inf['batch']}"
    lines.append(head)
    for name, b in (("prefill", p), ("decode", d)):
        if b is None:
            continue
        dominant = max(b["time_by_class"].items(), key=lambda kv: kv[1]) if b["time_by_class"] else ("-", 0.0)
        lines.append(f"  {name:<8}{b['steps']:>4} steps  {ms3(b['step_time_s']):>12}/step  "
                     f"{b['flops_per_step'] / 1e9:,.2f} GFLOP  {b['bytes_per_step'] / 1e6:,.1f} MB  "
                     f"MBU {pct(b.get('mbu'))}  {dominant[0]} {pct(dominant[1])} of kernel time")
    lines.append(f"  decode bytes per step: weights {d['weight_bytes_per_step'] / 1e6:,.1f} MB, "
                 f"KV cache {d['kv_bytes_per_step'] / 1e6:,.1f} MB; decode MBU {pct(inf['decode_mbu'])}")
    return lines
