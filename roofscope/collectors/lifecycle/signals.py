"""SIGINT, SIGTERM and SIGHUP from a profile's start to its Run's end, and the dispositions a forked child gets back.

One :class:`Guard` per profile owns the three signals in the main thread:

- while the script runs (its frame is on the interrupted stack: :meth:`Guard.watch`) a signal acts as it
  would without roofscope: the handler from before is called (SIGINT: KeyboardInterrupt), and where the
  default would kill the process (SIGTERM, SIGHUP) :class:`Terminated` is raised instead, so that the Run
  is still written and the exit code is the one a shell sees (128 + n);
- anywhere else (roofscope's own code: stopping the profiler, writing the Run, printing the summary) the
  handler only notes the signal, and the main path reads it (``received``) where stopping loses nothing:
  no exception lands inside a profiler transition, a write or a ``finally`` (a Ctrl-C as the script ended
  once lost the Run and segfaulted the process at exit);
- inside :meth:`Guard.armed` (the analysis, the wait for the other ranks' parts: reading only) the first
  signal raises :class:`Interrupted`, which skips the rest; the recorded data is on disk by then.

Every disposition roofscope replaces goes through :func:`replace_handler` (the guard's, the time windows'
SIGALRM): a forked child gets the one from before back, so a worker of the script (multiprocessing, a
fork-unsafe OpenMP pool) dies on SIGTERM as under plain python and prints nothing of roofscope's.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import CodeType, FrameType
from typing import Any

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# signal -> (the disposition before roofscope's, roofscope's handler): what a forked child gets back.
_replaced: dict[int, tuple[Any, Any]] = {}
_current: "Guard | None" = None


class Terminated(BaseException):
    """Raised into the script for a signal whose default would kill the process (SIGTERM, SIGHUP), so that
    its Run is still written."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signum)
        self.signum = signum


class Interrupted(BaseException):
    """Raised into an armed stretch (the analysis) by a signal: a BaseException, so no ``except Exception``
    holds it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def replace_handler(sig: int, handler: Any) -> Any:
    """``signal.signal``, undone in a forked child: the disposition from before comes back there."""
    old = signal.signal(sig, handler)
    _replaced.setdefault(sig, (old, handler))
    return old


def restore_handler(sig: int, old: Any) -> None:
    """Give ``sig`` back to ``old`` (what :func:`replace_handler` returned)."""
    signal.signal(sig, old if old is not None else signal.SIG_DFL)
    _replaced.pop(sig, None)


def _after_fork_in_child() -> None:
    # The child is the script's (a worker, a subprocess about to exec): none of roofscope's handlers there
    # (exits.py gives os._exit back). A handler the script set itself since is left alone.
    global _current
    for sig, (old, ours) in list(_replaced.items()):
        try:
            if signal.getsignal(sig) == ours:
                signal.signal(sig, old if old is not None else signal.SIG_DFL)
        except (ValueError, OSError, TypeError):
            pass
    _replaced.clear()
    _current = None


os.register_at_fork(after_in_child=_after_fork_in_child)


def say(text: str) -> None:
    """Write ``text`` to stderr from a signal handler or an exit path."""
    # A raw write: a signal handler must not re-enter sys.stderr's buffer (its lock may be held).
    try:
        os.write(2, text.encode(errors="replace"))
    except OSError:
        pass


class Guard:
    """SIGINT, SIGTERM and SIGHUP, from a profile's start (``roofscope run``) or its end
    (``roofscope.profile()``) until its Run is written, analyzed and announced. ``redeliver``: on leaving,
    a signal that skipped nothing goes to the handlers from before (a library's caller: its Ctrl-C still
    acts, once the Run is written). Outside the main thread (no handlers there) signals act as before."""

    def __init__(self, redeliver: bool = False) -> None:
        self.redeliver = redeliver
        self.received: int | None = None     # the first signal taken outside the script
        self.unhandled: int | None = None    # one that skipped nothing (yet)
        self.writing = False                 # the recorded data is being written (a signal waits for it)
        self.ended = False                   # the script has ended: nothing is raised into it any more
        self._script: CodeType | None = None
        self._armed = False
        self._old: dict[int, Any] = {}
        self._handler = self._handle         # one bound method: the one signal.getsignal gives back

    def __enter__(self) -> "Guard":
        global _current
        if threading.current_thread() is threading.main_thread():
            for sig in HANDLED:
                old = signal.getsignal(sig)
                if old not in (signal.SIG_IGN, None):   # ignored (nohup) stays ignored; None: not Python's
                    self._old[sig] = replace_handler(sig, self._handler)
            _current = self
        return self

    def __exit__(self, *exc: Any) -> None:
        global _current
        for sig, old in self._old.items():
            restore_handler(sig, old)
        if _current is self:
            _current = None
        if self.redeliver and self.unhandled is not None and self._old:
            signal.raise_signal(self.unhandled)

    def watch(self, code: CodeType) -> None:
        """``code`` runs the script: while its frame is on the main thread's stack, signals act on the script."""
        self._script = code

    def finishing(self) -> None:
        """The script has ended and its recorded data is being written. Handlers the script installed for
        itself give way to the guard's again (their signal would land in roofscope's code)."""
        self.ended = self.writing = True
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in HANDLED:
            current = signal.getsignal(sig)
            if current not in (signal.SIG_IGN, None, self._handler):
                self._old.setdefault(sig, current)
                replace_handler(sig, self._handler)

    def _script_running(self, frame: FrameType | None) -> bool:
        if self._script is None or self.ended:
            return False
        while frame is not None:
            if frame.f_code is self._script:
                return True
            frame = frame.f_back
        return False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._script_running(frame):
            old = self._old.get(signum)
            if callable(old):
                old(signum, frame)        # SIGINT's default_int_handler raises KeyboardInterrupt
                return
            raise Terminated(signum)      # the default would kill the process: the script ends here
        if self.received is None:
            self.received = signum
        if self._armed:
            self._armed = False
            raise Interrupted(signum)
        if self.unhandled is None:
            self.unhandled = signum
            if self.writing:
                say(f"roofscope: {signal.Signals(signum).name} received: the recorded profile is being written;"
                     " stopping right after\n")

    @contextmanager
    def armed(self) -> Iterator[None]:
        """A stretch that an exception loses nothing of (reading, analyzing): the first signal raises
        :class:`Interrupted` in it, and one that came before raises at once. Raised where Python swallows
        exceptions (a weakref callback, a ``__del__``), it is raised again as the stretch ends, unprinted."""
        if threading.current_thread() is not threading.main_thread():
            yield      # handlers run in the main thread: nothing could be raised here
            return
        if self.unhandled is not None:
            signum, self.unhandled = self.unhandled, None   # it skips this stretch: not delivered again
            raise Interrupted(signum)
        swallowed: list[int] = []
        before = sys.unraisablehook

        def unraisable(u: Any) -> None:
            if isinstance(u.exc_value, Interrupted):
                swallowed.append(u.exc_value.signum)
            else:
                before(u)

        self._armed, sys.unraisablehook = True, unraisable
        try:
            yield
        finally:
            self._armed, sys.unraisablehook = False, before
        if swallowed:
            raise Interrupted(swallowed[0])

    def exit_code(self, code: int) -> int:
        """The process's exit code: the script's, else 128 + the signal that stopped roofscope, if one did."""
        return code or (128 + self.received if self.received is not None else 0)


def current() -> Guard | None:
    """The guard of the profile this process is ending, if any."""
    return _current


@contextmanager
def armed() -> Iterator[None]:
    """:meth:`Guard.armed` of the current guard (none: signals act as they would)."""
    if _current is None:
        yield
    else:
        with _current.armed():
            yield
