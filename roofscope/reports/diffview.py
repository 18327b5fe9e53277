"""Terminal (80 columns) and markdown views of a :class:`~roofscope.analyzers.compare.diff.Diff`."""
from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from roofscope.analyzers.compare.diff import UNCHANGED_ABS_S, UNCHANGED_REL
from roofscope.config import Presentation
from roofscope.text import md_code, md_table, md_text, pct, shorten, si, table
from roofscope.text_safety import clean

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from roofscope.analyzers.compare.diff import Diff, MetricChange, Prediction

WIDTH = 80


def _percent(x: float) -> str:
    """A number already in percent: small ones keep 3 significant digits (HFU of 0.136 %)."""
    return f"{x:.1f}" if x == 0 or abs(x) >= 10 else f"{x:.3g}"


def _value(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "s":
        return f"{v * 1e3:,.3f} ms"
    return f"{_percent(100 * v)}%" if unit == "" else si(v, unit)


def _delta(m: "MetricChange") -> str:
    if m.delta is None:
        return "-"
    # Fractions (HFU, idle, ...) move in percentage points, beside their relative change.
    if m.unit == "":
        change = ("+" if m.delta >= 0 else "-") + f"{_percent(abs(100 * m.delta))} pt"
    else:
        change = ("+" if m.delta >= 0 else "-") + _value(abs(m.delta), m.unit)
    return change + (f" ({100 * m.rel:+.1f}%)" if m.rel is not None else "")


def _judgement(m: "MetricChange") -> str:
    return m.note if m.better is None else ("better" if m.better else "worse")


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f}"


def _dus(seconds: float) -> str:
    return f"{seconds * 1e6:+,.1f}"


def _name(name: str, width: int) -> str:
    """Kernel names shortened for a column: without ``at::native::`` and, when still too long,
    cut in the middle, since both the kernel and its functor (at the end) tell kernels apart."""
    short = shorten(name.replace("at::native::", ""), 1 << 30)
    if len(short) <= width:
        return short
    head = (width - 1) // 2
    return short[:head] + "…" + short[len(short) - (width - 1 - head):]


def _count(x: float) -> str:
    """Calls per complete step: whole in a steady loop; a kernel that skips steps shows its mean."""
    return f"{x:.0f}" if abs(x - round(x)) < 1e-9 else f"~{x:.1f}"


def _calls(a: float, b: float) -> str:
    return f"{_count(a)}/{_count(b)}"


def _metric_rows(d: "Diff") -> list[list[str]]:
    return [[m.label, _value(m.a, m.unit), _value(m.b, m.unit), _delta(m), _judgement(m)]
            for m in d.metrics if m.a is not None or m.b is not None]


def _status_rows(d: "Diff") -> list[list[str]]:
    """Kernel time by status, then the step's time outside any kernel: the rows add up to the step."""
    rows = [[str(s), f"{int(r['kernels']):,}", _us(r["time_a_s"]), _us(r["time_b_s"]), _dus(r["delta_s"])]
            for s, r in d.by_status.iterrows() if r["kernels"]]
    if d.outside_delta_s is not None:
        rows.append([f"outside any {'op' if d.cpu_only else 'kernel'}", "-", _us(d.outside_a_s), _us(d.outside_b_s),
                     _dus(d.outside_delta_s)])
    return rows


OUTSIDE_NOTE = ("outside: the profiled steps' mean time less their kernels' time (host work, waits, sleeps);"
                " the rows add up to the step")


def _totals_rows(t: "pd.DataFrame") -> list[list[str]]:
    return [[str(key), _us(r["time_a_s"]), _us(r["time_b_s"]), _dus(r["delta_s"])] for key, r in t.iterrows()]


def _prediction_items(p: "Prediction") -> list[tuple[str, str]]:
    """(label, text) lines of the prediction check."""
    out = []
    if p.rule is not None:
        out += [("finding", p.rule + (f" ({p.title})" if p.title else "")), ("taken", p.why)]
        if p.predicted_s is not None:
            out.append(("predicted", f"{_value(p.predicted_s, 's')}/step saving"))
    if p.measured_s is not None:
        out.append(("measured", f"{_value(p.measured_s, 's')}/step saving (median step A - median step B)"
                    + (f", {pct(p.ratio)} of predicted" if p.ratio is not None else "")))
    if p.evidence_time_a_s:
        out.append(("evidence", f"its kernels took {_us(p.evidence_time_a_s)} -> {_us(p.evidence_time_b_s)} µs/step"))
    out.append(("verdict", p.verdict if p.rule is not None else f"{p.verdict} ({p.why})"))
    return out


def render_terminal(d: "Diff", top: int = Presentation.top) -> str:
    """The diff for a terminal: metrics, top ``top`` kernel changes, class changes, prediction."""
    out = [f"roofscope diff: A {d.a}", f"                B {d.b}",
           f"  device  A {d.device_a}" + ("" if d.device_b == d.device_a else f", B {d.device_b}"),
           f"  steps   A {d.steps_a}, B {d.steps_b} complete steps profiled; kernel times below are per step"]
    for w in d.warnings:
        out += textwrap.wrap(w, WIDTH, initial_indent="  warning ", subsequent_indent=" " * 10)
    out.append("")
    rows = _metric_rows(d)
    if rows:
        out.append("Metrics (B vs A)")
        out += ["  " + r for r in table(["metric", "A", "B", "change", ""], rows, "<>>><")]
        out.append("")

    changed = d.kernels[d.kernels["status"] != "unchanged"].head(top)
    out.append("Kernel time per step by status (µs)")
    out += ["  " + r for r in table(["status", "kernels", "A", "B", "Δ"], _status_rows(d), "<>>>>")]
    if d.outside_delta_s is not None:
        out += textwrap.wrap(OUTSIDE_NOTE, WIDTH, initial_indent="  ", subsequent_indent="  ")
    if len(changed):
        head = ["status", "A µs", "B µs", "Δ µs", "calls"]
        body = [[r.status, _us(r.time_a_s), _us(r.time_b_s), _dus(r.delta_s), _calls(r.calls_a, r.calls_b)]
                for r in changed.itertuples()]
        # Names take what the figures leave of the line: the separator row's width is the columns'.
        name_width = max(WIDTH - len("  ") - len(table(head, body, "<>>>>")[1]) - len("  "), 16)
        lines = table(head + ["kernel"], [b + [_name(n, name_width)] for b, n in zip(body, changed["name"])],
                      "<>>>><")
        out.append("")
        out.append(f"Top {len(changed)} kernel changes by |Δ| per step")
        out += ["  " + r for r in lines]
    else:
        out += ["", f"No kernel moved by more than {UNCHANGED_REL:.0%} or {UNCHANGED_ABS_S * 1e6:g} µs per step."]
    out.append("")

    cc = d.class_changes()
    if len(cc):
        out.append("Class changes")
        rows = [[f"{r.cls_a} -> {r.cls_b}", _us(r.time_a_s), _us(r.time_b_s), _name(r.name, 36)]
                for r in cc.head(top).itertuples()]
        out += ["  " + r for r in table(["class A -> B", "A µs", "B µs", "kernel"], rows, "<>><")]
        out.append("")

    out.append("Time per step by class (µs)")
    out += ["  " + r for r in table(["class", "A", "B", "Δ"], _totals_rows(d.by_class), "<>>>")]
    out.append("")
    out.append("Prediction check")
    for label, text in _prediction_items(d.prediction):
        out += textwrap.wrap(text, WIDTH, initial_indent=f"  {label + ':':<11}", subsequent_indent=" " * 13)
    return "\n".join(map(clean, out)) + "\n"   # kernel names: text_safety.py


def render_markdown(d: "Diff", top: int = Presentation.top) -> str:
    """The diff as GitHub-flavoured markdown (full kernel names, every table)."""
    out = ["## roofscope diff", "", f"A: {md_code(d.a)} ({md_text(d.device_a)}, {d.steps_a} steps)  ",
           f"B: {md_code(d.b)} ({md_text(d.device_b)}, {d.steps_b} steps)", ""]
    out += [f"> **warning:** {md_text(w)}" for w in d.warnings] + ([""] if d.warnings else [])
    out += ["### Metrics", ""] + md_table(["metric", "A", "B", "change", ""], _metric_rows(d), "<>>><") + [""]
    changed = d.kernels[d.kernels["status"] != "unchanged"].head(top)
    out += ["### Kernel time per step by status (µs)", ""]
    out += md_table(["status", "kernels", "A", "B", "Δ"], _status_rows(d), "<>>>>") + [""]
    out += [md_text(OUTSIDE_NOTE[0].upper() + OUTSIDE_NOTE[1:] + "."), ""] if d.outside_delta_s is not None else []
    out += [f"### Top {len(changed)} kernel changes (per step)", ""]
    rows = [[r.status, md_code(r.name), _calls(r.calls_a, r.calls_b), _us(r.time_a_s), _us(r.time_b_s),
             _dus(r.delta_s), r.cls_a or "-", r.cls_b or "-"] for r in changed.itertuples()]
    out += md_table(["status", "kernel", "calls A/B", "A µs", "B µs", "Δ µs", "class A", "class B"], rows,
                     "<<>>>><<") + [""]
    cc = d.class_changes()
    if len(cc):
        out += ["### Class changes", ""]
        out += md_table(["kernel", "class A", "class B", "A µs", "B µs"],
                         [[md_code(r.name), r.cls_a, r.cls_b, _us(r.time_a_s), _us(r.time_b_s)]
                          for r in cc.head(top).itertuples()], "<<<>>") + [""]
    for title, t in (("class", d.by_class), ("category", d.by_category)):
        out += [f"### Time per step by {title} (µs)", ""]
        out += md_table([title, "A", "B", "Δ"], _totals_rows(t), "<>>>") + [""]
    out += ["### Prediction check", ""] + [f"- **{label}**: {md_text(text)}" for label, text in _prediction_items(d.prediction)]
    return "\n".join(out) + "\n"
