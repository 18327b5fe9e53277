"""A trace file's columns read by a child forked at start-up, while this process imports the analysis.

``roofscope analyze`` spends its first 0.3-0.45 s importing pandas and the stages on one core, while
reading the file needs only msgspec and numpy (kineto_stream.py, kineto_columns.py). :func:`start`, called
by the command line before those imports, forks a child that reads the file (kineto_helper.read_columns)
and pickles what it read (the columns, the top-level keys, the skipped events) into an anonymous memory
file; :func:`take`, called where the reading would begin (kineto_frames.py), waits for it and unpickles it.
The child reads exactly what this process would, with the same code, on a file of the same identity
(device, inode, size, modification time); whatever else happens (an error, a repair, a signal) it does not
say: it ends with a failure, which this process answers by reading the file itself, as before, with the
same messages. Only a file too small for kineto_helper.py's two readers (:func:`large`) is read ahead, and
only where a fork is safe (:func:`may_fork`). The reader (msgspec, numpy), which the analysis imports anyway,
is imported before the fork, so that the child does not import it again (0.1 s of CPU, which a machine
whose second processor is busy pays in wall time). The child leaves with ``os._exit`` so that nothing of
the parent runs twice, ignores SIGINT (the parent stops it), is killed at exit when not taken, and by the
kernel when the parent dies.
"""
from __future__ import annotations

import atexit
import ctypes
import gc
import mmap
import os
import pickle
import signal
import stat
import struct
from dataclasses import dataclass

from roofscope.analyzers.ingest.kineto_helper import Read, read_columns
from roofscope.analyzers.ingest.source import large, may_fork
from roofscope.fileio import collector_paused

# prctl's option that has the kernel signal a process when its parent ends.
_PR_SET_PDEATHSIG = 1
# What the child says when done: the pickle's length in the memory file, or -1 (read it yourself).
_DONE = struct.Struct("<q")


@dataclass(frozen=True)
class _Child:
    """The parent's end of a reading child."""

    pid: int
    identity: tuple[int, ...]        # the file's, when forked: a file changed since is read here
    memory: int                      # the memory file the child pickles its Read into
    done: int                        # the pipe it says it is done on


_child: _Child | None = None


def _identity(path: str | os.PathLike) -> tuple[int, ...] | None:
    """A regular file's device, inode, size and modification time; None for anything else."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None


def start(path: str) -> None:
    """Fork a child that reads ``path``'s columns, where that is safe (:func:`may_fork`) and pays: a
    regular file too small for kineto_helper.py's two processes, which a third competing for the two
    processors gains nothing on (1.09M events: 2.9-3.0 s either way)."""
    global _child
    identity = _identity(path)
    if _child is not None or identity is None or large(path) or not may_fork():
        return
    try:
        memory = os.memfd_create("roofscope-read", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        return
    done_in, done_out = os.pipe()
    parent = os.getpid()
    try:
        pid = os.fork()
    except OSError:
        for fd in (memory, done_in, done_out):
            os.close(fd)
        return
    if pid == 0:  # the child: never returns, not even on a Ctrl-C before it ignores SIGINT
        try:
            os.close(done_in)
            _die_with(parent)
            _serve(path, memory, done_out)
        finally:
            os._exit(0)
    os.close(done_out)
    _child = _Child(pid, identity, memory, done_in)
    atexit.register(_stop)


def _die_with(parent: int) -> None:
    """The child killed by the kernel when the parent ends however it ends (SIGKILL, a crash), not left
    reading for nobody; a parent gone before this asked ends it now."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # no prctl: the child ends when its read is done
        return
    if os.getppid() != parent:
        os._exit(0)


def _serve(path: str, memory: int, done: int) -> None:
    """The child's life: the file read and pickled into ``memory``, its size (or -1) said on ``done``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    gc.disable()  # the process ends after the read: nothing it makes needs collecting
    size = -1
    try:
        read = read_columns(path)
        read.columns.end_block()  # the values still in lists made arrays here, not in the parent
        data = pickle.dumps(read, protocol=pickle.HIGHEST_PROTOCOL)
        with open(memory, "wb", closefd=False) as f:
            f.write(data)
        size = len(data)
    except BaseException:  # noqa: BLE001 - whatever it was, the parent reads the file itself and says it
        pass
    try:
        os.write(done, _DONE.pack(size))
    finally:
        os._exit(0)


def take(path: str | os.PathLike) -> Read | None:
    """The columns the child read, when it read this file (the same identity: another file, a graph
    capture, leaves the child for the trace) and all went well; else None: the caller reads the file."""
    global _child
    child = _child
    if child is None or _identity(path) != child.identity:
        return None
    _child = None
    try:
        said = _read_all(child.done, _DONE.size)
        size = _DONE.unpack(said)[0] if len(said) == _DONE.size else -1
        if size <= 0:
            return None
        # unpickling the events' lists would set off full collections
        with mmap.mmap(child.memory, size, prot=mmap.PROT_READ) as data, collector_paused():
            return pickle.loads(data)
    finally:
        _end(child)


def _read_all(fd: int, size: int) -> bytes:
    """``size`` bytes from the pipe, fewer when the writer ended first."""
    parts, n = [], 0
    while n < size:
        part = os.read(fd, size - n)
        if not part:
            break
        parts.append(part)
        n += len(part)
    return b"".join(parts)


def _end(child: _Child) -> None:
    try:
        os.kill(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(child.pid, 0)
    for fd in (child.memory, child.done):
        os.close(fd)


def _stop() -> None:
    """At exit: a child not taken (the command failed first, or read no trace) is stopped."""
    global _child
    if _child is not None:
        child, _child = _child, None
        _end(child)
