"""A second process that decodes blocks of a large trace's events: reading a million events is
CPU-bound Python and C in one thread (msgspec holds the GIL), so a machine's second core halves it.

The helper is a fork of the reading process, made before the read-ahead thread starts and only
where that is safe and pays (source.may_fork and large): Linux, no other Python thread, torch
not loaded (its runtime's threads and devices are not the helper's to inherit), two processors to run
on, a file of 48 MB of JSON or more (about 250,000 events).
kineto_stream.py offers it each block of about
:data:`~roofscope.analyzers.ingest.kineto_stream.BUFFER_BYTES` that ends at an event boundary: a block
goes to the helper when one of its :data:`SLOTS` of shared memory is free (it holds at most one block
waiting and one being decoded), else the reading process, which also inflates the file, decodes it; a
slot freed meanwhile takes the rest of that block
(:data:`~roofscope.analyzers.ingest.kineto_stream.HANDOVER_BYTES` or more). Handing a block over is a
copy into shared memory and a message of a few bytes, so neither process waits for the other, and the
share each takes follows their speeds (a helper slowed by other work on the machine is given less). The
helper decodes each block in typed regions into its own Columns, whose pieces carry the block's number,
hands the block's pieces back with its slot (the parent unpickles them while it reads), and the rest of
its columns (names, signatures) at the end, to be merged in file order. It decodes clean JSON only: a
block it cannot decode as typed events (a boundary inside a string, an event needing repairs) makes the
whole file be read again in one process (kineto_stream.Fallback), which repairs and reports exactly as
before. The helper leaves with ``os._exit``, so nothing of the parent (buffers, atexit handlers) runs
twice, and ignores SIGINT: the parent stops it. :func:`read_columns` reads a file so, or alone.
"""
from __future__ import annotations

import mmap
import os
import pickle
import signal
import struct
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from roofscope.analyzers.ingest import kineto_stream
from roofscope.analyzers.ingest.kineto import Event, TraceFile
from roofscope.analyzers.ingest.kineto_columns import Columns
from roofscope.analyzers.ingest.kineto_stream import BOUNDARY, REGION_BYTES, Fallback, Stream
from roofscope.analyzers.ingest.source import large, may_fork, read_chunks
from roofscope.errors import TraceError

if TYPE_CHECKING:  # pragma: no cover
    from multiprocessing.connection import Connection  # start-up time

_EVENTS = msgspec.json.Decoder(list[Event], strict=False)
# Blocks handed over at a time: one waiting while the helper decodes another.
SLOTS = 2
# A block's number, its slot and its length: the message that hands it over.
_HEADER = struct.Struct("<qBQ")


def wanted(path: str | os.PathLike) -> bool:
    """Whether a helper would pay for itself, and may be forked here."""
    return large(path) and may_fork()


@dataclass(frozen=True)
class Read:
    """A file's events as columns, and what its stream said besides."""

    columns: Columns
    meta: TraceFile                  # the top-level keys
    skipped: Counter                 # malformed events skipped, by reason


def read_columns(path: str) -> Read:
    """The file's columns, read by this process, and by a helper where that is safe and pays; read
    again by one process when it needs repairs (kineto_stream.Fallback)."""
    helper = Helper.start() if wanted(path) else None
    try:
        return _read(path, helper)
    except (Fallback, TraceError) as e:
        # An error with blocks sent may come of a block boundary that was none: read alone, which says.
        if helper is None or isinstance(e, TraceError) and not helper.blocks:
            raise
        helper.stop()
        helper = None
        return _read(path, None)
    finally:
        if helper is not None:
            helper.stop()


def _read(path: str, helper: Helper | None) -> Read:
    columns = Columns()
    chunks = read_chunks(path)
    try:  # closed here, not when a traceback that holds it is collected: it stops the read-ahead thread
        stream = Stream(path, chunks, helper)
        stream.read(columns)
    finally:
        chunks.close()  # type: ignore[attr-defined]
    if helper is not None and helper.blocks:
        helper.merge(columns)
    return Read(columns, stream.meta, stream.skipped)


class Helper:
    """The parent's end of a helper process (see the module docstring)."""

    def __init__(self, pid: int, send: Connection, receive: Connection, shared: mmap.mmap, slot_bytes: int) -> None:
        self.pid, self._send, self._receive = pid, send, receive
        self._shared, self._slot_bytes = shared, slot_bytes
        self._free = list(range(SLOTS))
        self._pieces: list[dict[str, list]] = []  # the helper's pieces, as it made them
        self.blocks = 0  # blocks sent

    @classmethod
    def start(cls) -> Helper | None:
        """The helper, forked; None where the system refuses a process (the file is read alone)."""
        from multiprocessing.connection import Pipe  # start-up time: only a large trace needs it

        # A block is the unread bytes after a fill of BUFFER_BYTES: at most one inflated piece more
        # (a larger one, from a file inflating 64 MiB at a time, is decoded by the parent).
        slot_bytes = 2 * kineto_stream.BUFFER_BYTES
        shared = mmap.mmap(-1, SLOTS * slot_bytes)  # anonymous and shared: the fork sees the parent's writes
        blocks_in, blocks_out = Pipe(duplex=False)
        results_in, results_out = Pipe(duplex=False)
        try:
            pid = os.fork()
        except OSError:
            for end in (blocks_in, blocks_out, results_in, results_out):
                end.close()
            shared.close()
            return None
        if pid == 0:  # the helper: never returns
            blocks_out.close()
            results_in.close()
            _serve(blocks_in, results_out, shared, slot_bytes)
        blocks_in.close()
        results_out.close()
        return cls(pid, blocks_out, results_in, shared, slot_bytes)

    def room(self) -> bool:
        """Whether a slot is free for a block; :class:`Fallback` when the helper is gone."""
        self._freed()
        return bool(self._free)

    def send(self, block: int, data: memoryview) -> bool:
        """Events ``data`` (complete, between two boundaries) to decode as block number ``block``,
        when a slot is free (else False: the caller decodes them); :class:`Fallback` when the helper
        is gone (a block it could not decode ends it)."""
        self._freed()
        if not self._free or len(data) > self._slot_bytes:
            return False
        slot = self._free.pop()
        at = slot * self._slot_bytes
        self._shared[at:at + len(data)] = data
        try:
            self._send.send_bytes(_HEADER.pack(block, slot, len(data)))
        except OSError:
            raise Fallback from None
        self.blocks += 1
        return True

    def _freed(self) -> None:
        """The slots the helper is done with, free again, and the pieces it made of them kept;
        :class:`Fallback` once it ended (only a helper that failed speaks before it is asked)."""
        try:
            while self._receive.poll():
                self._took(pickle.loads(self._receive.recv_bytes()))
        except (EOFError, OSError, pickle.UnpicklingError):
            raise Fallback from None

    def _took(self, said: object) -> None:
        if not isinstance(said, tuple):
            raise Fallback
        slot, pieces = said
        self._free.append(slot)
        self._pieces.append(pieces)

    def merge(self, columns: Columns) -> None:
        """The helper's columns merged into ``columns``; :class:`Fallback` when a block did not
        decode, or the helper failed."""
        self._freed()
        try:
            self._send.send_bytes(b"")
            said = pickle.loads(self._receive.recv_bytes())
            while isinstance(said, tuple):  # the last blocks'
                self._took(said)
                said = pickle.loads(self._receive.recv_bytes())
        except (EOFError, OSError, pickle.UnpicklingError):
            said = None
        if not isinstance(said, Columns):
            raise Fallback
        for pieces in self._pieces:
            said.received(pieces)
        columns.merge(said)

    def stop(self) -> None:
        for end in (self._send, self._receive):
            end.close()
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
        self._shared.close()


def _serve(receive: Connection, send: Connection, shared: mmap.mmap, slot_bytes: int) -> None:
    """The helper's life: blocks in, slots freed with the block's pieces, the rest of its columns
    out, then exit."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    columns = Columns()
    failed = False
    try:
        while True:
            message = receive.recv_bytes()
            if not message:
                break
            block, slot, size = _HEADER.unpack(message)
            at = slot * slot_bytes
            columns.block = block
            _decode_block(shared[at:at + size], columns)
            columns.end_block()
            # The block's pieces go with its slot: unpickled while the parent reads, not after it.
            send.send_bytes(pickle.dumps((slot, columns.handed()), protocol=pickle.HIGHEST_PROTOCOL))
    except BaseException:  # noqa: BLE001 - not clean JSON events, or anything else: the parent reads alone
        failed = True  # said at once: the parent's next block or its merge finds the helper gone
    try:
        send.send_bytes(pickle.dumps(None if failed else columns, protocol=pickle.HIGHEST_PROTOCOL))
    finally:
        os._exit(0)


def _decode_block(data: bytes, columns: Columns) -> None:
    """A block's events decoded in regions that end at event boundaries, as kineto_stream's;
    raises what msgspec raises for anything but typed events."""
    start, end = 0, len(data)
    while start < end:
        m = BOUNDARY.search(data, min(start + REGION_BYTES, end - 1))
        cut = m.start() + 1 if m else end
        columns.add(_EVENTS.decode(b"".join((b"[", memoryview(data)[start:cut], b"]"))))
        start = data.index(b"{", cut) if m else end
