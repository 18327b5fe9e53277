"""What several renderers say alike: the memory roofs and the kernels above their roof in words
(terminal, markdown, HTML, the ceilings table), the recommendations as terminal lines (an
analysis's summary and a job's), which of MFU and HFU was adjusted, and the program's own time
(analyzers/views/programtime.py): the step time with and without the profiler, the cold steps left out, and
how savings were carried into the program's time; the fixes `roofscope verify` re-ran (verify.json)."""
from __future__ import annotations

import math
import textwrap
from typing import TYPE_CHECKING, Any, Mapping

from roofscope.analyzers.model.kernels import NO_CACHE_ROOF
from roofscope.analyzers.model.summary import CAPPED
from roofscope.text import ms, pct, plural, shorten, si

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.analyzers.model.summary import AboveRoof, Recommendation
    from roofscope.hardware.ceilings import Ceilings


def memory_text(c: "Ceilings") -> str:
    """'memory 30.9 GB/s', or per level: 'memory L2 120 GB/s (<= 2 MiB), LLC 230 GB/s (<= 32 MiB), DRAM 18 GB/s'."""
    if not c.levels:
        return f"memory {si(c.bandwidth, 'B/s')}"
    return "memory " + ", ".join(f"{name} {si(bw, 'B/s')}" + ("" if cap == math.inf else f" (<= {si(cap, 'B')})")
                                 for name, cap, bw in c.levels)


def ceilings_kind(c: "Ceilings") -> str:
    """What the roofs' numbers are: ``theoretical`` (a CPU's peak from its clock and vector units, the measured
    rates shown beside as achievable), ``measured`` (roofscope microbench), ``datasheet`` or ``user`` (--peak-*)."""
    return "theoretical" if c.source == "measured" and "theoretical" in c.env else c.source


def ceilings_sentences(c: "Ceilings") -> list[str]:
    """The ceilings in labelled sentences, one fact each, for a renderer to wrap: the roofs with what they
    are, the datasheet's beside measured ones, how theoretical roofs were made and what was measured, and
    where a cached measurement came from."""
    if not c.known:
        return [c.notes[0]]
    kind = ceilings_kind(c)
    peaks = ", ".join(f"{k} {si(v, 'FLOP/s')}" for k, v in sorted(c.peaks.items(), key=lambda kv: -kv[1]))
    out = [f"{kind} roofs: {peaks}; {memory_text(c)}"]
    spec = c.datasheet
    if spec is not None and kind != "datasheet":
        top = ", ".join(f"{k} {si(v, 'FLOP/s')}" for k, v in sorted(spec.peaks.items(), key=lambda kv: -kv[1])[:3])
        out.append(f"datasheet ({spec.name}): {top}; memory {si(spec.bandwidth, 'B/s')}")
    # On a CPU, how the theoretical roofs were made and the measured (achievable) rates; noisy benchmarks.
    out += [n for n in c.notes if n.startswith(("noisy:", "compute roofs:", "memory roofs:"))]
    out += [n for n in c.notes if n.startswith("using ceilings measured on") or " identified from its properties " in n]
    return out


def above_roof_text(above: "AboveRoof") -> str:
    """One sentence on the kernels that ran faster than their roof allows."""
    worst = ", ".join(f"{shorten(t.name, 40)} {pct(t.efficiency)}" + (f" ({t.level})" if t.level else "")
                      for t in above.top[:3])
    n, calls = above.kernels, above.calls
    why, fix = "ceilings stale or wrong level", "re-measure with `roofscope microbench`"
    if any(t.level == NO_CACHE_ROOF for t in above.top):
        why = "the ceilings have no cache roof, and data that stays in L2 moves faster than memory"
        fix = "measure the ceilings, cache levels included, with `roofscope microbench`"
    return (f"{n} {'kernel' if n == 1 else 'kernels'} ({plural(calls, 'call')}) ran above {'its' if n == 1 else 'their'}"
            f" roof ({why}): {worst}; {fix}")


def finding_head(f: "Recommendation", per_step: str = "") -> str:
    """A finding's title and what it saves (``per_step``: the words after "ms"): a blocked fix and
    advice save nothing, and say so (analyzers/diagnose/blockers.py, analyzers/model/findings.KINDS)."""
    if f.status == "blocked":
        return f"{f.title}: blocked"
    if f.kind == "advice":
        return f"{f.title}: advice, no saving by itself"
    return f"{f.title}: -{f.saving_s * 1e3:.3f} ms{per_step} ({pct(f.saving_pct)}), {f.confidence} confidence"


def finding_lines(findings: "list[Recommendation]", top: int = 5) -> list[str]:
    """The top recommendations, each with its saving, evidence and fix, wrapped to 80 columns."""
    if not findings:
        return []
    out = [f"Recommendations (estimated saving per step; savings overlap){'' if len(findings) <= top else f', top {top} of {len(findings)}'}"]
    for f in findings[:top]:
        out.append(f"  {f.rank}. {finding_head(f)}")
        out += textwrap.wrap(f.summary, 78, initial_indent="     ", subsequent_indent="     ")
        code = (f.fix.snippet or "").splitlines()
        if code:
            # Code is printed whole, one line each, never wrapped: it is meant to be copied.
            out += ["     fix: " + code[0]] + ["          " + line for line in code[1:]]
        else:
            out += textwrap.wrap("fix: " + f.fix.text, 78, initial_indent="     ", subsequent_indent="       ")
        verdict = f.extra.get("verify")
        if verdict:
            out += textwrap.wrap(f"re-run with {verdict.get('fix') or 'it'}: {verdict_text(verdict)}", 78,
                                 initial_indent="     ", subsequent_indent="       ")
    out.append("")
    return out


def verdict_text(v: Mapping[str, Any]) -> str:
    """'verified: saves 2.4 ms/step [2.1, 2.8] over 4 pairs: 0.93x the predicted 2.6 ms' (a verify.json entry)."""
    return f"{v.get('status')}: {v.get('reason')}"


def unplaced(verification: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """summary.json's verified fixes that answer none of the findings (asked for with --fix, or the
    findings changed since): the verdicts a renderer lists on their own."""
    return [v for v in (verification or {}).get("fixes") or [] if v.get("finding") is None]


def verification_lines(fixes: list[Mapping[str, Any]]) -> list[str]:
    """verify.json's fixes as terminal lines: each fix, its finding's rule, its status and why."""
    if not fixes:
        return []
    out = ["Fixes re-run in the program (roofscope verify: saving per step, 95% interval)"]
    for v in fixes:
        rule = f" [{v.get('rule')}]" if v.get("rule") else ""
        out += textwrap.wrap(f"{v.get('fix') or '(source edit)'}{rule}: {verdict_text(v)}", 78,
                             initial_indent="  ", subsequent_indent="     ")
    out.append("")
    return out


def utilization_note(m: Mapping[str, Any]) -> str | None:
    """The sentence that says which of MFU and HFU was adjusted and why, or None."""
    model, counted = m.get("model_flops_per_step"), m.get("flops_per_step")
    if not model or counted is None or model <= counted or not m.get("peak_flops"):
        return None
    if m.get("hfu_source") == "raised_to_mfu":
        return (f"HFU raised to MFU: the kernels were counted doing {si(counted, 'FLOP')} per step, less than the"
                f" model's {si(model, 'FLOP')} (--model-flops-per-step); kernels without a cost model are missing"
                " from the count")
    formula = str(m.get("mfu_formula") or "").replace(CAPPED, "")
    return (f"MFU capped at HFU: the model FLOPs estimate ({formula}), {si(model, 'FLOP')} per step, exceeds the"
            f" {si(counted, 'FLOP')} the kernels were counted doing (a first layer computes no input gradient),"
            " so MFU uses the count")


def step_time_lines(block: dict[str, Any] | None, steps_meta: dict[str, Any] | None = None) -> list[str]:
    """``own time`` lines: unprofiled vs profiled step time, inflation, cold steps; or why there is none."""
    if not block:
        window = isinstance(steps_meta, dict) and (steps_meta.get("stepless_window") or
                                                   "duration_s" in (steps_meta.get("requested") or {}))
        why = ("this Run profiled a time window, not steps (--step-on or roofscope.step() marks them)"
               if window else "a bare trace or an older Run")
        return [f"  own time  not measured: {why}; step figures are the profiled ones, which the profiler"
                " inflates on host-bound work"]
    u, p = block.get("unprofiled_median_s"), block.get("profiled_median_s")
    spread = (f" (p10-p90 {ms(block.get('unprofiled_p10_s'))}-{ms(block.get('unprofiled_p90_s'))},"
              f" {block.get('unprofiled_steps', 0)} steps)")
    line = f"  own time  {ms(u)} ms/step without the profiler{spread}"
    if p is not None:
        line += f"; {ms(p)} profiled"
        if block.get("inflation"):
            line += f" ({block['inflation']:.2f}x" + (f" iteration {block['inflation_outer']}'s unprofiled steps)"
                                                      if block.get("inflation_outer") is not None else ")")
    out = [line + f" [{block.get('source', 'host')} clock]"]
    if block.get("decode_median_s") is not None:
        out.append(f"            decode {ms(block['decode_median_s'])} ms/token"
                   + (f", prefill {ms(block['prefill_median_s'])} ms" if block.get("prefill_median_s") else "")
                   + " without the profiler")
    cold = block.get("cold_steps") or []
    settle = (steps_meta or {}).get("settle") or {}
    stretches = block.get("cold_stretches") or []
    if stretches:
        # Loop steps: the outer loop's iterations that ran cold (a decode's first round), apart from the median.
        outer = (((steps_meta or {}).get("loop") or {}).get("outer") or [{}])[0].get("text")
        out.append("            cold: " + "; ".join(
            f"iteration {c['outer']}{f' of `{outer}`' if outer else ''}, {c['steps']} steps at {ms(c['median_s'])} ms"
            for c in stretches) + " (left out of the median)")
    elif cold:
        out.append(f"            {len(cold)} cold step{'s' if len(cold) != 1 else ''} skipped before the profile"
                   f" (median {ms(block.get('cold_median_s'))} ms)"
                   + (": the step times never settled" if settle.get("outcome") == "never settled" else ""))
    if (steps_meta or {}).get("rearmed"):
        out.append(f"            {steps_meta['rearmed']}")   # type: ignore[index]
    return out


def savings_note(program_time: dict[str, Any] | None) -> list[str]:
    """How the savings were carried into the program's time, or that they are the profiled step's."""
    if not program_time:
        return []
    return [f"  In the program's own time: host-side terms scaled x{program_time['host_scale']:.2f} from the"
            f" profiled step ({ms(program_time['profiled_step_s'])} ms) to the unprofiled one"
            f" ({ms(program_time['unprofiled_step_s'])} ms); no host-side saving exceeds"
            f" {ms(program_time['bound_s'])} ms (the step less {ms(program_time['busy_s'])} ms of kernels)"
            + (f"; the host's own work is at least {ms(program_time['host_floor_s'])} ms a step (the profiled step"
               " waited on it): a fix of kernels alone (tf32, cudnn_benchmark, channels_last) saves at most"
               f" {ms(max(0.0, program_time['unprofiled_step_s'] - program_time['host_floor_s']))} ms"
               if program_time.get("host_floor_s") else "")]


def program_note(program: dict[str, Any] | None) -> list[str]:
    """What the fixes assume the program is (analyzers/diagnose/program.py), so a wrong guess shows."""
    if not program or not program.get("words"):
        return []
    return textwrap.wrap(f"Fixes written for: {program['words']}", 78, initial_indent="  ",
                         subsequent_indent="    ") + [""]
