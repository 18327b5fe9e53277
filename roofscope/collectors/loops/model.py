"""The program's own loops: which files are the program's own, the loop statements a file holds (their
lines and headers, read from its source), and the :class:`Loop` records the tracker keeps.

The program's own code is the script's file and the files beside it and below its folder, less what
Python installed (the interpreter's prefixes, ``site-packages``) and roofscope itself: the loop that
drives the work is there; a library's loops (a model's layers, ``generate()``'s tokens) are not.
"""
from __future__ import annotations

import ast
import functools
import os
import sys
import sysconfig
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

_ROOFSCOPE_DIR = str(Path(__file__).resolve().parents[2])
_INSTALLED = ("site-packages", "dist-packages")

# A loop's states: watched until the tracker decides; the step; a loop around the step (its outer
# loops stay watched: they name the stretch a step is in); off (never the step: in a generator, in a
# module's forward, or trivial: iterations too short to hold work, or a helper: its iterations hold
# little of its outer loop's); named (forwards were the steps, once per iteration of this loop).
WATCHING, STEP, OUTER, OFF, NAMED = "watching", "step", "outer", "off", "named"


class Watcher(Protocol):
    """A source of the program's loop iterations (monitoring.py, marks.py); ``why``: why it watches none."""

    why: str

    def start(self) -> bool:
        """Start watching; False when this Python or this program offers no way to (the reason in ``why``)."""
        ...

    def stop(self) -> None: ...

    def when_defined(self, attrs: list[str], then: Callable[[Any, str, Any], None]) -> bool:
        """Call ``then(owner, name, fn)`` once the script has bound ``attrs`` (``FUNC`` or
        ``Class.method``) at its top level; False when it cannot be watched for."""
        ...


class OwnCode:
    """Which files are the program's own (module docstring): ``own(filename)`` is the file's absolute
    path when it is, else None."""

    def __init__(self, script: Path | None) -> None:
        if script is None:   # roofscope.profile(): the program's __main__ file, if it has one
            main = getattr(sys.modules.get("__main__"), "__file__", None)
            script = Path(main).resolve() if isinstance(main, str) else None
        self.script = str(script) if script is not None else None
        prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sysconfig.get_paths().get("stdlib", sys.prefix)}
        self._installed = tuple(p.rstrip(os.sep) + os.sep for p in prefixes if p)
        root = str(script.parent) + os.sep if script is not None else None
        # A script that is itself installed (a console script, pytest's __main__): only its own file.
        installed = root is not None and (root.startswith(self._installed) or
                                          any(part in _INSTALLED for part in root.split(os.sep)))
        self.root = None if installed else root
        self._seen: dict[str, str | None] = {}

    def __call__(self, filename: str) -> str | None:
        try:
            return self._seen[filename]
        except KeyError:
            own = self._seen[filename] = self._judge(filename)
            return own

    def _judge(self, filename: str) -> str | None:
        if self.script is None or filename.startswith("<"):
            return None
        path = os.path.abspath(filename)   # runpy compiles a script under the name it was given
        if path == self.script:
            return path
        if self.root is None or not path.startswith(self.root) or path.startswith(_ROOFSCOPE_DIR + os.sep):
            return None
        if any(part in _INSTALLED for part in path[len(self.root):].split(os.sep)):
            return None
        return None if path.startswith(self._installed) else path


@dataclass(frozen=True)
class Header:
    """A loop statement of a file: its line, the line its body starts on and its header."""

    line: int
    body_line: int
    text: str


def header_text(node: ast.For | ast.AsyncFor | ast.While) -> str:
    if isinstance(node, ast.While):
        return f"while {ast.unparse(node.test)}"
    return f"{'async for' if isinstance(node, ast.AsyncFor) else 'for'} {ast.unparse(node.target)} in " \
           f"{ast.unparse(node.iter)}"


@functools.lru_cache(maxsize=256)
def file_loops(filename: str) -> tuple[Header, ...]:
    """The loop statements of ``filename``, in line order (none when it cannot be read or parsed)."""
    try:
        tree = ast.parse(Path(filename).read_bytes(), filename=filename)
    except (OSError, SyntaxError, ValueError):
        return ()
    found = [Header(n.lineno, n.body[0].lineno, header_text(n))
             for n in ast.walk(tree) if isinstance(n, (ast.For, ast.AsyncFor, ast.While))]
    return tuple(sorted(found, key=lambda h: h.line))


@functools.lru_cache(maxsize=256)
def comprehension_lines(filename: str) -> frozenset[int]:
    """The lines of ``filename`` a comprehension or generator expression starts on: Python 3.12 inlines a
    comprehension into its function, so its iterations are back-edges there, yet it builds a value (a list
    of a model's layers, a KV cache's tensors) and is never the program's step."""
    try:
        tree = ast.parse(Path(filename).read_bytes(), filename=filename)
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    kinds = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
    return frozenset(n.lineno for n in ast.walk(tree) if isinstance(n, kinds))


def header_at(filename: str, line: int, is_for: bool) -> Header | None:
    """The loop statement a back-edge to ``line`` belongs to: a ``for`` loop's goes to its own line; a
    ``while`` loop's to its body's first line (or to its own, for a ``continue``)."""
    loops = file_loops(filename)
    if is_for:
        found = [h for h in loops if h.line == line and h.text.startswith(("for ", "async for "))]
    else:
        found = ([h for h in loops if h.body_line == line and h.text.startswith("while ")]
                 or [h for h in loops if h.line == line and h.text.startswith("while ")])
    return found[-1] if found else None


@dataclass(eq=False)
class Loop:
    """One loop of the program's own code, and what the tracker saw of its iterations."""

    file: str
    line: int
    text: str                         # its header: ``for tok in range(64)``
    function: str                     # the qualified name of the code holding it (``<module>`` at top level)
    generator: bool = False           # in a generator: its iterations wait on its consumer's work
    comprehension: bool = False       # a comprehension inlined into its function (3.12): it builds a value
    parent: "Loop | None" = None      # the loop around it, in its own code or up the calling stack
    children: list["Loop"] = field(default_factory=list)
    placed: bool = False              # its parent and place looked up (at its first iteration)
    state: str = WATCHING
    why: str = ""                     # why it is off, or why it is the step
    edges: int = 0                    # back-edges seen
    last: float = 0.0                 # perf_counter at the latest one
    frame: int = 0                    # id() of the frame that ran it then
    parent_edges: int = -1            # the parent's back-edges then
    run: int = 0                      # iterations timed in the current activation
    most: int = 0                     # ... in its longest activation
    run_start: float = 0.0            # perf_counter at the activation's first back-edge
    forwards: int = 0                 # outermost forwards counted when the current activation began
    timed: int = 0                    # iterations timed in all
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=16))

    def where(self) -> str:
        name = Path(self.file).name
        return f"{name}:{self.line}" + ("" if self.function == "<module>" else f", in {self.function}()")

    def describe(self) -> str:
        return f"`{self.text}` ({self.where()})"

    def spec(self) -> str:
        """The ``--step-on`` that makes this loop the step (``FILE:LINE``)."""
        return f"{self.file}:{self.line}"

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "text": self.text, "function": self.function}


def bind_defined(namespace: dict[str, Any], pending: list[tuple[list[str], Callable[[Any, str, Any], None]]]) -> None:
    """For each ``(attrs, then)`` whose ``attrs`` (``FUNC`` or ``Class.method``) the script's top-level
    ``namespace`` now binds to a callable: ``then(owner, name, fn)``, once (taken out of ``pending``)."""
    for attrs, then in list(pending):
        owner: Any = _Namespace(namespace) if len(attrs) == 1 else namespace.get(attrs[0])
        for a in attrs[1:-1]:
            owner = getattr(owner, a, None)
        fn = getattr(owner, attrs[-1], None) if owner is not None else None
        if callable(fn):
            pending.remove((attrs, then))
            then(owner, attrs[-1], fn)


class _Namespace:
    """A module's globals as an object: the owner whose attribute a step wrapper replaces (``setattr``)."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        self.__dict__["_ns"] = namespace

    def __getattr__(self, name: str) -> Any:
        try:
            return self._ns[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self._ns[name] = value
