"""A real Run recorded on an H200 by `roofscope run --modules` (tests/data/h200_gpt_run), analyzed on CPU.

Recorded with: roofscope run -o h200_gpt_run --modules --tokens-per-step 512
--model-flops-per-step 8455716864 --nvml-hz 100 examples/gpt.py --steps 7 --layers 2 --d-model 256
--heads 4 --seq 128 --batch 4 --vocab 4096 (torch 2.11+cu130, 2026-11-21); see tests/data/README.md.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import roofscope
from roofscope.cli import main

RUN = Path(__file__).parent / "data" / "h200_gpt_run"


@pytest.fixture(scope="module")
def analysis():
    return roofscope.analyze(RUN)


def test_run_metadata() -> None:
    run = roofscope.load(RUN)
    m = run.meta
    assert m["schema_version"] == 1 and m["exit_status"] == {"code": 0, "reason": "ok", "detail": None}
    assert m["steps"]["source"] == "optimizer" and m["steps"]["recorded"] == [3, 4, 5]
    assert m["device"]["name"] == "NVIDIA H200" and m["device"]["capability"] == "9.0"
    assert m["modules"]["enabled"] and m["inductor_benchmark_kernel"] == "enabled"


def test_attribution_and_throughput(analysis) -> None:
    s = analysis.to_dict()
    assert s["steps"] == [3, 4, 5]
    assert s["unattributed"]["share"] < 0.01  # 2 µs of 1.6 ms: three tiny kernels without a formula
    t = s["metrics"]
    # 512 tokens per step over the median ProfilerStep span; MFU against the bf16 roof (989.5 TFLOP/s).
    assert t["tokens_per_s"] == pytest.approx(512 / t["step_time_s"])
    assert t["peak_roof"] == "bf16" and t["mfu_source"] == "model_flops"
    assert t["mfu"] == pytest.approx(8455716864 / t["step_time_s"] / 989.5e12)
    # HFU counts the kernels' attributed FLOPs per step instead of the model's.
    assert t["hfu"] == pytest.approx(s["total_flops"] / 3 / t["step_time_s"] / 989.5e12, rel=0.02)
    assert 5e-3 < t["step_time_s"] < 8e-3  # the example printed 6.35 ms median unprofiled


def test_backward_kernels_land_on_their_forward_module(analysis) -> None:
    k = analysis.kernels
    qkv = k[(k["module"] == "GPT.blocks.0.attn.qkv") & (k["step"] == 4)]
    ops = qkv["op_name"].astype(str).value_counts().to_dict()
    # Forward: one addmm. Backward (autograd's thread, matched by sequence number): the two
    # GEMMs for the input and weight gradients and the bias-gradient sum.
    assert ops.get("aten::addmm") == 1 and ops.get("aten::mm") == 2 and ops.get("aten::sum") == 1
    depth2 = analysis.by_module(depth=2)
    assert {"GPT.blocks", "GPT.head", "GPT.tok_emb"} <= set(depth2.index)
    # Only the optimizer and loss bookkeeping run outside every module.
    assert depth2.loc["(no module)", "time_share"] < 0.2


def test_telemetry_summary(analysis) -> None:
    gpu = analysis.to_dict()["telemetry"]["devices"][0]
    assert gpu["name"] == "NVIDIA H200" and gpu["cuda_index"] == 0
    assert gpu["samples"] >= 1 and gpu["sm_clock_mhz"]["mean"] == 1980.0 and gpu["max_sm_clock_mhz"] == 1980.0


def test_analyze_cli_on_the_run(tmp_path, capsys) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    assert main(["analyze", str(run), "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "Time by module" in out and "GPT.blocks.0.attn.qkv" in out
    assert "ktokens/s" in out and "MFU 0.1%, HFU" in out and "NVML samples" in out


def test_telemetry_clock_matches_trace_clock(analysis) -> None:
    from roofscope.analyzers.views.metrics import to_unix_ns

    steps = analysis.steps
    start = to_unix_ns(analysis.trace, int(steps["ts_ns"].min()))
    t = analysis.telemetry.frame()["t_unix_ns"]
    # The sampler ran from session start to the end of recording: the recorded steps (Kineto's
    # clock, via baseTimeNanoseconds) must fall inside the span of NVML timestamps (time.time_ns).
    assert t.min() < start < t.max()
    assert t.max() - start < 1e9
