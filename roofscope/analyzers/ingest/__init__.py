"""Readers: a profiler's file in, a :class:`~roofscope.analyzers.model.trace.Trace` out.

Only this package knows input formats. A file is given to the first reader whose ``sniff``
accepts its first bytes (gunzipped; source.py refuses what is no regular file or too large
before that). A new format is one module implementing :class:`Reader` and one line: an entry
in ``READERS``, or ``register_reader(MyReader())`` run at import of that module. An installed
package may instead declare its reader as an entry point of the ``roofscope.readers`` group:
those are loaded when a file comes that no registered reader claims (so a Kineto trace never
pays for the search; a reader of some JSON format, which Kineto's reader claims, is registered).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from roofscope.analyzers.ingest import kineto_reader
from roofscope.analyzers.ingest.source import kind, read_head
from roofscope.analyzers.model.trace import Distributed, Trace
from roofscope.errors import RoofscopeError, TraceError

ENTRY_POINT_GROUP = "roofscope.readers"


class Reader(Protocol):
    name: str                          # "kineto", "nsys": named in refusals
    suffixes: tuple[str, ...]          # file names it reads (".json.gz"): folders of rank traces are listed by them

    def sniff(self, head: bytes, file_name: str) -> bool:
        """Whether the file whose first bytes (up to 64 KiB, gunzipped) are ``head`` is this format."""
        ...

    def read(self, path: Path) -> Trace:
        """The linked Trace (analyzers/ingest/frames.py: ``assemble`` builds one from plain columns);
        :class:`TraceError` in one line for a file it cannot read."""
        ...

    def peek_rank(self, head: bytes) -> Distributed | None:
        """The process group the trace's head names, without a full read (a job's ranks), or None."""
        ...


# Asked in order: the last registered first, so that a specific format is never claimed by a
# broad one (Kineto's reader takes any JSON).
READERS: list[Reader] = [kineto_reader.READER]
_plugins_loaded = False


def register_reader(reader: Reader) -> None:
    """Ask ``reader`` before the readers registered so far."""
    READERS.insert(0, reader)


def _load_plugins() -> bool:
    """Register the readers installed packages declare under ``[project.entry-points."roofscope.readers"]``
    (each names a Reader instance), once per process; whether that added any."""
    global _plugins_loaded
    if _plugins_loaded:
        return False
    _plugins_loaded = True
    # Here, not at the top: importing importlib.metadata and scanning the installed packages
    # takes 15-20 ms, which only a file of no registered reader's format pays.
    from importlib.metadata import entry_points

    added = False
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            reader = ep.load()
        except (Exception, SystemExit) as e:
            raise RoofscopeError(f"reader entry point {ep.name} ({ep.value}): {type(e).__name__}: {e}") from None
        if reader not in READERS:
            register_reader(reader)
            added = True
    return added


def _claimant(head: bytes, file_name: str) -> Reader | None:
    return next((r for r in READERS if r.sniff(head, file_name)), None)


def sniff(head: bytes, file_name: str) -> Reader | None:
    """The reader of a file whose first bytes are ``head``, or None."""
    reader = _claimant(head, file_name)
    if reader is None and _load_plugins():
        reader = _claimant(head, file_name)
    return reader


def read(path: str | os.PathLike) -> Trace:
    """Read a trace file of any known format; one-line :class:`TraceError` for anything else.
    Shapes past int64 are dropped and counted (frames.drop_impossible_shapes), whatever the reader."""
    # start-up time: frames.py is pandas', which the command line's early read (kineto_prefetch.py) imports
    # this package without
    from roofscope.analyzers.ingest.frames import drop_impossible_shapes

    p = Path(path)
    head = read_head(p)
    reader = sniff(head, p.name)
    if reader is None:
        if not head.strip():
            raise TraceError(f"{p}: empty file")
        raise TraceError(f"{p}: not a trace any reader knows ({kind(p, head)}; readers:"
                         f" {', '.join(r.name for r in READERS)})")
    return drop_impossible_shapes(reader.read(p))


def peek_rank(head: bytes, file_name: str) -> Distributed | None:
    """The process group a trace file's first bytes (gunzipped) name, by the reader of its format."""
    reader = sniff(head, file_name)
    return reader.peek_rank(head) if reader is not None else None


def trace_suffix(name: str) -> str | None:
    """The longest of the readers' suffixes ``name`` ends with, or None (installed readers' too)."""
    _load_plugins()
    return max((s for r in READERS for s in r.suffixes if name.endswith(s)), key=len, default=None)


def is_trace_name(name: str) -> bool:
    """Whether some reader reads files named so."""
    return trace_suffix(name) is not None
