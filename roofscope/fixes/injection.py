"""What an installer gets: patches it can undo, the program's root modules, and a record of what it did.

Installers run in the program's process before the program (collectors/inject/). Each says what
it changed (:meth:`Injection.applied`) or why it could not (:meth:`Injection.skip`); a fix that
applied nowhere is "not applicable" to this program. Root modules are the outermost
``nn.Module`` calls on the main thread (a model called by the loop, a loss module), each handed
to the subscribers at its first call, before its forward runs; the search stops at the first
step boundary after the first root call (:meth:`Roots.stop`), so later steps carry no global module hook.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

# (root module, its first call's positional arguments) -> new arguments for that call, or None
RootHook = Callable[[Any, tuple[Any, ...]], "tuple[Any, ...] | None"]


class Roots:
    def __init__(self) -> None:
        self._subscribers: list[RootHook] = []
        self._handles: list[Any] = []
        self._depth = 0
        self._thread = threading.get_ident()
        self.seen: list[Any] = []

    def subscribe(self, hook: RootHook) -> None:
        if not self._handles and not self.seen:
            self._start()
        self._subscribers.append(hook)

    def _start(self) -> None:
        from torch.nn.modules import module as nn_module

        self._handles = [nn_module.register_module_forward_pre_hook(self._pre),
                         nn_module.register_module_forward_hook(self._post, always_call=True)]

    def _pre(self, module: Any, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        import torch

        if torch.compiler.is_compiling() or threading.get_ident() != self._thread:
            return None
        self._depth += 1
        if self._depth != 1 or any(m is module for m in self.seen):
            return None
        self.seen.append(module)
        for hook in self._subscribers:
            new = hook(module, args)
            args = args if new is None else new
        return args

    def _post(self, module: Any, args: Any, output: Any) -> None:
        import torch

        if not torch.compiler.is_compiling() and threading.get_ident() == self._thread:
            self._depth = max(0, self._depth - 1)

    def stop(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


@dataclass(eq=False)
class _Flag:
    owner: Any
    name: str
    value: Any
    what: str
    fix: str
    own: Any                 # the program's own setting: what it was, or what the program set it to since
    active: bool = False     # the fix changed it (False while the program runs with the value anyway)


class Injection:
    """One process's injected fixes: the patches (undone by :meth:`undo`), the root modules, and the
    record of what each fix did, under the name of the fix being installed (:meth:`installing`)."""

    def __init__(self) -> None:
        self.roots = Roots()
        self.done: dict[str, list[str]] = {}
        self.skipped: dict[str, list[str]] = {}
        self._undo: list[Callable[[], None]] = []
        self._switches: list[Callable[[bool], None]] = []
        self._flags: list[_Flag] = []
        self._setattr: dict[type, Callable[[Any, str, Any], None]] = {}   # classes watched: their own __setattr__
        self._on = True
        self._current = ""

    def installing(self, name: str) -> None:
        self._current = name
        self.done.setdefault(name, [])
        self.skipped.setdefault(name, [])

    def applied(self, what: str, fix: str | None = None) -> None:
        """``fix`` (default: the one being installed) changed the program: ``what``, in a few words."""
        done = self.done.setdefault(fix or self._current, [])
        if what not in done:
            done.append(what)

    def skip(self, why: str, fix: str | None = None) -> None:
        skipped = self.skipped.setdefault(fix or self._current, [])
        if why not in skipped:
            skipped.append(why)

    def patch(self, owner: Any, name: str, value: Any) -> Any:
        """Set ``owner.name`` to ``value`` until :meth:`undo`; the value it had."""
        old = getattr(owner, name)
        setattr(owner, name, value)
        self._undo.append(lambda: setattr(owner, name, old))
        return old

    def flag(self, owner: Any, name: str, value: Any, what: str) -> None:
        """A process setting the program may set itself (``torch.backends.cudnn.benchmark``): set to ``value`` now
        unless it is already, and held there, so that a program setting its own value at its start does not undo
        the fix. What the program sets (caught as it sets it, where the owner's class allows, and at each step
        boundary: :meth:`boundary`) is its own setting: the one the fix turned off (:meth:`set_fixed`) puts back,
        and when it is the fix's value, the fix has nothing left to do. ``what`` names the change (:meth:`applied`)."""
        f = _Flag(owner, name, value, what, self._current, own=getattr(owner, name))
        self._flags.append(f)
        self._watch(type(owner))
        self._undo.append(lambda: self._set(f, f.own))   # before the class's own __setattr__ is back (LIFO)
        if f.own == value:
            self.skip(f"{what.partition(' = ')[0]} already {value!r}")
        else:
            self._hold(f)

    def boundary(self) -> None:
        """A step boundary of the program: a flag it changed by other means (``torch.set_float32_matmul_precision``
        sets ``allow_tf32``) is its own setting, and the fix's value is set again."""
        for f in self._flags:
            now = getattr(f.owner, f.name)
            if now != (f.value if self._on and f.active else f.own):
                self._program_set(f, now)

    def _watch(self, cls: type) -> None:
        """The program's assignments to the flags of ``cls``'s instances go through :meth:`_program_set`."""
        if cls in self._setattr:
            return
        original = cls.__setattr__

        def program_setattr(obj: Any, attr: str, v: Any) -> None:
            f = next((f for f in self._flags if f.owner is obj and f.name == attr), None)
            if f is None:
                original(obj, attr, v)
            else:
                self._program_set(f, v)

        try:
            self.patch(cls, "__setattr__", program_setattr)
        except TypeError:   # a built-in type: the boundaries still see what the program set
            return
        self._setattr[cls] = original

    def _set(self, f: "_Flag", v: Any) -> None:
        cls = type(f.owner)
        self._setattr.get(cls, cls.__setattr__)(f.owner, f.name, v)

    def _program_set(self, f: "_Flag", v: Any) -> None:
        f.own = v
        if v == f.value:   # the program asks for what the fix would: nothing of the fix's is left
            if f.active:
                f.active = False
                self.done[f.fix].remove(f.what)
                self.skip(f"the program sets {f.what} itself", f.fix)
            self._set(f, v)
        else:
            self._hold(f)

    def _hold(self, f: "_Flag") -> None:
        if not f.active:
            f.active = True
            self.applied(f.what, f.fix)
        self._set(f, f.value if self._on else f.own)

    def setting(self, owner: Any, name: str, value: Any) -> Any:
        """:meth:`patch`, as a switch: :meth:`set_fixed` puts the old value back and this one again."""
        old = self.patch(owner, name, value)
        self.switch(lambda on: setattr(owner, name, value if on else old))
        return old

    def switch(self, turn: Callable[[bool], None]) -> None:
        """``turn(on)`` sets the fix's change (True) or the program's own setting (False) between steps."""
        self._switches.append(turn)

    def set_fixed(self, on: bool) -> None:
        """Every switched change on (as installed) or off (as the program had it)."""
        self._on = on
        for turn in self._switches:
            turn(on)
        for f in self._flags:
            if f.active:
                self._set(f, f.value if on else f.own)

    def on_undo(self, fn: Callable[[], None]) -> None:
        self._undo.append(fn)

    def on_root(self, hook: RootHook) -> None:
        """Call ``hook`` for each root module at its first call, under the fix being installed."""
        name = self._current

        def under_name(module: Any, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
            self._current = name
            return hook(module, args)

        self.roots.subscribe(under_name)

    def undo(self) -> None:
        self.roots.stop()
        while self._undo:
            self._undo.pop()()
