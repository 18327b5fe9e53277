"""GitHub Actions output: workflow-command annotations and the job's step summary.

Annotations are ``::error title=T::MESSAGE`` lines on stdout. GitHub's workflow-command
rules: in the message ``%``, ``\\r`` and ``\\n`` are written ``%25``, ``%0D``, ``%0A``; in
property values such as the title also ``:`` and ``,`` (``%3A``, ``%2C``), which would
otherwise end the property.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from roofscope.errors import RoofscopeError
from roofscope.text_safety import clean_lines

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.gate.result import GateResult


def escape_data(s: str) -> str:
    # Kernel names in a message: their escape sequences and controls go (text_safety), the
    # message's own line breaks stay, encoded.
    return "%0D".join(clean_lines(part).replace("%", "%25").replace("\n", "%0A") for part in s.split("\r"))


def escape_property(s: str) -> str:
    return escape_data(s).replace(":", "%3A").replace(",", "%2C")


def command(kind: str, title: str, message: str) -> str:
    """One workflow command line: ``kind`` is error, warning or notice."""
    return f"::{kind} title={escape_property(title)}::{escape_data(message)}"


def annotations(result: "GateResult") -> list[str]:
    """An error per failed check (with the kernels that grew most) and per undecided one, a warning per warning."""
    culprits = result.culprits()
    lines = [command("error", f"roofscope gate: {c.name} regressed",
                     c.message() + (f"\nKernels that grew most: {culprits}" if culprits else ""))
             for c in result.failures]
    lines += [command("error", f"roofscope gate: {c.name} undecided", c.message()) for c in result.undecided]
    lines += [command("warning", "roofscope gate", w) for w in result.warnings]
    return lines


def in_actions(env: Mapping[str, str] | None = None) -> bool:
    return (os.environ if env is None else env).get("GITHUB_ACTIONS") == "true"


def append_step_summary(markdown: str, env: Mapping[str, str] | None = None) -> Path | None:
    """Append to ``$GITHUB_STEP_SUMMARY`` (GitHub's per-step file, shared by the job's steps)."""
    path = (os.environ if env is None else env).get("GITHUB_STEP_SUMMARY")
    if not path:
        return None
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(markdown)
    except OSError as e:
        raise RoofscopeError(f"cannot append to GITHUB_STEP_SUMMARY {path}: {e.strerror}") from None
    return Path(path)
