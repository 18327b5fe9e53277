"""Record every CUDA-graph capture of the profiled program, so its replays can be costed.

``torch.cuda.CUDAGraph`` (used by ``torch.cuda.graph``, ``make_graphed_callables`` and
Inductor's cudagraph trees) is patched for the session: each graph gets an id; its capture
is wrapped in the annotation ``roofscope: graph capture N`` and every replay in ``roofscope:
graph replay N`` (analyzers/cost/graphs.py matches the two). A capture that happens while the
session's profiler is not recording (graphs are usually captured during warm-up) is recorded
by a short profiler of its own, from ``capture_begin`` to ``capture_end``, into
``capture-NNNN.json`` (a warming-up session profiler steps aside for it and starts again after);
the Run keeps those as ``graph-capture-NNNN.json.gz``. A capture inside a step-less window stays in
the window's trace (starting a session there is a hazard, collectors/windows.py), which is kept
as a capture file too (:meth:`GraphRecorder.file_window`) in case the steps' trace becomes the
Run's. While the session records, the capture lands in the main trace itself. The first ``limit`` captures are recorded.
"""
from __future__ import annotations

import itertools
import shutil
from pathlib import Path
from typing import Any, Callable

from roofscope.collectors import cupti
from roofscope.collectors.compiling import profiler_start
from roofscope.labels import CAPTURE_LABEL, REPLAY_LABEL

_ID_ATTR = "_roofscope_graph_id"


class GraphRecorder:
    def __init__(self, directory: Path, make_room: Callable[[], bool], give_back_room: Callable[[], None],
                 limit: int = 64) -> None:
        self.directory = directory
        # The session's profiler steps aside for a capture's own (True when it did, or was idle)
        # and comes back after it (torchprof.TorchCollector.make_room).
        self.make_room = make_room
        self.give_back_room = give_back_room
        self.limit = limit
        self.files: list[Path] = []
        self.skipped = 0                  # captures not recorded (limit, or the session was warming up)
        self.captures = 0
        self._in_trace = 0                # captures recorded in a running profile since the last window was filed
        self.errors: list[str] = []       # recording failures (the captures themselves went on)
        self._ids = itertools.count()
        self._saved: dict[str, Any] = {}
        self._open: dict[int, tuple[Any, Any]] = {}   # graph id -> (annotation, own profiler or None)
        self._installed = False
        # Captures in progress: nothing runs during one, so the session marks no step boundary
        # (a boundary would also switch the session's profiler while the capture's own records).
        self.capturing = 0

    def adopt(self, earlier: "GraphRecorder") -> None:
        """Go on from an earlier recorder of the same session (a profile made again): its recorded
        captures, counts and graph ids are kept, and new ids follow them."""
        self.files, self.errors = list(earlier.files), list(earlier.errors)
        self.skipped, self.captures = earlier.skipped, earlier.captures
        self._ids = itertools.count(next(earlier._ids))

    def file_window(self, trace: Path) -> None:
        """A step-less window's trace was held (collectors/windows.py HeldWindow): when captures were recorded
        in it, keep a copy as a capture file, for their replays in a later trace of the steps."""
        if not self._in_trace:
            return
        self._in_trace = 0
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"capture-window-{len(self.files):04d}.json"
        shutil.copyfile(trace, path)
        self.files.append(path)

    def install(self) -> None:
        import torch

        cls = torch.cuda.CUDAGraph
        self._saved = {m: cls.__dict__[m] for m in ("capture_begin", "capture_end", "replay") if m in cls.__dict__}
        begin, end, replay = (getattr(cls, m) for m in ("capture_begin", "capture_end", "replay"))
        rec = self

        def capture_begin(graph: Any, *args: Any, **kwargs: Any) -> Any:
            rec.capturing += 1
            rec._guarded(rec._begin, graph)
            return begin(graph, *args, **kwargs)

        def capture_end(graph: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return end(graph, *args, **kwargs)
            finally:
                rec.capturing = max(0, rec.capturing - 1)
                rec._guarded(rec._end, graph)

        def replay_(graph: Any, *args: Any, **kwargs: Any) -> Any:
            with torch.profiler.record_function(f"{REPLAY_LABEL}{getattr(graph, _ID_ATTR, '?')}"):
                return replay(graph, *args, **kwargs)

        cls.capture_begin, cls.capture_end, cls.replay = capture_begin, capture_end, replay_
        self._installed = True

    def remove(self) -> None:
        import torch

        if not self._installed:
            return
        self._installed = False
        cls = torch.cuda.CUDAGraph
        for m in ("capture_begin", "capture_end", "replay"):
            if m in self._saved:
                setattr(cls, m, self._saved[m])
            elif m in cls.__dict__:
                delattr(cls, m)
        self._saved = {}
        for gid in list(self._open):  # a capture still open (the program failed mid-capture)
            self._close(gid, export=False)

    def _guarded(self, fn: Callable[[Any], None], graph: Any) -> None:
        # The user's capture must go on whatever happens to its recording: a failure costs the
        # capture's costs (its replays keep their time), never the program.
        try:
            fn(graph)
        except Exception as e:  # noqa: BLE001
            self.errors.append(f"{type(e).__name__}: {e}")

    def _begin(self, graph: Any) -> None:
        import torch

        gid = next(self._ids)
        try:
            setattr(graph, _ID_ATTR, gid)
        except AttributeError:
            return
        self.captures += 1
        own = None
        if torch.autograd.profiler._is_profiler_enabled:
            self._in_trace += 1   # recorded in the running profile (the session's steps or step-less window)
        else:
            if len(self.files) >= self.limit or not self.make_room():
                self.skipped += 1
                return
            from torch.profiler import ProfilerActivity, profile

            try:
                own = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True)
                cupti.before_start()
                profiler_start(own.start)
            except Exception:
                self.give_back_room()   # the session's profiler must not stay aside
                raise
        ann = torch.profiler.record_function(f"{CAPTURE_LABEL}{gid}")
        ann.__enter__()
        self._open[gid] = (ann, own)

    def _end(self, graph: Any) -> None:
        gid = getattr(graph, _ID_ATTR, None)
        if gid in self._open:
            self._close(gid, export=True)

    def _close(self, gid: int, export: bool) -> None:
        ann, own = self._open.pop(gid)
        ann.__exit__(None, None, None)
        if own is None:
            return
        with cupti.stopping():
            own.stop()
        if export:
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self.directory / f"capture-{gid:04d}.json"
            own.export_chrome_trace(str(path))
            self.files.append(path)
        if not any(o is not None for _, o in self._open.values()):
            self.give_back_room()

    def notes(self) -> list[str]:
        failed = [f"recording a CUDA-graph capture failed ({self.errors[0]}"
                  f"{f'; {len(self.errors) - 1} more' if len(self.errors) > 1 else ''}): replays of that graph have"
                  " time only"] if self.errors else []
        if not self.skipped:
            return failed
        return failed + [f"{self.skipped} CUDA-graph capture{'s were' if self.skipped != 1 else ' was'} not recorded "
                f"(at most {self.limit} are): replays of "
                "those graphs have time only"]
