"""Serving-engine formulas (formulas/serving.py) and the hidden arguments recovered around them
(hidden_args.py): hand-worked arithmetic, and a real vLLM decode served from CUDA graphs compared
with the per-op reference CSVs TraceLens wrote for it."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from roofscope.analyzers.cost.costmodel import missing_argument
from roofscope.analyzers.cost.formulas.families.moe import expected_experts, moe_cost
from roofscope.analyzers.cost.hidden_args import WINDOW_NOT_RECORDED, step_lengths
from roofscope.analyzers.cost.notes import missing_notes
from tests.conftest import EXTERNAL, VENDORED
from tests.test_costmodel import BF16, F32, check, cost

FP8, U8, LONG = "c10::Float8_e4m3fn", "unsigned char", "long int"
# Vendored in tests/data/external (MIT licence, LICENSE-TraceLens beside it); the corpus's copy otherwise.
VLLM = next((d for d in (VENDORED / "tracelens" / "vllm_decode_full", EXTERNAL / "tracelens" / "vllm_decode_full")
             if d.is_dir()), None)
CAPTURE = (VLLM / "capture_traces" / "graph_capture_rank_0.1773709742341309550.pt.trace.json.gz") if VLLM else None
STEP = "execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk55086sqsq32sqsk55086)"
needs_vllm = pytest.mark.skipif(VLLM is None or not VLLM.is_dir(), reason="no ../shared vLLM trace")


def test_aiter_fused_add_rmsnorm_matches_tracelens() -> None:
    # (out, input, residual_in, residual_out, weight, eps, flag), 32 tokens x 2880, bf16:
    # FLOPs 5 * 32*2880 = 460,800; bytes: input, residual_in, out, residual_out 4 * 184,320 + weight 5,760
    # = 743,040 (TraceLens: 0.7086181640625 MiB = 743,040)
    dims = [[32, 2880]] * 4 + [[2880], [], []]
    row = cost("aiter::rmsnorm2d_fwd_with_add_ck", dims, [BF16] * 5 + ["Scalar"] * 2)
    check(row, 460_800, 743_040, "bf16", "normalization")


def test_vllm_fused_add_rms_norm_writes_input_and_residual_in_place() -> None:
    # _C::fused_add_rms_norm(input!, residual!, weight, eps) on [4, 8] bf16: FLOPs 5*32 = 160;
    # bytes: read input, residual (64 each), weight 16; write input, residual (64 each) = 272
    row = cost("_C::fused_add_rms_norm", [[4, 8], [4, 8], [8], []], [BF16, BF16, BF16, "Scalar"])
    check(row, 160, 272, "bf16", "normalization")
    # _C::rms_norm(result, input, weight, eps): FLOPs 4*32 = 128; bytes 64 + 16 + 64 = 144
    check(cost("_C::rms_norm", [[4, 8], [4, 8], [8], []], [BF16, BF16, BF16, "Scalar"]), 128, 144, "bf16",
          "normalization")


def test_rotary_reads_only_the_cache_rows_of_its_positions() -> None:
    # (positions [32], query [32, 64 heads*64], key [32, 8*64], head_size 64, cos_sin_cache [131072, 64], neox)
    # rotated elements 32*4096 + 32*512 = 147,456 -> FLOPs 3 * 147,456 = 442,368;
    # bytes: positions 256 + cache rows 32*64*2 = 4,096 + q and k read and written 2 * 294,912 = 594,176
    dims = [[32], [32, 4096], [32, 512], [], [131072, 64], []]
    row = cost("_C::rotary_embedding", dims, [LONG, BF16, BF16, "Scalar", BF16, "Scalar"],
               concrete=["", "", "", "64", "", "True"])
    check(row, 442_368, 594_176, "bf16", "elementwise")


def test_kv_cache_write_moves_the_new_tokens_only() -> None:
    # key, value [32, 8, 64] bf16 (32,768 B each) read, written into the cache (65,536 B), slots 32*8 = 256,
    # the 0-d fp32 k_scale and v_scale read (8): 131,336
    dims = [[32, 8, 64], [32, 8, 64], [224304, 32, 8, 64], [224304, 32, 8, 64], [32], [], [], []]
    row = cost("_C_cache_ops::reshape_and_cache_flash", dims, [BF16] * 4 + [LONG, "", F32, F32])
    check(row, 0, 131_336, "bf16", "copy")


def test_silu_and_mul_and_fp8_quantization() -> None:
    # silu_and_mul(out [4, 11008], input [4, 22016]) bf16: FLOPs 5 * 44,032 = 220,160;
    # bytes 176,128 + 88,064 = 264,192
    check(cost("_C::silu_and_mul", [[4, 11008], [4, 22016]], [BF16, BF16]), 220_160, 264_192, "bf16", "elementwise")
    # static fp8: out [16, 4096] fp8, input bf16, scale [1] fp32: FLOPs 2 * 65,536; bytes 131,072 + 4 + 65,536
    check(cost("_C::scaled_fp8_quant", [[16, 4096], [16, 4096], [1]], [FP8, BF16, F32]),
          131_072, 196_612, "bf16", "elementwise")
    # per-token dynamic: the scales [16, 1] are written: FLOPs 3 * 65,536; bytes 131,072 + 65,536 + 64
    check(cost("_C::dynamic_per_token_scaled_fp8_quant", [[16, 4096], [16, 4096], [16, 1], []], [FP8, BF16, F32, ""]),
          196_608, 196_672, "bf16", "elementwise")


def test_topk_router() -> None:
    # TopK(logits [32, 32] bf16, k=4): FLOPs 5 * 1,024 = 5,120; bytes 2,048 + (T, k) fp32 weights 512
    # + int32 ids 512 = 3,072
    row = cost("TopK", [[32, 32], [], [], [], [], [], []], [BF16, "Scalar", "Scalar", "Scalar", "Scalar", "", ""],
               concrete=["", "4", "True", "1", "True", "", ""])
    check(row, 5_120, 3_072, "fp32", "reduction")


def test_moe_cost_by_hand() -> None:
    # 32 tokens, H 3072, I 2944 (gate/up 5888), 32 experts, top-4, MXFP4 weights:
    # per expert 3072*5888 + 2944*3072 = 27,131,904 weights; FLOPs 2 * 128 * that = 6,945,767,424
    # weight bytes per expert 27,131,904 / 2 + scales / 32 = 13,565,952 + 847,872 = 14,413,824;
    # experts touched 32 * (1 - (28/32)^32); activations (2*32*3072 + 2*128*2944 + 128*3072) * 2 = 2,686,976
    c = moe_cost(32, 3072, 2944, 5888, 32, 4, 2, 4)
    assert c.flops == 6_945_767_424
    assert c.bytes == pytest.approx(32 * (1 - 0.875 ** 32) * 14_413_824 + 2_686_976)
    assert expected_experts(32, 4, 1) == pytest.approx(4.0) and expected_experts(8, 8, 3) == pytest.approx(8.0)


def test_moe_without_its_weights_says_which_argument_is_missing() -> None:
    dims, types = [[32, 3072], [32, 32], [], []], [BF16, BF16, "", ""]
    row = cost("vllm::moe_forward", dims, types)
    assert row["reason"] == "no_shapes" and math.isnan(row["flops"])
    assert missing_argument("vllm::moe_forward", dims, types) == "no Input Dims for the expert weights"


def test_vllm_step_annotation_lengths() -> None:
    assert step_lengths(STEP) == {"sq": 32, "sk": 55086, "sqsk": 55086}
    # prefill of two sequences of 4 and 6 tokens: sqsq = 16 + 36 = 52, sqsk = 52; causal scores
    # 4*5/2 + 6*7/2 = 31 = 52 - (52 - 10) / 2
    assert step_lengths("execute_10_context_2(sq10sk10sqsq52sqsk52)_generation_0(sq0sk0sqsq0sqsk0)") == \
        {"sq": 10, "sk": 10, "sqsk": 31}
    assert step_lengths("ProfilerStep#3") is None


def test_step_lengths_under_a_sliding_window_are_bounded_by_it() -> None:
    # decode of 32 sequences, 55,086 keys (1,721 each on average), window 128: at most 128 keys a query,
    # so 32 * 128 = 4,096 scores and K/V reads of sq + n (W - 1) = 32 + 32 * 127 = 4,096 keys
    assert step_lengths(STEP, 128) == {"sq": 32, "sk": 4096, "sqsk": 4096}
    # a window longer than every sequence changes nothing
    assert step_lengths(STEP, 100_000) == step_lengths(STEP)
    # prefill of 4 and 6 tokens, window 3: scores at most 10 * 3 = 30 (exactly 1+2+3+3 + 1+2+3+3+3+3 = 24;
    # the annotation keeps only sums), keys at most min(10, 10 + 2 * 2) = 10
    assert step_lengths("execute_10_context_2(sq10sk10sqsq52sqsk52)_generation_0(sq0sk0sqsq0sqsk0)", 3) == \
        {"sq": 10, "sk": 10, "sqsk": 30}


def test_missing_notes_name_the_engine_op_and_its_missing_argument() -> None:
    k = pd.DataFrame({"missing": ["vllm::moe_forward: no Input Dims for the expert weights"] * 2
                      + ["aten::addmm: no Input Dims recorded", ""],
                      "unattributed": ["no_shapes"] * 3 + [""], "dur_ns": [2_000_000, 1_500_000, 9_000_000, 5]})
    assert missing_notes(k) == ["vllm::moe_forward: 3.500 ms uncosted: no Input Dims for the expert weights"]


# ---------------------------------------------------------------- the real vLLM decode


@pytest.fixture(scope="module")
def capture_costs() -> tuple[pd.Series, pd.DataFrame, pd.DataFrame]:
    from roofscope.analyzers.cost.attribution import op_costs
    from roofscope.analyzers.cost.costmodel import signature_costs
    from roofscope.analyzers.ingest import read as read_trace

    t = read_trace(CAPTURE)
    sig = signature_costs(t.signatures)
    names = t.ops["name"].astype(str)
    return names, op_costs(t, sig, STEP), op_costs(t, sig)


def _first(names: pd.Series, oc: pd.DataFrame, op: str) -> pd.Series:
    return oc[(names == op).to_numpy()].iloc[0]


@needs_vllm
def test_vllm_capture_costs_agree_with_tracelens(capture_costs) -> None:
    names, oc, _ = capture_costs
    mib = 2 ** 20
    # unified attention: TraceLens 0.902529024 GFLOP, 108.08984375 MiB (decode: 2 * 64 heads * 55086 * 128)
    att = _first(names, oc, "vllm::unified_attention_with_output")
    assert att["flops"] == 902_529_024 and att["bytes"] / mib == pytest.approx(108.08984375)
    # MoE: TraceLens 2.415919104 + 4.831838208 GFLOP and 142.930 + 284.923 MiB, taking the intermediate
    # size as the hidden size (3072); the weights say 2944, and we add the MXFP4 block scales
    moe = _first(names, oc, "vllm::moe_forward")
    assert moe["flops"] == 6_945_767_424
    assert moe["flops"] / 7.247757312e9 == pytest.approx(1, abs=0.05)
    assert moe["bytes"] / mib / (142.93016346657365 + 284.9228269331473) == pytest.approx(1, abs=0.03)
    norm = _first(names, oc, "aiter::rmsnorm2d_fwd_with_add_ck")
    assert norm["bytes"] / mib == pytest.approx(0.7086181640625)


@needs_vllm
def test_without_the_step_annotation_attention_says_what_is_missing(capture_costs) -> None:
    names, _, bare = capture_costs
    att = _first(names, bare, "vllm::unified_attention_with_output")
    assert att["reason"] == "no_shapes"
    assert att["missing"].startswith("vllm::unified_attention_with_output: no sequence")
    assert _first(names, bare, "vllm::moe_forward")["reason"] == ""  # its hints come from its own subtree


@needs_vllm
def test_vllm_decode_with_its_capture_is_costed() -> None:
    import roofscope

    a = roofscope.analyze(str(VLLM / "graph_execution.json.gz"), graph_capture=[str(CAPTURE)])
    u = a.to_dict()["unattributed"]
    # before the serving formulas 84.1% of the 10.718 ms had no cost; now aten::index (3 us: its index list
    # was not recorded) and GPT-OSS's 12 sliding-window layers' kernel_unified_attention_2d (0.162 ms: the
    # window is not in the trace; against the whole context they moved 113 MB in 13.5 us, 1.6x the roof)
    assert u["share"] == pytest.approx((161.786 + 2.959) / 10_717.708)  # us of 2d kernels + aten::index
    assert u["by_reason"]["no_shapes"]["kernels"] == 13
    assert [n for n in u["notes"] if "uncosted" in n] == [  # aten ops' missing shapes are not serving notes
        "vllm::unified_attention_with_output: 0.162 ms uncosted: " + WINDOW_NOT_RECORDED]
    k = a.kernels
    assert (k.loc[k["name"] == "kernel_unified_attention_2d", "unattributed"] == "no_shapes").all()
    # the full layers' split-KV calls keep TraceLens' figures: 902,529,024 FLOPs and 113,340,416 bytes a call
    full = k[k["name"].isin(["kernel_unified_attention_3d", "reduce_segments"])]
    assert full["flops"].sum() == pytest.approx(12 * 902_529_024) and full["bytes"].sum() == pytest.approx(
        12 * 113_340_416)
    # triton_poi_fused_0: the embedding's 32 gathered rows, not its 201088 (test_costmodel.py works the bytes)
    emb = k[k["name"] == "triton_poi_fused_0"].iloc[0]
    assert (emb["flops"], emb["bytes"]) == (8_388_608, 50_700_416)
    assert a.to_dict()["above_roof"]["kernels"] == 0  # were these two: 21.5x and 1.63x their roof


@needs_vllm
def test_vllm_decode_with_the_window_given_is_costed_whole() -> None:
    import roofscope

    a = roofscope.analyze(str(VLLM / "graph_execution.json.gz"), graph_capture=[str(CAPTURE)], attention_window=128)
    u = a.to_dict()["unattributed"]
    assert u["share"] == pytest.approx(2.959 / 10_717.708)  # aten::index alone
    assert [n for n in u["notes"] if "window given" in n] == [
        "vllm::unified_attention_with_output: 0.162 ms in 12 sliding-window kernels costed over the window given "
        "(--attention-window): at most that many keys per query, an upper bound where a sequence holds fewer"]
    k = a.kernels[a.kernels["name"] == "kernel_unified_attention_2d"]
    # 32 sequences x 128 keys = 4,096: FLOPs 2 * 64 heads * 4,096 * (64 + 64) = 67,108,864; bytes bf16:
    # Q 32*64*64*2 = 262,144 + K/V 4,096 x 8 heads x 128 x 2 = 8,388,608 + out 262,144 = 8,912,896
    assert set(k["flops"]) == {67_108_864} and set(k["bytes"]) == {8_912_896}
    assert set(k["cost_source"]) == {"window"} and a.to_dict()["above_roof"]["kernels"] == 0


@needs_vllm
def test_cli_subprocess_reports_the_coverage(tmp_path: Path) -> None:
    out = tmp_path / "a.json"
    r = subprocess.run([sys.executable, "-m", "roofscope", "analyze", str(VLLM / "graph_execution.json.gz"),
                        "--graph-capture", str(CAPTURE), "--json", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["summary"]["unattributed"]["share"] < 0.02  # 1.5%: windowed attention

    r = subprocess.run([sys.executable, "-m", "roofscope", "analyze", str(VLLM / "graph_execution.json.gz"),
                        "--graph-capture", str(CAPTURE), "--attention-window", "128", "--json", str(out), "--force",
                        "-q"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["summary"]["unattributed"]["share"] < 0.001  # aten::index's 3 us
    # a window where no call shows one: said, not silently ignored; and a window of 0 is refused
    r = subprocess.run([sys.executable, "-m", "roofscope", "analyze", str(VLLM / "graph_execution.json.gz"),
                        "--attention-window", "128", "-q"], capture_output=True, text=True)
    assert r.returncode == 0 and "--attention-window 128: no attention call here shows a sliding window" in r.stderr
    r = subprocess.run([sys.executable, "-m", "roofscope", "analyze", str(VLLM / "graph_execution.json.gz"),
                        "--attention-window", "0"], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "--attention-window" in r.stderr


def test_eager_vllm_step_costs_attention_and_moe_from_the_trace_around_them(tmp_path: Path) -> None:
    import gzip

    import roofscope
    from tests.kineto import TraceBuilder

    b = TraceBuilder()
    b.annotation("execute_4_context_0(sq0sk0sqsq0sqsk0)_generation_4(sq4sk400sqsq4sqsk400)", 0, 1000)
    qkvo = [[4, 8, 64], [4, 2, 64], [4, 2, 64], [4, 8, 64]]
    att = b.op("vllm::unified_attention_with_output", 10, 50, dims=qkvo + [[]] * 4, types=[BF16] * 4 + [""] * 4)
    b.launch_kernel("kernel_unified_attention_2d", 20, 100, 10, ext=att)
    moe = b.op("vllm::moe_forward", 100, 200, dims=[[4, 256], [4, 8], [], []], types=[BF16, BF16, "", ""])
    b.op("TopK", 110, 10, dims=[[4, 8], [], [], [], [], [], []], types=[BF16] + ["Scalar"] * 4 + ["", ""],
         concrete=["", "2", "True", "1", "True", "", ""])
    b.op("aten::view", 130, 2, dims=[[8, 256, 1024], []], types=[BF16, "ScalarList"])
    b.op("aten::view", 140, 2, dims=[[8, 512, 256], []], types=[BF16, "ScalarList"])
    b.launch_kernel("fused_moe_kernel", 150, 300, 40, ext=moe)
    p = tmp_path / "vllm.json.gz"
    with gzip.open(p, "wt") as f:
        json.dump(b.doc(), f)
    k = roofscope.analyze(str(p)).kernels.set_index("name")
    # attention: 8 query heads x 400 cached keys x (64 + 64) x 2 = 819,200 FLOPs; bytes bf16:
    # Q 4*8*64*2 = 4,096 + K/V of 400 tokens x 2 heads x 128 x 2 = 204,800 + out 4,096 = 212,992
    assert k.loc["kernel_unified_attention_2d", "flops"] == 819_200
    assert k.loc["kernel_unified_attention_2d", "bytes"] == 212_992
    # MoE, bf16 experts: H 256, gate/up (8, 256, 1024): 2I = 1024; down (8, 512, 256): I = 512;
    # 8 routed tokens x 2 x (256*1024 + 512*256) = 6,291,456 FLOPs
    assert k.loc["fused_moe_kernel", "flops"] == 6_291_456 and k.loc["fused_moe_kernel", "unattributed"] == ""


def test_a_single_pass_call_beside_split_kv_calls_is_a_windowed_layer_and_has_no_cost(tmp_path: Path) -> None:
    import gzip

    import roofscope
    from tests.kineto import TraceBuilder

    # Two decode steps of the same shapes (AITER's selection: the split-KV 3d kernel unless the layer has
    # a window, max_seqlen_k <= 512 or the 2d grid fills the device). Step 1: layer 0 runs 2d beside
    # layer 1's 3d + reduce_segments: layer 0 has a window. Step 2: both 2d (no split-KV call): no inference.
    b = TraceBuilder()
    qkvo = [[4, 8, 64], [4, 2, 64], [4, 2, 64], [4, 8, 64]]
    for step, t0, kinds in ((1, 0, ("2d", "3d")), (2, 1000, ("2d", "2d"))):
        b.annotation(f"execute_4_context_0(sq0sk0sqsq0sqsk0)_generation_4(sq4sk{400 * step}sqsq4sqsk{400 * step})",
                     t0, 900)
        for layer, kind in enumerate(kinds):
            ts = t0 + 10 + 100 * layer
            att = b.op("vllm::unified_attention_with_output", ts, 50, dims=qkvo + [[]] * 4, types=[BF16] * 4 + [""] * 4)
            b.launch_kernel(f"kernel_unified_attention_{kind}", ts + 10, ts + 500, 30, ext=att)
            if kind == "3d":
                b.launch_kernel("reduce_segments", ts + 20, ts + 540, 10, ext=att)
    p = tmp_path / "vllm.json.gz"
    with gzip.open(p, "wt") as f:
        json.dump(b.doc(), f)
    k = roofscope.analyze(str(p)).kernels.sort_values("ts_ns")
    windowed, split, reduce, *step2 = k.to_dict("records")
    assert (windowed["name"], split["name"], reduce["name"]) == \
        ("kernel_unified_attention_2d", "kernel_unified_attention_3d", "reduce_segments")
    assert windowed["unattributed"] == "no_shapes" and math.isnan(windowed["flops"])
    assert windowed["missing"] == "vllm::unified_attention_with_output: " + WINDOW_NOT_RECORDED
    # the full layer: 2 * 8 heads * 400 keys * 128 = 819,200 FLOPs on the 3d kernel (reduce_segments is the
    # op's split-KV epilogue: layout, no FLOPs); 212,992 bytes (Q 4,096 + K/V 400 x 2 heads x 128 x 2 B
    # = 204,800 + out 4,096)
    assert (split["flops"], reduce["flops"], reduce["category"]) == (819_200, 0, "layout")
    assert split["bytes"] == 212_992 and split["unattributed"] == reduce["unattributed"] == ""
    # step 2, 800 keys: both costed against the whole context, 2 * 8 * 800 * 128 = 1,638,400 FLOPs each
    assert [r["flops"] for r in step2] == [1_638_400, 1_638_400]

    # The window given (--attention-window 100): the windowed call reads at most 4 * 100 = 400 keys (all
    # of step 1's) and computes 2 * 8 * 400 * 128 = 819,200 FLOPs; nothing else changes.
    w = roofscope.analyze(str(p), attention_window=100).kernels.sort_values("ts_ns").to_dict("records")
    assert (w[0]["flops"], w[0]["bytes"], w[0]["cost_source"], w[0]["unattributed"], w[0]["missing"]) == \
        (819_200, 212_992, "window", "", "")
    assert [r["flops"] for r in w[1:]] == [split["flops"], reduce["flops"]] + [r["flops"] for r in step2]
    # window 10: 4 * 10 = 40 keys: 2 * 8 * 40 * 128 = 81,920 FLOPs; Q 4,096 + K/V 40 x 2 x 128 x 2 = 20,480
    # + out 4,096 = 28,672 bytes
    w = roofscope.analyze(str(p), attention_window=10).kernels.sort_values("ts_ns").iloc[0]
    assert (w["flops"], w["bytes"]) == (81_920, 28_672)


def test_fused_experts_with_fp8_weights_as_arguments() -> None:
    # vllm::inplace_fused_experts(x (16, 1024) bf16, w1 (8, 1024, 1024) fp8, w2 (8, 1024, 512) fp8,
    # topk_weights (16, 2), topk_ids (16, 2), ...): gate/up 2I = 1024 (w1 holds H*1024 per expert),
    # down I = 512; FLOPs 2 * 32 routed * (1024*1024 + 512*1024) = 100,663,296
    # bytes: experts touched 8 * (1 - (6/8)^16) x 1,572,864 fp8 weights + activations
    # (2*16*1024 + 2*32*512 + 32*1024) * 2 = 196,608
    dims = [[16, 1024], [8, 1024, 1024], [8, 1024, 512], [16, 2], [16, 2], []]
    row = cost("vllm::inplace_fused_experts", dims, [BF16, FP8, FP8, F32, "int", "Scalar"])
    assert row["flops"] == 100_663_296 and row["category"] == "gemm"
    assert row["bytes"] == pytest.approx(8 * (1 - 0.75 ** 16) * 1_572_864 + 196_608)


def test_topk_softmax_finds_the_logits_in_either_argument_order() -> None:
    # vLLM (weights!, ids!, token_expert_indices!, gating (64, 128) fp32) and SGLang (weights!, ids!, gating,
    # renormalize): FLOPs 5 * 8,192 = 40,960; bytes: gating 32,768 + the (64, 8) outputs
    vllm = cost("_moe_C::topk_softmax", [[64, 8], [64, 8], [64, 8], [64, 128]], [F32, "int", "int", F32])
    check(vllm, 40_960, 32_768 + 3 * 2_048, "fp32", "reduction")
    sgl = cost("sgl_kernel::topk_softmax", [[64, 8], [64, 8], [64, 128], []], [F32, "int", F32, "Scalar"])
    check(sgl, 40_960, 32_768 + 2 * 2_048, "fp32", "reduction")
