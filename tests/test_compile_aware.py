"""A time window of roofscope's neither opens during a torch.compile compilation (nor under another
profiler) nor stays open when one starts, and a profiler transition that fails because someone else
took Kineto over never raises into the program (collectors/compiling.py, collectors/windows.py)."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import torch

from roofscope.collectors import compiling
from roofscope.collectors.torchprof import Schedule, TorchCollector

dynamo = pytest.importorskip("torch._dynamo")
from torch._dynamo.callback import CallbackTrigger  # noqa: E402


def _compilation():
    """What Dynamo wraps every compilation in (convert_frame, and cudagraph trees' recording)."""
    return dynamo.callback_handler.install_callbacks(CallbackTrigger.DYNAMO, "0/0")


def _spin(seconds: float, until=lambda: False) -> None:
    """CPU work in the main thread for ``seconds`` (the alarm runs between its bytecodes)."""
    x = torch.randn(32, 32)
    end = time.monotonic() + seconds
    while time.monotonic() < end and not until():
        x = torch.tanh(x @ x)


def test_compiling_is_seen_only_inside_a_compilation():
    assert not compiling.compiling()
    with _compilation():
        assert compiling.compiling()
        with _compilation():      # nested: still one compilation under way
            assert compiling.compiling()
        assert compiling.compiling()
    assert not compiling.compiling()


def test_the_watch_calls_back_at_a_compilations_start_until_removed():
    calls = []
    watch = compiling.OnCompileStart(lambda: calls.append(1))
    watch.poll()
    with _compilation():
        with _compilation():      # Dynamo runs the start callbacks once for nested compilations
            pass
    assert calls == [1]
    watch.remove()
    with _compilation():
        pass
    assert calls == [1]


def test_a_stepless_window_waits_for_a_compilation_to_end(tmp_path: Path):
    c = TorchCollector(tmp_path / "trace.json", Schedule(1, 1, 1), duration_s=None, stepless_after_s=0.05)
    try:
        with _compilation():
            c.start()
            # 0.05 s to the alarm, then retried every 0.5 s while compiling: never opened in here.
            _spin(0.3)
            assert c.fallback == "armed" and c.window is None
        _spin(2.0, until=lambda: c.window == "recording")
        assert c.fallback == "recording"
    finally:
        c.stop()
    assert c.trace_ready


def test_a_stepless_window_closes_when_a_compilation_starts(tmp_path: Path):
    c = TorchCollector(tmp_path / "trace.json", Schedule(1, 1, 1), duration_s=None, stepless_after_s=0.05)
    c.start()
    try:
        _spin(2.0, until=lambda: c.window == "recording")
        assert c.window == "recording"
        with _compilation():
            # Closed and held in Dynamo's start callback, before anything of the compilation ran.
            assert c.window is None and c.fallback == "held" and c.held.path is not None
        assert c.window_cut == "a torch.compile compilation began"
        # a program that compiles gets no step-less window again, and says why
        assert c.no_window == "the program imported torch.compile's Dynamo"
    finally:
        c.stop()
    assert c.trace_ready and c.kept_window == "recorded" and (tmp_path / "trace.json").stat().st_size > 0
    assert c.shortfall().startswith("recorded a time window instead of steps, ")
    assert c.shortfall().endswith("(cut short: a torch.compile compilation began)")


def test_dynamo_imported_by_roofscopes_own_profiler_is_not_the_programs(monkeypatch):
    # torch 2.13's profiler start imports Dynamo (1.1 s): that alone must not make every program one that
    # compiles. Then the program counts once torch.compile registers a backend in Dynamo's registry.
    from types import SimpleNamespace

    registry = {1: "registered at import"}
    monkeypatch.setattr(compiling, "_own_import", compiling._NOT_OURS)
    monkeypatch.setitem(sys.modules, "torch._dynamo.eval_frame", SimpleNamespace(cached_backends=registry))
    monkeypatch.delitem(sys.modules, "torch._dynamo")
    assert not compiling.dynamo_imported()
    compiling.profiler_start(lambda: sys.modules.__setitem__("torch._dynamo", dynamo))
    assert compiling._own_import == 1 and not compiling.dynamo_imported()
    registry[2] = "torch.compile's backend"
    assert compiling.dynamo_imported()
    # imported by the program before roofscope's profiler started: it compiles
    monkeypatch.setattr(compiling, "_own_import", compiling._NOT_OURS)
    compiling.profiler_start(lambda: None)
    assert compiling._own_import == compiling._NOT_OURS and compiling.dynamo_imported()


def test_a_window_does_not_open_under_another_profiler(tmp_path: Path):
    c = TorchCollector(tmp_path / "trace.json", Schedule(1, 1, 1), duration_s=None, stepless_after_s=0.05)
    try:
        with torch.profiler.profile():
            c.start()
            _spin(0.3)
            assert c.fallback == "armed"
    finally:
        c.stop()


def test_a_failed_transition_gives_up_instead_of_raising(tmp_path: Path):
    c = TorchCollector(tmp_path / "trace.json", Schedule(0, 1, 2), duration_s=None, stepless_after_s=None)
    c.start()
    assert c.phase == "warmup"

    def taken_over() -> None:
        raise RuntimeError("Can't disable Kineto profiler when it's not running")

    c._prof.step = taken_over
    c.step()                      # no raise into the program's hook
    assert c.done and c.phase == "done" and not c.trace_ready
    c.step()                      # later boundaries: nothing more is tried
    assert c.stop() is False
    assert c.shortfall() == (
        "the profiler was stopped from outside roofscope (Can't disable Kineto profiler when it's not running):"
        " another torch.profiler took Kineto over (Inductor benchmarking while it compiled, or the program's own);"
        " nothing was recorded")


def test_a_window_lost_to_another_profiler_ends_cleanly(tmp_path: Path):
    # lightning_cnn --compile on the H200: the window's profiler failed under Inductor's, and stop()
    # then called stop() on the dropped profiler (AttributeError, roofscope's own traceback).
    c = TorchCollector(tmp_path / "trace.json", Schedule(1, 1, 1), duration_s=None, stepless_after_s=0.05)
    c.start()
    _spin(2.0, until=lambda: c.window == "recording")

    def taken_over() -> None:
        raise RuntimeError("Can't disable Kineto profiler when it's not running")

    real_stop, c._prof.stop = c._prof.stop, taken_over
    c._on_compile_start()         # Dynamo's start callback: no raise into the compilation
    assert c.lost and c.fallback is None and c.done
    c.step()
    assert c.stop() is False and "stopped from outside roofscope" in c.shortfall()
    real_stop()                   # the Kineto session itself, for the next test


def test_a_program_that_imported_dynamo_gets_no_window(tmp_path: Path, monkeypatch):
    # Cold lightning --compile on the H200: after a window closed when a compilation began, the step
    # profiler could not start (4 of 4 runs). A program that imported Dynamo gets no step-less window.
    from roofscope.collectors import windows

    monkeypatch.setattr(windows, "dynamo_imported", lambda: True)
    c = TorchCollector(tmp_path / "trace.json", Schedule(1, 1, 1), duration_s=None, stepless_after_s=0.1)
    try:
        c.start()
        _spin(0.5)
        assert c.held.windows == 0 and c.window is None and c.no_window
    finally:
        assert c.stop() is False
    assert c.shortfall() == ("requested 1 wait + 1 warmup + 1 active steps, but only 0 step boundaries arrived;"
                             " nothing was recorded (no step-less time window: the program imported torch.compile's"
                             " Dynamo)")


def test_an_opening_window_closes_when_dynamo_is_imported_under_it(tmp_path: Path, monkeypatch):
    from roofscope.collectors import windows

    imported = [False]
    monkeypatch.setattr(windows, "dynamo_imported", lambda: imported[0])
    c = TorchCollector(tmp_path / "trace.json", Schedule(1, 1, 1), duration_s=None, stepless_after_s=30)
    try:
        c.start()
        _spin(2.0, until=lambda: c.window == "recording")
        assert c.held.windows == 1
        imported[0] = True          # the program imports torch.compile's Dynamo: the next tick closes
        _spin(1.0, until=lambda: c.window is None)
        assert c.fallback == "held" and c.window_cut == "torch.compile was imported"
    finally:
        c.stop()
    assert c.kept_window == "recorded"


def test_a_duration_window_is_not_cut_by_dynamos_import(tmp_path: Path, monkeypatch):
    # --duration is the user's own window: only a compilation's start closes it, not an import.
    from roofscope.collectors import windows

    imported = [False]
    monkeypatch.setattr(windows, "dynamo_imported", lambda: imported[0])
    c = TorchCollector(tmp_path / "trace.json", duration_s=0.8, delay_s=0.0)
    try:
        c.start()
        assert c.window == "recording"
        imported[0] = True
        _spin(0.5)              # two ticks after the import
        assert c.window == "recording" and c.window_cut is None
        _spin(2.0, until=lambda: c.window == "done")
        assert c.window == "done"
    finally:
        c.stop()
    assert c.trace_ready and c.shortfall() is None


def test_a_library_that_imported_dynamo_is_named_not_the_program(monkeypatch):
    # transformers imports torch._dynamo at its own import, compiling nothing: the step-less window's refusal
    # names it (the importer the meta path watch saw), not "the program compiles"
    monkeypatch.setattr(compiling, "_importer", None)
    assert compiling.dynamo_cause() == "the program imported torch.compile's Dynamo"
    monkeypatch.setattr(compiling, "_importer", "transformers.utils.import_utils")
    assert compiling.dynamo_cause() == ("transformers imported torch.compile's Dynamo (transformers.utils.import_utils;"
                                        " that alone compiles nothing)")
    # the watch (a meta path finder that finds nothing) notes the module whose import statement asked for
    # Dynamo, then leaves: here one named fakelib asks
    monkeypatch.setattr(compiling, "_importer", None)
    monkeypatch.setattr(sys, "meta_path", [compiling._watch, *sys.meta_path])
    exec("spec = find('torch._dynamo')", {"__name__": "fakelib", "find": compiling._watch.find_spec})
    assert compiling._importer == "fakelib" and compiling._watch not in sys.meta_path
