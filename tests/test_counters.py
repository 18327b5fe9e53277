"""Counters in a Run: joining ncu launches to trace kernels, storing them, and the
`roofscope counters` / `roofscope run --counters ncu` paths (CPU: fixtures and a fake ncu)."""
from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from roofscope.run import counters
from roofscope.analyzers.ingest import read as read_trace
from roofscope.cli import main
from roofscope.collectors import session
from roofscope.analyzers.ingest import ncujoin as counters_join
from roofscope.collectors.counters import ncu, ncu_target
from roofscope.collectors.counters.ncu_csv import parse_ncu_csv
from roofscope.collectors.torchprof import Schedule
from roofscope.commands.counters import recorded_target
from roofscope.errors import OutputExistsError, RoofscopeError
from roofscope.run import ANALYSIS_VERSION, new_meta, write_run

DATA = Path(__file__).parent / "data" / "ncu"
KINETO = DATA / "h200_probe_kineto.json.gz"
# Correlation ids of the trace's 14 kernels in launch order (memsets excluded): step 2, then step 3.
TRACE_CORR = [187, 200, 211, 229, 259, 273, 334, 355, 368, 379, 397, 427, 441, 502]
COMMAND = ["roofscope", "run", "-o", "runs/probe", "--force", "--wait", "1", "--warmup", "1", "--active", "2",
           "--counters", "ncu", "probe_ncu.py", "range"]


def _ncu(name: str) -> pd.DataFrame:
    return parse_ncu_csv((DATA / f"h200_probe_{name}.csv").read_text())


@pytest.fixture(scope="module")
def trace():
    return read_trace(KINETO)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    meta = new_meta(COMMAND, cwd=str(tmp_path), steps={"requested": {"wait": 1, "warmup": 1, "active": 2}})
    write_run(tmp_path / "run", meta=meta, trace=KINETO, files={"report.html": "old report"})
    return tmp_path / "run"


# -- join -----------------------------------------------------------------------------------------

def test_normalized_names_agree_across_demanglers():
    names = pd.Series([
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>>(int)",
        "void at::vectorized_elementwise_kernel<4, at::CUDAFunctorOnSelf_add<float>, std::array<char *, 2>>(int)",
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int, float)",
        "void at::<unnamed>::vectorized_layer_norm_kernel<float, float, 0>(int, T2)",
        "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT",
    ])
    assert counters_join.normalize_names(names).tolist() == [
        "vectorized_elementwise_kernel", "vectorized_elementwise_kernel",
        "vectorized_layer_norm_kernel", "vectorized_layer_norm_kernel",
        "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"]


def test_join_long_csv_to_kineto_trace(trace):
    joined, stats = counters_join.join(_ncu("long"), trace)
    assert stats == counters_join.JoinStats(ncu_kernels=14, trace_kernels=14, matched=14, unmatched_ncu=0,
                                       unmatched_trace=0, name_mismatches=0)
    assert joined["correlation"].tolist() == TRACE_CORR
    # Launch 7 (the step-3 bf16 GEMM) is the trace's nvjet kernel of correlation 355.
    k = trace.kernels.set_index("correlation")
    assert k.loc[355, "name"] == joined.loc[7, "name"] == "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
    assert k.loc[355, "step"] == 3


def test_join_launch_count_prefix(trace):
    joined, stats = counters_join.join(_ncu("count3"), trace)
    assert (stats.ncu_kernels, stats.matched, stats.unmatched_trace, stats.name_mismatches) == (3, 3, 11, 0)
    assert joined["correlation"].tolist() == TRACE_CORR[:3]


def test_join_after_skipped_launches(trace):
    # ncu --launch-skip 4 --launch-count 3: the profiled launches are the trace's 5th to 7th
    ncu_rows = _ncu("long").iloc[4:7].reset_index(drop=True)
    joined, stats = counters_join.join(ncu_rows, trace, skip=4)
    assert (stats.ncu_kernels, stats.trace_kernels, stats.matched, stats.name_mismatches) == (3, 10, 3, 0)
    assert joined["correlation"].tolist() == TRACE_CORR[4:7]


def test_extra_missing_and_renamed_launches_do_not_shift_the_rest(trace):
    base = _ncu("long")
    extra = base.iloc[[2]].assign(name="triton_poi_fused_add_0")
    # An extra launch after launch 2, and the step-3 layer norm (launch 11) missing.
    edited = pd.concat([base.iloc[:3], extra, base.iloc[3:11], base.iloc[12:]], ignore_index=True)
    joined, stats = counters_join.join(edited, trace)
    assert (stats.ncu_kernels, stats.matched, stats.unmatched_ncu, stats.unmatched_trace) == (14, 13, 1, 1)
    assert joined.loc[3, "correlation"] == -1
    expected = TRACE_CORR[:3] + [-1] + TRACE_CORR[3:11] + TRACE_CORR[12:]
    assert joined["correlation"].tolist() == expected
    # A name neither side reconciles, at the same position: still paired, and counted.
    renamed = base.copy()
    renamed.loc[5, "name"] = "renamed_softmax_kernel"
    joined, stats = counters_join.join(renamed, trace)
    assert (stats.matched, stats.name_mismatches) == (14, 1)
    assert joined["correlation"].tolist() == TRACE_CORR


def test_periodic_steps_stay_aligned_after_a_missing_launch():
    # Six steps of the same 5 kernels; ncu lacks launch 7 (step 1's third kernel). A global
    # alignment (difflib) pairs ncu's 7..28 with the trace's 3..24: same names, a step early.
    b = np.tile(np.arange(5), 6)
    a = np.delete(b, 7)
    ia, ib, mismatches = counters_join.align(a, b)
    assert ia.tolist() == list(range(29))
    assert ib.tolist() == list(range(7)) + list(range(8, 30))
    assert mismatches == 0
    # Two launches renamed in place (a 2-long skip on both sides) are paired and counted;
    # an extra launch at the very start is skipped, the rest paired from there.
    renamed = b.copy()
    renamed[[12, 13]] = 99
    assert counters_join.align(renamed, b)[0].tolist() == list(range(30)) and counters_join.align(renamed, b)[2] == 2
    ia, ib, _ = counters_join.align(np.concatenate([[77], b]), b)
    assert ia.tolist() == list(range(1, 31)) and ib.tolist() == list(range(30))
    # Nothing in common: nothing paired.
    assert len(counters_join.align(np.full(10, 5), np.arange(5))[0]) == 0


def _periodic_trace(n: int, names: list[str]):
    """A trace-like object (what join reads) of ``n`` kernels repeating ``names`` step after step."""
    from types import SimpleNamespace

    k = pd.DataFrame({"name": np.resize(np.array(names, dtype=object), n), "cat": "kernel", "step": 1,
                      "launch": np.arange(n), "ts_ns": np.arange(n) * 1000, "correlation": np.arange(n) + 100})
    return SimpleNamespace(kernels=k, runtime=pd.DataFrame({"ts_ns": np.arange(n) * 1000 - 5}))


def test_join_of_100k_kernels_is_complete():
    # Its speed (0.1 s on 2 cores; difflib took 30 s): benchmarks/bench_costs.py.
    # The probe's 7 kernel names under ncu's spelling, 100,000 launches; ncu lacks 3 of them.
    names = _ncu("long")["name"].iloc[:7].tolist()
    trace = _periodic_trace(100_000, [n.replace("at::", "at::native::", 1) for n in names])
    ncu_side = pd.DataFrame({"name": np.resize(np.array(names, dtype=object), 100_000)})
    ncu_side = ncu_side.drop(index=[10, 50_000, 99_990]).reset_index(drop=True)
    joined, stats = counters_join.join(ncu_side, trace)
    assert (stats.matched, stats.unmatched_trace, stats.name_mismatches) == (99_997, 3, 0)
    # Launch 10 of ncu is the trace's launch 11 (correlation 111), launch 50,000 the trace's 50,002.
    assert joined.loc[10, "correlation"] == 111 and joined.loc[50_000, "correlation"] == 50_102


def test_check_join_refuses_counters_of_other_kernels():
    good = counters_join.JoinStats(14, 14, 14, 0, 0, 0)
    assert counters_join.check_join(good) == []
    assert counters_join.check_join(counters_join.JoinStats(14, 14, 13, 1, 1, 2)) == [
        "1 of 14 profiled launches matched no trace kernel and 2 matched one of another name: the two passes "
        "launched different kernels (data-dependent control flow, autotuning?)"]
    # 14 launches, 7 paired by name: half is enough; 6 is not.
    assert counters_join.check_join(counters_join.JoinStats(14, 20, 7, 7, 13, 0))
    with pytest.raises(counters.CountersError, match="only 6 of the 14 profiled launches match"):
        counters_join.check_join(counters_join.JoinStats(14, 20, 10, 4, 10, 4))
    with pytest.raises(counters.CountersError, match="trace has no GPU kernels"):
        counters_join.check_join(counters_join.JoinStats(3, 0, 0, 3, 0, 0))


def test_csv_of_another_workload_is_refused(tmp_path, capsys):
    # The GPT Run's 426 kernels against the probe's 14 launches: one name in common at most.
    meta = new_meta(COMMAND, steps={"requested": {"wait": 1, "warmup": 1, "active": 2}})
    write_run(tmp_path / "gpt", meta=meta, trace=Path(__file__).parent / "data" / "h200_gpt_run" / "trace.json.gz")
    assert main(["counters", str(tmp_path / "gpt"), "--from-csv", str(DATA / "h200_probe_long.csv")]) == 2
    err = capsys.readouterr().err
    assert "of the 14 profiled launches match a kernel of the Run's recorded steps (426 kernels)" in err
    assert not (tmp_path / "gpt" / counters.COUNTERS_FILE).exists()
    assert "counters" not in json.loads((tmp_path / "gpt" / "run.json").read_text())


@pytest.mark.parametrize("content, message", [
    (lambda long, raw: long[:3000], "ends inside a row (5 of 15 fields): the file is truncated"),
    (lambda long, raw: "\n".join(long.splitlines()[:30]), "the last launch (ID 1) has 6 of the 19 metrics"),
    (lambda long, raw: "\n".join(raw.splitlines()[:6]), "has a header but no kernel launches"),
    (lambda long, raw: '"ID","Kernel Name"\n"0","k"', "header has no 'Block Size', 'Grid Size' column"),
    (lambda long, raw: raw.replace('"0","', '"zero","', 1), "malformed Nsight Compute CSV"),
    (lambda long, raw: "", "no Nsight Compute CSV header"),
])
def test_bad_csv_is_a_one_line_error(run_dir, tmp_path, capsys, content, message):
    csv = tmp_path / "export.csv"
    csv.write_text(content((DATA / "h200_probe_long.csv").read_text(), (DATA / "h200_probe_raw.csv").read_text()))
    assert main(["counters", str(run_dir), "--from-csv", str(csv)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert main(["counters", str(run_dir), "--from-csv", str(tmp_path / "missing.csv")]) == 2
    assert "missing.csv: no such file" in capsys.readouterr().err


def test_gzipped_csv_is_read(run_dir, tmp_path):
    csv = tmp_path / "export.csv.gz"
    csv.write_bytes(gzip.compress((DATA / "h200_probe_long.csv").read_bytes()))
    assert main(["counters", str(run_dir), "--from-csv", str(csv), "-q"]) == 0
    assert counters.load(run_dir).table["correlation"].tolist() == TRACE_CORR


@pytest.mark.parametrize("doc, message", [
    (b"not json", "unreadable counters"),
    (b'{"version": 1}', "unreadable counters"),
    (b'{"version": 1, "columns": {"a": [1], "b": [1, 2]}}', "unreadable counters"),
    (b'{"version": 9, "columns": {}}', "counters version 9 is newer than this roofscope reads (1); upgrade roofscope"),
    (b'{"version": 1, "columns": {"correlation": [1]}}', "counters without column(s) dram_read_bytes"),
])
def test_corrupt_counters_file_is_a_one_line_error(run_dir, capsys, doc, message):
    (run_dir / counters.COUNTERS_FILE).write_bytes(gzip.compress(doc))
    with pytest.raises(counters.CountersError, match=re.escape(message)):
        counters.load(run_dir)
    assert main(["analyze", str(run_dir)]) == 2
    assert message in capsys.readouterr().err


# -- storage --------------------------------------------------------------------------------------

def test_save_load_round_trip_and_force(run_dir, trace):
    joined, stats = counters_join.join(_ncu("raw"), trace)
    meta = {"tool": "ncu", "ncu_version": "2025.3.1.0", "metrics": ["x"], "sample": None,
            "join": {"matched": stats.matched}, "command": ["ncu"]}
    counters.save(run_dir, joined, meta)
    c = counters.load(run_dir)
    assert list(c.table.columns) == list(joined.columns)
    assert c.table["correlation"].tolist() == TRACE_CORR
    assert c.table.loc[7, "tensor_flops_bf16"] == 2 * 4096**3
    assert c.table["flops_fp32"].isna().all()             # null in JSON, NaN again
    assert c.table.loc[0, "grid"] == [2, 66, 1]
    assert c.meta["ncu_version"] == "2025.3.1.0" and c.meta["version"] == 1
    doc = json.loads(gzip.decompress((run_dir / counters.COUNTERS_FILE).read_bytes()))
    assert doc["columns"]["time_ns"][0] == 177_408
    entry = json.loads((run_dir / "run.json").read_text())["counters"]
    assert (entry["file"], entry["kernels"], entry["matched"], entry["command"]) == ("counters.json.gz", 14, 14,
                                                                                    ["ncu"])
    with pytest.raises(OutputExistsError, match="--force"):
        counters.save(run_dir, joined, meta)
    counters.save(run_dir, joined.head(3), meta, force=True)
    assert len(counters.load(run_dir).table) == 3
    assert counters.load(run_dir.parent) is None


# -- roofscope counters RUN --from-csv ---------------------------------------------------------------

def test_counters_from_csv_in_process(run_dir, capsys):
    assert main(["counters", str(run_dir), "--from-csv", str(DATA / "h200_probe_long.csv")]) == 0
    out = capsys.readouterr().out
    assert "14 kernel launches profiled, 14 matched to the trace's 14 kernels (0 name mismatches)" in out
    c = counters.load(run_dir)
    assert c.table["correlation"].tolist() == TRACE_CORR
    assert c.table.loc[8, "flops_fp32"] == 2_099_249_152
    assert c.meta["join"]["matched"] == 14 and c.meta["source"].endswith("h200_probe_long.csv")
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["counters"]["kernels"] == 14 and meta["counters"]["sample"] is None
    # summary.json and report.html re-rendered from the Run; the summary stamped as current.
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["kernels"] > 0 and summary["analysis_version"] == ANALYSIS_VERSION
    assert (run_dir / "report.html").read_text().startswith("<!DOCTYPE html>")
    # Not again without --force; --sample makes no sense with a CSV.
    assert main(["counters", str(run_dir), "--from-csv", str(DATA / "h200_probe_long.csv")]) == 2
    assert "already has counters" in capsys.readouterr().err
    assert main(["counters", str(run_dir), "--from-csv", str(DATA / "h200_probe_count3.csv"), "--force"]) == 0
    assert len(counters.load(run_dir).table) == 3
    assert main(["counters", str(run_dir), "--from-csv", "x.csv", "--sample", "3", "--force"]) == 2
    assert "--sample and --skip apply to ncu" in capsys.readouterr().err


def test_counters_from_csv_subprocess(run_dir):
    res = subprocess.run([sys.executable, "-m", "roofscope", "counters", str(run_dir), "--from-csv",
                          str(DATA / "h200_probe_raw.csv")], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "14 matched" in res.stdout
    assert counters.load(run_dir).table["correlation"].tolist() == TRACE_CORR
    bad = subprocess.run([sys.executable, "-m", "roofscope", "counters", str(run_dir), "--force", "--from-csv",
                          str(DATA / "ncu_messages.txt")], capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "no Nsight Compute CSV header" in bad.stderr


# -- the ncu pass, with a fake ncu -----------------------------------------------------------------

FAKE = '''#!{python}
import json, pathlib, sys
argv = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(json.dumps(argv) + "\\n")
if argv == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler")
    print("Version 2025.3.1.0 (build 36398880) (public-release)")
    sys.exit(0)
mode = {mode!r}
if mode == "perm":
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
          "Counters on the target device 0.")
    sys.exit(1)
if mode == "fail":
    print("Traceback: boom")
    print("==ERROR== The application returned an error code (3).")
    sys.exit(3)
if mode == "none":
    print("==WARNING== No kernels were profiled.")
    sys.exit(0)
if "--import" in argv:
    print(pathlib.Path({csv!r}).read_text())
    sys.exit(0)
pathlib.Path(argv[argv.index("-o") + 1] + ".ncu-rep").write_bytes(b"NCU report")
print("==PROF== Connected to process 1")
print("the script's own output")
print("==PROF== Disconnected from process 1")
'''


def _fake_ncu(tmp_path: Path, monkeypatch, mode: str, csv: str = "h200_probe_count3.csv") -> Path:
    log = tmp_path / "ncu-calls.jsonl"
    exe = tmp_path / "fake-ncu"
    exe.write_text(FAKE.format(python=sys.executable, log=str(log), mode=mode, csv=str(DATA / csv)))
    exe.chmod(0o755)
    monkeypatch.setenv(ncu.NCU_ENV, str(exe))
    return log


def test_ncu_pass_with_skip(run_dir, tmp_path, monkeypatch, capsys):
    # ncu --launch-skip 2 --launch-count 3 profiles the 3rd to 5th launches, numbering them from 0
    lines = (DATA / "h200_probe_long.csv").read_text().splitlines(keepends=True)
    head = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = [line for line in lines[head + 1:] if line.split(",", 1)[0].strip('"') in ("2", "3", "4")]
    renumbered = [f'"{int(r.split(",", 1)[0].strip(chr(34))) - 2}",' + r.split(",", 1)[1] for r in rows]
    csv = tmp_path / "skip2.csv"
    csv.write_text("".join(lines[:head + 1] + renumbered))
    log = _fake_ncu(tmp_path, monkeypatch, "ok", csv=str(csv))
    assert main(["counters", str(run_dir), "--sample", "3", "--skip", "2"]) == 0
    assert counters.load(run_dir).table["correlation"].tolist() == TRACE_CORR[2:5]
    prof = [json.loads(line) for line in log.read_text().splitlines()][1]
    assert prof[6:10] == ["--launch-skip", "2", "--launch-count", "3"]
    out = capsys.readouterr().out
    assert "sample:   3 launches after the first 2 of the recorded steps" in out
    assert counters.load(run_dir).meta["skip"] == 2
    assert main(["counters", str(run_dir), "--skip", "1", "--from-csv", str(tmp_path / "x.csv")]) == 2
    assert "--sample and --skip apply to ncu's own pass" in capsys.readouterr().err


def test_ncu_pass_command_line_report_and_version(run_dir, tmp_path, monkeypatch, capsys):
    log = _fake_ncu(tmp_path, monkeypatch, "ok")
    assert main(["counters", str(run_dir), "--sample", "3"]) == 0
    out = capsys.readouterr().out
    assert "the script's own output" in out                     # streamed through
    assert "3 kernel launches profiled, 3 matched" in out and "counters.ncu-rep" in out
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls[0] == ["--version"]
    prof = calls[1]
    assert prof[:6] == ["--profile-from-start", "off", "--clock-control", "none", "--metrics",
                        ",".join(ncu.METRICS)]
    assert prof[6:8] == ["--launch-count", "3"]
    assert prof[8] == "-o" and Path(prof[9]).name == "counters" and prof[10] == "--force-overwrite"
    # The recorded script and schedule (wait 1, warmup 1, active 2), through the inner runner.
    assert prof[11:] == [sys.executable, "-m", "roofscope.collectors.counters.ncu_target", "--wait", "1", "--warmup", "1",
                         "--active", "2", "probe_ncu.py", "range"]
    assert calls[2][0] == "--import" and calls[2][2:] == ["--csv", "--page", "raw", "--print-units", "base"]
    assert (run_dir / counters.COUNTERS_REPORT).read_bytes() == b"NCU report"
    entry = json.loads((run_dir / "run.json").read_text())["counters"]
    assert (entry["ncu_version"], entry["sample"], entry["kernels"]) == ("2025.3.1.0 (build 36398880) "
                                                                         "(public-release)", 3, 3)
    assert entry["command"][0] == str(tmp_path / "fake-ncu")


@pytest.mark.parametrize("mode, message", [
    ("perm", "options nvidia NVreg_RestrictProfilingToAdminUsers=0` in a file in /etc/modprobe.d/ and reboot; "
             "see https://developer.nvidia.com/ERR_NVGPUCTRPERM"),
    ("fail", "the script failed under ncu with exit code 3"),
    ("none", "ncu profiled no kernels: the script reached no step boundary of the profiled range (it starts "
             "after 2 steps"),
])
def test_ncu_failures_are_one_line_errors(run_dir, tmp_path, monkeypatch, capsys, mode, message):
    _fake_ncu(tmp_path, monkeypatch, mode)
    assert main(["counters", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (run_dir / counters.COUNTERS_FILE).exists()


def test_ncu_missing(run_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(ncu.NCU_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ncu, "DEFAULT_NCU", str(tmp_path / "no-ncu"))
    assert main(["counters", str(run_dir)]) == 2
    assert "Nsight Compute (ncu) not found" in capsys.readouterr().err
    monkeypatch.setenv(ncu.NCU_ENV, str(tmp_path / "nowhere" / "ncu"))
    with pytest.raises(ncu.NcuError, match="ROOFSCOPE_NCU=.*nowhere/ncu is not an executable"):
        ncu.find_ncu()


def test_check_output_on_real_ncu_messages():
    lines = (DATA / "ncu_messages.txt").read_text().splitlines()
    s = Schedule(1, 2, 3)
    with pytest.raises(ncu.NcuError, match=r"ncu profiled no kernels.*starts after 3 steps"):
        ncu.check_output(lines[:2], 0, s)
    with pytest.raises(ncu.NcuError, match="the script failed under ncu with exit code 3;"):
        ncu.check_output(lines[:3], 3, s)
    with pytest.raises(ncu.NcuError, match="ncu failed with exit code 1: '/nonexistent' does not exist"):
        ncu.check_output(lines[3:4], 1, s)
    ncu.check_output(["==PROF== Connected to process 1", "==PROF== Disconnected from process 1"], 0, s)


def test_na_of_an_essential_metric_is_an_error():
    df = _ncu("badmetric")
    assert ncu.check_metrics(df) == ["ncu reported n/a for not__a_metric.sum: not supported on this GPU or ncu "
                                     "version; those columns are empty"]
    df.attrs["na_metrics"] = ["dram__bytes_read.sum", "sm__ops_path_tensor_src_fp8.sum"]
    with pytest.raises(ncu.NcuError, match="n/a for dram__bytes_read.sum, sm__ops_path_tensor_src_fp8.sum"):
        ncu.check_metrics(df)


def test_recorded_target():
    meta = new_meta(["roofscope", "run", "-o", "out", "--force", "--counters", "ncu", "--counters-sample", "9",
                     "--wait", "2", "-m", "pkg.train", "--lr", "3e-4", "-m", "x"],
                    steps={"requested": {"wait": 2, "warmup": 0, "active": 5}})
    t = recorded_target(meta)
    assert t == ncu.Target("pkg.train", ("--lr", "3e-4", "-m", "x"), True, Schedule(2, 0, 5))
    # The profile began where the steps settled: boundary 9 less 2 warm-up steps, not --wait 2.
    settled = dict(meta, steps={"requested": {"wait": 2, "warmup": 2, "active": 5}, "profiled_from": 9})
    assert recorded_target(settled).schedule == Schedule(7, 2, 5)
    assert recorded_target(dict(meta, steps={**settled["steps"], "step_on": "generate"})).step_on == "generate"
    window = dict(meta, steps={"requested": {"duration_s": 5.0, "delay_s": 0.0}})
    with pytest.raises(RoofscopeError, match="time window"):
        recorded_target(window)
    with pytest.raises(RoofscopeError, match="not recorded by `roofscope run`"):
        recorded_target(dict(meta, command=["train.py", "--lr", "3"]))
    with pytest.raises(RoofscopeError, match=r"its command: ''\)"):
        recorded_target(dict(meta, command="roofscope run x.py"))   # a hand-edited run.json
    for steps in (None, {"requested": None}, {"requested": {"wait": 1}}):
        with pytest.raises(RoofscopeError, match="records no step schedule"):
            recorded_target(dict(meta, steps=steps))


# -- the inner runner -------------------------------------------------------------------------------

def test_counter_range_opens_on_the_recorded_steps(tmp_path, monkeypatch):
    events: list[tuple[str, int]] = []

    def start(self):
        events.append(("start", self.steps))
        self.recording = True

    def end(self):
        if self.recording:
            events.append(("stop", self.steps))
            self.recording = False

    monkeypatch.setattr(ncu_target.CounterRange, "_start", start)
    monkeypatch.setattr(ncu_target.CounterRange, "end", end)
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent("""
        import sys, torch, roofscope
        m = torch.nn.Linear(2, 2)
        a, b = torch.optim.SGD(m.parameters(), lr=0.1), torch.optim.SGD(m.parameters(), lr=0.1)
        for i in range(int(sys.argv[1])):
            a.step(); b.step()      # only the first optimizer counts
            if sys.argv[2] == "explicit":
                roofscope.step()    # and explicit steps win over it
        sys.exit(int(sys.argv[3]))
    """))
    # wait 1 + warmup 1: the range opens at boundary 2 and closes at 2 + 2 = 4 (torchprof.py's syncs).
    assert ncu_target.main(["--wait", "1", "--warmup", "1", "--active", "2", str(script), "6", "opt", "0"]) == 0
    assert events == [("start", 2), ("stop", 4)]
    events.clear()
    # Once the recorded steps are profiled the script ends (code 0, not its own 7): steps 5 and 6 and
    # whatever follows them would only run again under ncu.
    assert ncu_target.main(["--wait", "1", "--warmup", "1", "--active", "2", str(script), "6", "opt", "7"]) == 0
    assert events == [("start", 2), ("stop", 4)]
    events.clear()
    assert ncu_target.main(["--wait", "0", "--warmup", "0", "--active", "3", str(script), "6", "explicit", "0"]) == 0
    assert events == [("start", 0), ("stop", 3)]
    events.clear()
    # The script ends inside the active steps with code 5: the range closes at exit, the code is kept.
    assert ncu_target.main(["--wait", "1", "--warmup", "0", "--active", "4", str(script), "3", "opt", "5"]) == 5
    assert events == [("start", 1), ("stop", 3)]
    assert session.step_listeners == []
    assert os.environ["TORCHINDUCTOR_BENCHMARK_KERNEL"]


def test_counter_range_counts_an_inference_loops_forwards(tmp_path, monkeypatch):
    # No optimizer, no roofscope.step(): each outermost forward without gradients is a step, as in the
    # Kineto pass (collectors/steps.py), so ncu's range lands on the recorded forwards.
    events: list[tuple[str, int]] = []
    monkeypatch.setattr(ncu_target.CounterRange, "_start",
                        lambda self: (events.append(("start", self.steps)), setattr(self, "recording", True)))
    monkeypatch.setattr(ncu_target.CounterRange, "end",
                        lambda self: self.recording and (events.append(("stop", self.steps)),
                                                         setattr(self, "recording", False)))
    script = tmp_path / "serve.py"
    script.write_text(textwrap.dedent("""
        import torch
        outer = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())   # its Linear is no step of its own
        with torch.no_grad():
            for _ in range(8):
                outer(torch.ones(1, 2))
    """))
    # wait 2 + warmup 1: the range opens at forward 3 and closes at forward 3 + 2 = 5.
    assert ncu_target.main(["--wait", "2", "--warmup", "1", "--active", "2", str(script)]) == 0
    assert events == [("start", 3), ("stop", 5)]
    events.clear()
    # --step-on MODULE.FUNC: a function's calls are the steps; the forwards inside them are not.
    (tmp_path / "work.py").write_text("import torch\n\ndef once(m):\n    with torch.no_grad():\n"
                                      "        m(torch.ones(1, 2)); m(torch.ones(1, 2))\n")
    script.write_text("import sys, torch, work\nm = torch.nn.Linear(2, 2)\nfor _ in range(6):\n    work.once(m)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert ncu_target.main(["--wait", "1", "--warmup", "0", "--active", "2", "--step-on", "work.once",
                            str(script)]) == 0
    assert events == [("start", 1), ("stop", 3)]
    events.clear()
    # --step-on __main__.FUNC (given, or adopted by the Kineto pass and kept in run.json): the script's
    # own function. The script sleeps before its loop so that the watcher (every 20 ms) has wrapped it.
    script.write_text("import time, torch\n\ndef once(m):\n    with torch.no_grad():\n        m(torch.ones(1, 2))\n\n"
                      "m = torch.nn.Linear(2, 2)\ntime.sleep(0.1)\nfor _ in range(6):\n    once(m)\n")
    assert ncu_target.main(["--wait", "1", "--warmup", "0", "--active", "2", "--step-on", "__main__.once",
                            str(script)]) == 0
    assert events == [("start", 1), ("stop", 3)]


# -- roofscope run --counters ncu -----------------------------------------------------------------

TRAIN = textwrap.dedent("""
    import sys, torch
    m = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for _ in range(5):
        m(torch.randn(4, 8)).sum().backward()
        opt.step()
    sys.exit(int(sys.argv[1]))
""")
PEAKS = ["--peak-tflops", "1", "--peak-bandwidth", "10", "--settle", "0"]  # exact step counts


def test_run_with_counters(tmp_path, monkeypatch, capsys):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    log = _fake_ncu(tmp_path, monkeypatch, "ok")
    base = ["run", *PEAKS, "--wait", "1", "--warmup", "1", "--active", "2", "-q"]
    # A time window cannot be re-run over the same steps: refused before the script runs.
    assert main([*base, "-o", str(tmp_path / "w"), "--duration", "1", "--counters", "ncu", str(script), "0"]) == 2
    assert "cannot follow a time window" in capsys.readouterr().err and not (tmp_path / "w").exists()
    # A failing script: the Run is written, the pass skipped, the script's code kept.
    assert main([*base, "-o", str(tmp_path / "f"), "--counters", "ncu", str(script), "3"]) == 3
    assert "skipping the counters pass" in capsys.readouterr().err
    assert not (tmp_path / "f" / counters.COUNTERS_FILE).exists() and not log.exists()
    # The pass runs the recorded command; a CPU trace has no GPU kernels for the 3 launches, so the
    # join refuses to store them: the Run stays, without counters, and the exit code says so.
    out = tmp_path / "ok"
    assert main([*base, "-o", str(out), "--counters", "ncu", "--counters-sample", "3", str(script), "0"]) == 2
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls[1][-4:] == ["--active", "2", str(script), "0"]
    assert calls[1][calls[1].index("--launch-count") + 1] == "3"
    err = capsys.readouterr().err
    assert ("counters pass: the Run's trace has no GPU kernels in its recorded steps to join counters to (the Run "
            f"{out} was written without counters)") in err
    assert (out / "run.json").exists() and not (out / counters.COUNTERS_FILE).exists()
    assert "counters" not in json.loads((out / "run.json").read_text())


def test_run_skip_needs_counters_ncu(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    assert main(["run", *PEAKS, "-o", str(tmp_path / "r"), "--skip", "5", str(script), "0"]) == 2
    assert "--skip needs --counters ncu" in capsys.readouterr().err and not (tmp_path / "r").exists()


# -- kernel filters (--kernel-name, --nvtx) ------------------------------------------------------------

def _csv_of_launches(tmp_path: Path, ids: list[int]) -> Path:
    """The long CSV cut to the given launches, renumbered from 0 as ncu numbers what it profiled."""
    lines = (DATA / "h200_probe_long.csv").read_text().splitlines(keepends=True)
    head = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    new_id = {str(old): str(new) for new, old in enumerate(ids)}
    rows = [f'"{new_id[r.split(",", 1)[0].strip(chr(34))]}",' + r.split(",", 1)[1] for r in lines[head + 1:]
            if r.split(",", 1)[0].strip('"') in new_id]
    csv = tmp_path / "filtered.csv"
    csv.write_text("".join(lines[:head + 1] + rows))
    return csv


def test_trace_kernels_filtered_by_name_and_region(trace):
    # Launch order: nvjet GEMM, xmma GEMM, elementwise, reduce, layer norm, softmax, SDPA, in step 2
    # (launches 0-6) and again in step 3 (7-13). `gemm|nvjet` on the function names: 0, 1, 7, 8.
    tk = counters_join.trace_kernels(trace, kernel_name="gemm|nvjet")
    assert tk["correlation"].tolist() == [TRACE_CORR[i] for i in (0, 1, 7, 8)]
    # The range ProfilerStep#3 holds launches 7-13; both filters together: 7 and 8.
    assert counters_join.trace_kernels(trace, nvtx="ProfilerStep#3")["correlation"].tolist() == TRACE_CORR[7:]
    assert counters_join.trace_kernels(trace, "gemm|nvjet", "ProfilerStep#3")["correlation"].tolist() == TRACE_CORR[7:9]
    assert len(counters_join.trace_kernels(trace, nvtx="no such range")) == 0


def test_join_of_a_name_filtered_csv_aligns_with_the_matching_kernels(trace, tmp_path):
    # ncu --kernel-name regex:gemm|nvjet profiled 4 launches, numbered 0-3: unfiltered, the join
    # would pair them with the trace's first 4 kernels (2 of them other names).
    ncu_rows = parse_ncu_csv(_csv_of_launches(tmp_path, [0, 1, 7, 8]).read_text())
    joined, stats = counters_join.join(ncu_rows, trace, kernel_name="gemm|nvjet")
    # Every profiled launch and every selected trace kernel paired, none left over on either side.
    assert stats == counters_join.JoinStats(4, 4, 4, 0, 0, 0)
    assert joined["correlation"].tolist() == [187, 200, 355, 368]
    # --launch-skip 1 counts matching launches only: the 2nd to 4th GEMMs (unfiltered, skipping the
    # trace's first launch would leave the nvjet GEMM of step 2 as the first candidate).
    joined, stats = counters_join.join(ncu_rows.iloc[1:].reset_index(drop=True), trace, skip=1, kernel_name="gemm|nvjet")
    assert joined["correlation"].tolist() == [200, 355, 368] and stats == counters_join.JoinStats(3, 3, 3, 0, 0, 0)


def test_profile_command_with_kernel_filters():
    target = ncu.Target("train.py", ("--lr", "1"), False, Schedule(1, 1, 2))
    cmd = ncu.profile_command("ncu", target, Path("/tmp/c"), sample=5, python="py", skip=2,
                              kernel_name="gemm|flash", nvtx="decode")
    assert cmd[:6] == ["ncu", "--profile-from-start", "off", "--clock-control", "none", "--metrics"]
    assert cmd[7:16] == ["--kernel-name", "regex:gemm|flash", "--nvtx", "--nvtx-include", "decode/",
                         "--launch-skip", "2", "--launch-count", "5"]
    assert cmd[-3:] == ["train.py", "--lr", "1"]
    plain = ncu.profile_command("ncu", target, Path("/tmp/c"), python="py")
    assert "--kernel-name" not in plain and "--nvtx" not in plain
    assert "--step-on" not in plain
    # A Run stepped on generate() calls: the inner runner counts the same boundaries.
    generate = ncu.profile_command("ncu", ncu.Target("serve.py", (), False, Schedule(1, 1, 2), "generate"),
                                   Path("/tmp/c"), python="py")
    assert generate[-3:] == ["--step-on", "generate", "serve.py"]


def test_counters_pass_with_kernel_name_filter(run_dir, tmp_path, monkeypatch, capsys):
    log = _fake_ncu(tmp_path, monkeypatch, "ok", csv=str(_csv_of_launches(tmp_path, [0, 1, 7, 8])))
    assert main(["counters", str(run_dir), "--kernel-name", "gemm|nvjet"]) == 0
    out = capsys.readouterr().out
    assert "4 kernel launches profiled, 4 matched to the trace's 4 kernels (0 name mismatches)" in out
    assert "all launches matching --kernel-name 'gemm|nvjet' of the recorded steps" in out
    c = counters.load(run_dir)
    assert c.table["correlation"].tolist() == [187, 200, 355, 368] and c.meta["kernel_name"] == "gemm|nvjet"
    prof = [json.loads(line) for line in log.read_text().splitlines()][1]
    assert prof[6:8] == ["--kernel-name", "regex:gemm|nvjet"]


def test_kernel_filter_errors_are_one_line(run_dir, tmp_path, capsys):
    csv = _csv_of_launches(tmp_path, [0, 1, 7, 8])
    assert main(["counters", str(run_dir), "--kernel-name", "gemm(", "--from-csv", str(csv)]) == 2
    assert "--kernel-name 'gemm(' is not a regular expression" in capsys.readouterr().err
    assert main(["counters", str(run_dir), "--nvtx", "decode", "--from-csv", str(csv)]) == 2
    err = capsys.readouterr().err
    assert "no kernel of the Run's recorded steps matches --nvtx 'decode'" in err and "Traceback" not in err
    # A CSV exported from a filtered ncu run: the same filter given with --from-csv.
    assert main(["counters", str(run_dir), "--kernel-name", "gemm|nvjet", "--from-csv", str(csv), "-q"]) == 0
    assert counters.load(run_dir).table["correlation"].tolist() == [187, 200, 355, 368]


def test_no_kernels_profiled_under_a_filter_says_so():
    with pytest.raises(ncu.NcuError, match="no launch of the profiled steps matched --kernel-name / --nvtx"):
        ncu.check_output(["==WARNING== No kernels were profiled."], 0, Schedule(1, 1, 2), filtered=True)


def test_run_passes_kernel_filters_to_the_counters_pass(tmp_path, monkeypatch, capsys):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    base = ["run", *PEAKS, "--wait", "1", "--warmup", "1", "--active", "2", "-q"]
    # Without --counters ncu, or with a bad regex: refused before the script runs.
    assert main([*base, "-o", str(tmp_path / "a"), "--kernel-name", "gemm", str(script), "0"]) == 2
    assert "--kernel-name needs --counters ncu" in capsys.readouterr().err and not (tmp_path / "a").exists()
    log = _fake_ncu(tmp_path, monkeypatch, "ok")
    assert main([*base, "-o", str(tmp_path / "b"), "--counters", "ncu", "--kernel-name", "[", str(script), "0"]) == 2
    assert "is not a regular expression" in capsys.readouterr().err and not (tmp_path / "b").exists()
    # The filters reach ncu's command line; the CPU trace has no kernel they select, which the join says.
    out = tmp_path / "ok"
    assert main([*base, "-o", str(out), "--counters", "ncu", "--kernel-name", "gemm", "--nvtx", "fwd", str(script),
                 "0"]) == 2
    prof = [json.loads(line) for line in log.read_text().splitlines()][1]
    assert prof[6:11] == ["--kernel-name", "regex:gemm", "--nvtx", "--nvtx-include", "fwd/"]
    assert "no kernel of the Run's recorded steps matches --kernel-name 'gemm' and --nvtx 'fwd'" in \
        capsys.readouterr().err
