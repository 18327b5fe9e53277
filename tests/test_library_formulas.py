"""Library-op formulas (formulas/library.py: sort / top-k, indexing, embedding bags, torchvision's
RoIAlign, NMS, deformable convolution) and grouped convolutions on the CUDA-core roof, with
hand-worked arithmetic."""
from __future__ import annotations

from roofscope.hardware.ceilings import Ceilings
from roofscope.hardware.datasheets import lookup
from tests.test_costmodel import BF16, F32, check, cost

LONG = "long int"
CONV_TYPES = [F32, F32, "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"]
BWD_TYPES = [F32, F32, F32, "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar",
             "ScalarList"]


def test_sort_and_topk() -> None:
    # sort [4, 1024] fp32 along -1: ceil(log2 1024) = 10 comparisons per element -> 40,960 FLOPs;
    # bytes 16,384 read + 16,384 values + 32,768 int64 indices = 65,536
    check(cost("aten::sort", [[4, 1024], [], []], [F32, "Scalar", "Scalar"], concrete=["", "-1", "False"]),
          40_960, 65_536, "fp32", "reduction")
    # topk k=5 of [8, 1000]: (ceil(log2 5) + 1) * 8,000 = 32,000; bytes 32,000 + (8, 5) values 160 + indices 320
    check(cost("aten::topk", [[8, 1000], [], [], [], []], [F32] + ["Scalar"] * 4,
               concrete=["", "5", "-1", "True", "True"]), 32_000, 32_480, "fp32", "reduction")


def test_data_dependent_outputs_count_the_inputs_only() -> None:
    # nonzero of 1,000 bools: 2 FLOPs each; bytes: the input only (the output's size is the data's)
    check(cost("aten::nonzero", [[1000]], ["bool"]), 2_000, 1_000, "", "reduction")


def test_advanced_indexing_reads_the_selected_rows() -> None:
    # x[idx] with x [100, 64] bf16 and 50 int64 indices: 50 rows of 64 read and written:
    # 50 * 8 + 2 * 3,200 * 2 = 13,200 bytes
    check(cost("aten::index", [[100, 64], [[50]]], [BF16, "TensorList"]), 0, 13_200, "bf16", "copy")
    # x.index_put_((idx,), values, accumulate=True), x [100, 64] fp32, 30 rows: 1,920 adds;
    # bytes 30 * 8 + values 7,680 + 1,920 * 4 read and written 15,360 = 23,280
    check(cost("aten::index_put_", [[100, 64], [[30]], [30, 64], []], [F32, "TensorList", F32, "Scalar"],
               concrete=["", "", "", "True"]), 1_920, 23_280, "fp32", "copy")


def test_embedding_bag() -> None:
    # _embedding_bag(weight [1000, 64] fp32, indices [200], offsets [20], ..., mode sum): 12,800 adds;
    # reads indices 1,600 + offsets 160 + the gathered rows 51,200; writes out (20, 64) 5,120
    # + offset2bag 1,600 + bag_size 160 + max_indices 160 -> 60,000
    dims = [[1000, 64], [200], [20], [], [], [], [], [], []]
    types = [F32, LONG, LONG, "Scalar", "Scalar", "Scalar", "", "Scalar", "Scalar"]
    check(cost("aten::_embedding_bag", dims, types, concrete=["", "", "", "False", "0", "False", "", "False", "-1"]),
          12_800, 60_000, "fp32", "embedding")


def test_roi_align_forward_and_backward() -> None:
    # 512 RoIs over a [2, 256, 50, 50] fp32 map, 7x7 bins, sampling_ratio 2 (4 samples per bin):
    # outputs 512*256*49 = 6,422,528; samples 25,690,112 at 8 FLOPs = 205,520,896
    # bytes: the taps, at most the map 1,280,000 * 4 = 5,120,000 + rois 10,240 + out 25,690,112 = 30,820,352
    row = cost("torchvision::roi_align", [[2, 256, 50, 50], [512, 5], [], [], [], [], []],
               [F32, F32, "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"],
               concrete=["", "", "0.25", "7", "7", "2", "True"])
    check(row, 205_520_896, 30_820_352, "fp32", "elementwise")
    # backward: grad (512, 256, 7, 7) read 25,690,112 + rois 10,240 + the whole input gradient 5,120,000
    row = cost("torchvision::_roi_align_backward", [[512, 256, 7, 7], [512, 5]] + [[]] * 9,
               [F32, F32] + ["Scalar"] * 9, concrete=["", "", "0.25", "7", "7", "2", "256", "50", "50", "2", "True"])
    check(row, 205_520_896, 30_820_352, "fp32", "elementwise")


def test_nms() -> None:
    # 1,000 boxes: 499,500 pairs at 15 FLOPs = 7,492,500; bytes: dets 16,000 + scores 4,000
    # + the 1,000 x 16 64-bit mask 128,000 + keep 8,000 = 156,000
    check(cost("torchvision::nms", [[1000, 4], [1000], []], [F32, F32, "Scalar"], concrete=["", "", "0.7"]),
          7_492_500, 156_000, "fp32", "reduction")


def test_depthwise_convolution_runs_on_cuda_cores() -> None:
    # depthwise 3x3, x [2, 32, 16, 16], w [32, 1, 3, 3], groups 32, pad 1:
    # FLOPs 2 * 256 pixels * 9 taps * 2 batch * 32 channels * 1 = 294,912; no tensor cores
    row = cost("aten::convolution", [[2, 32, 16, 16], [32, 1, 3, 3], [], [], [], [], [], [], []], CONV_TYPES,
               concrete=["", "", "None", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "32"])
    assert row["flops"] == 294_912 and not row["tensor_core"]
    # a dense convolution keeps the tensor-core class
    dense = cost("aten::convolution", [[2, 32, 16, 16], [16, 32, 3, 3], [], [], [], [], [], [], []], CONV_TYPES,
                 concrete=["", "", "None", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"])
    assert dense["tensor_core"]


def test_depthwise_backward_counts_grad_weight_per_group() -> None:
    # grad_input 294,912 (as forward); grad_weight: each of the 32 filters correlates its own channel
    # only: 2 * 2*32*256*9 = 294,912 (torch.utils.flop_counter counts 32x that, ignoring groups)
    dims = [[2, 32, 16, 16], [2, 32, 16, 16], [32, 1, 3, 3]] + [[]] * 8
    row = cost("aten::convolution_backward", dims, BWD_TYPES,
               concrete=["", "", "", "None", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "32",
                         "[True, True, False]"])
    assert row["flops"] == 2 * 294_912 and not row["tensor_core"]


def test_cuda_core_roof_for_depthwise_bf16() -> None:
    # the roofline takes a kernel off tensor cores to the fp32 CUDA-core peak (H100 SXM: 67 TFLOP/s,
    # not bf16's 989)
    c = Ceilings.from_spec(lookup("h100-sxm"))
    assert c.roof("bf16", False) == c.peaks["fp32"] < c.roof("bf16", True)


def test_deform_conv2d_costs_its_sampling_only() -> None:
    # x [1, 16, 32, 32], w [32, 16, 3, 3], offset [1, 18, 32, 32], no mask: columns 16*9*1024 = 147,456
    # at 11 FLOPs = 1,622,016; reads the map (at most 16,384 * 4 = 65,536) + offsets 73,728; writes the
    # columns 589,824 -> 729,088 (the GEMM on the columns is an aten::addmm of its own)
    dims = [[1, 16, 32, 32], [32, 16, 3, 3], [1, 18, 32, 32], [], [32]] + [[]] * 9
    row = cost("torchvision::deform_conv2d", dims, [F32] * 3 + ["", F32] + ["Scalar"] * 9)
    check(row, 1_622_016, 729_088, "fp32", "elementwise")
