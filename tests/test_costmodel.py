"""signature_costs on hand-worked signatures (arithmetic in the comments) and real traces."""
from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from roofscope.analyzers.cost.costmodel import COLUMNS, clear_cache, signature_costs

from .conftest import external

DATA = Path(__file__).resolve().parent / "data"
A100 = external("hta_a100_rank0.json.gz")
BF16, F32, F16 = "c10::BFloat16", "float", "c10::Half"


def cost(name: str, dims: Any, types: Any, strides: Any = None, concrete: Any = None) -> pd.Series:
    df = pd.DataFrame([{"name": name, "input_dims": dims, "input_types": types, "input_strides": strides,
                        "concrete_inputs": concrete}], index=[7])
    out = signature_costs(df)
    assert list(out.columns) == COLUMNS and list(out.index) == [7]
    return out.loc[7]


def check(row: pd.Series, flops: float, nbytes: float, dtype: str, category: str, reason: str = "") -> None:
    got = (row["flops"], row["bytes"], row["dtype"], row["category"], row["reason"])
    want = (flops, nbytes, dtype, category, reason)
    assert all((isinstance(w, float) and math.isnan(w) and math.isnan(g)) or g == w for g, w in zip(got, want)), \
        f"got {got}, want {want}"


# ---------------------------------------------------------------- gemm


def test_addmm_bf16() -> None:
    # addmm (16x512)@(512x1024) + bias[16,1024]: 2*16*512*1024 = 16,777,216 FLOPs;
    # bytes bf16: (16*1024 bias + 16*512 + 512*1024 + 16*1024 out) * 2 = 1,130,496
    row = cost("aten::addmm", [[16, 1024], [16, 512], [512, 1024], [], []], [BF16, BF16, BF16, "Scalar", "Scalar"],
               concrete=["", "", "", "1", "1"])
    check(row, 16_777_216, 1_130_496, "bf16", "gemm")
    assert row.tensor_core


def test_addmm_broadcast_bias_is_read_once() -> None:
    # bias [1024] broadcast: (1024 + 16*512 + 512*1024 + 16*1024) * 2 = 1,099,776
    row = cost("aten::addmm", [[1024], [16, 512], [512, 1024], [], []], [BF16, BF16, BF16, "Scalar", "Scalar"])
    check(row, 16_777_216, 1_099_776, "bf16", "gemm")


def test_mm_fp32() -> None:
    # (64x128)@(128x32): 2*64*128*32 = 524,288; bytes (8192 + 4096 + 2048 out) * 4 = 57,344
    check(cost("aten::mm", [[64, 128], [128, 32]], [F32, F32]), 524_288, 57_344, "fp32", "gemm")


def test_mm_with_out_buffer_counts_it_as_a_write() -> None:
    # Inductor's extern mm(out=): the out buffer is recorded as a third input but only written
    check(cost("aten::mm", [[64, 128], [128, 32], [64, 32]], [F32, F32, F32]), 524_288, 57_344, "fp32", "gemm")


def test_bmm_fp16() -> None:
    # [4,64,32]@[4,32,48]: 2*4*64*32*48 = 786,432; bytes (8192 + 6144 + 12288) * 2 = 53,248
    check(cost("aten::bmm", [[4, 64, 32], [4, 32, 48]], [F16, F16]), 786_432, 53_248, "fp16", "gemm")


def test_int_mm_is_int8_precision() -> None:
    # (32x64)@(64x16) int8 -> int32: 2*32*64*16 = 65,536; bytes 2048 + 1024 + 512*4 = 5,120
    check(cost("aten::_int_mm", [[32, 64], [64, 16]], ["signed char", "signed char"]), 65_536, 5_120, "int8",
          "gemm")


# ---------------------------------------------------------------- conv

CONV_TYPES = [F32, F32, F32, "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"]


def test_convolution_3x3_same() -> None:
    # x[2,3,32,32] w[16,3,3,3] pad 1 -> out [2,16,32,32]
    # FLOPs 2 * (32*32 out pixels) * (3*3 taps) * 2 batch * 16 C_out * 3 C_in = 1,769,472
    # bytes (6144 x + 432 w + 16 bias + 32768 out) * 4 = 157,440
    row = cost("aten::convolution", [[2, 3, 32, 32], [16, 3, 3, 3], [16], [], [], [], [], [], []], CONV_TYPES,
               concrete=["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"])
    check(row, 1_769_472, 157_440, "fp32", "conv")
    assert row.tensor_core


def test_convolution_strided() -> None:
    # stride 2, pad 1 -> out [2,16,16,16]: 1,769,472 / 4 = 442,368 FLOPs;
    # bytes (6144 + 432 + 16 + 8192) * 4 = 59,136
    row = cost("aten::convolution", [[2, 3, 32, 32], [16, 3, 3, 3], [16], [], [], [], [], [], []], CONV_TYPES,
               concrete=["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"])
    check(row, 442_368, 59_136, "fp32", "conv")


def test_strided_1x1_convolution_reads_only_the_pixels_it_samples() -> None:
    # ResNet-50's downsample: x[64,256,56,56] w[512,256,1,1] stride 2 -> out [64,512,28,28] (cuDNN op)
    # FLOPs 2 * 64 * 512 * 28 * 28 * 256 = 13,153,337,344
    # the 1x1 filter at stride 2 reads every other row and column: 28/56 * 28/56 = 1/4 of x
    # bytes bf16: x 102,760,448 / 4 = 25,690,112 + w 262,144 + out 51,380,224 = 77,332,480
    # (counting all of x gave 154,402,816 bytes, and the kernel ran at 112% of that roof on an H100)
    row = cost("aten::cudnn_convolution", [[64, 256, 56, 56], [512, 256, 1, 1], [], [], [], [], [], [], []],
               [BF16, BF16, "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar", "Scalar"],
               concrete=["", "", "[0, 0]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"])
    check(row, 13_153_337_344, 77_332_480, "bf16", "conv")
    # a 3x3 filter at stride 2 overlaps its neighbours' rows: all of x is read (59,136 above)


def test_convolution_without_parameters_has_no_shapes() -> None:
    # old traces: stride/padding not recorded -> the output size is unknown, nothing is guessed
    row = cost("aten::convolution", [[2, 3, 32, 32], [16, 3, 3, 3], [16], [], [], [], [], [], []], CONV_TYPES)
    check(row, math.nan, math.nan, "fp32", "conv", "no_shapes")


BWD_TYPES = [F32, F32, F32, "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar",
             "ScalarList"]
BWD_DIMS = [[2, 16, 32, 32], [2, 3, 32, 32], [16, 3, 3, 3], [], [], [], [], [], [], [], []]


def test_convolution_backward() -> None:
    # grad_input (a transposed conv, same MACs as forward) 1,769,472 + grad_weight 1,769,472 = 3,538,944
    # bytes: read grad_out 32768 + x 6144 + w 432, write grad_x 6144 + grad_w 432 + grad_bias 16
    #        = 45,936 elements * 4 = 183,744
    row = cost("aten::convolution_backward", BWD_DIMS, BWD_TYPES,
               concrete=["", "", "", "[16]", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1",
                         "[True, True, True]"])
    check(row, 3_538_944, 183_744, "fp32", "conv")


def test_convolution_backward_weight_only() -> None:
    # output_mask [False, True, False]: grad_weight only; bytes (32768 + 6144 + 432 + 432) * 4 = 159,104
    row = cost("aten::convolution_backward", BWD_DIMS, BWD_TYPES,
               concrete=["", "", "", "None", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1",
                         "[False, True, False]"])
    check(row, 1_769_472, 159_104, "fp32", "conv")


def test_convolution_backward_old_trace_infers_transposed_from_channels() -> None:
    # no Concrete Inputs: w[0] == grad_out channels != x channels -> a regular conv; mask -> all
    check(cost("aten::convolution_backward", BWD_DIMS, BWD_TYPES), 3_538_944, 183_744, "fp32", "conv")


# ---------------------------------------------------------------- attention

QKV = [[2, 8, 1024, 64]] * 3
SDPA_TYPES = [BF16, BF16, BF16, "Scalar", "Scalar", "Scalar", ""]


@pytest.mark.parametrize("causal,flops", [("True", 2_147_483_648), ("False", 4_294_967_296)])
def test_sdpa_flash_forward(causal: str, flops: int) -> None:
    # 4*B*H*S*S*D = 4*2*8*1024*1024*64 = 4,294,967,296; causal counts half the score square
    # bytes: q,k,v 3 * 1,048,576 * 2 + out 2,097,152 + fp32 logsumexp 2*8*1024*4 = 8,454,144
    row = cost("aten::_scaled_dot_product_flash_attention", QKV + [[]] * 4, SDPA_TYPES,
               concrete=["", "", "", "0.", causal, "False", ""])
    check(row, flops, 8_454_144, "bf16", "attention")
    assert row.tensor_core


@pytest.mark.parametrize("causal,flops", [("True", 5_368_709_120), ("False", 10_737_418_240)])
def test_sdpa_flash_backward(causal: str, flops: int) -> None:
    # backward = 5 matmuls = 2.5 * forward; bytes: read grad_out, q, k, v, out (5 * 2,097,152),
    # logsumexp 65,536, 2 int64 cum_seq (0-dim, 16), 2 int64 philox (16); write dq, dk, dv 3 * 2,097,152
    dims = [[2, 8, 1024, 64]] * 5 + [[2, 8, 1024], [], [], [], [], [], [], [], [], []]
    types = [BF16] * 5 + [F32, "long int", "long int", "Scalar", "Scalar", "Scalar", "Scalar", "long int",
                          "long int", ""]
    concrete = [""] * 8 + ["1024", "1024", "0.", causal, "", "", ""]
    row = cost("aten::_scaled_dot_product_flash_attention_backward", dims, types, concrete=concrete)
    check(row, flops, 8 * 2_097_152 + 65_536 + 32, "bf16", "attention")


def test_flash_internal_uses_bshd_layout() -> None:
    # _flash_attention_forward takes (B, S, H, D) = [2,1024,8,64]: same FLOPs as SDPA's (B, H, S, D)
    # (read as BHSD it would be 4*2*1024*8*8*64 = 33,554,432)
    dims = [[2, 1024, 8, 64]] * 3 + [[]] * 7
    types = [BF16] * 3 + ["", "", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"]
    row = cost("aten::_flash_attention_forward", dims, types,
               concrete=["", "", "", "", "", "1024", "1024", "0.", "False", "False"])
    check(row, 4_294_967_296, 8_454_144, "bf16", "attention")


# ---------------------------------------------------------------- elementwise, reductions, norms


def test_gelu() -> None:
    # 5 FLOPs/element (erf form) * 4096 = 20,480; bytes 2 * 4096 * 4 = 32,768
    check(cost("aten::gelu", [[4, 1024], []], [F32, ""], concrete=["", ""]), 20_480, 32_768, "fp32", "elementwise")
    # approximate="tanh": 9 * 4096 = 36,864
    check(cost("aten::gelu", [[4, 1024], []], [F32, "Scalar"], concrete=["", "tanh"]), 36_864, 32_768, "fp32",
          "elementwise")


def test_inplace_add_reads_and_writes_self() -> None:
    # add_(self[1000], other[1000]): 1000 FLOPs; bytes (read self + read other + write self) * 4 = 12,000
    row = cost("aten::add_", [[1000], [1000], []], [F32, F32, "Scalar"], concrete=["", "", "1"])
    check(row, 1000, 12_000, "fp32", "elementwise")


def test_out_variant_uses_rule_shape_not_stale_out_buffer() -> None:
    # add(out=empty[0]): out resized to [4,8]; bytes (128 + 128 read + 128 write) = 384
    row = cost("aten::add", [[4, 8], [4, 8], [], [0]], [F32, F32, "Scalar", F32], concrete=["", "", "1", ""])
    check(row, 32, 384, "fp32", "elementwise")


def test_type_promotion_and_broadcast_footprint() -> None:
    # div(float [2,16,1] expanded from one element (strides 0), int64 [2,16,1]) -> float32 [2,16,1]
    # bytes: 1 element * 4 + 32 * 8 + 32 * 4 out = 388
    row = cost("aten::div", [[2, 16, 1], [2, 16, 1]], [F32, "long int"], strides=[[0, 0, 0], [16, 1, 1]],
               concrete=["", ""])
    check(row, 32, 388, "fp32", "elementwise")
    # gt(float[4,8], 0) -> bool: 128 + 32 = 160
    check(cost("aten::gt", [[4, 8], []], [F32, "Scalar"], concrete=["", "0"]), 32, 160, "fp32", "elementwise")
    # int32 * int32 -> int32: 3 * 4096 * 4 = 49,152; no floating input -> dtype ""
    check(cost("aten::mul", [[4096], [4096]], ["int", "int"]), 4096, 49_152, "", "elementwise")
    # int32 / int32 -> float32 (true division): same bytes
    check(cost("aten::div", [[4096], [4096]], ["int", "int"]), 4096, 49_152, "", "elementwise")


def test_native_layer_norm_bf16() -> None:
    # x [8,512,768] = 3,145,728 elements * 8 FLOPs (mean 1, var 3, normalize 2, weight 1, bias 1) = 25,165,824
    # bytes: x 6,291,456 + w 1536 + b 1536 + out 6,291,456 + fp32 mean & rstd 2 * 4096 * 4 = 12,618,752
    row = cost("aten::native_layer_norm", [[8, 512, 768], [], [768], [768], []], [BF16, "ScalarList", BF16, BF16,
                                                                                   "Scalar"],
               concrete=["", "[768]", "", "", "1e-05"])
    check(row, 25_165_824, 12_618_752, "bf16", "normalization")


def test_sum_over_a_dim() -> None:
    # sum([32,4096], dim=[1]): 131,072 FLOPs; bytes 524,288 + 32 * 4 = 524,416
    row = cost("aten::sum", [[32, 4096], [], [], []], [F32, "ScalarList", "Scalar", ""],
               concrete=["", "[1]", "False", ""])
    check(row, 131_072, 524_416, "fp32", "reduction")
    # the same op in an old trace (dims not recorded): input bytes only, a documented lower bound
    check(cost("aten::sum", [[32, 4096], [], [], []], [F32, "", "Scalar", ""]), 131_072, 524_288, "fp32",
          "reduction")
    # sum of int32 -> int64 scalar: 4000 + 8 = 4,008
    check(cost("aten::sum", [[1000], []], ["int", ""], concrete=["", ""]), 1000, 4008, "", "reduction")


def test_softmax() -> None:
    # [4,16,128,128] = 1,048,576 elements * 5 FLOPs = 5,242,880; fp16 in + out = 4,194,304 bytes
    row = cost("aten::_softmax", [[4, 16, 128, 128], [], []], [F16, "Scalar", "Scalar"], concrete=["", "-1", "False"])
    check(row, 5_242_880, 4_194_304, "fp16", "softmax")
    # half_to_float: fp32 output -> 2,097,152 + 4,194,304 = 6,291,456
    row = cost("aten::_softmax", [[4, 16, 128, 128], [], []], [F16, "Scalar", "Scalar"], concrete=["", "-1", "True"])
    check(row, 5_242_880, 6_291_456, "fp16", "softmax")


def test_max_pool_ceil_mode() -> None:
    # 7x7, kernel 2, stride 2, ceil_mode -> 4x4 windows (torch agrees): 16 outputs * 4 taps = 64 FLOPs;
    # bytes: in 49*4 + out 16*4 + int64 indices 16*8 = 388
    row = cost("aten::max_pool2d_with_indices", [[1, 1, 7, 7], [], [], [], [], []],
               [F32, "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar"],
               concrete=["", "[2, 2]", "[2, 2]", "[0, 0]", "[1, 1]", "True"])
    check(row, 64, 388, "fp32", "reduction")


def test_reshaping_copies() -> None:
    # upsample_nearest2d.vec to 8x8 (formulas/shapes.py): out [1,2,8,8]; bytes (32 + 128) * 4 = 640
    row = cost("aten::upsample_nearest2d", [[1, 2, 4, 4], [], []], [F32, "ScalarList", ""],
               concrete=["", "[8, 8]", ""])
    check(row, 0, 640, "fp32", "copy")
    # constant_pad_nd by (1, 1, 2, 2): out [2,3,8,6] = 288; bytes (96 + 288) * 4 = 1,536
    row = cost("aten::constant_pad_nd", [[2, 3, 4, 4], [], []], [F32, "ScalarList", "Scalar"],
               concrete=["", "[1, 1, 2, 2]", "0."])
    check(row, 0, 1536, "fp32", "copy")
    # without the pad amounts nothing is guessed
    row = cost("aten::constant_pad_nd", [[2, 3, 4, 4], [], []], [F32, "ScalarList", "Scalar"])
    check(row, math.nan, math.nan, "fp32", "copy", "no_shapes")
    # repeat [2,3] by (2, 1, 2): out [2,2,6] = 24; bytes (6 + 24) * 4 = 120
    check(cost("aten::repeat", [[2, 3], []], [F32, "ScalarList"], concrete=["", "[2, 1, 2]"]), 0, 120, "fp32", "copy")
    # bilinear to 8x8: 128 outputs * (4 taps * 2 - 1) = 896 FLOPs; bytes (32 + 128) * 4 = 640
    row = cost("aten::upsample_bilinear2d", [[1, 2, 4, 4], [], [], [], []], [F32, "ScalarList", "Scalar", "", ""],
               concrete=["", "[8, 8]", "False", "", ""])
    check(row, 896, 640, "fp32", "elementwise")
    # a pad torch refuses (reflection by the whole width) is not costed
    row = cost("aten::reflection_pad1d", [[2, 4], []], [F32, "ScalarList"], concrete=["", "[4, 0]"])
    check(row, math.nan, math.nan, "fp32", "copy", "no_shapes")


# ---------------------------------------------------------------- copies, optimizer, views, triton


def test_copy_fp32_into_bf16() -> None:
    # dst is only written: src 1,048,576 * 4 + dst 1,048,576 * 2 = 6,291,456
    row = cost("aten::copy_", [[1024, 1024], [1024, 1024], []], [BF16, F32, "Scalar"], concrete=["", "", "False"])
    check(row, 0, 6_291_456, "bf16", "copy")


def test_embedding_reads_only_gathered_rows() -> None:
    # weight [50000,512] fp32, indices [8,128] int64: 8192 + 1024*512*4 gathered + 1024*512*4 written
    row = cost("aten::embedding", [[50000, 512], [8, 128], [], [], []], [F32, "long int", "Scalar", "Scalar", "Scalar"],
               concrete=["", "", "-1", "False", "False"])
    check(row, 0, 8192 + 2 * 2_097_152, "fp32", "embedding")


def test_foreach_mul_inplace() -> None:
    # two params (100 + 5 elements, TensorList -> fp32): 105 FLOPs; read + write 105 * 4 * 2 = 840
    row = cost("aten::_foreach_mul_", [[[10, 10], [5]], []], ["TensorList", "Scalar"], concrete=["", "0.9"])
    check(row, 105, 840, "fp32", "optimizer")


def test_foreach_addcdiv() -> None:
    # self += v * t1 / t2: 3 FLOPs * 105 = 315; self r+w 840 + t1, t2 read 2 * 420 = 1,680
    lists = [[[10, 10], [5]]] * 3
    row = cost("aten::_foreach_addcdiv_", lists + [[]], ["TensorList"] * 3 + ["ScalarList"],
               concrete=["", "", "", "[-0.01, -0.01]"])
    check(row, 315, 1680, "fp32", "optimizer")


def test_fused_adamw() -> None:
    # 1010 params * 14 FLOPs (13 + decoupled weight decay) = 14,140
    # bytes: params, exp_avg, exp_avg_sq read + written 2 * 3 * 4040 + grads 4040 + 2 fp32 steps 8 = 28,288
    p = [[100, 10], [10]]
    dims = [p, p, p, p, [], [[], []]] + [[]] * 9
    types = ["TensorList"] * 6 + ["Scalar"] * 7 + ["", ""]
    concrete = [""] * 6 + ["0.001", "0.9", "0.999", "0.01", "1e-08", "False", "False", "", ""]
    check(cost("aten::_fused_adamw_", dims, types, concrete=concrete), 14_140, 28_288, "fp32", "optimizer")


def test_view_is_free_even_without_shapes() -> None:
    check(cost("aten::view", [[4, 8], []], [F32, "ScalarList"], concrete=["", "[32]"]), 0, 0, "fp32", "view")
    check(cost("aten::transpose", None, None), 0, 0, "", "view")


@pytest.mark.parametrize("name,dims,types,flops,nbytes,cat", [
    # poi: largest arg 16,384 elements -> 16,384 FLOPs (estimate); bytes 2 * 16384 * 2 = 65,536
    ("triton_poi_fused_add_0", [[16, 1024], [16, 1024], []], [BF16, BF16, "Scalar"], 16_384, 65_536, "elementwise"),
    # red: in [16,1024] + out [16] fp32 = 65,600 bytes
    ("triton_red_fused_sum_1", [[16, 1024], [16], [], []], [F32, F32, "Scalar", "Scalar"], 16_384, 65_600,
     "reduction"),
    # template (gemm): FLOPs left to Inductor's kernel_flop; bytes (8192 + 4096 + 2048) * 2 = 28,672
    ("triton_tem_fused_mm_2", [[64, 128], [128, 32], [64, 32]], [BF16] * 3, math.nan, 28_672, "gemm"),
])
def test_triton_kernels(name: str, dims: list, types: list, flops: float, nbytes: float, cat: str) -> None:
    check(cost(name, dims, types), flops, nbytes, "bf16" if types[0] == BF16 else "fp32", cat)


@pytest.mark.parametrize("dims,types,flops,nbytes", [
    # embedding lookup fused into a pointwise kernel: ids (8,) int64, table (1000, 64) fp32, out (8, 64):
    # 8 rows read, not 1000: 8*8 + 2 * 8*64*4 = 4,160 bytes; FLOPs 512 (the rows read, the largest)
    ([[8], [1000, 64], [8, 64]], ["long int", F32, F32], 512, 4_160),
    # no 8-row result beside the table: read whole, 8*8 + 2 * 64,000*4 = 512,064 bytes
    ([[8], [1000, 64], [1000, 64]], ["long int", F32, F32], 64_000, 512_064),
    # vLLM GPT-OSS decode's triton_poi_fused_0 (MI300X capture): 32 token ids (int32) gathered from the
    # (201088, 2880) bf16 embedding into (32, 2880), beside a (131072, 64) fp32 -> bf16 cos/sin cache cast.
    # Bytes 128 + 184,320 + 33,554,432 + 184,320 + 16,777,216 = 50,700,416 (was 1,208,782,976: the whole
    # table, 21.5x above the memory roof in its 10.6 us); FLOPs 131072*64 = 8,388,608 (was 579,133,440)
    ([[32], [201088, 2880], [131072, 64], [32, 2880], [131072, 64]], ["int", BF16, F32, BF16, BF16],
     8_388_608, 50_700_416),
])
def test_triton_kernel_reads_only_the_gathered_rows_of_a_table(dims: list, types: list, flops: float,
                                                              nbytes: float) -> None:
    check(cost("triton_poi_fused_0", dims, types), flops, nbytes, "bf16" if BF16 in types else "fp32",
          "elementwise")


# ---------------------------------------------------------------- unknowns and garbage


def test_no_shapes() -> None:
    for dims in (None, []):
        row = cost("aten::mm", dims, [] if dims == [] else None)
        check(row, math.nan, math.nan, "", "gemm", "no_shapes")
        assert row.tensor_core
    # old traces record TensorList arguments without shapes
    check(cost("aten::cat", [[], []], ["TensorList", "Scalar"]), math.nan, math.nan, "", "copy", "no_shapes")


def test_unknown_op_of_activation_sized_tensors_is_costed_from_its_signature() -> None:
    # fbgemm::permute_2D_sparse_data(permute [96] int32, lengths [96, 4096] fp32): every tensor led by the
    # 96 features: memory-bound, each read or written once: 96*4 + 96*4096*4 = 1,573,248 bytes, no FLOPs
    row = cost("fbgemm::permute_2D_sparse_data", [[96], [96, 4096]], ["int", F32])
    check(row, 0, 1_573_248, "fp32", "other")
    assert not row.tensor_core and row["source"] == "signature"


def test_unknown_op_with_a_pool_is_not_costed() -> None:
    # a (1,000,000, 128) table looked up by 96 indices: the table is no activation (its rows are not the
    # indices' 96): the op may read any of it, so it stays uncosted
    row = cost("fbgemm::my_lookup", [[1_000_000, 128], [96]], [F32, "long int"])
    check(row, math.nan, math.nan, "fp32", "other", "no_formula")
    # PyTorch's own namespaces are never costed by signature
    check(cost("c10d::allreduce_", [[96, 4096]], [F32]), math.nan, math.nan, "fp32", "other", "no_formula")


def test_broken_signatures_never_raise() -> None:
    rows = [
        ("aten::mm", [[2, 3], [4, 5]], [F32, F32]),  # inner dims disagree: flop_counter asserts
        ("aten::mm", "garbage", [F32, F32]),
        ("aten::add", [[4], ["x"]], [F32, F32]),
        ("aten::cat", [[4, 5], []], ["TensorList", "Scalar"]),  # TensorList dims that are not shapes
        (None, None, None),
        ("aten::gelu", [[4, 4]], 17),
        ("aten::addmm", [[3], [2, 3]], [F32, F32, F32]),  # fewer dims than types
    ]
    df = pd.DataFrame(rows, columns=["name", "input_dims", "input_types"])
    out = signature_costs(df)  # no input_strides / concrete_inputs columns at all
    assert list(out.index) == list(df.index)
    assert out.flops.isna().all() and out.bytes.isna().all()
    assert set(out.reason) <= {"no_formula", "no_shapes"}


def test_numpy_arrays_and_nan_cells_from_parquet() -> None:
    df = pd.DataFrame({"name": ["aten::mm"], "input_dims": [np.array([np.array([64, 128]), np.array([128, 32])],
                                                                    dtype=object)],
                       "input_types": [np.array([F32, F32])], "input_strides": [float("nan")],
                       "concrete_inputs": [None]}, index=[3])
    row = signature_costs(df).loc[3]
    check(row, 524_288, 57_344, "fp32", "gemm")


def test_empty_frame() -> None:
    out = signature_costs(pd.DataFrame(columns=["name", "input_dims", "input_types"]))
    assert list(out.columns) == COLUMNS and len(out) == 0


# ---------------------------------------------------------------- real traces


def load_signatures(path: Path) -> tuple[pd.DataFrame, list[dict]]:
    """cpu_op events -> one row per distinct (name, dims, types, strides, concrete), like the trace layer."""
    events = [e for e in json.load(gzip.open(path))["traceEvents"] if e.get("cat") == "cpu_op"]
    df = pd.DataFrame({
        "name": [e["name"] for e in events],
        "input_dims": [e["args"].get("Input Dims") for e in events],
        "input_types": [e["args"].get("Input type") for e in events],
        "input_strides": [e["args"].get("Input Strides") for e in events],
        "concrete_inputs": [e["args"].get("Concrete Inputs") for e in events],
    })
    key = pd.Series([json.dumps([e["name"], e["args"].get("Input Dims"), e["args"].get("Input type"),
                                 e["args"].get("Input Strides"), e["args"].get("Concrete Inputs")]) for e in events])
    return df[~key.duplicated().to_numpy()].reset_index(drop=True), events


def test_hta_a100_trace() -> None:
    sigs, events = load_signatures(A100)
    assert len(events) == 25_185 and len(sigs) == 818
    clear_cache()
    out = signature_costs(sigs)
    # 11 fbgemm signatures (permute_2D_sparse_data, asynchronous_complete_cumsum, bounds_check_indices,
    # block_bucketize_sparse_features) of activation-sized tensors are costed from their signature
    assert out.reason.value_counts().to_dict() == {"": 493, "no_formula": 288, "no_shapes": 37}
    assert (out.source == "signature").sum() == 11
    costed = sigs.join(out)[out.reason == ""]
    assert (costed.category != "view").sum() == 214
    # the largest GEMM: (4096x64)@(64x2798) fp32 = 2*4096*64*2798 FLOPs,
    # (4096*64 + 64*2798 + 4096*2798) * 4 bytes
    mm = costed[(costed.name == "aten::mm") & (costed.input_dims.astype(str) == "[[4096, 64], [64, 2798]]")]
    assert mm.flops.tolist() == [1_466_957_824] and mm.bytes.tolist() == [47_607_296]


@pytest.mark.parametrize("fixture", ["h100_eager_block", "h100_compiled_block", "h100_conv_block", "cpu_block"])
def test_fixture_flops_match_flop_counter(fixture: str) -> None:
    """Per-call FLOPs of the recorded fixtures equal FlopCounterMode's (causal SDPA: half, by design)."""
    sigs, _ = load_signatures(DATA / f"{fixture}.json.gz")
    costs = sigs.join(signature_costs(sigs))
    expected = json.loads((DATA / f"{fixture}.expected.json").read_text())["flops_by_call"]
    assert expected
    for call in expected:
        name = "aten::" + call["op"].split(".")[1]
        shapes = [s if s is not None else [] for s in call["input_shapes"]]
        n = sum(1 for s in shapes[:3] if s)  # compare the leading tensor shapes
        match = costs[(costs.name == name) & costs.input_dims.map(lambda d: d is not None and d[:n] == shapes[:n])]
        assert len(match), (name, shapes)
        want = call["flops_per_call"] * (0.5 if "attention" in name else 1.0)  # the blocks use is_causal=True
        assert set(match.flops) == {want}, (name, shapes)


def test_compiled_fixture_triton_bytes_match_inductor() -> None:
    """Triton bytes = Inductor's kernel_num_gb, except kernels with in-place (in_out_ptr) buffers."""
    events = [e for e in json.load(gzip.open(DATA / "h100_compiled_block.json.gz"))["traceEvents"]
              if e.get("cat") == "cpu_op" and e["name"].startswith("triton_")]
    assert len(events) == 20
    sigs = pd.DataFrame({"name": [e["name"] for e in events],
                         "input_dims": [e["args"]["Input Dims"] for e in events],
                         "input_types": [e["args"]["Input type"] for e in events]})
    out = signature_costs(sigs)
    assert (out.reason == "").all()
    ratio = out.bytes.to_numpy() / np.array([e["args"]["kernel_num_gb"] * 1e9 for e in events])
    # 18 agree (to 0.1%: Inductor rounds tiny buffers); the other two read+write an in_out_ptr buffer,
    # which an argument list can only count once: 2 of 3 and 3 of 4 buffer passes
    assert (np.abs(ratio - 1) < 1e-3).sum() == 18
    assert sorted(np.round(ratio[np.abs(ratio - 1) >= 1e-3], 4).tolist()) == [0.6667, 0.75]
