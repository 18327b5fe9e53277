from __future__ import annotations

import gzip
import json

import pytest

import roofscope
from roofscope.cli import main
from roofscope.hardware.devices import Ceilings
from roofscope.errors import OutputExistsError, TraceError
from roofscope.run import SCHEMA_VERSION, RunError, load, new_meta, write_run

from .kineto import TraceBuilder

CPU = Ceilings(device="cpu: test", source="measured", peaks={"fp32": 1e12}, bandwidth=50e9)


def _cpu_trace(tmp_path):
    b = TraceBuilder(device_name=None)
    # fp32 mm 256^3: 2*256^3 = 33,554,432 FLOPs in 100 us
    b.op("aten::mm", 0, 100, [[256, 256], [256, 256]], ["float", "float"])
    return b.write(tmp_path / "t.json")


def test_write_load_round_trip_uses_stored_ceilings(tmp_path):
    out = tmp_path / "runs" / "r1"
    run = write_run(out, meta=new_meta(["train.py", "--lr", "3e-4"], exit_status=0), trace=_cpu_trace(tmp_path),
                    ceilings=CPU, summary={"x": float("nan")})
    assert sorted(p.name for p in out.iterdir()) == [".roofscope-files", "ceilings.json", "run.json", "summary.json",
                                                     "trace.json.gz"]
    assert json.loads((out / ".roofscope-files").read_text())["files"] == ["ceilings.json", "run.json", "summary.json",
                                                                         "trace.json.gz"]
    assert gzip.decompress((out / "trace.json.gz").read_bytes()).startswith(b"{")
    r = roofscope.load(out)
    assert r.meta["schema_version"] == SCHEMA_VERSION and r.meta["command"] == ["train.py", "--lr", "3e-4"]
    assert r.summary() == {"x": None}
    a = roofscope.analyze(out)  # no flags: the Run's measured CPU ceilings apply
    assert a.ceilings.source == "measured" and a.ceilings.device == "cpu: test"
    # 33,554,432 FLOPs / 100 us = 335.5 GFLOP/s
    assert a.kernels["achieved_flops"].iloc[0] == pytest.approx(33_554_432 / 100e-6)
    assert run.path == out


def test_existing_run_needs_force_and_is_replaced_whole(tmp_path):
    out = tmp_path / "r"
    write_run(out, meta=new_meta(["a"]), trace=_cpu_trace(tmp_path), ceilings=CPU)
    with pytest.raises(OutputExistsError):
        write_run(out, meta=new_meta(["b"]), trace=_cpu_trace(tmp_path))
    assert load(out).meta["command"] == ["a"]
    write_run(out, meta=new_meta(["b"]), trace=_cpu_trace(tmp_path), force=True)
    assert load(out).meta["command"] == ["b"]
    assert not (out / "ceilings.json").exists()  # nothing of the old Run survives
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_failed_write_leaves_nothing(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_run(tmp_path / "r", meta=new_meta(["a"]), trace=tmp_path / "missing.json")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("setup,error,match", [
    (lambda d: None, RunError, "not a roofscope Run"),
    (lambda d: (d / "run.json").write_text("{oops"), RunError, "unreadable"),
    (lambda d: (d / "run.json").write_text(json.dumps({"schema_version": 99})), RunError, "newer"),
    (lambda d: (d / "run.json").write_text(json.dumps({"schema_version": 1})), TraceError, "no trace.json.gz"),
])
def test_bad_run_dirs(tmp_path, setup, error, match):
    d = tmp_path / "d"
    d.mkdir()
    setup(d)
    with pytest.raises(error, match=match):
        load(d)


def test_cli_analyze_run_dir(tmp_path, capsys):
    out = tmp_path / "r"
    write_run(out, meta=new_meta(["a"]), trace=_cpu_trace(tmp_path), ceilings=CPU)
    assert main(["analyze", str(out)]) == 0
    assert "cpu: test" in capsys.readouterr().out
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["analyze", str(empty)]) == 2
    assert "neither a trace file nor a roofscope Run" in capsys.readouterr().err
