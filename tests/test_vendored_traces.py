"""The real traces a fresh clone tests with: vendored in tests/data/external with their licence and a
README entry each, byte for byte the corpus's files; conftest says what it found and where."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from . import conftest
from .conftest import ROOT, VENDORED, external, vendored_traces

README = ROOT / "tests" / "data" / "README.md"


def test_every_vendored_trace_has_its_licence_and_readme_entry():
    traces = vendored_traces()
    # 19 files: the A100 and AlexNet traces at the top, 15 of HTA's folders under hta/ (2.1 MB), and
    # TraceLens' vLLM decode with its capture trace under tracelens/ (2.4 MB).
    assert len(traces) == 19 and sum((VENDORED / rel).stat().st_size for rel in traces) < 4_800_000
    assert "MIT License" in (VENDORED / "LICENSE-HTA").read_text()
    assert "MIT License" in (VENDORED / "tracelens" / "LICENSE-TraceLens").read_text()
    text = README.read_text()
    section = text[text.index("## `external/`"):]
    assert [rel for rel in traces if f"`{rel}`" not in section] == []


def test_vendored_copies_are_the_corpus_files():
    compared = [rel for rel in vendored_traces() if (conftest.EXTERNAL / rel).is_file()]
    for rel in compared:
        assert (VENDORED / rel).read_bytes() == (conftest.EXTERNAL / rel).read_bytes(), rel
    # Without the corpus there is nothing to compare; with it, every vendored file is in it.
    assert len(compared) == (len(vendored_traces()) if conftest.corpus_present() else 0)


def test_a_trace_is_found_vendored_first_then_in_the_corpus():
    assert external("hta_a100_rank0.json.gz") == VENDORED / "hta_a100_rank0.json.gz"
    # Not vendored (2.9 MB): the corpus's path, present or not.
    assert external("hta/mtia_trace_single_rank/mtia_rank_0.json.gz") == \
        conftest.EXTERNAL / "hta/mtia_trace_single_rank/mtia_rank_0.json.gz"


def test_the_header_says_what_was_found(monkeypatch, tmp_path):
    monkeypatch.setattr(conftest, "EXTERNAL", tmp_path / "nowhere")
    assert conftest.pytest_report_header(None) == (
        f"real traces: 19 vendored in {VENDORED}; no corpus at {tmp_path / 'nowhere'}: the corpus-wide sweeps"
        " cover the vendored traces only (put the shared data beside the clone as ../shared, or set"
        " ROOFSCOPE_SHARED_DIR)")
    (tmp_path / "external" / "hta").mkdir(parents=True)
    monkeypatch.setattr(conftest, "EXTERNAL", tmp_path / "external")
    assert conftest.pytest_report_header(None).endswith(f"; the whole corpus at {tmp_path / 'external'}")
    assert conftest.available_traces() == vendored_traces()       # an empty corpus adds nothing


def test_ci_requires_the_corpus(monkeypatch, tmp_path):
    monkeypatch.setattr(conftest, "EXTERNAL", tmp_path / "nowhere")
    monkeypatch.setenv("ROOFSCOPE_REQUIRE_SHARED", "1")
    with pytest.raises(pytest.UsageError, match="shared corpus of real traces is missing at .*nowhere"):
        conftest.pytest_collection_modifyitems(None, [])
    monkeypatch.setenv("ROOFSCOPE_REQUIRE_SHARED", "0")
    conftest.pytest_collection_modifyitems(None, [])


def test_shared_dir_comes_from_the_environment(tmp_path):
    code = "from tests import conftest; print(conftest.EXTERNAL, conftest.corpus_present(), len(conftest.available_traces()))"
    env = dict(os.environ, PYTHONPATH=str(ROOT), ROOFSCOPE_SHARED_DIR=str(tmp_path / "none"))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=600)
    assert res.returncode == 0, res.stderr
    assert res.stdout == f"{tmp_path / 'none' / 'traces' / 'external'} False 19\n"
