"""Op families (analyzers/cost/formulas/families/): one formula per family, hand-worked, reached through each
framework's name and argument order, and through a name no one registered (its words and its tensors' shapes).
Signatures are those the frameworks define (vLLM csrc/torch_bindings.cpp, SGLang sgl-kernel, AITER's
compile_ops, FlashInfer's register_custom_op, TensorRT-LLM, torchao), as Kineto records them: Input Dims,
Input type, Concrete Inputs."""
from __future__ import annotations

import math

import pytest

from roofscope.analyzers.cost.formulas.families.roles import operands, squashed, words
from roofscope.analyzers.cost.costmodel import build_call, freeze
from tests.test_costmodel import BF16, F32, check, cost

FP8, U8, I32, I64, I8 = "c10::Float8_e4m3fn", "unsigned char", "int", "long int", "signed char"


# ---------------------------------------------------------------- names read as words


def test_names_as_words() -> None:
    assert words("sglang_profiler::attention_paged_attention_ragged_12") == "attention_paged_attention_ragged"
    assert words("LigerRMSNormFunction") == "liger_rmsnorm_function"
    assert squashed("aiter::rmsnorm2d_fwd_with_add_ck") == "rmsnorm2dfwdwithaddck"


def test_roles_by_shape() -> None:
    # paged-attention-like call: out and query led by the 4 tokens, two caches led by 512 pages, indices
    call = build_call("foo::op", freeze([[4, 8, 64], [4, 8, 64], [512, 16, 2, 64], [512, 16, 2, 64], [40], [5]]),
                      freeze([BF16, BF16, BF16, BF16, I32, I32]))
    ops = operands(call)
    assert ops.tokens == 4 and len(ops.acts) == 2 and len(ops.pools) == 2 and len(ops.ints) == 2


# ---------------------------------------------------------------- norms

RMS = [[4, 8], [8], []]  # T = 4 tokens of H = 8: 32 elements, bf16 64 bytes


@pytest.mark.parametrize(("name", "dims", "types"), [
    # an op no one registered: matched by its words and its (input, weight, eps) signature
    ("foo::my_rms_norm", RMS, [BF16, BF16, "Scalar"]),
    ("aiter::rms_norm_cu", [[4, 8]] + RMS, [BF16, BF16, BF16, "Scalar"]),              # (out, input, weight, eps)
    ("flashinfer::rmsnorm", [[4, 8]] + RMS + [[]], [BF16, BF16, BF16, "Scalar", "Scalar"]),
    ("sgl_kernel::rmsnorm", [[4, 8]] + RMS + [[]], [BF16, BF16, BF16, "Scalar", "Scalar"]),
    ("sglang_profiler::layernorm_rmsnorm_7", RMS, [BF16, BF16, "Scalar"]),            # a profiler wrapper, per layer
])
def test_rms_norm_under_every_name(name: str, dims: list, types: list) -> None:
    # FLOPs 4 * 32 = 128; bytes: input 64 + weight 16 + output 64 = 144 (an output implied when not passed)
    row = cost(name, dims, types)
    check(row, 128, 144, "bf16", "normalization")
    assert row["source"] == ("formula" if name.startswith(("aiter", "flashinfer", "sgl_kernel")) else "family")


def test_fused_add_rms_norm_in_place_and_out_of_place_agree() -> None:
    # read input, residual (64 each) and weight (16); write output and residual (64 each) = 272; FLOPs 5 * 32
    check(cost("aiter::fused_add_rms_norm_cu", [[4, 8], [4, 8], [8], []], [BF16, BF16, BF16, "Scalar"]),
          160, 272, "bf16", "normalization")
    check(cost("aiter::add_rmsnorm", [[4, 8]] * 4 + [[8], []], [BF16] * 5 + ["Scalar"]), 160, 272, "bf16",
          "normalization")


def test_add_rms_norm_with_dynamic_int8_quant() -> None:
    # AITER rmsnorm2d_fwd_with_add_dynamicquant(out int8, input, residual_in, residual_out, yscale (4, 1) fp32,
    # weight, eps): FLOPs (4 + 1 add + 3 dynamic quant) * 32 = 256; bytes: input 64 + weight 16 + int8 output 32
    # + scales 16 + residual read and written 128 = 256
    row = cost("aiter::rmsnorm2d_fwd_with_add_dynamicquant_ck", [[4, 8], [4, 8], [4, 8], [4, 8], [4, 1], [8], []],
               [I8, BF16, BF16, BF16, F32, BF16, "Scalar"])
    check(row, 256, 256, "bf16", "normalization")


def test_layer_norm_by_name_words() -> None:
    # an unknown fused LayerNorm (x, weight, bias, eps): FLOPs 8 * 32 = 256; bytes 64 + 16 + 16 + 64 = 160
    check(cost("foo::fused_layer_norm", [[4, 8], [8], [8], []], [BF16, BF16, BF16, "Scalar"]), 256, 160, "bf16",
          "normalization")


# ---------------------------------------------------------------- rotary


def test_rotary_out_of_place_flashinfer() -> None:
    # apply_rope_pos_ids_cos_sin_cache(q [4,8,64], k [4,2,64], q_rope, k_rope, cos_sin_cache [4096,64] fp32,
    # pos_ids [4] int32, interleave): rotated (4*8*64 + 4*2*64) = 2,560 elements: FLOPs 7,680; bytes: positions 16,
    # 4 cache rows 4*64*4 = 1,024, q, k read and q_rope, k_rope written 2 * (4,096 + 1,024) = 10,240 -> 11,280
    dims = [[4, 8, 64], [4, 2, 64], [4, 8, 64], [4, 2, 64], [4096, 64], [4], []]
    row = cost("flashinfer::apply_rope_pos_ids_cos_sin_cache", dims, [BF16] * 4 + [F32, I32, "Scalar"])
    check(row, 7_680, 11_280, "bf16", "elementwise")


def test_rotary_in_place_under_an_unknown_name() -> None:
    # (positions [4] int64, query [4, 512], key [4, 128], head_size 64, cos_sin_cache [4096, 64] bf16, is_neox):
    # rotated 4*512 + 4*128 = 2,560: FLOPs 7,680; bytes 32 + 4*64*2 = 512 + 2 * (4,096 + 1,024) = 10,784
    dims = [[4], [4, 512], [4, 128], [], [4096, 64], []]
    row = cost("sglang_profiler::rotary_embedding_forward_3", dims, [I64, BF16, BF16, "Scalar", BF16, "Scalar"],
               concrete=["", "", "", "64", "", "True"])
    check(row, 7_680, 10_784, "bf16", "elementwise")
    assert row["source"] == "family"


# ---------------------------------------------------------------- gated activations


def test_silu_and_mul_names_and_quantized_output() -> None:
    # out [4, 16], input [4, 32] bf16: FLOPs 5 * 64 = 320; bytes 256 + 128 = 384
    check(cost("aiter::silu_and_mul", [[4, 16], [4, 32]], [BF16, BF16]), 320, 384, "bf16", "elementwise")
    check(cost("foo::fused_swiglu", [[4, 32]], [BF16]), 320, 384, "bf16", "elementwise")  # output implied
    # fp8 output and its scale: (5 + 3) * 64 = 512 FLOPs; bytes 256 + 64 + 4 = 324
    check(cost("_C::silu_and_mul_quant", [[4, 16], [4, 32], [1]], [FP8, BF16, F32]), 512, 324, "bf16", "elementwise")


# ---------------------------------------------------------------- quantization


def test_quantize_fp8_per_token_group_and_nvfp4() -> None:
    # (x [4, 256] bf16, x_q fp8, x_s [4, 2] fp32, group 128, eps): dynamic: 3 * 1,024 = 3,072 FLOPs;
    # bytes 2,048 + 1,024 + 32 = 3,104
    check(cost("foo::per_token_group_quant_fp8", [[4, 256], [4, 256], [4, 2], [], []],
               [BF16, FP8, F32, "Scalar", "Scalar"]), 3_072, 3_104, "bf16", "elementwise")
    # vLLM scaled_fp4_quant(output uint8 [4, 128] (two fp4 a byte), input [4, 256], output_scale int32 [128, 4]
    # (swizzled fp8 block scales), input_scale [1]): 3 * 1,024 FLOPs; bytes 2,048 + 512 + 2,048 + 4 = 4,612
    check(cost("_C::scaled_fp4_quant", [[4, 128], [4, 256], [128, 4], [1]], [U8, BF16, I32, F32]),
          3_072, 4_612, "bf16", "elementwise")


def test_dequantize_int8() -> None:
    # torchao dequantize_affine(int8 [4, 256], block_size, scale [4, 1] fp32, ...): 2 * 1,024 FLOPs; bytes:
    # input 1,024 + a 2-byte output 2,048 + scale 16 = 3,088
    row = cost("torchao::dequantize_affine", [[4, 256], [], [4, 1], [], [], [], [], []],
               [I8, "GenericList", F32, "", "Scalar", "Scalar", "Scalar", "Scalar"])
    check(row, 2_048, 3_088, "", "elementwise")


# ---------------------------------------------------------------- KV-cache writes


def test_kv_store_by_slot_into_an_fp8_cache() -> None:
    # SGLang store_cache(k [4, 2, 64] bf16, v, k_cache [1024, 2, 64] fp8, v_cache, loc [4] int64): the 1,024
    # new elements read (2,048 B) and stored at one byte each (1,024), the slots 32; a quantizing store 2 FLOPs
    # an element. The 1024-slot caches are never read.
    dims = [[4, 2, 64], [4, 2, 64], [1024, 2, 64], [1024, 2, 64], [4]]
    check(cost("sglang::store_cache", dims, [BF16, BF16, FP8, FP8, I64]), 2_048, 3_104, "bf16", "copy")


# ---------------------------------------------------------------- paged attention

RAGGED = [[4, 8, 64], [4, 8, 4], [4, 8, 64], [512, 16, 2, 64], [512, 16, 2, 64], [], [5], [40], [4], [], [], [], [],
          [], [], [1], [1]]
RAGGED_T = [BF16, F32, BF16, BF16, BF16, "Scalar", I32, I32, I32, "Scalar", "Scalar", "", "", "", "Scalar", F32, F32]
RAGGED_C = ["", "", "", "", "", "0.125", "", "", "", "16", "2", "", "auto", "NHD", "0.", "", ""]


def test_sglang_paged_attention_ragged_on_mi300() -> None:
    # AITER paged_attention_ragged(out, workspace [4, 8, 4] fp32, query [4, 8, 64], key_cache / value_cache
    # [512 pages, 16, 2 heads, 64] (NHD), scale, kv_indptr [5], kv_page_indices [40], kv_last_page_lens [4],
    # block_size 16, max_num_partitions 2, ...), wrapped by SGLang's profiler (per-layer suffix).
    # 4 sequences on 40 pages of 16: between (40 - 4) * 16 + 4 = 580 and 640 keys; estimated with half of each
    # last page used: 640 - 4 * 15 / 2 = 610. FLOPs 2 * 8 heads * 610 * 128 = 1,249,280.
    # Bytes: q 4,096 + out 4,096 + indices 20 + 160 + 16 + scales 8 = 8,396; K and V 256 B a token each:
    # 610 * 512 = 312,320 -> 320,716 (the 512-page caches are never read whole)
    row = cost("sglang_profiler::attention_paged_attention_ragged_12", RAGGED, RAGGED_T, concrete=RAGGED_C)
    check(row, 1_249_280, 320_716, "bf16", "attention")
    assert row["tensor_core"] and row["source"] == "family" and row["estimate"] == "keys from the page indices"
    assert (row["flops_lo"], row["flops_hi"]) == (2 * 8 * 580 * 128, 2 * 8 * 640 * 128)
    assert (row["bytes_lo"], row["bytes_hi"]) == (8_396 + 580 * 512, 8_396 + 640 * 512)


def test_an_fp8_cache_is_read_at_one_byte_an_element() -> None:
    types = RAGGED_T[:3] + [FP8, FP8] + RAGGED_T[5:]
    row = cost("aiter::paged_attention_ragged", RAGGED, types, concrete=RAGGED_C)
    # K and V 128 B a token each: 8,396 + 610 * 256 = 164,556
    check(row, 1_249_280, 164_556, "bf16", "attention")


def test_sglang_token_pool_decode_is_exact() -> None:
    # SGLang's triton decode over a one-token-page pool: (q [4, 8, 64], k_buffer [10000, 2, 64], v_buffer, o,
    # kv_indptr [5], kv_indices [900], ...): 900 keys exactly. FLOPs 2 * 8 * 900 * 128 = 1,843,200; bytes:
    # q 4,096 + out 4,096 + indices 20 + 3,600 + K/V 900 * 2 * 2 * 64 * 2 = 460,800 -> 472,612
    dims = [[4, 8, 64], [10000, 2, 64], [10000, 2, 64], [4, 8, 64], [5], [900], [], []]
    row = cost("sglang_profiler::triton_decode_attention_fwd_3", dims, [BF16] * 4 + [I32, I32, "Scalar", "Scalar"])
    check(row, 1_843_200, 472_612, "bf16", "attention")
    assert row["estimate"] == ""


def test_attention_without_lengths_says_so() -> None:
    row = cost("foo::decode_attention", [[4, 8, 64], [512, 16, 2, 64], [512, 16, 2, 64]], [BF16] * 3)
    assert row["reason"] == "no_shapes" and math.isnan(row["bytes"])


# ---------------------------------------------------------------- MoE


def test_nvfp4_grouped_gemm_reads_the_touched_experts() -> None:
    # vLLM cutlass_fp4_group_mm(out [8, 512] bf16, a [8, 128] uint8 (K = 256 fp4), b [4, 512, 128] uint8,
    # a_blockscale [8, 16] fp8, b_blockscales [4, 512, 16] fp8, alphas [4], problem_sizes [4, 3],
    # expert_offsets [4], sf_offsets [4]): FLOPs 2 * 8 * 512 * 256 = 2,097,152. Bytes: expected experts of 8 rows
    # over 4: 4 * (1 - 0.75^8) = 3.5995 of 65,536 B each, + rows and scales 1,024 + 8,192 + 128 + 32,768 + 16
    # + indices 48 + 16 + 16 = 42,208; bounds: 1 to 4 experts
    dims = [[8, 512], [8, 128], [4, 512, 128], [8, 16], [4, 512, 16], [4], [4, 3], [4], [4]]
    types = [BF16, U8, U8, FP8, FP8, F32, I32, I32, I32]
    row = cost("_C::cutlass_fp4_group_mm", dims, types)
    touched = 4 * (1 - 0.75 ** 8)
    assert row["flops"] == 2_097_152 and row["category"] == "gemm" and row["tensor_core"]
    assert row["bytes"] == pytest.approx(touched * 65_536 + 42_208)
    assert (row["bytes_lo"], row["bytes_hi"]) == (65_536 + 42_208, 4 * 65_536 + 42_208)


def test_fused_moe_of_flashinfer_weights_as_arguments() -> None:
    # trtllm_fp8_block_scale_moe(routing_logits [16, 8] fp32, routing_bias, hidden_states [16, 1024] fp8,
    # hidden_states_scale [8, 16], gemm1_weights [8, 1024, 1024] fp8, gemm1_scales, gemm2_weights [8, 1024, 512],
    # gemm2_scales, num_experts 8, top_k 2, ...): k from the top_k argument; gate/up 1024 (I 512), down 512 -> 1024:
    # FLOPs 2 * 32 * (1024*1024 + 512*1024) = 100,663,296
    dims = [[16, 8], [], [16, 1024], [8, 16], [8, 1024, 1024], [8, 8, 8], [8, 1024, 512], [8, 8, 4], [], []]
    types = [F32, "", FP8, F32, FP8, F32, FP8, F32, "Scalar", "Scalar"]
    row = cost("flashinfer::trtllm_fp8_block_scale_moe", dims, types, concrete=[""] * 8 + ["8", "2"])
    assert row["flops"] == 100_663_296 and row["estimate"] == "experts touched: expected under uniform routing"


def test_moe_align_is_costed_as_a_permutation() -> None:
    # moe_align_block_size(topk_ids [16, 2] int32, num_experts, block_size, sorted_token_ids [95], experts_ids [6],
    # num_tokens_post_pad [1], cumsum [9], pad): 2 FLOPs a routed row (32); bytes: each tensor once
    # 128 + 380 + 24 + 4 + 36 = 572
    dims = [[16, 2], [], [], [95], [6], [1], [9], []]
    row = cost("sgl_kernel::moe_align_block_size", dims, [I32, "Scalar", "Scalar", I32, I32, I32, I32, "Scalar"])
    check(row, 64, 572, "", "copy")


# ---------------------------------------------------------------- sampling and signatures


def test_top_k_top_p_sampling() -> None:
    # (probs [4, 1000] fp32, top_k [4] int32, top_p [4] fp32, ...): 2 * 4,000 FLOPs; bytes 16,000 + 16 + 16
    # + the 4 int64 samples 32 = 16,064
    row = cost("flashinfer::top_k_top_p_sampling_from_probs", [[4, 1000], [4], [4], [], []],
               [F32, I32, F32, "Scalar", "Scalar"])
    check(row, 8_000, 16_064, "fp32", "reduction")


def test_unknown_elementwise_op_is_memory_bound_from_its_signature() -> None:
    # foo::scale_shift(x [4, 8] bf16, scale [8], shift [8]): 64 + 16 + 16 = 96 bytes, no FLOPs
    row = cost("foo::scale_shift", [[4, 8], [8], [8]], [BF16, BF16, BF16])
    check(row, 0, 96, "bf16", "other")
    assert row["source"] == "signature" and not row["tensor_core"]


def test_autograd_functions_of_liger_and_apex_are_costed_by_their_family() -> None:
    # torch records an autograd Function's inputs: LigerRMSNormFunction(X [4, 8], W [8], eps) is an RMSNorm
    # (FLOPs 4 * 32, bytes 144), apex's FusedLayerNormAffineFunction(x, weight, bias, shape, eps) a LayerNorm;
    # their backward nodes are not (a backward is not its forward's family)
    check(cost("LigerRMSNormFunction", RMS, [BF16, BF16, "Scalar"]), 128, 144, "bf16", "normalization")
    check(cost("FusedLayerNormAffineFunction", [[4, 8], [8], [8], [], []], [BF16, BF16, BF16, "ScalarList", "Scalar"]),
          256, 160, "bf16", "normalization")
    assert cost("LigerRMSNormFunctionBackward", [[4, 8]], [BF16])["reason"] == "no_formula"
