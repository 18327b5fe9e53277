"""Text for people, shared by every output: counts and shares in words, kernel names cut to fit,
fixed-width tables for the terminal, and inert markdown.

It sits at the bottom of the package (no roofscope import but ``text_safety``), so the gate, the
commands, the microbenchmarks and every renderer can use it without importing a renderer: SI-prefixed
figures (3.35e12 B/s -> "3.35 TB/s", ``si``), milliseconds (``ms``), words, names and tables.
"""
from __future__ import annotations

import math
import os
import re
import shutil
import sys
import textwrap
from typing import Any, Sequence

from roofscope.text_safety import clean


def si_scale(value: float) -> tuple[float, str]:
    """The SI factor and prefix for ``value``: 3.35e12 -> (1e12, "T")."""
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return factor, prefix
    return 1.0, ""


def si(value: float | None, unit: str = "", digits: int = 3) -> str:
    """3.35e12, "B/s" -> "3.35 TB/s"; NaN -> "-"."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    factor, prefix = si_scale(value)
    return f"{value / factor:.{digits}g} {prefix}{unit}".rstrip()


def ms(seconds: float | None) -> str:
    """Seconds as milliseconds with three decimals ("1,234.567"); "-" when unknown."""
    return "-" if seconds is None or math.isnan(seconds) else f"{seconds * 1e3:,.3f}"


def duration(seconds: float) -> str:
    """A wall time as people say it: "4.2 s", "3 min 12 s", "1 h 5 min"."""
    if seconds < 59.5:
        return f"{seconds:.2g} s" if seconds < 9.95 else f"{seconds:.0f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"


_NAME_WIDTH = 64
_FILE_WIDTH = 160   # a table's width where no terminal says how wide it is
_MIN_TEXT = 12      # a name column is never cut narrower
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


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


def prose_width() -> int:
    """Where a sentence wraps: the terminal's width, but at most 100 columns (longer lines are hard to read)."""
    return max(40, min(terminal_width(), 100))


def field_lines(label: str, text: str) -> list[str]:
    """``  label     text`` wrapped to :func:`prose_width`, continuation lines under the text."""
    lines = textwrap.wrap(text, prose_width(), initial_indent=f"  {label:<9} ", subsequent_indent=" " * 12,
                          break_long_words=False, break_on_hyphens=False)
    return lines or [f"  {label}"]


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


def md_text(text: Any) -> str:
    """Free text as inert markdown: HTML's specials as entities, markdown's backslash-escaped,
    one line (a newline would end a table row), control characters dropped."""
    s = " ".join(clean(text).split())
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", s)


def md_code(text: Any) -> str:
    """A code span holding ``text`` verbatim; ``|`` is escaped, which GFM tables require even
    inside code spans."""
    s = " ".join(clean(text).split()).replace("|", "\\|")
    if not s:
        return ""
    fence = "`" * (max((len(r) for r in re.findall(r"`+", s)), default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str | None) -> list[str]:
    """GFM table lines; cells must already be escaped; ``align`` has '<' or '>' per column (None:
    columns left to the viewer's default)."""
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(cells) + " |"

    rules = ["---"] * len(headers) if align is None else ["---:" if a == ">" else ":---" for a in align]
    return [line(headers), "|" + "|".join(rules) + "|"] + [line(r) for r in rows]
