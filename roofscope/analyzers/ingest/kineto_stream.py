"""A Kineto file read as a stream: its events decoded a region at a time as the bytes arrive
(source.read_chunks), so that memory holds the tables being built and one buffer of JSON
(:data:`BUFFER_BYTES`), never the file.

A file is a head (up to its ``"traceEvents": [``, or the ``[`` of a bare list of events), the
events, and what follows them. The head is found in the first bytes and checked as JSON. Each
region ends at an event boundary (``}``, ``,``, ``{``) and is decoded in one typed msgspec pass;
what is left at the end is decoded with the head as one document (kineto.decode), which reads the
metadata and repairs a file cut short. A region that does not decode gets the repairs kineto.decode
makes of a whole file (bytes that are not UTF-8, NaN / Infinity / lone surrogates, raw control
characters), so the file gives what it gave decoded whole, with the same messages and byte offsets;
one that no repair makes JSON is refused at its first bad byte, read no further. A file whose
events do not begin in its first :data:`HEAD_LIMIT` bytes (a JSON file that is no trace) is read
whole, checked as JSON as it grows.
"""
from __future__ import annotations

import re
from collections import Counter
from itertools import chain, islice
from typing import Iterator, Protocol

import msgspec

from roofscope.analyzers.ingest.kineto import (CONTROL, CUT_TRIES, MARK, Decoded, Event, TraceFile, decode, mark,
                                               no_events, one_by_one, valid_utf8)
from roofscope.analyzers.ingest.kineto_columns import Columns
from roofscope.errors import TraceError

# JSON decoded at a time (about 1,300 events): its typed structs live only while their columns are taken,
# and stay in the processor's cache for it.
REGION_BYTES = 256 << 10
# JSON read ahead of the regions.
BUFFER_BYTES = 8 << 20
# What is left of a buffer that is worth handing to a helper that became free (kineto_helper.py).
HANDOVER_BYTES = 2 << 20
# Where the events must begin for the file to be read as a stream.
HEAD_LIMIT = 16 << 20
# An event boundary: the ``}`` of one event before the ``,`` and ``{`` of the next.
BOUNDARY = re.compile(rb"\}(?=\s*,\s*\{)")
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_NOT_SPACE = re.compile(rb"\S")
_SPACE = b" \t\r\n"
_BLANK = bytes(range(33))  # JSON's whitespace and the control characters kineto.CONTROL makes spaces
# Event boundaries tried back from a region's end before reading on: one falls inside a string
# or an event's arguments only in files made to (a name holding "}, {").
_TRIES = 8
_EVENTS = msgspec.json.Decoder(list[Event], strict=False)
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])
_HEAD = msgspec.json.Decoder(TraceFile)
_BYTE_AT = re.compile(r"\(byte (\d+)\)")
# The last document's events are tabulated this many at a time (a whole file's may be many).
_LAST_BATCH = 1 << 16


class Fallback(Exception):
    """Read with a helper (kineto_helper.py), the file turned out to need what only one process
    reading it whole does (repairs, skipped events): read it again so."""


class Helper(Protocol):
    def room(self) -> bool: ...

    def send(self, block: int, data: memoryview) -> bool: ...


class Stream:
    """One file's events, decoded into a Columns by :meth:`read`; then ``meta`` (the top-level keys),
    ``skipped`` (malformed events by reason)."""

    def __init__(self, path: str, chunks: Iterator[bytes], helper: Helper | None = None) -> None:
        self.path = path
        self._helper = helper      # takes the blocks it has room for (kineto_helper.py)
        self._block = 0
        self._chunks = chunks
        self._buf = b""
        self._pos = 0              # where the unread bytes of _buf begin
        self._at = 0               # where they are in the file, as repaired so far
        self._eof = False
        self.meta = TraceFile()
        self.skipped: Counter = Counter()
        self._first_error: str | None = None   # the first malformation a repair fixed (kineto._Piece)
        self._entries = 0          # entries decoded one by one, kept or skipped
        self._kept = 0             # events decoded

    def read(self, sink: Columns) -> None:
        head_at, head = self._head()
        if head is None:
            self._whole(sink)
            return
        if self._helper is not None:  # the first buffer's events too: the helper waits for a block
            self._next_block(sink)
        while True:
            if not self._eof and self._left() < 2 * REGION_BYTES:
                self._fill(BUFFER_BYTES)
                if self._helper is not None:
                    self._next_block(sink)
            elif self._eof:
                break
            elif not self._region(sink):
                self._stuck()
            elif self._helper is not None and not self._eof and self._left() >= HANDOVER_BYTES \
                    and self._helper.room():
                # The helper finished while this process decoded a block: it takes the buffer's rest.
                self._next_block(sink)
        self._last(head_at, head, sink)

    def _next_block(self, sink: Columns) -> None:
        """A new buffer's events, up to the last event boundary before its end: to the helper when
        it has room for them (kineto_helper.py), else decoded here; numbered for the merge."""
        self._block += 1
        if not self._eof:
            end = self._limit()
            at = next(self._boundaries(end), None) if end > self._pos else None
            if at is not None and self._helper.send(self._block,  # type: ignore[union-attr]
                                                    memoryview(self._buf)[self._pos:at + 1]):
                self._drop(self._buf.index(b"{", at + 1) - self._pos)
                return
        sink.end_block()
        sink.block = self._block

    def _alone(self) -> None:
        """What is about to happen needs the file read by one process (see :class:`Fallback`)."""
        if self._helper is not None:
            raise Fallback

    # --- reading -----------------------------------------------------------------------------

    def _left(self) -> int:
        return len(self._buf) - self._pos

    def _fill(self, size: int) -> None:
        """Read until the buffer holds ``size`` unread bytes, or the file ends."""
        parts, n = [memoryview(self._buf)[self._pos:]], self._left()
        while n < size:
            chunk = next(self._chunks, None)
            if chunk is None:
                self._eof = True
                break
            parts.append(chunk)
            n += len(chunk)
        self._buf, self._pos = b"".join(parts), 0

    def _drop(self, n: int, repaired: int | None = None) -> None:
        """The next ``n`` bytes are read (``repaired``: their length as repaired)."""
        self._pos += n
        self._at += n if repaired is None else repaired

    # --- the head ----------------------------------------------------------------------------

    def _head(self) -> tuple[int, bytes | None]:
        """Where the head begins in the file and its bytes through the events' ``[``, which are
        read; None for a file to read whole."""
        while True:
            self._fill(self._left() + BUFFER_BYTES)
            start = _NOT_SPACE.search(self._buf)
            if start is None:  # whitespace so far: nothing to keep
                if self._eof:
                    raise TraceError(f"{self.path}: empty file")
                self._drop(self._left())
                continue
            at = start.start()
            if self._buf[at:at + 1] == b"[":
                end = at + 1
            elif self._buf[at:at + 1] == b"{":
                end = self._events_key(at)
            else:
                return at, None
            if end is not None:
                head_at = self._at + at
                self._drop(end)
                return head_at, self._buf[at:end]
            if self._eof or len(self._buf) > HEAD_LIMIT:
                return at, None

    def _events_key(self, at: int) -> int | None:
        """The end of the top-level ``"traceEvents": [`` in the buffer (an object from ``at``), if any."""
        for m in _EVENTS_KEY.finditer(self._buf, at):
            # At the top level when what comes before it closes as an object of the file's keys.
            try:
                _HEAD.decode(self._buf[at:m.start()] + b'"traceEvents": null}')
            except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
                continue
            return m.end()
        return None

    # --- the events --------------------------------------------------------------------------

    def _limit(self) -> int:
        """Where a region may end at most: before the last CUT_TRIES + 1 ``}`` of the buffer, so that
        what is left holds the boundaries kineto.decode tries when the file turns out cut short."""
        end = len(self._buf)
        for _ in range(CUT_TRIES + 1):
            end = self._buf.rfind(b"}", self._pos, end)
            if end < 0:
                return self._pos
        return end

    def _boundaries(self, end: int) -> Iterator[int]:
        """Event boundaries (the ``}`` positions) of the unread bytes before ``end``, from the last."""
        window = 1 << 14
        while end > self._pos:
            lo = max(self._pos, end - window)
            found = [m.start() for m in BOUNDARY.finditer(self._buf, lo, min(len(self._buf), end + 256))
                     if m.start() < end]
            yield from reversed(found)
            end, window = lo, window * 4

    def _after(self, start: int, end: int) -> Iterator[int]:
        """Event boundaries from ``start`` on, before ``end``."""
        for m in BOUNDARY.finditer(self._buf, start):
            if m.start() >= end:
                return
            yield m.start()

    def _region(self, sink: Columns) -> bool:
        """Decode the events up to the last boundary within :data:`REGION_BYTES` (past them, the
        first: an event larger than a region) that ends a decodable region; False when none of
        the :data:`_TRIES` boundaries tried does."""
        end = self._limit()
        if end <= self._pos:
            return False
        cut = min(end, self._pos + REGION_BYTES)
        boundaries = chain(self._boundaries(cut), islice(self._after(cut, end), 1))
        for _ in range(_TRIES):
            at = next(boundaries, None)
            if at is None or at >= end:
                return False
            got = self._decode(at + 1, sink)
            if got is not None and got is not True:  # a bad byte: a region must end before it
                end = min(end, got)
                boundaries = self._boundaries(min(end, at))
            elif got:  # the next region begins at the next event's "{"
                self._drop(self._buf.index(b"{", at + 1) - (at + 1))
                return True
        return False

    def _decode(self, end: int, sink: Columns) -> bool | int | None:
        """Decode the unread bytes up to ``end`` as complete events: True when it did (they are
        read), None when ``end`` is no event boundary after all, or where (about) a byte no repair
        fixes is."""
        data = b"".join((b"[", memoryview(self._buf)[self._pos:end], b"]"))
        try:
            events = _EVENTS.decode(data)
        except msgspec.ValidationError:
            events = None
        except (msgspec.DecodeError, UnicodeDecodeError):
            return self._repaired(data[1:-1], sink)
        if events is None:
            try:
                raws = _RAWS.decode(data)
            except (msgspec.DecodeError, UnicodeDecodeError):
                return self._repaired(data[1:-1], sink)
            events = self._one_by_one(raws, False)
        self._emit(events, sink)
        self._drop(end - self._pos)
        return True

    def _repaired(self, region: bytes, sink: Columns) -> bool | int | None:
        """``region`` with the repairs of kineto._repaired, in their order, then decoded (see _decode)."""
        self._alone()
        fixed = _utf8(region)
        data = b"[" + mark(fixed) + b"]"
        raws, error = _raws(data)
        if raws is None:
            if _truncated(error, data):
                return None  # the "]" closed something inside an event: no boundary
            cleaned = data.translate(CONTROL)
            raws, error_after = _raws(cleaned)
            if raws is None:
                return self._pos + _byte(error_after) - 1
            if self._first_error is None:
                self._first_error = self._moved(error, self._at - 1)
            data = cleaned
        if MARK in data:
            events = self._one_by_one(raws, True)
        else:
            try:
                events = _EVENTS.decode(data)
            except msgspec.ValidationError:
                events = self._one_by_one(raws, False)
        self._emit(events, sink)
        self._drop(len(region), len(data) - 2)  # the file as repaired is longer (marks, U+FFFD)
        return True

    def _stuck(self) -> None:
        """No region decodes before the buffer's end: whitespace (a sparse file's zeros) is read,
        a valid beginning read on (an event larger than a region, the events' end), and a byte no
        repair fixes refused, as decoding the file whole would."""
        rest = self._buf[self._pos:]
        if not rest.translate(None, _BLANK):  # whitespace and controls only: read, the first bad one kept
            if self._first_error is None and rest.strip(_SPACE):
                self._alone()
                at = len(rest) - len(rest.lstrip(_SPACE))
                self._first_error = self._moved(_raws(b"[" + rest[at:at + 1])[1], self._at + at - 1)
            self._drop(len(rest))
            return
        data = b"[" + mark(_utf8(rest))
        _, error = _raws(data)
        if _truncated(error, data) or "trailing characters" in str(error):
            self._fill(2 * len(rest))
            return
        cleaned = data.translate(CONTROL)
        _, error_after = _raws(cleaned)
        if not _truncated(error_after, cleaned):
            raise TraceError(f"{self.path}: not valid JSON ({self._first_error or self._moved(error, self._at - 1)})")
        if self._first_error is None:
            self._first_error = self._moved(error, self._at - 1)
        self._fill(2 * len(rest))

    def _one_by_one(self, raws: list[msgspec.Raw], marked: bool) -> list[Event]:
        self._alone()
        self._entries += len(raws)
        return one_by_one(raws, marked, self.skipped)

    def _emit(self, events: list[Event], sink: Columns) -> None:
        self._kept += len(events)
        if events:
            sink.add(events)

    def _moved(self, error: Exception, shift: int) -> str:
        return _BYTE_AT.sub(lambda m: f"(byte {int(m.group(1)) + shift})", str(error))

    # --- the end -----------------------------------------------------------------------------

    def _last(self, head_at: int, head: bytes, sink: Columns) -> None:
        """The events left, with the head and what follows them: one document."""
        data = head + self._buf[self._pos:]
        base = self._at

        def at(i: int) -> int:
            return head_at + i if i < len(head) else base + i - len(head)

        self._finish(data, decode(self.path, data, at, self._first_error), sink)

    def _whole(self, sink: Columns) -> None:
        """A file whose events were not found in its head: decoded whole, once the bytes read so
        far are JSON (checked each time they double, so that garbage is refused early)."""
        parts, size, check = [self._buf[self._pos:]], self._left(), 2 * HEAD_LIMIT
        base = self._at

        def at(i: int) -> int:
            return base + i

        while not self._eof:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            parts.append(chunk)
            size += len(chunk)
            if size > check:
                parts, check = [b"".join(parts)], 2 * size
                data = mark(_utf8(b"[" + parts[0])).translate(CONTROL)
                if not _truncated(_raws(data)[1], data):
                    decode(self.path, parts[0], at)  # refuses it, as it would the whole file
        data = b"".join(parts)
        self._buf, self._pos = b"", 0
        self._finish(data, decode(self.path, data, at), sink)

    def _finish(self, data: bytes, decoded: Decoded, sink: Columns) -> None:
        if decoded.entries:
            self._alone()
        self.skipped.update(decoded.skipped)
        self._entries += decoded.entries
        events = decoded.doc.traceEvents or []
        for i in range(0, len(events), _LAST_BATCH):
            self._emit(events[i:i + _LAST_BATCH], sink)
        decoded.doc.traceEvents = None
        self.meta = decoded.doc
        if self._entries and not self._kept:
            raise no_events(self.path, data, self._entries)



def _utf8(data: bytes) -> bytes:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return valid_utf8(data)
    return data


def _raws(data: bytes) -> tuple[list[msgspec.Raw] | None, Exception | None]:
    try:
        return _RAWS.decode(data), None
    except (msgspec.DecodeError, RecursionError) as e:
        return None, e


def _truncated(error: Exception | None, data: bytes) -> bool:
    """Whether ``data`` decoded to ``error`` is JSON as far as it goes (msgspec says "invalid number"
    of one cut after its "." or "e", at the end)."""
    return error is None or "truncated" in str(error) or _byte(error) >= len(data) - 1


def _byte(error: Exception | None) -> int:
    m = _BYTE_AT.search(str(error))
    return int(m.group(1)) if m else -1
