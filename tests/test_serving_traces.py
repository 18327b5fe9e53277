"""Serving traces of other frameworks and vendors (built from their real op signatures: tests/serving_traces.py),
analyzed as a new user would: at most 20% of GPU time without a cost (main: 33.1% on the SGLang/MI300 decode,
64.5% on the vLLM/B200 NVFP4 MoE), no kernel above its roof, and the figures of their ops by hand."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from roofscope.analysis import AnalysisSettings, run
from tests.serving_traces import sglang_mi300_decode, vllm_b200_moe


@pytest.fixture(scope="module")
def sglang(tmp_path_factory: pytest.TempPathFactory):
    replay, capture = sglang_mi300_decode(tmp_path_factory.mktemp("sglang"))
    return run(replay, AnalysisSettings(graph_capture=(capture,)))


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory):
    return run(vllm_b200_moe(tmp_path_factory.mktemp("vllm")))


def test_sglang_mi300_decode_is_costed(sglang) -> None:
    s = sglang.to_dict()
    assert s["unattributed"]["share"] <= 0.20
    assert s["above_roof"]["kernels"] == 0
    k = sglang.kernels
    att = k[k["name"].str.startswith("_paged_attention_ll4mi_QKV")].iloc[0]
    # the step annotation: 32 sequences, 65,536 keys in all. FLOPs 2 * 32 heads * 65,536 * (128 + 128)
    # = 1,073,741,824 a layer; bytes: q and out 2 * 32*32*128*2 = 524,288 + K and V of 65,536 tokens at
    # 8 heads x 128 x 2 B each = 268,435,456 -> 268,959,744. A replay splits them by duration over the op's
    # two kernels (66 and 4 us)
    assert att["flops"] == pytest.approx(1_073_741_824 * 66 / 70) and att["cost_source"] == "family"
    assert att["estimate"] == ""
    ops = k[k["cost_op_name"].str.startswith("sglang_profiler::attention")]
    assert ops["flops"].sum() == pytest.approx(4 * 1_073_741_824) and ops["bytes"].sum() == pytest.approx(
        4 * 268_959_744)
    # aiter::add_rmsnorm: 32 x 4096 bf16, FLOPs 5 * 131,072 = 655,360; bytes 4 x 262,144 + weight 8,192
    norm = k[k["cost_op_name"] == "aiter::add_rmsnorm"].iloc[0]
    assert (norm["flops"], norm["bytes"]) == (655_360, 1_056_768)
    # sglang::store_cache: 32 new tokens' K and V (32 x 1024 bf16 each) read and written, slots 256 B
    store = k[k["cost_op_name"] == "sglang::store_cache"].iloc[0]
    assert store["bytes"] == 4 * 65_536 + 256


def test_vllm_b200_nvfp4_moe_is_costed(vllm) -> None:
    s = vllm.to_dict()
    assert s["unattributed"]["share"] <= 0.20 and s["above_roof"]["kernels"] == 0
    k = vllm.kernels
    # the gate/up grouped GEMM: 512 routed rows (64 tokens x top-8), N = 1536, K = 2048 from the packed
    # (512, 1024) NVFP4 rows: 2 * 512 * 1536 * 2048 = 3,221,225,472 FLOPs; its weights are its arguments
    up = k[(k["cost_op_name"] == "_C::cutlass_fp4_group_mm")].iloc[0]
    assert up["flops"] == 3_221_225_472 and up["estimate"] == "experts touched: expected under uniform routing"
    assert up["bytes_lo"] < up["bytes"] < up["bytes_hi"]
    # FlashInfer's decode over the fp8 cache, with the step's sums: 131,072 keys, 1 byte an element:
    # K and V 131,072 x 4 heads x 128 x 2 = 134,217,728 + q and out 2 x 64*32*128*2 = 1,048,576
    fi = k[k["cost_op_name"].str.startswith("flashinfer::batch_decode")].iloc[0]
    assert fi["flops"] == 2 * 32 * 131_072 * 256 and fi["bytes"] == 134_217_728 + 1_048_576
    assert fi["cost_source"] == "family" and fi["estimate"] == ""
    notes = " | ".join(s["unattributed"]["notes"])
    assert "costed on an estimate (experts touched" in notes and "costed as their family" in notes


def test_cli_subprocess_on_the_sglang_decode(tmp_path: Path) -> None:
    replay, capture = sglang_mi300_decode(tmp_path)
    out = tmp_path / "a.json"
    r = subprocess.run([sys.executable, "-m", "roofscope", "analyze", str(replay), "--graph-capture", str(capture),
                        "--json", str(out), "-q"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["summary"]["unattributed"]["share"] <= 0.20


def test_an_fp8_kv_cache_named_by_the_attention_kernel(tmp_path: Path) -> None:
    # vLLM unified attention with no cache write under it (the cache stored elsewhere), whose kernel names the
    # cache's fp8 element type: K/V read at 1 byte. 4 decode tokens of 8 query / 2 KV heads x 64, 400 keys:
    # bytes q and out 2 * 4*8*64*2 = 8,192 + K/V 400 x 2 heads x 128 x 1 B = 102,400 -> 110,592
    from tests.kineto import TraceBuilder

    b = TraceBuilder()
    b.annotation("execute_4_context_0(sq0sk0sqsq0sqsk0)_generation_4(sq4sk400sqsq4sqsk400)", 0, 1000)
    att = b.op("vllm::unified_attention_with_output", 10, 50, dims=[[4, 8, 64], [4, 2, 64], [4, 2, 64], [4, 8, 64]],
               types=["c10::BFloat16"] * 4)
    b.launch_kernel("void flashinfer::BatchDecodeWithPagedKVCacheKernel<0, 2u, 8u, 4u, __nv_fp8_e4m3, __nv_bfloat16, "
                    "int>", 20, 100, 10, ext=att)
    k = run(b.write(tmp_path / "fp8.json.gz")).kernels
    assert (k["flops"].iat[0], k["bytes"].iat[0]) == (2 * 8 * 400 * 128, 110_592)


def test_a_replay_without_the_step_annotation_says_its_lengths_are_missing(tmp_path: Path) -> None:
    # Without the annotation, the capture's page-index tensor is its buffer (32 x 256 pages of 16: 131,072 keys, twice
    # the replay's 65,536): not the replay's lengths. The attention kernels stay uncosted and the note says why,
    # rather than an estimate at 2x the memory roof.
    replay, capture = sglang_mi300_decode(tmp_path)
    with gzip.open(replay, "rt") as f:
        doc = json.load(f)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "user_annotation"]
    replay.write_bytes(gzip.compress(json.dumps(doc).encode()))
    r = run(replay, AnalysisSettings(graph_capture=(capture,)))
    s = r.to_dict()
    att = r.kernels[r.kernels["name"].str.startswith("_paged_attention_ll4mi")]
    assert (att["unattributed"] == "no_shapes").all() and s["above_roof"]["kernels"] == 0
    assert any("its capture's buffers" in n for n in s["unattributed"]["notes"])
