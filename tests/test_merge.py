"""`roofscope merge`: the torchrun layout, outputs and --force, the console summary, the HTML report,
`roofscope analyze JOB_DIR`, and the scaling tax against a baseline (figures: tests/test_ranks.py)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from roofscope.analysis import AnalysisSettings
from roofscope.cli import main
from roofscope.run import new_meta, write_run
from tests.test_ranks import rank_trace, straggler_job

ROOT = Path(__file__).resolve().parents[1]


def torchrun_layout(tmp_path: Path) -> Path:
    """OUT/rank-NNNN/ Runs with a distributed block, as `roofscope run` writes under torchrun."""
    job = tmp_path / "job"
    for r, trace in enumerate(straggler_job(tmp_path)):
        meta = new_meta(["train.py"], distributed={"rank": r, "world_size": 3, "local_rank": r, "node": "node0",
                                                   "backend": "nccl"})
        write_run(job / f"rank-{r:04d}", meta=meta, trace=trace, files={"report.html": "<html>rank</html>"})
    return job


def test_merge_torchrun_layout_in_process(tmp_path, capsys):
    job = torchrun_layout(tmp_path)
    assert main(["merge", str(job), "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "roofscope job: 3 of 3 ranks" in out
    assert re.search(r"^\s+2\s+25\.00\s+.*\s+3\.00\s+22\.00$", out, re.M)   # rank 2: exposed 3 ms, self 22 ms
    assert "straggler: rank 2 enters the collectives last: the others wait +5.00 ms/step in 100% of steps" in out
    assert "sm90_xmma_gemm_f32f32_tn +5.00 ms" in out
    assert "allreduce" in out and "Rank 2 is a straggler" in out
    doc = json.loads((job / "job.json").read_text())
    assert doc["kind"] == "roofscope-job" and doc["world_size"] == 3
    assert [(p["rank"], p["path"], p["node"]) for p in doc["parts"]] == [
        (0, "rank-0000", "node0"), (1, "rank-0001", "node0"), (2, "rank-0002", "node0")]
    summary = json.loads((job / "summary.json").read_text())
    assert [s["rank"] for s in summary["stragglers"]] == [2]
    html = (job / "report.html").read_text()
    assert 'href="rank-0002/report.html"' in html
    # Outputs exist now: a second merge refuses without --force, and succeeds with it.
    assert main(["merge", str(job), "-q"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["merge", str(job), "-q", "--force", "--jobs", "1"]) == 0
    # The job.json the merge wrote is itself a source.
    assert main(["merge", str(job), "-o", str(tmp_path / "again"), "-q", "--jobs", "1"]) == 0
    assert json.loads((tmp_path / "again" / "summary.json").read_text())["world_size"] == 3


def test_analyze_job_dir_prints_job_summary(tmp_path, capsys):
    job = torchrun_layout(tmp_path)
    assert main(["analyze", str(job), "--json", str(tmp_path / "s.json")]) == 0
    assert "straggler: rank 2" in capsys.readouterr().out
    assert json.loads((tmp_path / "s.json").read_text())["stragglers"][0]["rank"] == 2
    assert not (job / "job.json").exists()   # analyze only reads


def test_merge_errors(tmp_path, capsys):
    paths = straggler_job(tmp_path)
    assert main(["merge", str(paths[0]), str(paths[0])]) == 2
    assert "rank0.json.gz is given twice" in capsys.readouterr().err
    (tmp_path / "notes.txt").write_text("hello")
    assert main(["merge", str(tmp_path / "notes.txt"), "-o", str(tmp_path / "o")]) == 2
    assert "notes.txt: not a trace any reader knows" in capsys.readouterr().err
    # The same error raised in a worker process reaches the command line as one line too.
    (tmp_path / "more.txt").write_text("hello")
    assert main(["merge", str(tmp_path / "notes.txt"), str(tmp_path / "more.txt"), "--jobs", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert re.fullmatch(r"roofscope: error: .*(notes|more)\.txt: not a trace any reader knows.*\n", err)
    assert not (tmp_path / "o").exists()
    # A truncated gzip trace among good ones.
    (tmp_path / "cut.json.gz").write_bytes(paths[1].read_bytes()[:200])
    assert main(["merge", str(paths[0]), str(tmp_path / "cut.json.gz"), "--jobs", "2", "-q"]) == 2
    # analyze reads a cut trace up to its last complete event; merge refuses to judge a rank on part of it
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cut.json.gz: file cut short at byte" in err and "compares whole rank traces" in err
    # Sources that hold nothing, and a baseline that is no Run or trace.
    (tmp_path / "empty").mkdir()
    assert main(["merge", str(tmp_path / "empty")]) == 2
    assert "empty: not a Run directory, a trace file or a job directory" in capsys.readouterr().err
    assert main(["merge", *map(str, paths), "--baseline", str(tmp_path / "empty"), "-q", "--jobs", "1"]) == 2
    assert "empty: is a directory, neither a trace file nor a roofscope Run" in capsys.readouterr().err
    assert main(["merge", str(paths[0]), "--jobs", "0"]) == 2
    assert "0 is not in the range x>=1" in capsys.readouterr().err


def test_merge_never_writes_over_its_inputs(tmp_path, capsys):
    job = torchrun_layout(tmp_path)
    part = job / "rank-0000"
    before = {p.name: p.read_bytes() for p in part.iterdir()}
    # Into a rank's Run (its own summary.json and report.html), even with --force: refused.
    assert main(["merge", str(job), "-o", str(part), "--force", "-q", "--jobs", "1"]) == 2
    assert f"{part} is a Run directory" in capsys.readouterr().err
    # --json onto a part's trace or into a part, or onto the baseline: refused.
    traces = [tmp_path / f"rank{r}.json.gz" for r in range(3)]   # torchrun_layout's traces
    assert main(["merge", *map(str, traces), "--json", str(traces[1]), "--force", "-q"]) == 2
    assert "rank1.json.gz would replace an input of this merge" in capsys.readouterr().err
    assert main(["merge", str(job), "--json", str(part / "summary.json"), "--force", "-q"]) == 2
    assert "would replace an input" in capsys.readouterr().err
    assert main(["merge", str(traces[0]), str(traces[2]), "--baseline", str(traces[1]), "--json", str(traces[1]),
                 "--force", "-q"]) == 2
    assert "would replace an input" in capsys.readouterr().err
    # --json onto one of the files -o writes: refused before anything is written.
    assert main(["merge", str(job), "--json", str(job / "summary.json"), "-q"]) == 2
    assert "--json names one of the files written into the -o directory" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in part.iterdir()} == before
    assert traces[1].stat().st_size > 0 and not (job / "summary.json").exists()


def test_merge_baseline_scaling_tax(tmp_path, capsys):
    paths = straggler_job(tmp_path)
    # Baseline: one GPU doing the same 10 ms GEMM + 2 ms elementwise with no all-reduce partner;
    # its trace still has a 3 ms all-reduce, so its step is 25 ms as well: tax 0.
    base = rank_trace(0, 1, [10_000] * 5, [10_000] * 5).write(tmp_path / "base.json")
    assert main(["merge", *map(str, paths), "--baseline", str(base), "--json", str(tmp_path / "j.json"),
                 "--jobs", "1"]) == 0
    assert "scaling tax vs baseline 25.00 ms: +0.00 ms/step" in capsys.readouterr().out
    t = json.loads((tmp_path / "j.json").read_text())["scaling"]
    assert t["exposed_comm_s"] == pytest.approx(0.003, abs=1e-6)
    assert t["straggler_wait_s"] == pytest.approx(0.005, abs=1e-6)


def test_html_escapes_kernel_names(tmp_path):
    from roofscope.analyzers.job.ranks import resolve_parts
    from roofscope.merge import analyze_parts
    from roofscope.analyzers.job.straggler import combine
    from roofscope.reports.multirank import render_multirank

    evil = "evil</script><b>x"
    paths = []
    for r, gemm in enumerate((10_000, 15_000)):   # rank 1 is the straggler: its evil kernel is evidence
        b = rank_trace(r, 2, [gemm] * 3, [15_000] * 3)
        for e in b.events:
            if e["name"] == "sm90_xmma_gemm_f32f32_tn":
                e["name"] = evil + "_gemm"
            if e["name"] == "aten::mm":          # shapes: the kernel gets FLOPs and a roofline point
                e["args"].update({"Input Dims": [[1024, 1024], [1024, 1024]], "Input type": ["float", "float"]})
        paths.append(str(b.write(tmp_path / f"t{r}.json")))
    parts, world, _ = resolve_parts(paths)
    job = combine(analyze_parts(parts, AnalysisSettings(), jobs=1), world)
    assert job.stragglers[0].kernels[0]["name"] == evil + "_gemm"
    html = render_multirank(job, {0: 'a"><script>alert(1)</script>'})
    assert evil not in html and "<b>x" not in html
    assert "evil\\u003c/script>\\u003cb>x_gemm" in html          # JSON block, '<' escaped
    assert "evil&lt;/script&gt;&lt;b&gt;x_gemm" in html          # the straggler finding, autoescaped
    assert 'href="a&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"' in html
    assert html.count("<script") == 3                           # data, plotly, page script only
    csp = re.search(r'content="(default-src[^"]*)"', html).group(1)
    assert "connect-src" not in csp and "'unsafe-inline'" not in csp.split("script-src")[1]


def test_merge_subprocess(tmp_path):
    paths = straggler_job(tmp_path)
    r = subprocess.run([sys.executable, "-m", "roofscope", "merge", *map(str, paths), "-o", str(tmp_path / "out"),
                        "--jobs", "2"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "straggler: rank 2" in r.stdout
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"job.json", "summary.json", "report.html"}
    parts = json.loads((tmp_path / "out" / "job.json").read_text())["parts"]
    assert [p["path"] for p in parts] == [str(p.resolve()) for p in paths]   # outside DIR: absolute


def test_stale_part_of_an_earlier_larger_job_is_left_out(tmp_path):
    from roofscope.analyzers.job.ranks import resolve_parts

    job = tmp_path / "job"
    traces = straggler_job(tmp_path)
    # This job: 2 ranks (job id "new"); left behind by an earlier 3-rank job: rank-0002 (job id "old").
    for r, (jid, world) in enumerate([("new", 2), ("new", 2), ("old", 3)]):
        meta = new_meta(["train.py"], distributed={"rank": r, "world_size": world, "job_id": jid})
        write_run(job / f"rank-{r:04d}", meta=meta, trace=traces[r])
    parts, world, warnings = resolve_parts([str(job)])
    assert [p.rank for p in parts] == [0, 1] and world == 2 and warnings == []
