"""Whether torch.compile is compiling now, and a call when a compilation starts.

While Inductor compiles it may run profiler sessions of its own (benchmarking candidate kernels),
from other threads too. A Kineto session of roofscope's that is open then is stopped under it:
measured on an H200 with a cold Inductor cache (docs/validation.md), a step-less window open
during compilation ended in "Can't disable Kineto profiler when it's not running", raised into the
user's compile, and in a segfault. So a step-less time window neither opens while a compilation
runs nor stays open when one starts (collectors/windows.py).

Both read Dynamo's compilation callbacks (``torch._dynamo.callback_handler``: its start and end
callbacks bracket every Dynamo compilation, Inductor's included, and cudagraph trees' recording)
and AOTAutograd's tracing context (a backward compiled lazily at the first backward). Nothing here
imports Dynamo: a program that has not imported it is compiling nothing. A library may import it
without compiling anything (transformers does, at its import): :func:`dynamo_cause` names who did.
"""
from __future__ import annotations

import sys
from typing import Any, Callable

_DYNAMO = "torch._dynamo"
# CompilationCallbackHandler's count of compilations under way (name-mangled private attribute).
_PENDING = "_CompilationCallbackHandler__pending_callbacks_counter"


# Dynamo's registry of compile backends: torch.compile adds its backend there before compiling anything.
_BACKENDS = ("torch._dynamo.eval_frame", "cached_backends")
_NOT_OURS = -2
# How many backends were registered when roofscope's own profiler start imported Dynamo (some torch
# builds' profilers import it: torch 2.13's start took 1.1 s doing so); _NOT_OURS when it did not.
_own_import = _NOT_OURS


def _backend_count() -> int:
    """Dynamo's registered backends, -1 where this torch keeps no such registry."""
    registry = getattr(sys.modules.get(_BACKENDS[0]), _BACKENDS[1], None)
    return len(registry) if isinstance(registry, dict) else -1


def profiler_start(start: Callable[[], Any]) -> None:
    """Run roofscope's profiler ``start()``, noting whether it, not the program, imported Dynamo."""
    global _own_import
    before = _DYNAMO in sys.modules
    start()
    if not before and _DYNAMO in sys.modules and _own_import == _NOT_OURS:
        _own_import = _backend_count()


def dynamo_imported() -> bool:
    """The program has imported Dynamo (``torch.compile`` does): it compiles, probably soon. Where
    roofscope's own profiler imported it, the program counts once torch.compile has registered a
    backend (or always, on a torch that keeps no registry)."""
    if _DYNAMO not in sys.modules:
        return False
    if _own_import < 0:   # imported by the program, or no registry to tell its torch.compile by
        return True
    return _backend_count() > _own_import


class _DynamoImport:
    """A meta path finder that finds nothing: it notes which module imports Dynamo, then leaves."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        global _importer
        if name == _DYNAMO:
            _importer = _importing_module(sys._getframe(1))
            unwatch_dynamo_import()


_watch = _DynamoImport()
_importer: str | None = None   # the module whose import statement imported Dynamo, when it was seen


def _importing_module(frame: Any) -> str | None:
    """The module of the first frame up the stack that is not the import system's."""
    while frame is not None:
        name = frame.f_globals.get("__name__")
        if isinstance(name, str) and not name.startswith(("importlib", "_frozen_importlib")):
            return name
        frame = frame.f_back
    return None


def watch_dynamo_import() -> None:
    """Note who imports Dynamo from now on (nothing to note once it is imported)."""
    if _DYNAMO not in sys.modules and _watch not in sys.meta_path:
        sys.meta_path.insert(0, _watch)


def unwatch_dynamo_import() -> None:
    if _watch in sys.meta_path:
        sys.meta_path.remove(_watch)


def dynamo_cause() -> str:
    """Why the program counts as one that compiles: who imported torch.compile's Dynamo."""
    package = (_importer or "").split(".")[0]
    if package and package not in ("__main__", "torch", "roofscope"):
        return f"{package} imported torch.compile's Dynamo ({_importer}; that alone compiles nothing)"
    return "the program imported torch.compile's Dynamo"


def compiling() -> bool:
    """A Dynamo compilation, or a lazily compiled backward, is under way in this process."""
    if _DYNAMO not in sys.modules:
        return False
    handler = getattr(sys.modules[_DYNAMO], "callback_handler", None)
    if handler is not None and getattr(handler, _PENDING, 0) > 0:
        return True
    guards = sys.modules.get("torch._guards")
    context = getattr(guards, "TracingContext", None)
    return context is not None and context.try_get() is not None


def another_profiler() -> bool:
    """A torch.profiler session is enabled in this process (the program's own, or Inductor's)."""
    profiler = sys.modules.get("torch.autograd.profiler")
    return bool(getattr(profiler, "_is_profiler_enabled", False))


class OnCompileStart:
    """Calls ``fn`` when a Dynamo compilation starts, from the first :meth:`poll` that finds Dynamo
    imported (it registers then) until :meth:`remove`."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self._fn = fn
        self._handler: Any = None

    def _on_start(self, *_: Any) -> None:
        self._fn()

    def poll(self) -> None:
        if self._handler is not None or _DYNAMO not in sys.modules:
            return
        handler = getattr(sys.modules[_DYNAMO], "callback_handler", None)
        if handler is not None:
            handler.register_start_callback(self._on_start)
            self._handler = handler


    def remove(self) -> None:
        if self._handler is not None:
            try:
                self._handler.remove_start_callback(self._on_start)
            except ValueError:   # the program cleared Dynamo's callbacks itself
                pass
            self._handler = None
