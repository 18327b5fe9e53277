"""A second process that decodes two of every three blocks of a large trace's events: reading a
million events is CPU-bound Python and C in one thread (msgspec holds the GIL), so a machine's
second core halves it.

The helper is a fork of the reading process, made before the read-ahead thread starts and only
where that is safe and pays: Linux, no other Python thread, torch not loaded (its runtime's threads
and devices are not the helper's to inherit), two processors to run on, a file of 48 MB of JSON or
more (about 250,000 events). On the 2-core development machine, loaded by others (load average 3),
it read 1.09M events in 2.9-3.4 s against 3.5-4.1 s alone.
kineto_stream.py sends it blocks of about :data:`~roofscope.analyzers.ingest.kineto_stream.BUFFER_BYTES`
that end at an event boundary (the reading process also inflates the file, takes every third block
and merges); it decodes each in typed regions into its own Columns, whose pieces carry the block's
number, and hands them back at the end to be merged in file order. It decodes clean JSON only: a
block it cannot decode as typed events (a boundary inside a string, an event needing repairs) makes
the whole file be read again in one process (kineto_stream.Fallback), which repairs and reports
exactly as before. The helper leaves with ``os._exit``, so nothing of the parent (buffers, atexit handlers)
runs twice, and ignores SIGINT: the parent stops it.
"""
from __future__ import annotations

import os
import pickle
import signal
import stat
import sys
import threading
from typing import TYPE_CHECKING

import msgspec

from roofscope.analyzers.ingest.kineto import Event
from roofscope.analyzers.ingest.kineto_columns import Columns
from roofscope.analyzers.ingest.kineto_stream import BOUNDARY, REGION_BYTES, Fallback

if TYPE_CHECKING:  # pragma: no cover
    from multiprocessing.connection import Connection  # start-up time

# Estimated JSON below which one process reads alone (the fork and the merge cost ~0.1 s).
MIN_BYTES = 48 << 20
# A gzip trace's JSON per byte on disk, at least (real traces: 10-30).
_GZIP_RATIO = 8
_EVENTS = msgspec.json.Decoder(list[Event], strict=False)


def wanted(path: str | os.PathLike) -> bool:
    """Whether a helper would pay for itself, and may be forked here."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):  # source.py refuses it; opening a FIFO here would block
            return False
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
    except OSError:
        return False
    size = st.st_size
    return (size * (_GZIP_RATIO if gz else 1) >= MIN_BYTES and sys.platform.startswith("linux")
            and threading.active_count() == 1 and "torch" not in sys.modules
            and len(os.sched_getaffinity(0)) >= 2)


class Helper:
    """The parent's end of a helper process (see the module docstring)."""

    def __init__(self, pid: int, send: Connection, receive: Connection) -> None:
        self.pid, self._send, self._receive = pid, send, receive
        self.blocks = 0  # blocks sent

    @classmethod
    def start(cls) -> Helper | None:
        """The helper, forked; None where the system refuses a process (the file is read alone)."""
        from multiprocessing.connection import Pipe  # start-up time: only a large trace needs it

        blocks_in, blocks_out = Pipe(duplex=False)
        results_in, results_out = Pipe(duplex=False)
        try:
            pid = os.fork()
        except OSError:
            for end in (blocks_in, blocks_out, results_in, results_out):
                end.close()
            return None
        if pid == 0:  # the helper: never returns
            blocks_out.close()
            results_in.close()
            _serve(blocks_in, results_out)
        blocks_in.close()
        results_out.close()
        return cls(pid, blocks_out, results_in)

    def send(self, block: int, data: memoryview) -> None:
        """Events ``data`` (complete, between two boundaries) to decode as block number ``block``;
        :class:`Fallback` when the helper is gone (a block it could not decode ends it)."""
        try:
            self._send.send_bytes(b"".join((block.to_bytes(8, "little"), data)))
        except OSError:
            raise Fallback from None
        self.blocks += 1

    def merge(self, columns: Columns) -> None:
        """The helper's columns merged into ``columns``; :class:`Fallback` when a block did not
        decode, or the helper failed."""
        try:
            self._send.send_bytes(b"")
            theirs = pickle.loads(self._receive.recv_bytes())
        except (EOFError, OSError, pickle.UnpicklingError):
            theirs = None
        if theirs is None:
            raise Fallback
        columns.merge(theirs)

    def stop(self) -> None:
        for end in (self._send, self._receive):
            end.close()
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)


def _serve(receive: Connection, send: Connection) -> None:
    """The helper's life: blocks in, columns out, then exit."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    columns: Columns | None = Columns()
    try:
        while True:
            message = receive.recv_bytes()
            if not message:
                break
            columns.block = int.from_bytes(message[:8], "little")  # type: ignore[union-attr]
            _decode_block(message, columns)  # type: ignore[arg-type]
            columns.end_block()  # type: ignore[union-attr]
    except BaseException:  # noqa: BLE001 - not clean JSON events, or anything else: the parent reads alone
        columns = None  # said at once: the parent's next block or its merge finds the helper gone
    try:
        send.send_bytes(pickle.dumps(columns, protocol=pickle.HIGHEST_PROTOCOL))
    finally:
        os._exit(0)


def _decode_block(message: bytes, columns: Columns) -> None:
    """A block's events (after the 8 bytes of its number) decoded in regions that end at event
    boundaries, as kineto_stream's; raises what msgspec raises for anything but typed events."""
    start, end = 8, len(message)
    while start < end:
        m = BOUNDARY.search(message, min(start + REGION_BYTES, end - 1))
        cut = m.start() + 1 if m else end
        columns.add(_EVENTS.decode(b"".join((b"[", memoryview(message)[start:cut], b"]"))))
        start = message.index(b"{", cut) if m else end
