"""Run a user's script (or ``-m`` module) as ``__main__``, the way ``python`` would, and say how it ended.

The script sees the ``sys.argv``, ``sys.path[0]`` and ``__file__`` Python would give it.
Whatever ends it (returning, ``sys.exit(n)``, an exception, Ctrl-C, ``SIGTERM``, ``SIGHUP``) comes
back as an :class:`Outcome` with the exit code Python (or, for a signal that kills, the shell) would
show, so the caller can write the Run first and exit with that code; ``os._exit`` is
collectors/lifecycle/'s. Interpreter state is restored after.
"""
from __future__ import annotations

import importlib.util
import os
import runpy
import signal
import sys
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

from roofscope.collectors.lifecycle import Guard, Terminated
from roofscope.collectors.session import ProfileComplete
from roofscope.errors import RoofscopeError

_ROOFSCOPE_DIR = str(Path(__file__).resolve().parents[1])
_RUNPY = runpy.__file__


class ScriptError(RoofscopeError):
    """The target cannot be run at all (missing file, unknown module)."""


@dataclass(frozen=True)
class Outcome:
    code: int
    reason: str                   # "ok", "exit", "exception", "interrupted", "terminated", "stopped", "os._exit"
    detail: str | None = None     # the exception, one line

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_target(target: str, module: bool) -> Path | None:
    """Fail before profiling anything when the script or module does not exist; else the file
    that will run as ``__main__`` (None for a module without a source file)."""
    if module:
        # `python -m` puts the current directory first before it resolves the module; the
        # `roofscope` console script starts with its own bin directory there instead.
        saved_path = sys.path[:]
        sys.path.insert(0, os.getcwd())
        try:
            spec = importlib.util.find_spec(target)
        except (ImportError, ValueError) as e:
            raise ScriptError(f"cannot find module {target!r}: {e}") from None
        finally:
            sys.path[:] = saved_path
        if spec is None:
            raise ScriptError(f"no module named {target!r}")
        # A package runs its __main__.py (found beside its __init__, not imported here).
        locations = list(spec.submodule_search_locations or [])
        origin = spec.origin if not locations else str(Path(locations[0]) / "__main__.py")
        return Path(origin).resolve() if origin and Path(origin).is_file() else None
    if not Path(target).is_file():
        raise ScriptError(f"{target}: no such file" if not Path(target).exists() else f"{target}: not a file")
    return Path(target).resolve()


def _user_traceback(tb: TracebackType | None) -> TracebackType | None:
    # Drop roofscope's and runpy's frames in front of the script's own, as Python shows none.
    while tb is not None:
        f = tb.tb_frame.f_code.co_filename
        if not (f.startswith(_ROOFSCOPE_DIR) or f == _RUNPY or f.startswith("<frozen runpy")):
            break
        tb = tb.tb_next
    return tb


def _exit_code(e: SystemExit) -> int:
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code % 256  # what the shell sees
    print(code, file=sys.stderr)  # sys.exit("message") prints it and exits 1, as Python does
    return 1


def exit_forked_child(code: int) -> NoReturn:
    """End a child the script forked (os.fork) as Python would end it, after its own threads and atexit
    handlers, with its output flushed, but without the C++ static destructors: the profiler's (Kineto's
    config loader) wait forever on a thread that exists only in the parent."""
    import atexit
    import threading

    getattr(threading, "_shutdown", lambda: None)()   # what the interpreter's exit waits for first
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


# The script's globals, kept until the interpreter exits as a plain run keeps __main__'s. Freed when runpy
# returned, a DDP model's gloo process group was destroyed holding the GIL, and joined a gloo worker thread
# that waited for that GIL: the rank hung (tests/test_gloo_ranks.py). At exit, such a thread is ended instead.
_SCRIPT_GLOBALS: list[dict[str, Any]] = []


def _execute(target: str, module: bool) -> None:
    # The script's frames lie below this one's: the guard raises signals into the script only then.
    try:
        if module:
            _SCRIPT_GLOBALS.append(runpy.run_module(target, run_name="__main__", alter_sys=True))
        else:
            _SCRIPT_GLOBALS.append(runpy.run_path(target, run_name="__main__"))
    except BaseException as e:   # sys.exit() too: the globals are those of the script's frame on the way out
        _SCRIPT_GLOBALS.extend(f.f_globals for f, _ in traceback.walk_tb(e.__traceback__)
                               if f.f_code.co_name == "<module>" and f.f_globals.get("__name__") == "__main__")
        raise


def run_target(target: str, args: list[str], module: bool = False, guard: Guard | None = None) -> Outcome:
    """Run ``target`` as ``__main__`` with ``args``; never raises for anything the script does. ``guard``
    (the profile's, entered) takes the signals; without one, one is held while the script runs."""
    if guard is None:
        with Guard() as own:
            return run_target(target, args, module, own)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    guard.watch(_execute.__code__)
    try:
        if guard.received is not None:   # a signal came while the profile started: the script never runs
            raise (KeyboardInterrupt if guard.received == signal.SIGINT else Terminated)(guard.received)
        sys.argv = [target] + list(args)  # runpy replaces argv[0] with the module's file
        sys.path.insert(0, os.getcwd() if module else str(Path(target).resolve().parent))
        _execute(target, module)
        return Outcome(0, "ok")
    except ProfileComplete:
        return Outcome(0, "stopped", "stopped by roofscope after the profiled steps (--exit-after-profile)")
    except SystemExit as e:
        return Outcome(_exit_code(e), "exit", f"sys.exit({e.code!r})")
    except KeyboardInterrupt:
        print("KeyboardInterrupt", file=sys.stderr)
        return Outcome(128 + signal.SIGINT, "interrupted", "KeyboardInterrupt (SIGINT)")
    except Terminated as e:
        return Outcome(128 + e.signum, "terminated", signal.Signals(e.signum).name)
    except BaseException as e:  # the script's own error: shown as Python would, then reported
        traceback.print_exception(type(e), e, _user_traceback(e.__traceback__))
        return Outcome(1, "exception", "".join(traceback.format_exception_only(type(e), e)).strip())
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
