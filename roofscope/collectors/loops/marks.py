"""The script's loop iterations where Python has no ``sys.monitoring`` (before 3.12): marks compiled
into the script's own loops.

``roofscope run`` runs the script with runpy, which compiles it with ``compile(source, name, "exec")``.
While the watch is on, that name in runpy is ours for the script's file: every ``for`` and ``while`` of
the script gets the first statement ``__roofscope_loops__[K]()`` (K: the loop's number), which hands
the iteration to the tracker, or, once the tracker has let the loop go, calls a builtin that does
nothing (``tuple``): some 30 ns an iteration. A trace function would cost every call of the program,
the library's included (1.4x on a small model's forward, CPython 3.11). Top-level statements that bind
names are followed by ``__roofscope_defined__()``, for ``--step-on __main__.FUNC``. Both names reach
the script through ``builtins``: its globals are runpy's to make, and they stay there (as no-ops) once
the watch is off, for code of the script that runs later (an ``atexit`` handler).

Only the script's own file is marked, and only when roofscope runs it: neither the files it imports,
nor ``-m`` modules (the import system compiles those, from cached bytecode), nor ``roofscope.profile()``.
"""
from __future__ import annotations

import ast
import builtins
import os
import runpy
import sys
from pathlib import Path
from types import FrameType
from typing import Any, Callable

from roofscope.collectors.loops.model import Loop, bind_defined, header_text
from roofscope.collectors.loops.tracker import LoopTracker

LOOPS, DEFINED = "__roofscope_loops__", "__roofscope_defined__"
_BINDS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign, ast.Import, ast.ImportFrom)


# A mark once its loop is let go, or after the watch: a builtin that does nothing of note, called
# cheaper than a function of ours would be.
_off = tuple


class Marks:
    """A source of iterations for :class:`LoopTracker` (model.Watcher). ``tracker`` None: only
    ``when_defined``, no loop marked."""

    def __init__(self, tracker: LoopTracker | None, script: Path | None) -> None:
        self.tracker = tracker
        self.script = str(script) if script is not None else None
        self.why = ""
        self._slots: list[Callable[[], object]] = []
        self._spans: list[tuple[str, int, int, Loop]] = []   # (qualname, first line, last line, loop)
        self._defined: list[tuple[list[str], Callable[[Any, str, Any], None]]] = []
        self._on = False
        self._compiled = False   # runpy compiled the script through us
        if tracker is not None:
            tracker.enclosing = self._enclosing
            tracker.on_done = self._loops_done
            tracker.at_start = True

    def start(self) -> bool:
        if self.script is None:
            self.why = ("this Python has no sys.monitoring, and only a script roofscope runs (roofscope run FILE) has"
                        " its loops marked")
            return False
        if self._on:
            return True
        self._on = True
        runpy.compile = self._compile   # type: ignore[attr-defined]
        setattr(builtins, LOOPS, self._slots)
        setattr(builtins, DEFINED, self._check_defined)
        return True

    def stop(self) -> None:
        if not self._on:
            return
        self._on = False
        if not self._spans and self.tracker is not None and not self._compiled:
            self.why = ("the script was not compiled by runpy's compile (a -m module is, by the import system): its"
                        " loops were not marked; Python 3.12+ watches them with sys.monitoring")
        if runpy.__dict__.get("compile") == self._compile:
            del runpy.compile   # type: ignore[attr-defined]
        self._slots[:] = [_off] * len(self._slots)
        self._defined.clear()

    def _loops_done(self) -> None:
        self._slots[:] = [_off] * len(self._slots)

    def when_defined(self, attrs: list[str], then: Callable[[Any, str, Any], None]) -> bool:
        if not self.start():
            return False
        self._defined.append((attrs, then))
        return True

    # -- compiling the script ------------------------------------------------------------------

    def _compile(self, source: Any, filename: Any, mode: str, *args: Any, **kwargs: Any) -> Any:
        if not self._on or mode != "exec" or os.path.abspath(os.fsdecode(filename)) != self.script or args or kwargs:
            return builtins.compile(source, filename, mode, *args, **kwargs)
        try:
            tree = ast.parse(source, filename=filename)
        except (SyntaxError, ValueError):   # Python's own compile says so, as it would have
            return builtins.compile(source, filename, mode)
        self._compiled = True
        _Marker(self).visit(tree)
        ast.fix_missing_locations(tree)
        return builtins.compile(tree, filename, mode)

    def add(self, loop: Loop, qualname: str, end_line: int) -> int:
        """A loop of the script: its mark's number."""
        k = len(self._slots)
        self._spans.append((qualname, loop.line, end_line, loop))
        self._slots.append(self._mark(k, loop))
        return k

    def _mark(self, k: int, loop: Loop) -> Callable[[], object]:
        tracker, slots = self.tracker, self._slots
        assert tracker is not None

        def mark() -> None:
            if loop is tracker.step:
                tracker.step_edge(loop)
            elif not tracker.edge(loop, sys._getframe(1)):
                slots[k] = _off
        return mark

    def _check_defined(self) -> None:
        if self._defined:
            bind_defined(sys._getframe(1).f_globals, self._defined)

    def _enclosing(self, frame: FrameType) -> Loop | None:
        """The innermost loop of the script around the frame's current line, in the frame's own function."""
        code = frame.f_code
        if os.path.abspath(code.co_filename) != self.script:
            return None
        line = frame.f_lineno
        inside = [loop for q, first, last, loop in self._spans if q == code.co_qualname and first <= line <= last]
        return max(inside, key=lambda loop: loop.line) if inside else None


class _Marker(ast.NodeTransformer):
    """Marks every loop of the script and each top-level statement that binds names."""

    def __init__(self, marks: Marks) -> None:
        self.marks = marks
        self.code = ["<module>"]             # the qualified name of the code object each node is in
        self.function = [False]              # ... whether it is a function's
        self.generator = [False]
        self.loops: list[list[Loop]] = [[]]  # the loops open in each code object

    def visit_Module(self, node: ast.Module) -> ast.Module:
        self.generic_visit(node)
        if self.marks._defined:
            node.body = self._after_binds(node.body)
        return node

    def _after_binds(self, body: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in body:
            if isinstance(stmt, (ast.If, ast.Try, ast.With)):   # `if __name__ == "__main__":` and the like
                for block in ("body", "orelse", "finalbody"):
                    if getattr(stmt, block, None):
                        setattr(stmt, block, self._after_binds(getattr(stmt, block)))
                for h in getattr(stmt, "handlers", []):
                    h.body = self._after_binds(h.body)
            out.append(stmt)
            if isinstance(stmt, _BINDS):
                out.append(ast.copy_location(ast.Expr(ast.Call(ast.Name(DEFINED, ast.Load()), [], [])), stmt))
        return out

    def _code(self, node: Any, function: bool) -> Any:
        """A function or class: its code object's qualified name, as Python forms ``co_qualname``."""
        outer = self.code[-1]
        prefix = "" if outer == "<module>" else outer + (".<locals>." if self.function[-1] else ".")
        self.code.append(prefix + node.name)
        self.function.append(function)
        self.generator.append(function and any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await))
                                                for n in _own_nodes(node)))
        self.loops.append([])
        self.generic_visit(node)
        for stack in (self.code, self.function, self.generator, self.loops):
            stack.pop()
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> Any:
        return self._code(node, True)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> Any:
        return self._code(node, True)

    def visit_ClassDef(self, node: ast.ClassDef) -> Any:
        return self._code(node, False)

    def visit_Lambda(self, node: ast.Lambda) -> Any:
        return node   # no statement inside a lambda to mark

    def _loop(self, node: ast.For | ast.AsyncFor | ast.While) -> Any:
        if self.marks.tracker is None:   # only a name to wait for: no loop is marked
            return self.generic_visit(node)
        open_loops = self.loops[-1]
        loop = Loop(self.marks.script or "", node.lineno, header_text(node), self.code[-1],
                    generator=self.generator[-1], parent=open_loops[-1] if open_loops else None)
        k = self.marks.add(loop, self.code[-1], node.end_lineno or node.lineno)
        open_loops.append(loop)
        self.generic_visit(node)
        open_loops.pop()
        mark = ast.Expr(ast.Call(ast.Subscript(ast.Name(LOOPS, ast.Load()), ast.Constant(k), ast.Load()), [], []))
        node.body.insert(0, ast.copy_location(mark, node.body[0]))
        return node

    visit_For = visit_AsyncFor = visit_While = _loop


def _own_nodes(fn: ast.AST) -> list[ast.AST]:
    """The nodes of a function's body, not those of the functions and classes defined in it."""
    out, todo = [], list(ast.iter_child_nodes(fn))
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        out.append(n)
        todo.extend(ast.iter_child_nodes(n))
    return out
