"""The program's loop iterations from ``sys.monitoring`` (Python 3.12+): cost per iteration of its own
loops, none per call.

A ``PY_START`` event, disabled at each code object after its first call, turns ``JUMP`` events on in
the code objects of the program's own files (model.OwnCode), and in those its frames already run when
the watch starts (``roofscope.profile()``'s caller). A backward jump is a loop's back-edge: the end of
an iteration. Each code object's loops are read from its bytecode once (a ``continue`` in a ``while``
jumps back to another place than the loop's end: back-edges whose spans cross are one loop), named from
its file's source. Forward jumps, and the back-edges of loops the tracker lets go, are disabled where
they are (``sys.monitoring.DISABLE``): they cost nothing afterwards.

``--step-on __main__.FUNC``: ``LINE`` events on the script's top-level code find the statement after
which ``FUNC`` is bound, then stop.
"""
from __future__ import annotations

import dis
import inspect
import sys
from pathlib import Path
from types import CodeType, FrameType
from typing import Any, Callable

from roofscope.collectors.loops.model import Loop, OwnCode, bind_defined, comprehension_lines, header_at
from roofscope.collectors.loops.tracker import LoopTracker

_NAME = "roofscope loops"
_TOOL_IDS = (4, 3)       # free by convention: 0 debuggers, 1 coverage, 2 profilers, 5 optimizers
_BACKWARD = frozenset(("JUMP_BACKWARD",))   # JUMP_BACKWARD_NO_INTERRUPT: `yield from`/await's, not a loop
_GENERATOR = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
_SKIPPED_NAMES = ("torch_dynamo_resume_in_",)   # Dynamo's resume functions: pieces of a compiled function


class Monitoring:
    """A source of iterations for :class:`LoopTracker` (model.Watcher). ``tracker`` None: only
    ``when_defined``, no loop watched."""

    def __init__(self, tracker: LoopTracker | None, script: Path | None) -> None:
        self.tracker = tracker
        self.own = OwnCode(script)
        self.why = ""
        self._tool: int | None = None
        # Per code object (by id; the objects are kept in _codes): back-edge offset -> its loop; the spans.
        self._edges: dict[int, dict[int, Loop]] = {}
        self._spans: dict[int, list[tuple[int, int, Loop]]] = {}
        self._codes: dict[int, CodeType] = {}
        self._defined: list[tuple[list[str], Callable[[Any, str, Any], None]]] = []
        self._main_code: CodeType | None = None
        if tracker is not None:
            tracker.enclosing = self._enclosing
            tracker.on_done = self._loops_done

    def start(self) -> bool:
        if self._tool is not None:
            return True
        mon = getattr(sys, "monitoring", None)
        if mon is None:
            self.why = "this Python has no sys.monitoring"
            return False
        free = [t for t in _TOOL_IDS if mon.get_tool(t) is None]
        if not free:
            self.why = f"sys.monitoring's tool ids {' and '.join(map(str, _TOOL_IDS))} are another tool's"
            return False
        self._tool = free[0]
        mon.use_tool_id(self._tool, _NAME)
        ev = mon.events
        mon.register_callback(self._tool, ev.PY_START, self._on_start)
        mon.register_callback(self._tool, ev.JUMP, self._on_jump)
        mon.register_callback(self._tool, ev.LINE, self._on_line)
        mon.set_events(self._tool, ev.PY_START)
        f: FrameType | None = sys._getframe(1)
        while f is not None:   # the program's frames already running (roofscope.profile()'s caller)
            self._watch(f.f_code)
            f = f.f_back
        return True

    def stop(self) -> None:
        mon, tool = getattr(sys, "monitoring", None), self._tool
        if mon is None or tool is None:
            return
        self._tool = None
        mon.set_events(tool, 0)
        for code in self._codes.values():
            mon.set_local_events(tool, code, 0)
        for event in (mon.events.PY_START, mon.events.JUMP, mon.events.LINE):
            mon.register_callback(tool, event, None)
        mon.free_tool_id(tool)

    def when_defined(self, attrs: list[str], then: Callable[[Any, str, Any], None]) -> bool:
        if not self.start():
            return False
        self._defined.append((attrs, then))
        if self._main_code is not None:
            self._set(self._main_code)
        return True

    # -- events ------------------------------------------------------------------------------

    def _events(self, code: CodeType) -> int:
        ev = sys.monitoring.events
        loops = ev.JUMP if self.tracker is not None and not self.tracker.done else 0
        return loops | (ev.LINE if code is self._main_code and self._defined else 0)

    def _set(self, code: CodeType) -> None:
        if self._tool is not None:
            sys.monitoring.set_local_events(self._tool, code, self._events(code))

    def _loops_done(self) -> None:
        """The tracker needs no more iterations: only a pending ``when_defined`` keeps events."""
        for code in self._codes.values():
            self._set(code)
        if not self._defined:
            self.stop()

    def _on_start(self, code: CodeType, offset: int) -> Any:
        self._watch(code)
        return sys.monitoring.DISABLE

    def _watch(self, code: CodeType) -> None:
        if self._tool is None or id(code) in self._codes or code.co_name.startswith(_SKIPPED_NAMES):
            return
        path = self.own(code.co_filename)
        if path is None:
            return
        self._codes[id(code)] = code
        self._read(code, path)
        if code.co_name == "<module>" and path == self.own.script:
            self._main_code = code
        self._set(code)

    def _on_jump(self, code: CodeType, src: int, dst: int) -> Any:
        if dst > src or self.tracker is None:
            return sys.monitoring.DISABLE
        loop = self._edges.get(id(code), {}).get(src)
        if loop is self.tracker.step and loop is not None:
            self.tracker.step_edge(loop)
        elif loop is None or not self.tracker.edge(loop, sys._getframe(1)):
            return sys.monitoring.DISABLE
        return None

    def _on_line(self, code: CodeType, line: int) -> Any:
        if code is self._main_code and self._defined:
            bind_defined(sys._getframe(1).f_globals, self._defined)
            if not self._defined:
                self._set(code)
        return sys.monitoring.DISABLE

    # -- loops of a code object ----------------------------------------------------------------

    def _read(self, code: CodeType, path: str) -> None:
        """The loops of ``code`` from its back-edges; their parents within it."""
        spans: list[list[Any]] = []    # [start, end, back-edge offsets]
        for ins in dis.get_instructions(code):
            if ins.opname in _BACKWARD and isinstance(ins.argval, int):
                spans.append([ins.argval, ins.offset, [ins.offset]])
        merged: list[list[Any]] = []
        for span in sorted(spans, key=lambda s: (s[0], -s[1])):
            crossing = next((m for m in merged if m[0] < span[0] <= m[1] < span[1]), None)
            if crossing is not None:   # a while loop's continue and its end: one loop
                crossing[1], crossing[2] = span[1], crossing[2] + span[2]
            else:
                merged.append(span)
        at = {ins.offset: ins for ins in dis.get_instructions(code)}
        edges: dict[int, Loop] = {}
        table: list[tuple[int, int, Loop]] = []
        for start, end, backs in sorted(merged, key=lambda s: (s[0], -s[1])):
            ins = at.get(start)
            line = (ins.positions.lineno if ins is not None and ins.positions else None) or code.co_firstlineno
            header = header_at(path, line, is_for=ins is not None and ins.opname == "FOR_ITER")
            loop = Loop(path, header.line if header else line, header.text if header else f"a loop at line {line}",
                        code.co_qualname, generator=bool(code.co_flags & _GENERATOR),
                        comprehension=header is None and line in comprehension_lines(path))
            outer = [t for t in table if t[0] <= start and end <= t[1]]
            loop.parent = outer[-1][2] if outer else None
            table.append((start, end, loop))
            edges.update({b: loop for b in backs})
        self._edges[id(code)], self._spans[id(code)] = edges, table

    def _enclosing(self, frame: FrameType) -> Loop | None:
        """The innermost loop of the frame's code around its current instruction."""
        table = self._spans.get(id(frame.f_code))
        if not table:
            return None
        at = frame.f_lasti
        inside = [loop for start, end, loop in table if start <= at <= end]
        return inside[-1] if inside else None
