"""Text of the program's own time (views/programtime.py): the step time with and without the
profiler, the cold steps left out, and how savings were carried into the program's time. Shared
by the terminal summary and the markdown summary."""
from __future__ import annotations

from typing import Any

from roofscope.units import ms


def step_time_lines(block: dict[str, Any] | None, steps_meta: dict[str, Any] | None = None) -> list[str]:
    """``own time`` lines: unprofiled vs profiled step time, inflation, cold steps; or why there is none."""
    if not block:
        return ["  own time  not measured (a bare trace or an older Run): step figures are the profiled ones,"
                " which the profiler inflates on host-bound work"]
    u, p = block.get("unprofiled_median_s"), block.get("profiled_median_s")
    spread = (f" (p10-p90 {ms(block.get('unprofiled_p10_s'))}-{ms(block.get('unprofiled_p90_s'))},"
              f" {block.get('unprofiled_steps', 0)} steps)")
    line = f"  own time  {ms(u)} ms/step without the profiler{spread}"
    if p is not None:
        line += f"; {ms(p)} profiled"
        if block.get("inflation"):
            line += f" ({block['inflation']:.2f}x)"
    out = [line + f" [{block.get('source', 'host')} clock]"]
    if block.get("decode_median_s") is not None:
        out.append(f"            decode {ms(block['decode_median_s'])} ms/token"
                   + (f", prefill {ms(block['prefill_median_s'])} ms" if block.get("prefill_median_s") else "")
                   + " without the profiler")
    cold = block.get("cold_steps") or []
    settle = (steps_meta or {}).get("settle") or {}
    if cold:
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
            f" {ms(program_time['bound_s'])} ms (the step less {ms(program_time['busy_s'])} ms of kernels)"]
