"""Where a profile records until its Run is written.

Inside the Run directory it claimed (:func:`recording_dir`), not in TMPDIR: a full TMPDIR costs no
profile, and a process that dies (killed, crashed) leaves its trace where the Run was to be, named the
next time that directory is used (run/directory.orphaned_traces). Every trace, the step schedule's and
the time windows', is exported through :class:`Exports`: when the recording directory is gone (the
program removed or replaced its output) or short of room while TMPDIR has more, a directory in TMPDIR
takes the trace instead, and the terminal says so at once. The place is chosen before the export:
Kineto writes a trace once, and a failed write (a full disk) leaves only its partial ``.tmp`` file,
which is removed.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import weakref
from pathlib import Path
from typing import Any

from roofscope.run.directory import Claim
from roofscope.run.layout import RECORDING_PREFIX

# Below this much free space the recording directory gives way to TMPDIR, when TMPDIR has more.
ROOM_BYTES = 1 << 30


def _free(path: Path) -> int:
    try:
        st = os.statvfs(path)
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


def _release(fds: dict[Path, int], dirs: list[str], pid: int) -> None:
    for fd in fds.values():
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()
    if os.getpid() == pid:  # never from a forked child at its exit
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)


class Exports:
    """The directory the collector's traces are exported to: ``home``, else a directory in TMPDIR made
    the first time ``home`` will not do (and used from then on, so a profile's files stay together).
    Each exported trace is held open until :meth:`close`: one whose directory the program removes
    afterwards (its own output, taken over) is restored from it (:meth:`recover`)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.spill: Path | None = None
        self.failed: str | None = None      # the last export that could not be written, and why
        self._fds: dict[Path, int] = {}
        self._dirs: list[str] = []          # removed on close: the spill directory
        self._cleanup = weakref.finalize(self, _release, self._fds, self._dirs, os.getpid())

    def _why_not_home(self) -> str | None:
        if not self.home.is_dir():
            return f"the recording directory {self.home} is gone"
        free = _free(self.home)
        if free < ROOM_BYTES and _free(Path(tempfile.gettempdir())) > free:
            return f"{self.home.parent} has {free / 2**20:.1f} MiB free"
        return None

    def path(self, name: str) -> Path:
        """Where the trace ``name`` is to be exported now."""
        if self.spill is None:
            why = self._why_not_home()
            if why is None:
                return self.home / name
            try:
                self.spill = Path(tempfile.mkdtemp(prefix="roofscope-"))
            except OSError:
                return self.home / name
            self._dirs.append(str(self.spill))
            print(f"roofscope: warning: {why}: recording into {self.spill} instead", file=sys.stderr, flush=True)
        return self.spill / name

    def export(self, prof: Any, name: str) -> Path | None:
        """Export ``prof``'s trace (a torch.profiler.profile) as ``name``; where it is, None when the write
        failed (Kineto says so on stderr and raises nothing)."""
        path = self.path(name)
        prof.export_chrome_trace(str(path))
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            path.with_name(path.name + ".tmp").unlink(missing_ok=True)
            self.failed = f"Kineto could not write {path} ({_free(path.parent) / 2**20:.1f} MiB free there)"
            return None
        old = self._fds.pop(path, None)
        if old is not None:
            os.close(old)
        self._fds[path] = fd
        return path

    def recover(self, path: Path) -> Path | None:
        """``path``, or where its trace was restored to when the program removed it (None: nowhere)."""
        fd = self._fds.get(path)
        if path.is_file() or fd is None:
            return path if path.is_file() else None
        restored = self.path(path.name)
        try:
            with os.fdopen(os.dup(fd), "rb") as src, open(restored, "wb") as dst:
                src.seek(0)
                shutil.copyfileobj(src, dst)
        except OSError:
            return None
        self._fds[restored] = self._fds.pop(path)
        return restored

    def drop(self, path: Path) -> None:
        """A trace no longer wanted (a held window the step schedule replaced)."""
        fd = self._fds.pop(path, None)
        if fd is not None:
            os.close(fd)
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass   # its directory is gone or replaced: so is the file

    def keep(self) -> None:
        """Keep what was exported past the session (no Run could be written from it)."""
        self._dirs.clear()

    def close(self) -> None:
        """The session is over: the traces are closed, the spill directory removed (unless kept)."""
        self._cleanup()


def recording_dir(claim: Claim | None) -> Path:
    """A new recording directory inside the claimed Run directory, else (none claimed, or it refuses) in TMPDIR."""
    if claim is not None:
        try:
            return Path(tempfile.mkdtemp(prefix=RECORDING_PREFIX, dir=claim.path))
        except OSError:
            pass
    return Path(tempfile.mkdtemp(prefix="roofscope-"))
