"""A trace file's bytes, read within bounds whatever its format: its first bytes for the readers'
sniffing, and the whole of it in pieces as it is read, gunzipped when needed.

Refused in one line before anything large is read: what is missing, a directory, what is not a
regular file (a FIFO would block, /dev/zero never ends), and what holds more than
:func:`max_trace_bytes`; a gzip stream stops inflating at that bound or at a ratio a gzip bomb
exceeds and real traces never do.
"""
from __future__ import annotations

import os
import queue
import re
import stat
import sys
import threading
import zlib
from pathlib import Path
from typing import BinaryIO, Iterator

from roofscope.errors import RoofscopeError, TraceError

# A trace (after gunzip) may hold this many bytes; ROOFSCOPE_MAX_TRACE_SIZE raises or lowers it
# ("8G", "500M", bytes). The reader holds the tables and what it has not parsed yet, not the file;
# the bound keeps a gzip bomb or a huge sparse file from taking the machine's time.
MAX_TRACE_ENV = "ROOFSCOPE_MAX_TRACE_SIZE"
DEFAULT_MAX_TRACE = 4 << 30
# Unless the bound is set, a gzip stream may also inflate only this many times its size (real
# traces: up to 30x; a gzip bomb: ~1000x) beyond a floor, so that a 1 MB bomb stops at 256 MiB.
GZIP_RATIO = 250
_GZIP_FLOOR = 256 << 20
# What the readers sniff: the first bytes (gunzipped), enough for Kineto's distributedInfo too.
HEAD_BYTES = 1 << 16
# What is read from the file at a time, and how many pieces may wait read ahead.
READ_BYTES = 1 << 20
AHEAD = 4
_GZIP_MAGIC = b"\x1f\x8b"
# Estimated JSON from which two processes read a trace (kineto_helper.py: the fork and the merge cost ~0.1 s).
MIN_BYTES = 48 << 20
# A gzip trace's JSON per byte on disk, at least (real traces: 10-30).
_GZIP_RATIO = 8


def max_trace_bytes() -> int:
    """The size bound of a trace: ``$ROOFSCOPE_MAX_TRACE_SIZE``, else 4 GiB."""
    raw = os.environ.get(MAX_TRACE_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_TRACE
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?", raw, re.I)
    if not m:
        raise RoofscopeError(f"{MAX_TRACE_ENV}={raw!r}: expected a size such as 8G, 500M or a number of bytes")
    return int(float(m.group(1)) * 1024 ** "_kmgt".index(m.group(2).lower() or "_"))


def may_fork() -> bool:
    """Whether a child may be forked to read a trace (kineto_helper.py, kineto_prefetch.py): Linux, no
    other Python thread, torch not loaded (its runtime's threads and devices are not a child's to
    inherit), and two processors to run on."""
    return (sys.platform.startswith("linux") and threading.active_count() == 1 and "torch" not in sys.modules
            and len(os.sched_getaffinity(0)) >= 2)


def large(path: str | os.PathLike) -> bool:
    """Whether the file holds :data:`MIN_BYTES` of JSON or more (estimated): read by two processes."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):  # _checked refuses it; opening a FIFO here would block
            return False
        with open(path, "rb") as f:
            gz = f.read(2) == _GZIP_MAGIC
    except OSError:
        return False
    return st.st_size * (_GZIP_RATIO if gz else 1) >= MIN_BYTES


def _too_big(path: Path, what: str, limit: int, why: str = "the limit for a trace") -> TraceError:
    size = f"{limit / 2**30:.3g} GiB" if limit >= 2**30 else f"{limit / 2**20:.3g} MiB"
    return TraceError(f"{path}: {what} more than {size} of JSON, {why}; set"
                      f" {MAX_TRACE_ENV} (e.g. {MAX_TRACE_ENV}=16G) to analyze a larger one")


def _checked(path: Path, limit: int) -> None:
    """Refuse what is no regular file or is larger than ``limit`` (see the module docstring)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except OSError as e:
        raise TraceError(f"{path}: cannot read: {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise TraceError(f"{path}: is a directory, neither a trace file nor a roofscope Run")
    if not stat.S_ISREG(st.st_mode):
        raise TraceError(f"{path}: not a regular file (a device, pipe or socket), so not a trace")
    if st.st_size > limit:
        raise _too_big(path, "holds", limit)


def unzip_head(raw: bytes) -> bytes:
    """The first bytes of a file as the readers see them: gunzipped when they are a gzip stream's
    (up to :data:`HEAD_BYTES`). Raises ``zlib.error`` for a stream corrupt from its start."""
    if raw[:2] != _GZIP_MAGIC:
        return raw
    d = zlib.decompressobj(wbits=31)
    head = d.decompress(raw, HEAD_BYTES)
    if not head and not d.eof:
        raise zlib.error("the stream is cut short")
    return head


def read_head(path: str | os.PathLike) -> bytes:
    """The file's first :data:`HEAD_BYTES` (gunzipped), after the checks of the module docstring."""
    p = Path(path)
    _checked(p, max_trace_bytes())
    try:
        with open(p, "rb") as f:
            raw = f.read(HEAD_BYTES)
    except OSError as e:
        raise TraceError(f"{p}: cannot read: {e.strerror}") from None
    try:
        return unzip_head(raw)
    except zlib.error as e:
        raise TraceError(f"{p}: truncated or corrupt gzip ({e})") from None


def kind(path: str | os.PathLike, head: bytes) -> str:
    """What a file that no reader claims holds, in words that quote none of it (a link to
    /etc/passwd must not print the start of /etc/passwd): JSON, HTML or other markup, text or
    binary data, and where a symbolic link points."""
    start = head.lstrip()[:16].lower()
    if start[:1] in (b"{", b"["):
        what = "JSON"
    elif start.startswith((b"<!doctype html", b"<html")):
        what = "an HTML page"
    elif start.startswith(b"<"):
        what = "XML or other markup"
    else:
        what = "text" if _is_text(head) else "binary data"
    p = Path(path)
    return f"a link to {os.readlink(p)}, which holds {what}" if p.is_symlink() else f"it holds {what}"


def _is_text(head: bytes) -> bool:
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 3:   # more than a character cut by the head's end
            return False
        text = head[:e.start].decode("utf-8")
    return all(c.isprintable() or c in "\t\r\n" for c in text)


def read_chunks(path: str | os.PathLike) -> Iterator[bytes]:
    """The file's bytes in pieces as they are read, gunzipped when needed, after the checks of the
    module docstring: a reader holds what it has not parsed yet, never the whole file. A gzip stream
    cut short (a process killed while writing ``.json.gz``) or damaged gives what it holds up to the
    damage; the reader then reads up to its last complete event and reports the cut. The pieces are
    read and inflated by a thread, ahead of their use: zlib and the file system release the GIL, so
    that work overlaps the parsing of the pieces before."""
    return _ahead(_chunks(path))


_END = object()


def _ahead(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """``chunks`` produced by a thread, at most :data:`AHEAD` pieces before the one in use; what it
    raises is raised here."""
    q: queue.Queue = queue.Queue(AHEAD)
    stop = threading.Event()

    def put(item: object) -> bool:
        """``item`` queued, unless the reader stopped first (then False)."""
        while not stop.is_set():
            try:
                q.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for chunk in chunks:
                if not put(chunk):
                    return
            put(_END)
        except BaseException as e:  # noqa: BLE001 - handed to the reader, which raises it
            put(e)
        finally:
            chunks.close()  # type: ignore[attr-defined]

    thread = threading.Thread(target=produce, name="roofscope-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()


def _chunks(path: str | os.PathLike) -> Iterator[bytes]:
    p = Path(path)
    limit = max_trace_bytes()
    _checked(p, limit)
    try:
        f = open(p, "rb")
    except OSError as e:
        raise TraceError(f"{p}: cannot read: {e.strerror}") from None
    with f:
        first = _read(f, p, READ_BYTES)
        if first[:2] != _GZIP_MAGIC:
            while first:
                yield first
                first = _read(f, p, READ_BYTES)
            return
        bomb = max(_GZIP_FLOOR, GZIP_RATIO * os.fstat(f.fileno()).st_size)
        if bomb < limit and not os.environ.get(MAX_TRACE_ENV, "").strip():
            yield from _gunzip(p, f, first, bomb, f"{GZIP_RATIO} times its compressed size (a gzip bomb?)")
        else:
            yield from _gunzip(p, f, first, limit)


def _read(f: BinaryIO, path: Path, size: int) -> bytes:
    try:
        return f.read(size)
    except OSError as e:
        raise TraceError(f"{path}: cannot read: {e.strerror}") from None


def _gunzip(path: Path, f: BinaryIO, data: bytes, limit: int, why: str = "the limit for a trace") -> Iterator[bytes]:
    """The members of a gzip file, decompressed to at most ``limit`` bytes. The input is fed
    :data:`HEAD_BYTES` at a time, so that a damaged or cut stream gives what decompresses before
    the damage and a bomb inflates one step (64 MiB at most) past the bound before it is refused."""
    total = 0
    yielded = False  # whether anything but whitespace came out: a stream with nothing readable is refused
    d = zlib.decompressobj(wbits=31)
    view, at = memoryview(data), 0
    while True:
        if at == len(view):
            view, at = memoryview(_read(f, path, READ_BYTES)), 0
            if not view:
                error = "the stream is cut short"
                break
        try:
            out = d.decompress(view[at:at + HEAD_BYTES], limit - total + 1)
        except zlib.error as e:
            error = str(e)
            break
        at = min(at + HEAD_BYTES, len(view))
        total += len(out)
        if total > limit:
            raise _too_big(path, "decompresses to", limit, why)
        if out:
            yielded = yielded or bool(out.strip())
            yield out
        if d.eof:  # the next member, if any, begins with what this one left
            view, at = memoryview(d.unused_data + view[at:]), 0
            if not view:
                view = memoryview(_read(f, path, READ_BYTES))
                if not view:
                    return
            d = zlib.decompressobj(wbits=31)
    if not yielded:
        raise TraceError(f"{path}: truncated or corrupt gzip ({error})")
