"""Module attribution: label every ``nn.Module`` forward with its qualified name.

Global forward pre/post hooks open a ``record_function("nn.Module: GPT.blocks.3.mlp")``
span around each module call, so the analysis can say which module launched each
kernel (backward kernels inherit their forward op's module; see analyzers/ingest/modules.py).

Names: the first module called that is not inside an already named tree is a root and
is named after its class (``GPT``; ``GPT_1`` for a second root of that class); its
submodules get ``<root>.<path from named_modules()>``. Inside ``torch.compile`` the hooks
do nothing, so a compiled model shows as its outermost module only.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any

from roofscope.labels import MODULE_PREFIX


class ModuleLabels:
    """Installs the global hooks on :meth:`install` and removes them on :meth:`remove`."""

    def __init__(self) -> None:
        self._names: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()
        self._roots: dict[str, int] = {}
        self._local = threading.local()
        self._handles: list[Any] = []
        self.calls = 0

    def install(self) -> None:
        from torch.nn.modules import module as nn_module

        if self._handles:
            return
        self._handles = [nn_module.register_module_forward_pre_hook(self._pre),
                         nn_module.register_module_forward_hook(self._post, always_call=True)]

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def name_of(self, module: Any) -> str:
        name = self._names.get(module)
        if name is None:
            cls = type(module).__name__
            n = self._roots.get(cls, 0)
            self._roots[cls] = n + 1
            root = cls if n == 0 else f"{cls}_{n}"
            # A root claims its whole tree, renaming submodules that were called on their own first.
            for path, sub in module.named_modules():
                self._names[sub] = f"{root}.{path}" if path else root
            name = root
        return name

    def _stack(self) -> list[Any]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _pre(self, module: Any, args: Any) -> None:
        import torch

        if torch.compiler.is_compiling():
            return
        rf = torch.autograd.profiler.record_function(MODULE_PREFIX + self.name_of(module))
        rf.__enter__()
        self._stack().append((module, rf))
        self.calls += 1

    def _post(self, module: Any, args: Any, output: Any) -> None:
        import torch

        if torch.compiler.is_compiling():
            return
        stack = self._stack()
        # A module whose call began before install() has no span of its own to close.
        if not any(m is module for m, _ in stack):
            return
        # Pop down to this module's span: spans above it were left open by an exception
        # escaping a hook-less path, and must not leak into the caller's label.
        while stack:
            mod, rf = stack.pop()
            rf.__exit__(None, None, None)
            if mod is module:
                break
