"""The gate's verdict as a terminal table and as markdown (``--markdown``, GitHub step summary)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import pandas as pd

from roofscope.gate.evaluate import FAIL, PASS, UNDECIDED, Check
from roofscope.text import md_table, shorten, table
from roofscope.text_safety import clean

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.gate.result import GateResult

HEADERS = ("check", "baseline", "run", "change", "limit", "p", "verdict")
_MARK = {PASS: "pass", FAIL: "FAIL", "skip": "skip", UNDECIDED: "UNDECIDED"}


def _row(c: Check) -> list[str]:
    m = c.metric
    return [c.name, m.format(c.base) if c.kind == "regression" else "-", m.format(c.run), c.delta_text(),
            c.limit, f"{c.p_value:.3g}" if c.p_value is not None else "-", _MARK[c.status]]


def _kernel_rows(k: pd.DataFrame, width: int) -> list[list[str]]:
    return [[f"{1e3 * r.delta_s:+.3f}", f"{1e3 * r.time_a_s:.3f}", f"{1e3 * r.time_b_s:.3f}",
             f"{r.calls_a:g} -> {r.calls_b:g}", f"{r.cls_a or '-'} -> {r.cls_b or '-'}", r.status,
             shorten(clean(str(r.name)), width)] for r in k.itertuples()]


_KERNEL_HEADERS = ("delta ms", "base ms", "run ms", "calls/step", "class", "status", "kernel")


def _notes(result: "GateResult") -> list[str]:
    return [f"{c.name}: {c.note}" for c in result.checks if c.note]


def text(result: "GateResult") -> str:
    """Terminal verdict: the checks table, warnings, notes, and on failure the kernels behind it."""
    out = [f"roofscope gate: {result.run}" + (f"  vs  {result.baseline}" if result.baseline else "")]
    if result.baseline:
        out.append(f"  medians compared; a shift must be clear at alpha {result.alpha:g}"
                   " (one-sided Mann-Whitney on per-step samples)")
    out.append("")
    out += ["  " + line for line in table(HEADERS, [_row(c) for c in result.checks], "<>>>>><")]
    for title, lines in (("warnings", result.warnings), ("notes", _notes(result))):
        if lines:
            out += ["", f"  {title}:"] + [f"    - {w}" for w in lines]
    if not result.passed:
        out += [""] + [f"  {c.message()}" for c in result.failures + result.undecided]
    if result.failures:
        out += evidence_text(result)
    out += ["", f"  {result.verdict()}", ""]
    return "\n".join(out)


def evidence_text(result: "GateResult") -> list[str]:
    """The kernels behind a failure: those that grew, and those whose class changed."""
    out: list[str] = []
    grown, cls = result.grown_kernels(), result.class_changes()
    if len(grown):
        out += ["", "  kernels whose time per step grew (baseline -> run):"]
        out += ["    " + line for line in table(_KERNEL_HEADERS, _kernel_rows(grown, 60), ">>>>><<")]
    if len(cls):
        out += ["", "  kernels whose roofline class changed:"]
        out += ["    " + line for line in table(_KERNEL_HEADERS, _kernel_rows(cls, 60), ">>>>><<")]
    return out


def _md_table(headers: Sequence[str], rows: list[list[str]]) -> list[str]:
    """A plain GFM table; the cells are the terminal's, so only ``|`` (a column break) is escaped."""
    return md_table(headers, [[c.replace("|", "\\|") for c in r] for r in rows], None)


def markdown(result: "GateResult") -> str:
    """The same verdict as markdown: a headline, the checks, warnings, and the kernel evidence."""
    icon = ":white_check_mark:" if result.passed else ":x:" if result.failures else ":grey_question:"
    out = [f"### roofscope gate {icon} {result.verdict()}", "",
           f"Run `{result.run}`" + (f" against baseline `{result.baseline}`" if result.baseline else "")
           + f"; a check fails when its limit is exceeded and the shift is clear at alpha {result.alpha:g}"
           " (one-sided Mann-Whitney on per-step samples).", ""]
    rows = [[c.name, *(_row(c)[1:6]), f"**{_MARK[c.status]}**" if c.status in (FAIL, UNDECIDED) else _MARK[c.status]]
            for c in result.checks]
    out += _md_table(HEADERS, rows)
    if not result.passed:
        out += [""] + [f"- {c.message()}" for c in result.failures + result.undecided]
    for title, lines in (("Warnings", result.warnings), ("Notes", _notes(result))):
        if lines:
            out += ["", f"**{title}**", ""] + [f"- {w}" for w in lines]
    if result.failures:
        for title, k in (("Kernels whose time per step grew", result.grown_kernels()),
                         ("Kernels whose roofline class changed", result.class_changes())):
            if len(k):
                out += ["", f"**{title}** (baseline -> run)", ""]
                rows = [r[:-1] + [f"`{shorten(str(name), 80)}`"] for r, name in zip(_kernel_rows(k, 80), k["name"])]
                out += _md_table(_KERNEL_HEADERS, rows)
    return "\n".join(out) + "\n"
