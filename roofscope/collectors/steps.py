"""Steps for scripts with no optimizer and no ``roofscope.step()``: inference loops.

A step is then one call of the outermost ``nn.Module`` forward made with gradients off (a
decode token, or a prompt's prefill), or, with ``--step-on``, one ``generate()`` call or one
call of any importable function. Every outermost forward is also wrapped in the annotation
``roofscope: forward [B, T]`` (the shape of its first tensor argument: batch and tokens), which
tells prefill from decode in the analysis (analyzers/views/inference.py).

``--step-on __main__.FUNC`` names a function (or ``__main__.Class.method``) of the script itself,
which does not exist until the script has run its ``def``: the script's loop watch (collectors/loops/)
wraps it right after the statement that binds it, before any call (``defined``); one the program
defined before ``roofscope.profile()`` started is wrapped at once. ``--step-on loop`` or ``FILE:LINE``
make the script's own loop the step (collectors/loops/): no hook here marks a boundary then.

Forward steps end where the next outermost forward begins, so a token's step holds the host
work around its forward (sampling, stopping criteria) and a training script's forwards, whose
gradients are on, never count. After the first outermost call the global module hooks are
swapped for hooks on that root module alone (a hook on every submodule call would slow the
launch-bound loops being measured); another root module later is not seen.
"""
from __future__ import annotations

import ast
import functools
import importlib
import os
import re
import sys
import threading
import weakref
from pathlib import Path
from typing import Any, Callable

from roofscope.collectors.loops.model import file_loops
from roofscope.errors import RoofscopeError
from roofscope.labels import FORWARD_LABEL

MODES = ("forward", "generate")
# Modules that wrap the model, and the attribute holding what they wrap.
WRAPPERS = {"OptimizedModule": "_orig_mod", "DistributedDataParallel": "module", "DataParallel": "module",
            "FullyShardedDataParallel": "_fsdp_wrapped_module"}
SCRIPT = "__main__."           # --step-on __main__.FUNC: a function of the script being run
LOOP = "loop"                  # --step-on loop: the script's own loop, even where forwards came once per iteration
_LOOP_AT = re.compile(r"^(?P<file>.+\.py):(?P<line>\d+)$")   # --step-on FILE:LINE: the loop at that line
_ROOFSCOPE_DIR = str(Path(__file__).resolve().parents[1])
Bind = Callable[[list[str], Callable[[Any, str, Any], None]], bool]


def _holder(root: Any) -> tuple[str, str] | None:
    """The class of the module that holds ``root`` as a child, and the attribute it holds it by: the steps
    called that child directly and never the holder's forward (a LightningModule's training_step calling
    ``self.model``), so compiling the holder would compile a forward no step runs. None when no module holds
    it. The garbage collector's referrers, three scans of the heap, once at the profile's end."""
    import gc

    from torch import nn

    for children in gc.get_referrers(root):
        if type(children) is not dict:
            continue
        for holder in gc.get_referrers(children):
            # Python 3.12 refers from the module itself; 3.11 from its __dict__, materialized.
            found = [holder] if isinstance(holder, nn.Module) else (
                [m for m in gc.get_referrers(holder) if isinstance(m, nn.Module) and m.__dict__ is holder]
                if type(holder) is dict and holder.get("_modules") is children else [])
            for m in found:
                attr = next((k for k, v in children.items() if v is root), None) if m._modules is children else None
                if attr is not None:
                    return type(m).__name__, attr
    return None


def loop_spec(spec: str | None) -> bool:
    """``--step-on`` names the script's own loop: ``loop`` or ``FILE:LINE``."""
    return spec == LOOP or (spec is not None and _LOOP_AT.match(spec) is not None)


def resolve_function(spec: str) -> tuple[Any, str, Any]:
    """``pkg.mod.func`` / ``pkg.mod.Class.method`` / ``pkg.mod:Class.method`` -> (owner, attribute, function)."""
    mod_part, _, attr_part = spec.partition(":")
    parts = mod_part.split(".") if not attr_part else [mod_part]
    attrs = attr_part.split(".") if attr_part else []
    module = None
    for cut in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        attrs = parts[cut:] + attrs
        break
    if module is None or not attrs:
        raise RoofscopeError(f"--step-on {spec}: expected forward, generate or MODULE.FUNC with an importable MODULE")
    owner, missing = _owner(module, attrs)
    if missing is not None:
        raise RoofscopeError(f"--step-on {spec}: {missing!r} not found")
    fn = getattr(owner, attrs[-1], None)
    if not callable(fn):
        raise RoofscopeError(f"--step-on {spec}: {attrs[-1]!r} is not a function of {getattr(owner, '__name__', owner)}")
    return owner, attrs[-1], fn


def _owner(root: Any, attrs: list[str]) -> tuple[Any, str | None]:
    """The object holding ``attrs[-1]`` under ``root`` (``mod.Class`` for ``Class.method``), or the
    first attribute on the way that is not there."""
    owner = root
    for a in attrs[:-1]:
        owner = getattr(owner, a, None)
        if owner is None:
            return None, a
    return owner, None


def _inside_generate(model: Any) -> bool:
    """Whether ``model.generate()`` is on the calling stack (looked up once per run)."""
    f: Any = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name == "generate" and f.f_locals.get("self") is model:
            return True
        f = f.f_back
    return False


def _first_shape(args: Any, kwargs: Any) -> list[int] | None:
    import torch

    for v in (*args, kwargs.get("input_ids"), kwargs.get("inputs_embeds"), *kwargs.values()):
        if isinstance(v, torch.Tensor):
            return list(v.shape)
    return None


def _no_ref() -> None:
    """A weak reference to nothing."""
    return None


class StepHooks:
    """Calls ``on_boundary(source)`` at each step boundary of the chosen kind.

    ``mode`` None: forward steps, which the session counts only while neither an optimizer
    nor an explicit ``roofscope.step()`` has been seen."""

    def __init__(self, mode: str | None, on_boundary: Callable[[str], None],
                 on_round: Callable[[int], None] | None = None, script: Path | None = None,
                 defined: Bind | None = None) -> None:
        self.mode = mode
        self.script = script     # the file `roofscope run` runs as __main__ (None: this process's own)
        # Wraps a name of the script once bound (the loop watch's when_defined), for __main__.FUNC.
        self.defined = defined
        self.on_boundary = on_boundary
        # Called with the count of the root model's generate() calls as each begins.
        self.on_round = on_round
        self.rounds = 0
        self.tokens: int | None = None   # tokens per sequence of the forward starting at the latest boundary
        self.label = True                # annotate forwards (off once nothing is profiled any more)
        # The program's modules are held weakly: a model the program drops is freed when it drops it, not
        # when the profile stops (a DDP model freed inside roofscope's stop tore its gloo group down while
        # the group's worker waited for the GIL: a deadlock).
        self._generate_owner = _no_ref
        self.forwards = 0
        self.free_forwards = 0           # outermost forwards with gradients off: the ones that may be steps
        self._depth = 0
        self._root_ref = _no_ref
        self._root_facts: tuple[str | None, str | None, list[str], str | None] = (None, None, [], None)
        self._handles: list[Any] = []
        self._open: list[Any] = []
        self._patched: tuple[Any, str, Any] | None = None
        self._compiled_root = _no_ref
        self._narrowed = False
        self._thread = threading.get_ident()

    def install(self) -> None:
        from torch.nn.modules import module as nn_module

        if self.mode not in (None, "forward") and not loop_spec(self.mode):
            self._patch(self.mode)
        self._handles = [nn_module.register_module_forward_pre_hook(self._pre),
                         nn_module.register_module_forward_hook(self._post, always_call=True)]

    def _patch(self, mode: str) -> None:
        if mode.startswith(SCRIPT):
            attrs = mode[len(SCRIPT):].split(".")
            if self.defined is not None and self.defined(attrs, self._wrap):
                return
            found = _script_attribute(attrs, self.script)
            if found is None:
                raise RoofscopeError(f"--step-on {mode}: not defined when the profile started (define it before"
                                     " roofscope.profile(), or run the script with `roofscope run`)")
            self._wrap(*found)
            return
        if mode == "generate":
            try:
                from transformers.generation.utils import GenerationMixin
            except ImportError:
                raise RoofscopeError("--step-on generate needs transformers (its GenerationMixin.generate)") from None
            owner, name, fn = GenerationMixin, "generate", GenerationMixin.generate
        else:
            owner, name, fn = resolve_function(mode)
        self._wrap(owner, name, fn)

    def _wrap(self, owner: Any, name: str, fn: Any) -> None:
        """Make each call of ``owner.name`` (``fn``) end a step."""
        import torch

        hooks, source = self, self.source

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if torch.compiler.is_compiling():   # traced into by a compiled caller: no step inside a graph
                return fn(*args, **kwargs)
            try:
                return fn(*args, **kwargs)
            finally:
                hooks.on_boundary(source)

        functools.update_wrapper(wrapper, fn)
        setattr(owner, name, wrapper)
        self._patched = (owner, name, fn)

    @property
    def source(self) -> str:
        return "forward" if self.mode in (None, "forward") else "generate" if self.mode == "generate" else "function"

    def facts(self) -> dict[str, Any]:
        """run.json's ``program``: the outermost module the program called (its class, the package
        that defines it, the wrappers around it: ``torch.compile``'s, DDP's), how many forwards of it
        ran and how many of its ``generate()`` calls drove them, so fixes are written for this program."""
        module, package, wrappers, _ = self._root_facts
        facts = {"root_module": module, "root_package": package, "wrappers": list(wrappers),
                 "forwards": self.forwards, "generate_calls": self.rounds}
        held = _holder(self._root) if self._root is not None else None
        if held is not None:
            facts["root_owner"], facts["root_attr"] = held
        return facts

    def root_forward(self) -> str | None:
        """``MODULE.CLASS.forward`` of the outermost module seen (its --step-on), or None."""
        return self._root_facts[3]

    @property
    def _root(self) -> Any:
        return self._root_ref()

    def _see_root(self, root: Any) -> None:
        """Hold the outermost module weakly, and what the facts say of it now."""
        self._root_ref = weakref.ref(root)
        forward = f"{type(root).__module__}.{type(root).__qualname__}.forward"
        inner, wrappers = root, []
        while inner is not None and type(inner).__name__ in WRAPPERS:
            wrappers.append(type(inner).__name__)
            inner = getattr(inner, WRAPPERS[type(inner).__name__], None)
        self._root_facts = (type(inner).__name__ if inner is not None else None,
                            type(inner).__module__.split(".")[0] if inner is not None else None, wrappers, forward)

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        while self._open:
            self._open.pop().__exit__(None, None, None)
        if self._patched is not None:
            owner, name, fn = self._patched
            setattr(owner, name, fn)
            self._patched = None
        for owner, name in ((self._compiled_root(), "get_compiled_call"), (self._generate_owner(), "generate")):
            if owner is not None:
                owner.__dict__.pop(name, None)
        self._compiled_root = self._generate_owner = _no_ref

    def _watch_generate_calls(self, root: Any) -> None:
        """Count the root model's ``generate()`` calls (Hugging Face), wrapping the instance's method
        (the class is left alone). The call already running when the root is first seen counts as
        the first: the first forward of a generate() script comes from its first call."""
        utils = sys.modules.get("transformers.generation.utils")
        mixin = getattr(utils, "GenerationMixin", None)
        if self.on_round is None or mixin is None or not isinstance(root, mixin) or self.mode not in (None, "forward"):
            return
        gen = root.generate
        hooks = self
        hooks.rounds = 1 if _inside_generate(root) else 0

        def generate(*args: Any, **kwargs: Any) -> Any:
            if hooks._generate_owner() is root:
                hooks.rounds += 1
                hooks.on_round(hooks.rounds)
            return gen(*args, **kwargs)

        root.generate = generate
        self._generate_owner = weakref.ref(root)

    def _watch_compiled_calls(self, root: Any) -> None:
        """Count calls of the root's compiled forward as forwards too.

        Hugging Face ``generate()`` with a static cache decodes through
        ``model.get_compiled_call(...)``, a ``torch.compile``'d ``__call__`` whose module hooks were
        traced away: without this, every decode token of a compiled generate is one long step.
        The instance's method is wrapped (the class is left alone) so that each call of the
        compiled callable opens and closes a forward like an eager one."""
        get = getattr(type(root), "get_compiled_call", None)
        if get is None or self.mode not in (None, "forward"):
            return
        hooks = self

        def get_compiled_call(*args: Any, **kwargs: Any) -> Any:
            fn = get(root, *args, **kwargs)

            def call(*a: Any, **kw: Any) -> Any:
                # generate() keeps the callable for the whole loop: after remove() it runs unwatched
                if hooks._compiled_root() is not root:
                    return fn(*a, **kw)
                hooks._pre(root, a, kw)
                try:
                    return fn(*a, **kw)
                finally:
                    hooks._post(root, a, None)

            return call

        root.get_compiled_call = get_compiled_call
        self._compiled_root = weakref.ref(root)

    def _pre(self, module: Any, args: Any, kwargs: Any = None) -> None:
        import torch

        if torch.compiler.is_compiling() or threading.get_ident() != self._thread:
            return
        if self._root_ref is _no_ref:
            self._see_root(module)  # the first module called is the outermost one
            self._watch_compiled_calls(module)
            self._watch_generate_calls(module)
        elif module is not self._root:
            return
        self._depth += 1
        if self._depth != 1:
            return
        # The global hook gets no keyword arguments, so the first call may show no shape.
        shape = _first_shape(args, kwargs or {})
        self.tokens = shape[1] if shape is not None and len(shape) > 1 else None
        free = not torch.is_grad_enabled()
        if self.forwards and self.mode in (None, "forward") and free:
            self.on_boundary(self.source)
        self.forwards += 1
        self.free_forwards += free
        if not self.label:
            return
        rf = torch.autograd.profiler.record_function(f"{FORWARD_LABEL}{shape if shape is not None else '[]'}")
        rf.__enter__()
        self._open.append(rf)

    def _post(self, module: Any, args: Any, output: Any) -> None:
        import torch

        if torch.compiler.is_compiling() or threading.get_ident() != self._thread:
            return
        if module is not self._root or self._depth == 0:
            return
        self._depth -= 1
        if self._depth:
            return
        if self._open:
            self._open.pop().__exit__(None, None, None)
        if not self._narrowed:
            self._narrow()

    def _narrow(self) -> None:
        """Swap the global hooks for hooks on the root module only."""
        for h in self._handles:
            h.remove()
        self._handles = [self._root.register_forward_pre_hook(self._pre, with_kwargs=True),
                         self._root.register_forward_hook(self._post, always_call=True)]
        self._narrowed = True


def _script_attribute(attrs: list[str], script: Path | None) -> tuple[Any, str, Any] | None:
    """(owner, name, function) of ``attrs`` in the running script's module, once it has them.
    ``script``: the file `roofscope run` runs; until runpy makes it ``__main__``, that is
    roofscope's entry point. None: the process's own ``__main__`` (``roofscope.profile()``)."""
    main = sys.modules.get("__main__")
    file = getattr(main, "__file__", None)
    if not isinstance(file, str):
        return None
    here = Path(file).resolve()
    if (script is not None and here != script) or str(here).startswith(_ROOFSCOPE_DIR):
        return None
    owner, missing = _owner(main, attrs)
    fn = None if missing is not None else getattr(owner, attrs[-1], None)
    return (owner, attrs[-1], fn) if callable(fn) else None


def _top_level(tree: ast.Module) -> dict[str, ast.AST]:
    """The names the script binds at module level with ``def`` or ``class`` (also under a
    module-level ``if``/``try``/``with``, as ``if __name__ == "__main__":`` blocks do), and those it
    binds to ``torch.compile(f)`` of such a function (``fast = torch.compile(step)``): a function
    too. Other assignments are left out: wrapping an ``nn.Module`` bound to a name would hide its
    attributes."""
    found: dict[str, ast.AST] = {}
    compiled: list[tuple[str, str]] = []
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.setdefault(node.name, node)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            todo.extend(node.body + getattr(node, "orelse", []) + getattr(node, "finalbody", []) +
                        [s for h in getattr(node, "handlers", []) for s in h.body])
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, ast.Call) and node.value.args and isinstance(node.value.args[0], ast.Name) \
                and ast.unparse(node.value.func) in ("torch.compile", "compile"):
            compiled.append((node.targets[0].id, node.value.args[0].id))
    for name, fn in compiled:
        if isinstance(found.get(fn), (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.setdefault(name, found[fn])
    return found


def _parse(script: Path) -> ast.Module | None:
    try:
        return ast.parse(script.read_bytes(), filename=str(script))
    except (OSError, SyntaxError, ValueError):
        return None


def loop_target(spec: str | None) -> str | None:
    """A loop ``--step-on`` as the tracker matches it: ``loop``, or ``FILE:LINE`` with FILE made absolute."""
    m = _LOOP_AT.match(spec or "")
    return f"{os.path.abspath(m['file'])}:{m['line']}" if m else LOOP if spec == LOOP else None


def check_script_step_on(spec: str | None, script: Path | None) -> None:
    """``--step-on __main__.FUNC`` names something the script defines at its top level, ``FILE:LINE``
    a line of a file that starts a loop: else a one-line error before anything runs (a typo would
    otherwise profile nothing)."""
    m = _LOOP_AT.match(spec or "")
    if m:
        path = Path(m["file"])
        if not path.is_file():
            raise RoofscopeError(f"--step-on {spec}: no such file {m['file']}")
        if not any(h.line == int(m["line"]) for h in file_loops(str(path.resolve()))):
            raise RoofscopeError(f"--step-on {spec}: line {m['line']} of {path.name} starts no for or while loop")
        return
    if not spec or not spec.startswith(SCRIPT) or script is None:
        return
    attrs = spec[len(SCRIPT):].split(".")
    tree = _parse(script)
    if tree is None or not all(attrs):
        return
    node = _top_level(tree).get(attrs[0])
    if node is None:
        raise RoofscopeError(f"--step-on {spec}: {script.name} defines no function or class {attrs[0]!r} at its top level")
    if len(attrs) == 2 and isinstance(node, ast.ClassDef) and not any(
            isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == attrs[1] for n in node.body):
        raise RoofscopeError(f"--step-on {spec}: class {attrs[0]} of {script.name} defines no method {attrs[1]!r}")


def direct_forward_calls(script: Path | None) -> list[tuple[str, int]]:
    """``NAME.forward(...)`` calls inside the script's loops, with their lines: module hooks see only
    calls through the module (``NAME(...)``), so these make no forward steps."""
    tree = None if script is None else _parse(script)
    if tree is None:
        return []
    found = {(ast.unparse(n.func), n.lineno) for loop in ast.walk(tree) if isinstance(loop, (ast.For, ast.While))
             for n in ast.walk(loop) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr == "forward"}
    return sorted(found, key=lambda f: f[1])
