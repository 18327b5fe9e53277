"""`roofscope merge --scheduler`: the per-rank analysis on a Dask distributed cluster (a local one of
worker processes here), rank traces from a folder or an fsspec URL, and the one-line errors."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from roofscope.analysis import AnalysisSettings
from roofscope.analyzers.job.ranks import resolve_parts
from roofscope.merge import analyze_parts
from roofscope.analyzers.job.straggler import combine
from roofscope.cli import main
from tests.test_ranks import straggler_job

distributed = pytest.importorskip("distributed", reason="Dask distributed not installed (pip install -e '.[dev]')")


@pytest.fixture(scope="module")
def cluster():
    """One local cluster of two single-threaded worker processes for the module (start-up ~2 s).
    Dask sets OMP_NUM_THREADS=1 and more in this process for its workers: put back for later tests."""
    saved = dict(os.environ)
    try:
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                      dashboard_address=None) as c:
            yield c
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_dask_results_equal_local_processes(tmp_path, cluster):
    parts, world, _ = resolve_parts([str(p) for p in straggler_job(tmp_path)])
    local = combine(analyze_parts(parts, AnalysisSettings(), jobs=1), world).to_dict()
    remote = combine(analyze_parts(parts, AnalysisSettings(), scheduler=cluster.scheduler_address), world).to_dict()
    assert json.dumps(local, sort_keys=True) == json.dumps(remote, sort_keys=True)
    assert [s["rank"] for s in remote["stragglers"]] == [2]


def test_merge_folder_of_traces_on_scheduler(tmp_path, cluster, capsys):
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    straggler_job(ranks)
    (ranks / "summary.json").write_text("{}")     # roofscope's own outputs beside the traces are not ranks
    out = tmp_path / "out"
    assert main(["merge", str(ranks), "-o", str(out), "--scheduler", cluster.scheduler_address]) == 0
    text = capsys.readouterr().out
    assert "roofscope job: 3 of 3 ranks" in text
    # rank 2's gemm is 15 ms against 10 ms: +5 ms of own work per step
    assert "straggler: rank 2 enters the collectives last: the others wait +5.00 ms/step in 100% of steps" in text
    doc = json.loads((out / "job.json").read_text())
    assert [Path(p["path"]).name for p in doc["parts"]] == ["rank0.json.gz", "rank1.json.gz", "rank2.json.gz"]


def test_merge_fsspec_url_on_local_cluster(tmp_path, capsys):
    """Traces in fsspec's in-memory filesystem are read by the workers of a `local:2` cluster
    through file:// (memory:// lives in one process only); the job.json keeps the URLs."""
    straggler_job(tmp_path)
    url = f"file://{tmp_path}"
    out = tmp_path / "out"
    before = dict(os.environ)
    assert main(["merge", url, "-o", str(out), "--scheduler", "local:2", "-q"]) == 0
    # the local cluster's worker settings (OMP_NUM_THREADS=1, ...) do not stay in the caller's process
    assert dict(os.environ) == before
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 3 and [s["rank"] for s in summary["stragglers"]] == [2]


def test_memory_url_parts_read_by_the_worker(tmp_path):
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    for p in straggler_job(tmp_path):
        fs.pipe(f"/job16/{p.name}", p.read_bytes())
    parts, world, _ = resolve_parts(["memory://job16"])
    assert [(p.rank, p.url) for p in parts] == [(r, f"memory:///job16/rank{r}.json.gz") for r in range(3)]
    job = combine(analyze_parts(parts, AnalysisSettings(), jobs=1), world)   # in-process: the memory filesystem is here
    assert [s.rank for s in job.stragglers] == [2]
    assert job.results[0].path == "memory:///job16/rank0.json.gz"


def test_cluster_errors_are_one_line(tmp_path, cluster, capsys, monkeypatch):
    import roofscope.analyzers.job.cluster as cluster_mod

    monkeypatch.setattr(cluster_mod, "CONNECT_TIMEOUT_S", 2)
    paths = straggler_job(tmp_path)
    (tmp_path / "bad.json").write_text("hello")
    # A bad trace analyzed on a worker reaches the command line as its own one-line error.
    assert main(["merge", str(paths[0]), str(tmp_path / "bad.json"), "--scheduler", cluster.scheduler_address,
                 "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.fullmatch(r"roofscope: error: .*bad\.json: not a trace any reader knows.*\n", err)
    # Nothing listens on port 9 (discard): the client gives up after its connect timeout.
    assert main(["merge", str(paths[0]), "--scheduler", "tcp://127.0.0.1:9", "-q"]) == 2
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in capsys.readouterr().err
    assert main(["merge", "memory://no-such-job", "-q"]) == 2
    assert "memory://no-such-job: no such file or folder" in capsys.readouterr().err


def test_a_url_of_unknown_size_is_copied_within_the_trace_bound(monkeypatch, tmp_path):
    # Some fsspec filesystems cannot tell a size: the copy stops at ROOFSCOPE_MAX_TRACE_SIZE.
    import io

    from roofscope.analyzers.job import urls

    class NoSize:
        def size(self, path):
            raise NotImplementedError

        def open(self, path, mode):
            return io.BytesIO(b"x" * 3000)

    monkeypatch.setattr(urls, "_fs", lambda url: (NoSize(), "/t.json"))
    monkeypatch.setattr(urls, "_CHUNK", 1000)
    monkeypatch.setenv("ROOFSCOPE_MAX_TRACE_SIZE", "2500")
    with pytest.raises(urls.UrlError, match=r"nosize://t.json: over 2,500 bytes, more than the limit for a trace"):
        with urls.fetched("nosize://t.json"):
            pass
    monkeypatch.setenv("ROOFSCOPE_MAX_TRACE_SIZE", "3000")
    with urls.fetched("nosize://t.json") as p:
        assert p.read_bytes() == b"x" * 3000      # exactly the bound: kept
    assert not p.exists()                          # the temporary copy goes afterwards
