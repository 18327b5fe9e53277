"""``os._exit`` inside a profile: the profile ends first (its Run written and announced), then the process
exits with the script's code, as it asked. A forked child gets the real ``os._exit`` back.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

from roofscope.collectors.lifecycle import signals

_real_exit = os._exit
_wrapper: Callable[[int], NoReturn] | None = None


def _after_fork_in_child() -> None:
    if _wrapper is not None and os._exit is _wrapper:
        os._exit = _real_exit


os.register_at_fork(after_in_child=_after_fork_in_child)


@contextmanager
def intercept_exit(end: Callable[[int], object]) -> Iterator[None]:
    """While the block runs, ``os._exit(code)`` in this process first calls ``end(code)`` (the profile
    finished: its Run written and announced), then exits with ``code`` whatever ``end`` did. A forked child,
    a second call and one made by ``end`` itself exit at once."""
    global _wrapper
    pid = os.getpid()
    calls: list[int] = []

    def _exit(code: int) -> NoReturn:
        if os.getpid() != pid or calls or not isinstance(code, int):
            _real_exit(code)
        calls.append(code)
        guard = signals.current()
        if guard is not None:
            guard.ended = True        # nothing more is raised into the script
        try:
            end(code % 256)
        except BaseException as e:  # noqa: BLE001  whatever failed, the process ends with the script's code
            signals.say(f"roofscope: error: the profile could not be finished before os._exit:"
                        f" {type(e).__name__}: {e}\n")
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            _real_exit(code)

    _wrapper = _exit
    os._exit = _exit
    try:
        yield
    finally:
        if os._exit is _exit:
            os._exit = _real_exit
        _wrapper = None
