"""Attention formulas of our own (formulas/attention.py): hand-worked arithmetic, GQA, decode,
causal areas, varlen and paged ops, and agreement with torch.utils.flop_counter where it counts the same."""
from __future__ import annotations

import math

import pytest

from roofscope.analyzers.cost.formulas.attention import BOTTOM_RIGHT, TOP_LEFT, attention_flops, score_area
from tests.test_costmodel import BF16, F32, check, cost

# _cudnn_attention_forward(query, key, value, attn_bias, cum_seq_q, cum_seq_k, max_q, max_k,
#                          compute_log_sumexp, dropout_p, is_causal, return_debug_mask, scale)
CUDNN_TYPES = [BF16, BF16, BF16, "", "", "", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar", ""]


def test_gqa_decode_cudnn_forward_from_the_issue() -> None:
    # q [1,16,1,128], k/v [1,4,237,128]: each of 16 query heads scores 237 keys:
    # FLOPs 2 * B*Hq*Sq*Sk * (D + Dv) = 2 * 16*237 * 256 = 1,941,504
    # bytes bf16: q 16*128*2 = 4,096; k, v 4*237*128*2 = 242,688 each; out 4,096;
    # fp32 logsumexp [1,16,1] = 64 -> 493,632 (compute_log_sumexp unrecorded: written)
    dims = [[1, 16, 1, 128], [1, 4, 237, 128], [1, 4, 237, 128]] + [[]] * 10
    row = cost("aten::_cudnn_attention_forward", dims, CUDNN_TYPES,
               concrete=["", "", "", "", "", "", "0", "0", "", "0.", "False", "False", ""])
    check(row, 1_941_504, 4_096 + 2 * 242_688 + 4_096 + 64, "bf16", "attention")
    assert row.tensor_core


def test_gqa_prefill_causal_is_half_the_square() -> None:
    # q [2,8,512,64], k/v [2,2,512,64], causal: area 512^2/2 = 131,072 per (batch, head);
    # FLOPs 2 * 2*8*131,072 * 128 = 536,870,912 (half of the full square's 1,073,741,824)
    dims = [[2, 8, 512, 64], [2, 2, 512, 64], [2, 2, 512, 64]] + [[]] * 4
    row = cost("aten::_scaled_dot_product_flash_attention", dims, [BF16] * 3 + ["Scalar"] * 3 + [""],
               concrete=["", "", "", "0.", "True", "False", ""])
    assert row["flops"] == 536_870_912


def test_heads_must_divide() -> None:
    dims = [[1, 6, 1, 64], [1, 4, 9, 64], [1, 4, 9, 64]] + [[]] * 4
    row = cost("aten::_scaled_dot_product_flash_attention", dims, [BF16] * 3 + ["Scalar"] * 3 + [""])
    assert row["reason"] == "no_formula" and math.isnan(row["flops"])


@pytest.mark.parametrize("sq,sk,causal,area", [
    (4, 4, None, 16), (4, 4, TOP_LEFT, 8), (4, 4, BOTTOM_RIGHT, 8),
    (1, 237, BOTTOM_RIGHT, 236.5),   # decode row: every key but half a cell of the diagonal
    (1, 237, TOP_LEFT, 0.5),         # SDPA's is_causal with one query sees key 0 only
    (2, 6, TOP_LEFT, 2), (2, 6, BOTTOM_RIGHT, 10),   # 2*6 - 2^2/2
    (6, 2, TOP_LEFT, 10), (6, 2, BOTTOM_RIGHT, 2),
])
def test_score_area(sq: int, sk: int, causal: str | None, area: float) -> None:
    assert score_area(sq, sk, causal) == area


def test_backward_is_five_matmuls() -> None:
    # 2 * B*Hq*Sq*Sk * (3D + 2Dv) = 2 * 1*4*8*16 * (3*32 + 2*16) = 131,072
    assert attention_flops(1, 4, 8, 16, 32, 16, backward=True) == 131_072


def test_flash_internal_decode_attends_the_whole_cache() -> None:
    # _flash_attention_forward, (B, S, H, D): q [4,1,32,128], k/v [4,300,8,128], is_causal (bottom-right):
    # area 300 - 1/2 = 299.5; FLOPs 2 * 4*32*299.5 * 256 = 19,628,032
    dims = [[4, 1, 32, 128], [4, 300, 8, 128], [4, 300, 8, 128]] + [[]] * 7
    types = [BF16] * 3 + ["", "", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"]
    row = cost("aten::_flash_attention_forward", dims, types,
               concrete=["", "", "", "", "", "1", "300", "0.", "True", "False"])
    assert row["flops"] == 19_628_032


def test_flash_attn_package_varlen_with_paged_cache() -> None:
    # flash_attn::_flash_attn_varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, ...)
    # q packed [T=6, Hq=8, D=64] (6 decode tokens), k/v paged [blocks=10, 16, Hkv=2, 64], max_seqlen_k 100:
    # upper bound 2 * 6*8*100 * 128 = 1,228,800
    dims = [[6, 8, 64], [10, 16, 2, 64], [10, 16, 2, 64], [7], [7], [], [], [], [], []]
    types = [BF16, BF16, BF16, "int", "int", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"]
    row = cost("flash_attn::_flash_attn_varlen_forward", dims, types,
               concrete=["", "", "", "", "", "1", "100", "0.", "0.125", "True"])
    assert row["flops"] == 1_228_800 and row["category"] == "attention"


def test_vllm_paged_attention_reads_only_the_attended_pages() -> None:
    # _C::paged_attention_v1(out, query, key_cache, value_cache, num_kv_heads, scale, block_tables, seq_lens,
    #                        block_size, max_seq_len, ...): 4 sequences, Hq 32, Hkv 8, D 128, block 16,
    # max_seq_len 100 (7 pages = 112 token slots read per sequence and KV head)
    # FLOPs 2 * 4*32*100 * 256 = 6,553,600
    # bytes: q 4*32*128*2 = 32,768; block tables 4*8*4 = 128; seq_lens 4*4 = 16; K+V pages
    # 2 * 4*8*112*128*2 = 1,835,008; out 32,768 -> 1,900,688 (the 1000-block cache itself is never read whole).
    # The lengths are bounded, not known: the keys are an estimate, each sequence as long as the longest.
    dims = [[4, 32, 128], [4, 32, 128], [1000, 8, 16, 16, 8], [1000, 8, 128, 16], [], [], [4, 8], [4], [], []]
    types = [BF16, BF16, BF16, BF16, "Scalar", "Scalar", "int", "int", "Scalar", "Scalar"]
    row = cost("_C::paged_attention_v1", dims, types, concrete=["", "", "", "", "8", "0.08", "", "", "16", "100"])
    check(row, 6_553_600, 32_768 + 128 + 16 + 1_835_008 + 32_768, "bf16", "attention")
    # bounds: from 4 + 99 keys (one sequence of 100, three of 1) to 400: FLOPs 2 * 32 * 103 * 256 = 1,687,552;
    # bytes: q, out, tables, lengths 65,680 + K/V of 103 tokens (8 heads x 128 x 2 B x 2) 421,888 = 487,568
    assert row["estimate"] == "keys from the block table" and row["source"] == "formula"
    assert (row["flops_lo"], row["flops_hi"], row["bytes_lo"], row["bytes_hi"]) == (
        1_687_552, 6_553_600, 487_568, 1_900_688)


@pytest.mark.parametrize("q,k,backward", [
    ((2, 8, 128, 64), (2, 8, 256, 64), False), ((1, 16, 1, 128), (1, 4, 237, 128), False),
    ((2, 8, 64, 64), (2, 2, 64, 64), True), ((3, 4, 32, 80), (3, 4, 96, 80), True),
])
def test_agrees_with_flop_counter(q: tuple, k: tuple, backward: bool) -> None:
    """torch.utils.flop_counter counts the same matmuls (GQA since torch 2.12; it ignores masks)."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import flop_registry

    aten = torch.ops.aten
    try:
        if backward:
            ref = flop_registry[aten._scaled_dot_product_efficient_attention_backward](q, q, k, k)
        else:
            ref = flop_registry[aten._scaled_dot_product_flash_attention](q, k, k)
    except AssertionError:
        pytest.skip("this torch's flop_counter has no GQA")
    b, hq, sq, d = q
    assert attention_flops(b, hq, sq, k[2], d, k[3], backward=backward) == ref


def test_fp32_backward_signature() -> None:
    # _scaled_dot_product_efficient_attention_backward(grad_out, q, k, v, attn_bias, out, logsumexp,
    #   philox_seed, philox_offset, dropout_p, grad_input_mask, is_causal, scale): GQA q [1,4,16,32], k/v [1,2,16,32]
    # FLOPs 2 * 4*16*16 * (3*32 + 2*32) = 327,680
    dims = [[1, 4, 16, 32], [1, 4, 16, 32], [1, 2, 16, 32], [1, 2, 16, 32], [], [1, 4, 16, 32], [1, 4, 16],
            [], [], [], [], [], []]
    types = [F32] * 4 + [""] + [F32, F32, "long int", "long int", "Scalar", "ScalarList", "Scalar", ""]
    row = cost("aten::_scaled_dot_product_efficient_attention_backward", dims, types,
               concrete=[""] * 9 + ["0.", "[True, True, True, False]", "False", ""])
    assert row["flops"] == 327_680 and row["dtype"] == "fp32"
