"""Names from a trace made safe for text outputs: terminals, CSV files, CI logs.

A kernel, op or region name is whatever the traced program (or whoever edited the trace)
chose. Printed raw, an escape sequence rewrites the terminal, a newline starts a line that a
CI runner obeys (``::notice``, ``::set-output`` on GitHub Actions), and a CSV cell starting
with ``=`` is a spreadsheet formula. Every text renderer passes names through these helpers;
the HTML report escapes them itself, and JSON keeps them as recorded (JSON escapes controls).
"""
from __future__ import annotations

import re
from typing import Any

# ESC sequences as terminals read them: CSI (ESC [ ... final, or the C1 byte), OSC up to its
# terminator (BEL or ESC \\), and two-character ESC sequences.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
                      r"|\x1b[ -~]")
# What ends or splits a line anywhere (a terminal, a CI log, a CSV reader): one space instead.
_BREAKS = re.compile(r"[\t\n\v\f\r\x1c-\x1e\x85\u2028\u2029]")
# The other C0/C1 controls and DEL, and the bidirectional overrides that reorder what is shown.
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# Cells a spreadsheet would evaluate (OWASP's list for CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def clean(text: Any) -> str:
    """``text`` as one inert line: escape sequences and control characters dropped, line
    breaks and tabs as spaces."""
    s = str(text)
    if s.isprintable():  # the common case: nothing to do (printable excludes every character above)
        return s
    return _CONTROLS.sub("", _BREAKS.sub(" ", _ESCAPES.sub("", s)))


def clean_lines(text: str) -> str:
    """Like :func:`clean` for each line of ``text``; the newlines between lines are kept."""
    return "\n".join(clean(line) for line in text.split("\n"))


def csv_cell(text: Any) -> str:
    """A CSV text cell: :func:`clean`, and a leading quote where a spreadsheet would see a formula."""
    s = clean(text)
    return "'" + s if s.startswith(_FORMULA_START) else s
