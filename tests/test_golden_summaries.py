"""Speed work changes no figure: `analyze --json` of every shared external trace matches the digests
recorded before it (tests/golden.py explains the digests and how to re-record them)."""
from __future__ import annotations

import json

import pytest

from tests.golden import GOLDEN, digests, shared_traces_dir

# Sections other changes legitimately alter, by design, and so not compared here: none yet.
TOLERATED: dict[str, str] = {}

ROOT = shared_traces_dir()
RECORDED = json.loads(GOLDEN.read_text())


@pytest.mark.skipif(ROOT is None, reason="shared/traces/external not present")
@pytest.mark.parametrize("rel", sorted(RECORDED))
def test_summary_unchanged(rel: str) -> None:
    path = ROOT / rel
    if not path.exists():
        pytest.skip(f"{rel} not in this copy of the shared traces")
    want, got = RECORDED[rel], digests(path)
    if isinstance(want, str) or isinstance(got, str):
        assert got == want
        return
    # A section that appears only now is new output, not a changed figure.
    changed = sorted(k for k in want if k not in TOLERATED and got.get(k) != want[k])
    assert not changed, f"{rel}: sections changed: {changed}"
