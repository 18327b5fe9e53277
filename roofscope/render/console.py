"""Compact terminal summary of a Result."""
from __future__ import annotations

import math
import os
import shutil
import sys
from typing import TYPE_CHECKING, Sequence

from roofscope.model.kernels import ABOVE_ROOF_TOLERANCE
from roofscope.config import Presentation
from roofscope.run.layout import REPORT_FILE
from roofscope.text_safety import clean
from roofscope.render.programtime import savings_note, step_time_lines
from roofscope.units import ms, si

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.model.result import Result
    from roofscope.model.summary import AboveRoof, CountersBlock, Recommendation, Summary
    from roofscope.hardware.devices import Ceilings
    from roofscope.pipeline import SessionResult

_NAME_WIDTH = 64
_FILE_WIDTH = 160   # a table's width where no terminal says how wide it is
_MIN_TEXT = 12      # a name column is never cut narrower


def plural(n: int, noun: str) -> str:
    """'1 step', '3 steps'."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def step_range(steps: Sequence[int]) -> str:
    """'step 6', 'steps 3-5', 'steps 3, 5, 9' (not contiguous)."""
    if not steps:
        return "no steps"
    if len(steps) == 1:
        return f"step {steps[0]}"
    if list(steps) == list(range(steps[0], steps[-1] + 1)):
        return f"steps {steps[0]}-{steps[-1]}"
    return "steps " + ", ".join(map(str, steps))


def number(x: float, digits: int = 4) -> str:
    """A plain figure for people: 2.665e10 -> '26.65 G', 1234.5 -> '1,234', 0.0123 -> '0.0123'."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if abs(x) >= 1e5:
        return si(float(x), digits=digits)
    if abs(x) >= 1000 or float(x).is_integer():
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def pct(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def shorten(name: str, width: int = _NAME_WIDTH) -> str:
    """Kernel names are C++ signatures: keep the function part, cut the template noise."""
    short = name.replace("(anonymous namespace)::", "").replace("void ", "", 1)
    short = short.split("(")[0] if "(" in short and not short.startswith("(") else short
    return short if len(short) <= width else short[: width - 1] + "…"


def terminal_width() -> int:
    """``COLUMNS`` if set, else the terminal's width when stdout is one, else 160 (a file, a pipe)."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return shutil.get_terminal_size((_FILE_WIDTH, 24)).columns if sys.stdout.isatty() else _FILE_WIDTH


def middle_cut(text: str, width: int) -> str:
    """``text`` in ``width`` characters, an ellipsis in the middle: kernel names differ at both ends."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2 + (width - 1) % 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):] if width > 1 else text[:width]


def _fit(widths: list[int], align: str, room: int) -> list[int]:
    """Narrow the text ('<') columns, widest first, until the table fits ``room`` (never below
    :data:`_MIN_TEXT` or their header); figures keep their width."""
    widths = list(widths)
    over = sum(widths) + 2 * (len(widths) - 1) - room
    while over > 0:
        text = [i for i, a in enumerate(align) if a == "<" and widths[i] > _MIN_TEXT]
        if not text:
            break
        i = max(text, key=lambda j: widths[j])
        others = max([widths[j] for j in text if j != i] + [_MIN_TEXT])
        cut = min(over, widths[i] - others + 1 if widths[i] > others else 1, widths[i] - _MIN_TEXT)
        widths[i] -= cut
        over -= cut
    return widths


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str, indent: int = 2,
          width: int | None = None) -> list[str]:
    """Fixed-width text table; ``align`` has one of '<' or '>' per column. It fits ``width`` columns
    (default: the terminal's) less ``indent`` (what the caller puts before each line), cutting long
    text cells in the middle."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    widths = _fit(widths, align, (width or terminal_width()) - indent)

    def line(cells: Sequence[str]) -> str:
        return "  ".join(f"{middle_cut(c, w):{a}{w}}" for c, a, w in zip(cells, align, widths)).rstrip()

    return [line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows]


def memory_text(c: "Ceilings") -> str:
    """'memory 30.9 GB/s', or per level: 'memory L2 120 GB/s (<= 2 MiB), LLC 230 GB/s (<= 32 MiB), DRAM 18 GB/s'."""
    if not c.levels:
        return f"memory {si(c.bandwidth, 'B/s')}"
    return "memory " + ", ".join(f"{name} {si(bw, 'B/s')}" + ("" if cap == math.inf else f" (<= {si(cap, 'B')})")
                                 for name, cap, bw in c.levels)


def _ceilings_line(a: "Result") -> str:
    c = a.ceilings
    if not c.known:
        return c.notes[0]
    peaks = ", ".join(f"{k} {si(v, 'FLOP/s')}" for k, v in sorted(c.peaks.items(), key=lambda kv: -kv[1]))
    # Cached measurements say where they came from: stale ones are otherwise invisible.
    origin = next((n for n in c.notes if n.startswith("using ceilings measured on")
                   or " identified from its properties " in n), None)
    # Noisy roofs and, on a CPU, which roofs are theoretical and the rates measured beside them.
    shown = [n for n in c.notes if n.startswith(("noisy:", "compute roofs:", "memory roofs:"))]
    return (f"{c.source}: {peaks}; {memory_text(c)}" + (f" ({origin})" if origin else "")
            + (f"; {'; '.join(shown)}" if shown else ""))


def render_summary(a: "Result", top: int = Presentation.top) -> str:
    s = a.summary
    k = a.kernels
    out: list[str] = []
    what = "CPU ops (CPU-only trace)" if a.cpu_only else "GPU activities"
    out.append(f"roofscope analyze: {a.trace.path}")
    spec = a.ceilings.datasheet
    out.append(f"  device    {s.device}" + (f" (datasheet: {spec.name})" if spec is not None else ""))
    out.append(f"  ceilings  {_ceilings_line(a)}")
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
    if s.skipped_events:
        from roofscope.ingest.kineto import skipped_line

        out.append(f"  note      {skipped_line(s.skipped_events)}")
    out += _run_lines(s)
    if not a.cpu_only or a.run_meta:
        out += step_time_lines(s.extra.get("step_time"), (a.run_meta or {}).get("steps"))
    if s.above_roof.kernels:
        out += above_roof_lines(s.above_roof)
    if s.counters is not None:
        out.append(_counters_line(s.counters))
    if s.untimed_kernels:
        out.append(f"  note      {s.untimed_kernels:,} GPU activities are CUPTI counter ranges recorded in "
                   f"counter-replay mode: {si(s.counter_flops, 'FLOP')} measured by hardware counters, "
                   "but no kernel timings, so they are not placed on the roofline")
    out.append("")

    rows = [[c, ms(v.time_s), pct(v.share)] for c, v in s.time_by_class.items() if v.time_s > 0]
    out.append("Time by class")
    out += ["  " + r for r in table(["class", "time ms", "share"], rows, "<>>")]
    out.append("")

    regions = a.by_region()
    if len(regions) > 1 or (len(regions) == 1 and regions.index[0] != "(no region)"):
        rows = [[str(name)[:48], ms(r["time_s"]), pct(r["time_share"]), f"{int(r['calls']):,}", str(r["cls"])]
                for name, r in regions.head(8).iterrows()]
        out.append("Time by region (record_function)")
        out += ["  " + r for r in table(["region", "time ms", "share", "kernels", "class"], rows, "<>>><")]
        out.append("")

    if s.modules:
        mods = a.by_module().head(10)
        rows = [[str(name)[-56:], ms(r["time_s"]), pct(r["time_share"]), f"{int(r['calls']):,}", str(r["cls"])]
                for name, r in mods.iterrows()]
        out.append("Time by module (innermost; backward kernels count toward their forward module)")
        out += ["  " + r for r in table(["module", "time ms", "share", "kernels", "class"], rows, "<>>><")]
        out.append("")

    out += _finding_lines(s.findings)
    if s.findings:
        out += savings_note(s.diagnosis.extra.get("program_time"))
    if s.diagnosis.capture_steps:
        out += [f"  {step_range(s.diagnosis.capture_steps).capitalize()} captured a CUDA graph (warm-up): left out"
                " of these estimates", ""]
    out += _skipped_lines(s)

    if s.inference:
        from roofscope.views.inference import inference_lines

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

    agg = a.by_kernel().head(top)
    out.append(f"Top {len(agg)} kernels by time" if not a.cpu_only else f"Top {len(agg)} CPU ops by time")
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


def above_roof_text(above: "AboveRoof") -> str:
    """One sentence on the kernels that ran faster than their roof allows."""
    worst = ", ".join(f"{shorten(t.name, 40)} {pct(t.efficiency)}" + (f" ({t.level})" if t.level else "")
                      for t in above.top[:3])
    n, calls = above.kernels, above.calls
    return (f"{n} {'kernel' if n == 1 else 'kernels'} ({plural(calls, 'call')}) ran above {'its' if n == 1 else 'their'}"
            f" roof (ceilings stale or wrong level): {worst}; re-measure with `roofscope microbench`")


def above_roof_lines(above: "AboveRoof") -> list[str]:
    import textwrap

    return textwrap.wrap(above_roof_text(above), 78, initial_indent="  warning   ", subsequent_indent=" " * 12)


def _counters_line(c: "CountersBlock") -> str:
    """Coverage and agreement of the measured counters (place/measured.py)."""
    tool = "ncu" + (f" {c.ncu_version}" if c.ncu_version else "")
    unused = c.tensor_cores_unused
    return (f"  counters  {tool}: {c.kernels:,} of {c.kernels_total:,} kernels ({pct(c.time_share)} of kernel time);"
            f" class as analytic on {pct(c.class_agreement)} of it; tensor cores unused on"
            f" {ms(unused.time_s)} ms of matmul time ({unused.kernels:,} kernels)")


def _run_lines(s: "Summary") -> list[str]:
    """Step time, throughput and NVML telemetry lines, where the summary has them."""
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
            import textwrap

            from roofscope.render.notes import utilization_note

            mfu = f"MFU {pct(m.mfu)}" + (" (op-counted)" if m.mfu_source == "op_counted" else "")
            # HFU's own rate, so that the ratio printed is the HFU printed (raised or counted).
            rate = m.hfu * m.peak_flops if m.hfu is not None else m.achieved_flops_per_s
            out.append(f"  util      {mfu}, HFU {pct(m.hfu)}, MBU {pct(m.mbu)}; HFU is {si(rate, 'FLOP/s')}"
                       f" of the {m.peak_roof} peak {si(m.peak_flops, 'FLOP/s')}")
            note = utilization_note(m.to_dict())
            if note:
                out += textwrap.wrap(note, 78, initial_indent=" " * 12, subsequent_indent=" " * 12)
        elif m.achieved_flops_per_s is not None:
            out.append(f"  util      achieved {si(m.achieved_flops_per_s, 'FLOP/s')}"
                       + (f", {si(m.bytes_per_step / m.step_time_s, 'B/s')}" if m.bytes_per_step else "")
                       + "; MFU, HFU and MBU need ceilings (--device, --ceilings)")
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


def _finding_lines(findings: "list[Recommendation]", top: int = 5) -> list[str]:
    """The top recommendations, each with its saving, evidence and fix, wrapped to 80 columns."""
    import textwrap

    if not findings:
        return []
    out = [f"Recommendations (estimated saving per step; savings overlap){'' if len(findings) <= top else f', top {top} of {len(findings)}'}"]
    for f in findings[:top]:
        # A blocked fix offers no saving: say what blocks it instead (rules/blockers.py).
        out.append(f"  {f.rank}. {f.title}: blocked" if f.extra.get("status") == "blocked" else
                   f"  {f.rank}. {f.title}: -{f.saving_s * 1e3:.3f} ms ({pct(f.saving_pct)}),"
                   f" {f.confidence} confidence")
        out += textwrap.wrap(f.summary, 78, initial_indent="     ", subsequent_indent="     ")
        code = (f.fix.snippet or "").splitlines()
        if code:
            # Code is printed whole, one line each, never wrapped: it is meant to be copied.
            out += ["     fix: " + code[0]] + ["          " + line for line in code[1:]]
        else:
            out += textwrap.wrap("fix: " + f.fix.text, 78, initial_indent="     ", subsequent_indent="       ")
    out.append("")
    return out


def _skipped_lines(s: "Summary") -> list[str]:
    """Rules that did not run, with their reasons; collapsed to one line when they share it."""
    skipped = s.diagnosis.skipped
    if not skipped:
        return []
    reasons = {r.reason for r in skipped}
    head = "No recommendations: " if not s.findings else "Rules not applied: "
    if len(reasons) == 1:
        import textwrap

        return textwrap.wrap(f"{head}{len(skipped)} rules skipped: {reasons.pop()}", 80,
                             subsequent_indent="  ") + [""]
    return [head.rstrip(": ") + f" ({len(skipped)} rules skipped)"] + [
        f"  {r.rule}: {r.reason}" for r in skipped] + [""]


def render_session(result: "SessionResult", top: int = Presentation.top, quiet: bool = False) -> tuple[str, str | None]:
    """Text for the end of a profiling session and the problem to report, if any."""
    if result.run is None:
        return "", "no trace was recorded, so no Run was written"
    out = ""
    if result.analysis is not None and not quiet:
        out = render_summary(result.analysis, top=top) + "\n"
    out += f"run:    {result.run.path}\n"
    report = result.run.path / REPORT_FILE
    if report.exists():
        out += f"report: {report}\n"
    problem = None
    if result.error:
        problem = (f"{result.error}; the Run was written without a summary: "
                   f"re-analyze it with `roofscope analyze {result.run.path} --peak-tflops ... --peak-bandwidth ...`")
    return out, problem
