"""Hostile input (issue 27): names that would drive a terminal, a CI log or a spreadsheet; merge
sources that lie (damaged run.json, another job, job.json pointing outside); files that are not
files (FIFO, /dev/zero); bombs (gzip, sparse); JSON that is not JSON (NaN, lone surrogates, 10^4
levels deep). Each is refused in one line or skipped and counted; never a traceback, never
unbounded memory. The CLI runs in-process (main) and as a subprocess."""
from __future__ import annotations

import csv
import gzip
import io
import json
import math
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from roofscope import analysis
from roofscope.analyzers.cost.costmodel import cost_signature
from roofscope.analyzers.ingest import read as read_trace
from roofscope.cli import main
from roofscope.reports.github import command
from roofscope.text_safety import clean, csv_cell
from tests.conftest import console_field
from tests.kineto import TraceBuilder
from tests.test_merge import torchrun_layout
from tests.test_ranks import rank_trace

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "data" / "h100_compiled_block.json.gz"
EVIL_KERNEL = "evil_kernel\x1b[31m\x1b]8;;http://x\x07\n::notice title=pwned::owned\r\u202e"
EVIL_OP = '=HYPERLINK("http://x.example","click")'


def _cli(*args: str, env: dict[str, str] | None = None, preexec=None, timeout: float = 120
         ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "roofscope", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, preexec_fn=preexec,
                          timeout=timeout)


def _one_line_error(err: str, *words: str) -> None:
    assert err.startswith("roofscope: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err


def _evil_trace(path: Path, dur: float = 200) -> Path:
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1_000)
    b.op(EVIL_OP, 10, 100)
    b.launch_kernel(EVIL_KERNEL, 12, 100, dur)
    return b.write(path)


# ---------------------------------------------------------------------------------------------
# 27.13 output injection


def test_sanitizer_rules():
    assert clean("a\x1b[1;31mb\x1b[0m") == "ab"                     # CSI
    assert clean("\x1b]8;;http://x\x07link\x1b]8;;\x1b\\") == "link"  # OSC 8 hyperlink, both terminators
    assert clean("x\n::notice::y\r\tz") == "x ::notice::y  z"       # line breaks and tabs: spaces
    assert clean("\x00\x07\x7f\x9b2Jok\u202e") == "ok"               # C0, DEL, C1 CSI, bidi override
    assert clean("gemm<float, 128> … µs") == "gemm<float, 128> … µs"  # printable text untouched
    assert [csv_cell(s) for s in ("=1+1", "+1", "-1", "@SUM(A1)", "\tx", "a=b")] == [
        "'=1+1", "'+1", "'-1", "'@SUM(A1)", " x", "a=b"]              # a tab is cleaned to a space first
    assert command("notice", "t", "50% k\x1b[31m\nnext\r") == "::notice title=t::50%25 k%0Anext%0D"


def _no_injection(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text and "\u202e" not in text
    assert not any(line.lstrip().startswith("::") for line in text.splitlines()), text


def test_names_cannot_drive_terminal_ci_or_spreadsheet_in_process(tmp_path, capsys):
    trace = _evil_trace(tmp_path / "t.json")
    csv_out, md_out = tmp_path / "k.csv", tmp_path / "s.md"
    assert main(["analyze", str(trace), "--csv", str(csv_out), "--markdown", str(md_out)]) == 0
    out = capsys.readouterr().out
    _no_injection(out)
    assert "evil_kernel ::notice title=pwned::owned" in out          # the name is still shown, on one line
    md = md_out.read_text()
    _no_injection(md)
    assert "`evil_kernel ::notice title=pwned::owned`" in md
    rows = list(csv.DictReader(io.StringIO(csv_out.read_text())))
    assert len(rows) == 1
    assert rows[0]["name"] == "evil_kernel ::notice title=pwned::owned "       # the \r: a space
    assert rows[0]["op_name"] == "'" + EVIL_OP                        # a text cell, not a formula
    assert main(["analyze", str(trace), "--markdown", "-"]) == 0
    _no_injection(capsys.readouterr().out)


def test_names_cannot_drive_the_diff_view(tmp_path, capsys):
    a, b = _evil_trace(tmp_path / "a.json"), _evil_trace(tmp_path / "b.json", dur=400)
    assert main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    _no_injection(out)
    assert re.search(r"^  slower  200\.0  400\.0  \+200\.0    1/1  evil_kernel", out, re.M)  # listed, escapes gone


def test_names_cannot_drive_terminal_as_subprocess(tmp_path):
    trace = _evil_trace(tmp_path / "t.json")
    r = _cli("analyze", str(trace))
    assert r.returncode == 0, r.stderr
    _no_injection(r.stdout)
    assert "evil_kernel ::notice title=pwned::owned" in r.stdout


# ---------------------------------------------------------------------------------------------
# 27.8 merge: damaged, newer, or another job's run.json


def _edit_meta(run: Path, edit) -> None:
    p = run / "run.json"
    doc = json.loads(p.read_text())
    edit(doc)
    p.write_text(json.dumps(doc))


def test_merge_refuses_a_damaged_or_newer_rank(tmp_path, capsys):
    job = torchrun_layout(tmp_path)
    meta = job / "rank-0002" / "run.json"
    good = meta.read_bytes()
    meta.write_bytes(good[: len(good) // 2])                        # a rank killed while writing
    assert main(["merge", str(job), "-q", "--jobs", "1"]) == 2
    _one_line_error(capsys.readouterr().err, "rank-0002", "unreadable")
    meta.write_bytes(good)
    _edit_meta(job / "rank-0002", lambda d: d.update(schema_version=99))
    assert main(["merge", str(job), "-q", "--jobs", "1"]) == 2
    _one_line_error(capsys.readouterr().err, "rank-0002", "upgrade roofscope")
    # analyze JOB_DIR reads the job the same way
    assert main(["analyze", str(job)]) == 2
    _one_line_error(capsys.readouterr().err, "rank-0002")
    assert not (job / "job.json").exists()


def test_merge_names_a_rank_of_another_job_even_quiet(tmp_path, capsys):
    job = torchrun_layout(tmp_path)
    _edit_meta(job / "rank-0001", lambda d: d["distributed"].update(job_id="yesterday"))
    assert main(["merge", str(job), "-q", "--jobs", "1"]) == 0
    err = capsys.readouterr().err
    assert "roofscope: warning: 1 of 3 ranks missing: 1" in err
    assert "roofscope: warning: rank 1 left out: rank-0001 is a Run of another job (job id yesterday" in err
    r = _cli("merge", str(job), "-q", "--jobs", "1", "--force")
    assert r.returncode == 0 and "rank 1 left out: rank-0001 is a Run of another job" in r.stderr, r.stderr


# ---------------------------------------------------------------------------------------------
# 27.12 job.json parts outside the job


def _job_json(job: Path, parts: list[str]) -> None:
    job.mkdir(parents=True, exist_ok=True)
    (job / "job.json").write_text(json.dumps({"schema_version": 1, "kind": "roofscope-job", "world_size": len(parts),
                                              "parts": [{"rank": r, "path": p, "kind": "trace"}
                                                        for r, p in enumerate(parts)]}))


@pytest.mark.parametrize("part", ["../outside.json", "ABSOLUTE", "ftp://127.0.0.1:9/rank0.json",
                                  "file:///etc/passwd"])
def test_job_json_parts_stay_inside_the_job(tmp_path, capsys, part):
    outside = rank_trace(0, 1, [10_000], [10_000]).write(tmp_path / "outside.json")
    job = tmp_path / "job"
    _job_json(job, [str(outside) if part == "ABSOLUTE" else part])
    assert main(["merge", str(job), "-o", str(tmp_path / "o"), "-q", "--jobs", "1"]) == 2
    _one_line_error(capsys.readouterr().err, "job.json: part", "pass --allow-remote")
    assert not (tmp_path / "o").exists()


def test_allow_remote_reads_outside_parts(tmp_path, capsys):
    rank_trace(0, 1, [10_000], [10_000]).write(tmp_path / "outside.json")
    job = tmp_path / "job"
    _job_json(job, ["../outside.json"])
    r = _cli("merge", str(job), "-o", str(tmp_path / "o"), "-q", "--jobs", "1")
    assert r.returncode == 2 and "pass --allow-remote" in r.stderr
    assert main(["merge", str(job), "-o", str(tmp_path / "o"), "-q", "--jobs", "1", "--allow-remote"]) == 0
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["world_size"] == 1


# ---------------------------------------------------------------------------------------------
# 27.10 tracebacks


def test_huge_grid_string_is_unreadable_not_a_crash(tmp_path, capsys):
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1_000)
    b.op("aten::add", 10, 100)
    b.launch_kernel("triton_poi_fused_add_0", 12, 100, 200)
    b.events[-2]["args"]["grid"] = "grid(" + "9" * 5000 + ",)"      # int() refuses 4300 digits
    b.events[-2]["args"]["block"] = "block(128,)"
    trace = read_trace(b.write(tmp_path / "t.json"))
    assert trace.kernels["grid"].tolist() == [None] and trace.kernels["block"].tolist() == [[128]]
    assert main(["analyze", str(tmp_path / "t.json")]) == 0


def test_input_type_not_a_list_on_a_collective(tmp_path, capsys):
    b = rank_trace(0, 2, [10_000] * 2, [10_000] * 2)
    b.op("c10d::broadcast_", 5_000, 10, dims=[[1024]], types=5)      # "Input type": 5
    b.op("aten::add", 5_100, 10, dims=5, types=["float"], concrete=[])
    b.write(tmp_path / "t.json")
    assert main(["analyze", str(tmp_path / "t.json")]) == 0
    assert main(["merge", str(tmp_path / "t.json"), "-q", "--jobs", "1", "--json", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text())["collectives"][0]["collective"] == "allreduce"


@pytest.mark.parametrize("depth", [10_000, 100_000])
def test_deep_nesting_is_refused_in_one_line(tmp_path, capsys, depth):
    doc = json.dumps(rank_trace(0, 1, [10_000], [10_000]).doc())
    deep = "[" * depth + "]" * depth
    for i, where in enumerate(['"traceEvents": [', '"External id": ']):   # top level; inside one event's args
        p = tmp_path / f"deep{i}.json"
        p.write_text(doc.replace(where, where + deep + ", " if i else f'"x": {deep}, {where}', 1))
        assert main(["analyze", str(p)]) == 2
        _one_line_error(capsys.readouterr().err, "nested more than")


def test_deep_run_json_and_job_json_are_refused_in_one_line(tmp_path, capsys):
    job = torchrun_layout(tmp_path)
    deep = "[" * 20_000 + "]" * 20_000
    meta = job / "rank-0001" / "run.json"
    meta.write_text(meta.read_text().replace("{", '{"x": ' + deep + ", ", 1))
    for argv in (["analyze", str(job / "rank-0001")], ["merge", str(job), "-q"], ["analyze", str(job)]):
        assert main(argv) == 2
        _one_line_error(capsys.readouterr().err, "rank-0001", "run.json: unreadable (maximum recursion depth")
    _job_json(tmp_path / "other", [])
    (tmp_path / "other" / "job.json").write_text('{"schema_version": 1, "parts": ' + deep + "}")
    assert main(["merge", str(tmp_path / "other"), "-q"]) == 2
    _one_line_error(capsys.readouterr().err, "job.json: not valid JSON (maximum recursion depth")


def test_an_error_naming_a_hostile_path_stays_one_line(tmp_path, capsys):
    p = tmp_path / "x\n::error::pwned\x1b[2J.json"
    p.write_text("not json")
    assert main(["analyze", str(p)]) == 2
    err = capsys.readouterr().err
    _one_line_error(err, "x ::error::pwned.json: not a trace any reader knows")


def test_device_fifo_and_directory_are_refused(tmp_path, capsys):
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    for path, words in [("/dev/zero", "not a regular file"), (str(fifo), "not a regular file"),
                        (str(tmp_path), "is a directory")]:
        assert main(["analyze", path]) == 2
        _one_line_error(capsys.readouterr().err, words)
    r = _cli("analyze", str(fifo), timeout=60)                      # before: blocked forever on open()
    assert r.returncode == 2 and "not a regular file" in r.stderr
    # A Run whose trace is a FIFO, merged: its rank is not peeked from the FIFO's head.
    run = torchrun_layout(tmp_path) / "rank-0001"
    _edit_meta(run, lambda d: d.pop("distributed"))
    (run / "trace.json.gz").unlink()
    os.mkfifo(run / "trace.json.gz")
    r = _cli("merge", str(run), "-q", "--jobs", "1", timeout=60)
    assert r.returncode == 2 and "rank-0001: Run has no trace.json.gz" in r.stderr, r.stderr  # before: hung


# ---------------------------------------------------------------------------------------------
# 27.11 memory bound


def _limit_memory(mib: int):
    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (mib << 20, mib << 20))
    return apply


def _gzip_bomb(path: Path, head: bytes, fill: bytes, mib: int, level: int = 1) -> Path:
    c = zlib.compressobj(level, zlib.DEFLATED, 31)
    chunk = fill * (16 << 20)
    path.write_bytes(b"".join([c.compress(head)] + [c.compress(chunk) for _ in range(mib // 16)] + [c.flush()]))
    return path


def test_gzip_bomb_is_refused_within_the_bound(tmp_path, capsys):
    # 512 MiB of whitespace after a trace's first bytes: 2.3 MB on disk. Before, it was inflated
    # whole (and then some) before the refusal; under a 32 MiB bound it stops at 32 MiB.
    bomb = _gzip_bomb(tmp_path / "bomb.json.gz", b'{"traceEvents": [', b" ", 512)
    assert bomb.stat().st_size < 4 << 20
    r = _cli("analyze", str(bomb), env={"ROOFSCOPE_MAX_TRACE_SIZE": "32M", "OPENBLAS_NUM_THREADS": "1"},
             preexec=_limit_memory(480))                            # less than the bomb alone
    assert r.returncode == 2, r.stderr
    _one_line_error(r.stderr, "decompresses to more than 32 MiB", "ROOFSCOPE_MAX_TRACE_SIZE")
    os.environ["ROOFSCOPE_MAX_TRACE_SIZE"] = "32M"
    try:
        assert main(["analyze", str(bomb)]) == 2
        _one_line_error(capsys.readouterr().err, "decompresses to more than 32 MiB")
    finally:
        del os.environ["ROOFSCOPE_MAX_TRACE_SIZE"]


def test_gzip_bomb_is_refused_by_its_ratio_without_a_setting(tmp_path, capsys):
    # 512 MiB of whitespace in 0.5 MB: past 256 MiB (the floor; 250 x 0.5 MB is less) it is
    # refused as a bomb, under the default 4 GiB bound. Real traces inflate up to 30x.
    bomb = _gzip_bomb(tmp_path / "bomb.json.gz", b'{"traceEvents": [', b" ", 512, level=9)
    assert 250 * bomb.stat().st_size < 256 << 20
    assert main(["analyze", str(bomb)]) == 2
    _one_line_error(capsys.readouterr().err, "decompresses to more than 256 MiB of JSON, 250 times its compressed"
                    " size (a gzip bomb?); set ROOFSCOPE_MAX_TRACE_SIZE")
    assert read_trace(REAL).meta.events > 0                          # a real trace (about 20x) is read


def test_bomb_of_zeros_and_sparse_file_are_refused_by_their_first_bytes(tmp_path, capsys):
    zeros = _gzip_bomb(tmp_path / "zeros.json.gz", b"", b"\0", 512)
    sparse = tmp_path / "sparse.json"
    with open(sparse, "wb") as f:
        f.truncate(1 << 30)                                         # 1 GiB, no block on disk
    for path in (zeros, sparse):
        # default bound (4 GiB): the first 64 KiB already say it is no JSON; under 480 MiB of
        # address space, reading the whole file first would fail.
        r = _cli("analyze", str(path), env={"OPENBLAS_NUM_THREADS": "1"}, preexec=_limit_memory(480))
        assert r.returncode == 2, r.stderr
        _one_line_error(r.stderr, "not a trace any reader knows (it holds binary data")
    os.environ["ROOFSCOPE_MAX_TRACE_SIZE"] = "100M"
    try:
        assert main(["analyze", str(sparse)]) == 2                  # over the bound: refused by its size
        _one_line_error(capsys.readouterr().err, "holds more than 100 MiB")
    finally:
        del os.environ["ROOFSCOPE_MAX_TRACE_SIZE"]


def test_sparse_file_after_a_trace_head_is_read_in_bounded_memory(tmp_path):
    """Issue 40: a 3.5 GB sparse file beginning with '{"traceEvents": [' took 48 s and 7.1 GB of memory
    before "invalid character". The reader holds what it has not parsed yet, not the file: under 480 MiB
    of address space (reading the file whole would fail) a 1 GiB one is refused at its first zero, as
    decoding it whole refused it (byte 17: the zero after the 17 bytes of the head)."""
    sparse = tmp_path / "sparse.json"
    with open(sparse, "wb") as f:
        f.write(b'{"traceEvents": [')
        f.truncate(1 << 30)                                         # 1 GiB, no block on disk
    r = _cli("analyze", str(sparse), env={"OPENBLAS_NUM_THREADS": "1"}, preexec=_limit_memory(480))
    assert r.returncode == 2, r.stderr
    _one_line_error(r.stderr, "sparse.json: not valid JSON (JSON is malformed: invalid character (byte 17))")


def test_bad_bound_setting_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ROOFSCOPE_MAX_TRACE_SIZE", "lots")
    assert main(["analyze", str(REAL)]) == 2
    _one_line_error(capsys.readouterr().err, "ROOFSCOPE_MAX_TRACE_SIZE='lots'")
    monkeypatch.setenv("ROOFSCOPE_MAX_TRACE_SIZE", "1.5g")
    assert main(["analyze", str(REAL), "-q"]) == 0


# ---------------------------------------------------------------------------------------------
# 27.15 NaN / Infinity / lone surrogates: the event is skipped and counted


def test_non_json_tokens_skip_their_events_only(tmp_path, capsys):
    doc = json.loads(gzip.decompress(REAL.read_bytes()))
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    base = read_trace(REAL)
    kernels[0]["dur"] = float("nan")                                # json writes NaN
    kernels[1]["ts"] = float("-inf")                                # -Infinity (msgspec: "truncated")
    kernels[2]["args"]["bytes"] = float("inf")
    kernels[3]["name"] = "gemm\ud800"                               # a lone surrogate escape
    kernels[4]["name"] = "ok \U0001F600"                            # a valid pair stays
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))                                   # ensure_ascii: \ud800 and \ud83d\ude00
    text = p.read_text()
    assert "NaN" in text and "-Infinity" in text and "\\ud800" in text
    t = read_trace(p)
    assert t.meta.skipped_events == {"NaN or Infinity (not JSON)": 3, "a lone UTF-16 surrogate in a string": 1}
    assert len(t.kernels) == len(base.kernels) - 4
    assert "ok \U0001F600" in set(t.kernels["name"])
    assert main(["analyze", str(p), "--json", str(tmp_path / "s.json")]) == 0
    assert "skipped 4 malformed events: NaN or Infinity (not JSON) (3); a lone UTF-16 surrogate" \
           in capsys.readouterr().out
    r = _cli("analyze", str(p), "-q")
    assert r.returncode == 0 and r.stderr == "", r.stderr


# ---------------------------------------------------------------------------------------------
# issue 40: shapes and numbers past int64 or float range; a link to a file that is no trace

PAST_INT64 = "Input Dims past int64, which no tensor has (the op kept, uncosted)"


def _shaped_trace(path: Path, name: str, dims: list, types: list[str]) -> Path:
    """Two steps, each one ``name`` op with ``dims`` launching one 200 us kernel."""
    b = TraceBuilder()
    for s in range(2):
        b.annotation(f"ProfilerStep#{s + 1}", s * 1_000, 1_000)
        ext = b.op(name, s * 1_000 + 10, 100, dims, types)
        b.launch_kernel(f"k_{name}", s * 1_000 + 12, s * 1_000 + 100, 200, ext=ext)
    return b.write(path)


@pytest.mark.parametrize("name, dims, types", [
    # M = 2**63 and 10**30: the int64 array of (M, N, K) overflowed in diagnose/shapes.py:70 (gemm_table)
    pytest.param("aten::mm", [[2 ** 63, 64], [64, 64]], ["float", "float"], id="gemm_table-2**63"),
    pytest.param("aten::mm", [[10 ** 30, 64], [64, 64]], ["float", "float"], id="gemm_table-10**30"),
    pytest.param("aten::bmm", [[8, 2 ** 64, 64], [8, 64, 64]], ["float", "float"], id="gemm_table-batched"),
    # every dim in range, the element count 2**124 not: costed as 2**127 FLOPs
    pytest.param("aten::mm", [[2 ** 62, 2 ** 62], [2 ** 62, 64]], ["float", "float"], id="cost-numel"),
    # past a float's range: place/roofline.py's input bytes were no float
    pytest.param("aten::relu", [[64, 10 ** 400]], ["float"], id="roofline-past-float"),
    # a query length no int64 holds: views/inference.py's step phases could not take it
    pytest.param("aten::_scaled_dot_product_flash_attention", [[1, 8, 10 ** 30, 64]] * 3, ["float"] * 3,
                 id="inference-query"),
    # a serving op whose shapes are dropped (or never recorded): cost/hidden_args.py read None as a list
    pytest.param("vllm::unified_attention", [[128, 8, 2 ** 63], [128, 8, 64], [128, 8, 64], [128, 8, 64]],
                 ["c10::BFloat16"] * 4, id="hidden-args"),
])
def test_shapes_past_int64_skip_their_op_and_count_it(tmp_path, capsys, name, dims, types):
    # Before: a traceback where each case says, in analyze, merge and report alike. Now the op's
    # shapes are dropped and counted, its kernels uncosted.
    p = _shaped_trace(tmp_path / "t.json", name, dims, types)
    r = analysis.run(p)
    assert r.trace.meta.skipped_events == {PAST_INT64: 2}               # one op per step
    assert r.summary.total_flops == 0 and r.kernels["flops"].isna().all()
    assert main(["analyze", str(p), "-q"]) == 0
    assert main(["analyze", str(p)]) == 0
    assert f"skipped 2 malformed events: {PAST_INT64}" in console_field(capsys.readouterr().out, "note")
    assert main(["merge", str(p), "-q", "--jobs", "1", "--json", str(tmp_path / "m.json")]) == 0
    assert main(["report", str(p), "-o", str(tmp_path / "r.html")]) == 0


def test_shapes_past_int64_in_merge_as_a_subprocess(tmp_path):
    p = _shaped_trace(tmp_path / "t.json", "aten::mm", [[2 ** 63, 64], [64, 64]], ["float", "float"])
    r = _cli("merge", str(p), "-q", "--jobs", "1", "--json", str(tmp_path / "m.json"))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert json.loads((tmp_path / "m.json").read_text())["world_size"] == 1


def test_a_trace_built_in_process_is_checked_too(tmp_path):
    # A Trace handed to the analysis, not read from a file: its shapes are checked all the same.
    t = read_trace(_shaped_trace(tmp_path / "t.json", "aten::mm", [[64, 64], [64, 64]], ["float", "float"]))
    t.signatures.at[int(t.ops["sig"].iat[0]), "input_dims"] = [[2 ** 63, 64], [64, 64]]
    assert analysis.run(t).trace.meta.skipped_events == {PAST_INT64: 2}


@pytest.mark.parametrize("name, dims, types, concrete", [
    ("aten::mm", ((2 ** 63, 64), (64, 64)), ("float", "float"), None),           # before: 7.6e22 FLOPs
    ("aten::repeat", ((64, 64), ()), ("float", "ScalarList"), ("", f"[{10 ** 30}, 1]")),  # before: 1.6e34 bytes
    ("aten::constant_pad_nd", ((64, 64), (), ()), ("float", "ScalarList", "Scalar"), ("", f"[{10 ** 30}, 0]", "0")),
])
def test_the_cost_model_refuses_a_tensor_past_int64(name, dims, types, concrete):
    flops, nbytes, _, _, _, reason, *_ = cost_signature(name, dims, types, None, concrete)   # the row of COLUMNS
    assert math.isnan(flops) and math.isnan(nbytes) and reason in ("no_shapes", "no_formula")


@pytest.mark.parametrize("rank, world", [(10 ** 30, 1), (0, 2 ** 63)])
def test_a_rank_past_any_job_is_refused(tmp_path, rank, world):
    # Before: merge listed range(world) to find the missing ranks: 2**63 of them took the machine's
    # memory (under this 1 GiB bound, a MemoryError traceback).
    b = rank_trace(0, 1, [10_000], [10_000])
    b.extra["distributedInfo"] = {"rank": rank, "world_size": world, "backend": "nccl"}
    p = b.write(tmp_path / "t.json")
    r = _cli("merge", str(p), "-q", "--jobs", "1", preexec=_limit_memory(1024))
    assert r.returncode == 2, r.stderr
    _one_line_error(r.stderr, f"rank {rank} of {world}: no job has 16,777,216 ranks or more")


def test_a_link_to_another_file_names_its_kind_not_its_content(tmp_path, capsys):
    # Before: "not a trace any reader knows (it begins b'root:x:0:0:root:'; ...)": a Run's
    # trace.json.gz linked to /etc/passwd printed that file's first bytes.
    secret = tmp_path / "passwd"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\n")
    link = tmp_path / "trace.json.gz"
    link.symlink_to(secret)
    assert main(["analyze", str(link)]) == 2
    err = capsys.readouterr().err
    _one_line_error(err, f"not a trace any reader knows (a link to {secret}, which holds text; readers: kineto)")
    assert "root" not in err.replace(str(tmp_path), "")
    r = _cli("analyze", str(link))
    assert r.returncode == 2 and "root:x" not in r.stderr and f"a link to {secret}, which holds text" in r.stderr
    for content, kind in ((b"\x00\x01\x02", "binary data"), (b"<!DOCTYPE html><html>", "an HTML page"),
                          ("café".encode(), "text")):
        (tmp_path / "x.json").write_bytes(content)
        assert main(["analyze", str(tmp_path / "x.json")]) == 2
        _one_line_error(capsys.readouterr().err, f"(it holds {kind}; readers: kineto)")
