"""The Run format has one owner: file names from roofscope/run/layout.py, one version policy for
every reader, typed run.json, and derived files recomputed when an older analysis wrote them."""
from __future__ import annotations

import ast
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

import roofscope
from roofscope.cli import main
from roofscope.run import ANALYSIS_VERSION, RunError, load, new_meta, update_meta, write_run
from roofscope.run import layout
from roofscope.run.derived import STAMP, read_summary, summary_text
from roofscope.run.schema import CountersEntry, RunMeta, VersionError, check_version

from .kineto import TraceBuilder

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "roofscope"
H200_RUN = Path(__file__).parent / "data" / "h200_gpt_run"
NAMES = {layout.META_FILE, layout.TRACE_FILE, layout.CEILINGS_FILE, layout.TELEMETRY_FILE, layout.SUMMARY_FILE,
         layout.REPORT_FILE, layout.COUNTERS_FILE, layout.COUNTERS_REPORT, layout.JOB_FILE}
PREFIXES = ("rank-", "graph-capture-")


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _file_name_literals(path: Path) -> list[str]:
    """String constants of ``path`` that are a Run or job file name (or the start of a rank or
    capture name). Prose that mentions a file in a docstring, message or help text is not one."""
    tree = ast.parse(path.read_text(), str(path))
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            v = node.value
            if v in NAMES or v.rsplit("/", 1)[-1] in NAMES or v.startswith(PREFIXES):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {v!r}")
    return found


def test_every_file_name_comes_from_layout() -> None:
    found = [hit for p in sorted(PACKAGE.rglob("*.py")) if p != PACKAGE / "run" / "layout.py"
             for hit in _file_name_literals(p)]
    assert found == []


# -- one version policy ---------------------------------------------------------------------------

def test_version_policy() -> None:
    assert check_version(1, 1, "Run", "x") == 1
    assert check_version(2, 3, "Run", "x", oldest=2) == 2      # an older version still supported
    with pytest.raises(VersionError, match=r"^x: Run schema_version 4 is newer than this roofscope reads \(3\);"
                                           r" upgrade roofscope$"):
        check_version(4, 3, "Run", "x")
    with pytest.raises(VersionError, match="older than this roofscope reads"):
        check_version(1, 3, "Run", "x", oldest=2)
    for bad in (None, "1", 1.0, True):
        with pytest.raises(VersionError, match="is not a version"):
            check_version(bad, 1, "Run", "x")


def _cpu_trace(tmp_path: Path) -> Path:
    b = TraceBuilder(device_name=None)
    b.op("aten::mm", 0, 100, [[256, 256], [256, 256]], ["float", "float"])
    return b.write(tmp_path / "t.json")


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_run(tmp_path / "run", meta=new_meta(["train.py"]), trace=_cpu_trace(tmp_path)).path


def _bump(path: Path, key: str = "schema_version", version: int = 99) -> None:
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, key: version}))


def test_newer_run_is_refused_in_one_line_by_the_cli(run_dir: Path, capsys) -> None:
    _bump(run_dir / layout.META_FILE)
    assert main(["analyze", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err == (f"roofscope: error: {run_dir / layout.META_FILE}: Run schema_version 99 is newer than this"
                   " roofscope reads (1); upgrade roofscope\n")


def test_newer_run_is_refused_in_one_line_by_the_command(run_dir: Path) -> None:
    _bump(run_dir / layout.META_FILE)
    res = subprocess.run([sys.executable, "-m", "roofscope", "analyze", str(run_dir)], capture_output=True,
                         text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.splitlines() == [f"roofscope: error: {run_dir / layout.META_FILE}: Run schema_version 99 is"
                                       " newer than this roofscope reads (1); upgrade roofscope"]


def test_every_reader_refuses_a_newer_version_alike(tmp_path: Path) -> None:
    """Telemetry, counters, ceilings and job.json: the same one-line refusal as run.json's."""
    from roofscope.run import counters
    from roofscope.analyzers.job.ranks import resolve_parts
    from roofscope.analyzers.views.telemetry_summary import load as load_telemetry
    from roofscope.hardware.devices import load_ceilings_file

    (tmp_path / "tel.json").write_text(json.dumps({"schema_version": 2, "interval_s": 1.0}))
    (tmp_path / "c.json").write_text(json.dumps({"schema_version": 2, "device": "x", "peaks": {}, "bandwidth": 1}))
    run = write_run(tmp_path / "r", meta=new_meta(["a"]), trace=_cpu_trace(tmp_path)).path
    (run / layout.COUNTERS_FILE).write_bytes(gzip.compress(json.dumps({"version": 2, "columns": {}}).encode()))
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / layout.JOB_FILE).write_text(json.dumps({"schema_version": 2, "parts": []}))
    readers = [(lambda: load_telemetry(tmp_path / "tel.json"), "telemetry schema_version 2"),
               (lambda: load_ceilings_file(tmp_path / "c.json"), "ceilings schema_version 2"),
               (lambda: counters.load(run), "counters version 2"),
               (lambda: resolve_parts([str(tmp_path / "job")]), "job schema_version 2")]
    for read, what in readers:
        with pytest.raises(roofscope.errors.RoofscopeError) as e:
            read()
        assert str(e.value).endswith(f"{what} is newer than this roofscope reads (1); upgrade roofscope")


# -- typed run.json ---------------------------------------------------------------------------------

def test_run_json_typed_round_trip(tmp_path: Path) -> None:
    meta = new_meta(["train.py", "--lr", "3e-4"], exit_status={"code": 0, "reason": "ok", "detail": None},
                    device={"type": "cuda", "name": "NVIDIA H200", "l2_cache_size": 62914560},
                    steps={"requested": {"wait": 1, "warmup": 2, "active": 3}, "boundaries_seen": 6,
                           "source": "optimizer", "recorded": [3, 4, 5]},
                    tokens_per_step=512, distributed={"rank": 1, "world_size": 2, "node": "n1", "job_id": "j"},
                    telemetry={"file": layout.TELEMETRY_FILE, "hz": 100.0, "samples": 3, "notes": []},
                    optimizer={"params": 10}, frameworks=["lightning"])
    run = write_run(tmp_path / "r", meta=meta, trace=_cpu_trace(tmp_path))
    info = load(run.path).info
    assert info.command == ["train.py", "--lr", "3e-4"] and info.environment.roofscope == roofscope.__version__
    assert info.steps is not None and info.steps.recorded == [3, 4, 5] and info.tokens_per_step == 512.0
    assert info.distributed is not None and (info.distributed.rank, info.distributed.node) == (1, "n1")
    assert info.telemetry is not None and info.telemetry.file == layout.TELEMETRY_FILE
    assert msgspec.json.decode(msgspec.json.encode(info), type=RunMeta) == info
    # Fields no reader types stay in ``meta`` as written.
    assert load(run.path).meta["optimizer"] == {"params": 10}


def test_run_json_of_the_wrong_shape_is_one_line(run_dir: Path) -> None:
    doc = json.loads((run_dir / layout.META_FILE).read_text())
    (run_dir / layout.META_FILE).write_text(json.dumps({**doc, "command": "train.py"}))
    with pytest.raises(RunError, match=r"malformed Run file: Expected `array`, got `str` - at `\$.command`"):
        load(run_dir)


def test_update_meta_replaces_run_json_whole(run_dir: Path) -> None:
    run = load(run_dir)
    entry = CountersEntry(file=layout.COUNTERS_FILE, kernels=3, command=["ncu"])
    updated = update_meta(run, counters=entry)
    assert load(run_dir).info.counters == entry == updated.info.counters
    assert load(run_dir).meta["command"] == ["train.py"]
    with pytest.raises(msgspec.ValidationError):       # refused before the file is touched
        update_meta(run, steps="three")
    assert load(run_dir).info.counters == entry
    assert sorted(p.name for p in run_dir.iterdir()) == [layout.MANIFEST_FILE, layout.META_FILE, layout.TRACE_FILE]


# -- derived files --------------------------------------------------------------------------------

def test_current_summary_is_returned_and_a_stale_one_recomputed(run_dir: Path) -> None:
    fresh = roofscope.load(run_dir).summary()
    assert fresh is None                                   # none stored: none returned
    path = run_dir / layout.SUMMARY_FILE
    path.write_text(summary_text({"x": float("nan")}))
    assert json.loads(path.read_text())[STAMP] == ANALYSIS_VERSION
    assert roofscope.load(run_dir).summary() == {"x": None}
    for stale in ({"x": 1, STAMP: ANALYSIS_VERSION - 1}, {"x": 1}):   # an older analysis, or before stamps
        path.write_text(json.dumps(stale))
        got = roofscope.load(run_dir).summary()
        assert got is not None and "x" not in got and got["kernels"] == 1 and STAMP not in got
        assert json.loads(path.read_text()) == stale           # reading never rewrites the Run


def test_committed_run_summary_is_current() -> None:
    """tests/data/h200_gpt_run/summary.json is what this code computes: a change to the analysis
    that fails this bumps ANALYSIS_VERSION and refreshes the file (tests/data/README.md)."""
    stored = read_summary(H200_RUN)
    assert stored is not None and stored[STAMP] == ANALYSIS_VERSION
    a = roofscope.analyze(H200_RUN, use_cache=False)
    fresh = {**a.to_dict(), "trace": stored["trace"]}   # the Run's path where it was recorded
    assert json.loads(summary_text(fresh)) == stored
