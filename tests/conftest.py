from __future__ import annotations

import os
from pathlib import Path

import pytest

# Real traces recorded by others (HTA's A100 traces, ...), shared beside the clone as ../shared.
# Tests that read them skip without them; the header and the summary say so, and
# ROOFSCOPE_REQUIRE_SHARED=1 (CI, .ci/run) turns their absence into an error.
SHARED = Path(__file__).resolve().parents[2] / "shared"
EXTERNAL = SHARED / "traces" / "external"
_SHARED_SKIP_WORDS = ("absent", "not present")


def shared_present() -> bool:
    return (EXTERNAL / "hta_a100_rank0.json.gz").is_file()


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_report_header(config):
    if shared_present():
        return f"real traces: {EXTERNAL}"
    return (f"real traces: MISSING at {EXTERNAL}: the tests on real traces will skip; put the shared data beside"
            " the clone, as ../shared")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("ROOFSCOPE_REQUIRE_SHARED", "") not in ("", "0") and not shared_present():
        raise pytest.UsageError(f"ROOFSCOPE_REQUIRE_SHARED is set but the shared real traces are missing at"
                                f" {EXTERNAL}")
    if _cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _shared_skips(terminalreporter) -> int:
    n = 0
    for rep in terminalreporter.stats.get("skipped", []):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        n += "trace" in reason and any(w in reason for w in _SHARED_SKIP_WORDS)
    return n


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    n = _shared_skips(terminalreporter)
    if n:
        terminalreporter.write_line(f"{n} test{'s' if n != 1 else ''} on real traces skipped: the shared traces are "
                                    f"missing at {EXTERNAL} (put them beside the clone as ../shared)",
                                    yellow=True, bold=True)


@pytest.fixture(autouse=True)
def _hermetic_ceilings_cache(tmp_path_factory, monkeypatch):
    """Each test gets an empty ceilings cache: measurements cached on the developer's machine
    (or by an earlier test) must not replace the datasheet ceilings fixtures expect."""
    monkeypatch.setenv("ROOFSCOPE_CACHE_DIR", str(tmp_path_factory.mktemp("roofscope-cache")))
    monkeypatch.delenv("ROOFSCOPE_NO_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
