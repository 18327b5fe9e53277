from __future__ import annotations

import pytest


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
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
