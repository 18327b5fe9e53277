from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from roofscope.cli import main

from .conftest import console_field
from .kineto import TraceBuilder
from .test_trace import HTA

ROOT = Path(__file__).resolve().parents[1]


def _mm_trace(tmp_path: Path, device: str | None = "NVIDIA H100 80GB HBM3") -> Path:
    """One bf16 addmm (16x512 @ 512x1024 + bias) whose only kernel runs 10 us."""
    b = TraceBuilder(device_name=device)
    b.annotation("ProfilerStep#0", 0, 100)
    ext = b.op("aten::addmm", 10, 50, [[1024], [16, 512], [512, 1024], [], []],
               ["c10::BFloat16"] * 3 + ["Scalar", "Scalar"], ["", "", "", "1", "1"])
    b.launch_kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64", 20, 40, 10, ext=ext)
    return b.write(tmp_path / "mm.json")


def test_analyze_in_process_prints_summary_and_writes_outputs(tmp_path, capsys):
    trace = _mm_trace(tmp_path)
    out_json, out_csv = tmp_path / "a.json", tmp_path / "k.csv"
    assert main(["analyze", str(trace), "--json", str(out_json), "--csv", str(out_csv)]) == 0
    text = capsys.readouterr().out
    assert "NVIDIA H100 80GB HBM3" in text
    assert "sm90_xmma_gemm_bf16bf16" in text
    doc = json.loads(out_json.read_text())
    # 2*16*512*1024 = 16,777,216 FLOPs in 10 us = 1.678 TFLOP/s
    k = doc["by_kernel"][0]
    assert k["flops"] == 16_777_216
    assert k["achieved_flops"] == pytest.approx(16_777_216 / 10e-6)
    # Bytes: (1024 + 16*512 + 512*1024 + 16*1024 out) * 2 = 1,099,776; floor = max(F/989.5e12, B/3.35e12)
    # = max(16.96 ns, 328.3 ns) = 328.3 ns < 3 us -> latency class
    assert k["bytes"] == 1_099_776
    assert k["cls"] == "latency"
    assert doc["summary"]["unattributed"]["share"] == 0.0
    csv_lines = out_csv.read_text().splitlines()
    assert len(csv_lines) == 2 and csv_lines[0].startswith("name,cat,category")


def test_analyze_refuses_to_overwrite_without_force(tmp_path, capsys):
    trace = _mm_trace(tmp_path)
    out = tmp_path / "a.json"
    out.write_text("precious")
    assert main(["analyze", str(trace), "--json", str(out)]) == 2
    assert "already exists; pass --force" in capsys.readouterr().err
    assert out.read_text() == "precious"
    assert main(["analyze", str(trace), "--json", str(out), "--force", "-q"]) == 0
    assert json.loads(out.read_text())["schema_version"] == 1


@pytest.mark.parametrize("content,needle", [
    (None, "no such file"),
    (b"not json at all", "not a trace any reader knows (it holds text; readers: kineto)"),
    (b"{\"a\": 1}", "not a Kineto trace"),
])
def test_analyze_bad_input_is_one_line_exit_2(tmp_path, capsys, content, needle):
    p = tmp_path / "in.json"
    if content is not None:
        p.write_bytes(content)
    assert main(["analyze", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_unknown_device_needs_peaks(tmp_path, capsys):
    # No refusal: what needs no ceilings is analyzed, and one line says what needs them and how.
    trace = _mm_trace(tmp_path, device="NVIDIA GeForce GTX 1080")
    assert main(["analyze", str(trace)]) == 0
    line = console_field(capsys.readouterr().out, "ceilings")   # wrapped to the terminal: its lines joined
    assert "GTX 1080" in line and "--peak-tflops" in line and "--ceilings" in line
    assert main(["analyze", str(trace), "--peak-tflops", "100", "--peak-bandwidth", "1000", "-q"]) == 0


def test_device_override(tmp_path, capsys):
    trace = _mm_trace(tmp_path, device=None)
    assert main(["analyze", str(trace), "--device", "NVIDIA H200"]) == 0
    assert "NVIDIA H200" in capsys.readouterr().out


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-m", "roofscope", *args], capture_output=True, text=True,
                          env=env, timeout=600)


def test_subprocess_analyze_and_errors(tmp_path):
    trace = _mm_trace(tmp_path)
    ok = _run_cli("analyze", str(trace))
    assert ok.returncode == 0, ok.stderr
    assert "Time by class" in ok.stdout
    bad = _run_cli("analyze", str(tmp_path / "missing.json.gz"))
    assert bad.returncode == 2
    assert bad.stderr.strip().startswith("roofscope: error:") and "Traceback" not in bad.stderr
    usage = _run_cli("analyze")
    assert usage.returncode == 2 and "Missing argument" in usage.stderr


def test_a_dash_prints_that_output_instead_of_the_summary(tmp_path, capsys):
    trace = _mm_trace(tmp_path)
    assert main(["analyze", str(trace), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)   # the JSON alone: no terminal summary around it
    assert doc["by_kernel"][0]["flops"] == 16_777_216 and not (tmp_path / "-").exists()
    assert main(["analyze", str(trace), "--csv", "-"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("name,cat,category,") and len(lines) == 2   # the header and the one kernel
    assert main(["analyze", str(trace), "--json", "-", "--markdown", "-"]) == 2
    err = capsys.readouterr().err
    assert err == "roofscope: error: only one output can be '-' (standard output), got --json and --markdown\n"
    assert main(["analyze", str(trace), "--perfetto", "-"]) == 2
    assert capsys.readouterr().err == ("roofscope: error: --perfetto cannot be '-': its output is gzipped;"
                                       " give it a file\n")
    piped = _run_cli("analyze", str(trace), "--json", "-", "-q")
    assert piped.returncode == 0 and json.loads(piped.stdout)["by_kernel"][0]["flops"] == 16_777_216


def test_subprocess_hta_summary(tmp_path):
    res = _run_cli("analyze", str(HTA), "--json", str(tmp_path / "hta.json"))
    assert res.returncode == 0, res.stderr
    assert "NVIDIA A100-SXM4-80GB" in res.stdout
    assert "communication" in res.stdout


def test_import_is_cheap():
    """`import roofscope` must not import torch (or touch CUDA): commands that only read traces stay fast."""
    code = "import sys, roofscope, roofscope.cli; print(sorted(m for m in ('torch', 'pynvml', 'triton') if m in sys.modules))"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))))
    assert res.stdout.strip() == "[]", res.stderr
