"""Where a command's outputs go: files, or one of them on standard output (``-``) instead of the terminal
summary, so that it can be piped (``roofscope analyze T --json - | jq ...``)."""
from __future__ import annotations

from roofscope.errors import RoofscopeError
from roofscope.fileio import check_writable

BINARY = ("perfetto",)   # gzipped: no output for a terminal or a text pipe


def plan(named: list[tuple[str | None, str]], force: bool) -> tuple[str | None, list[tuple[str, str]]]:
    """``named``: (the path given or None, the renderer's name, which is also the option's) per output.
    The name of the one given as ``-``, printed instead of the terminal summary (None: none), and the
    (path, name) of those to write, each checked writable before any work (one-line errors)."""
    dashed = [name for path, name in named if path == "-"]
    binary = [name for name in dashed if name in BINARY]
    if binary:
        raise RoofscopeError(f"--{binary[0]} cannot be '-': its output is gzipped; give it a file")
    if len(dashed) > 1:
        raise RoofscopeError(f"only one output can be '-' (standard output), got --{' and --'.join(dashed)}")
    files = [(path, name) for path, name in named if path and path != "-"]
    for path, _ in files:
        check_writable(path, force)
    return (dashed[0] if dashed else None), files
