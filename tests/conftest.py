from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Real traces recorded by others (HolisticTraceAnalysis's test data, ...). The few that tests need are
# vendored in tests/data/external under their corpus paths (tests/data/README.md: source, licence, why),
# so a fresh clone runs every test. The whole corpus, shared beside the clone as ../shared, widens the
# corpus-wide sweeps (test_real_traces, test_golden_summaries, test_typed_summary) to all its files.
# ROOFSCOPE_SHARED_DIR points at another shared folder, or at none (`=/nonexistent`: what a fresh clone
# runs); ROOFSCOPE_REQUIRE_SHARED=1 (CI, .ci/run) makes a missing corpus an error, not a narrower sweep.
SHARED = Path(os.environ.get("ROOFSCOPE_SHARED_DIR") or ROOT.parent / "shared")
EXTERNAL = SHARED / "traces" / "external"
VENDORED = ROOT / "tests" / "data" / "external"


def corpus_present() -> bool:
    return (EXTERNAL / "hta").is_dir()


def external(rel: str) -> Path:
    """A real trace by its path in the corpus: the vendored copy when there is one, else the corpus's."""
    vendored = VENDORED / rel
    return vendored if vendored.is_file() else EXTERNAL / rel


def _traces(root: Path) -> set[str]:
    """Every file under ``root`` but its notes (README.md, LICENSE-*), by its path relative to it."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*")
            if p.is_file() and p.name != "README.md" and not p.name.startswith("LICENSE")}


def vendored_traces() -> list[str]:
    return sorted(_traces(VENDORED))


def available_traces() -> list[str]:
    """Corpus paths of every file at hand: the vendored traces, and the whole corpus when present."""
    return sorted(_traces(VENDORED) | (_traces(EXTERNAL) if corpus_present() else set()))


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_report_header(config):
    vendored = f"real traces: {len(vendored_traces())} vendored in {VENDORED}"
    if corpus_present():
        return f"{vendored}; the whole corpus at {EXTERNAL}"
    return (f"{vendored}; no corpus at {EXTERNAL}: the corpus-wide sweeps cover the vendored traces only"
            " (put the shared data beside the clone as ../shared, or set ROOFSCOPE_SHARED_DIR)")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("ROOFSCOPE_REQUIRE_SHARED", "") not in ("", "0") and not corpus_present():
        raise pytest.UsageError(f"ROOFSCOPE_REQUIRE_SHARED is set but the shared corpus of real traces is missing"
                                f" at {EXTERNAL}")
    if _cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _hermetic_ceilings_cache(tmp_path_factory, monkeypatch):
    """Each test gets an empty ceilings cache: measurements cached on the developer's machine
    (or by an earlier test) must not replace the datasheet ceilings fixtures expect."""
    monkeypatch.setenv("ROOFSCOPE_CACHE_DIR", str(tmp_path_factory.mktemp("roofscope-cache")))
    monkeypatch.delenv("ROOFSCOPE_NO_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)


@pytest.fixture
def fake_graph(monkeypatch: pytest.MonkeyPatch) -> tuple[type, list[str]]:
    """A stand-in for torch.cuda.CUDAGraph (CPU) that logs its calls, installed as that class."""
    import torch

    calls: list[str] = []

    class FakeGraph:
        def capture_begin(self, *a, **k):
            calls.append("begin")

        def capture_end(self):
            calls.append("end")

        def replay(self):
            calls.append("replay")

    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    return FakeGraph, calls


@pytest.fixture(autouse=True)
def _programs_compile_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process `roofscope run`s share pytest's interpreter, where some tests import Dynamo, which
    shuts every step-less window (collectors/windows.py): the scripts run here compile nothing.
    tests/test_compile_aware.py sets it back where a test is about that."""
    monkeypatch.setattr("roofscope.collectors.windows.dynamo_imported", lambda: False)


def console_field(text: str, label: str) -> str:
    """A terminal summary's ``  label     ...`` field, its wrapped continuation lines joined with spaces."""
    lines = text.splitlines()
    i = next(n for n, ln in enumerate(lines) if ln.startswith(f"  {label} "))
    parts = [lines[i][12:]]
    for ln in lines[i + 1:]:
        if not ln.startswith(" " * 12) or not ln.strip():
            break
        parts.append(ln.strip())
    return " ".join(parts)
