"""End-to-end analysis on synthetic traces (hand-worked numbers) and real ones."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import roofscope
from roofscope.analyzers.model.kernels import RooflineParams
from roofscope.hardware.devices import Ceilings

from .kineto import TraceBuilder
from .conftest import external
from .test_trace import HTA

DATA = Path(__file__).parent / "data"
ALEXNET = external("hta_a100_alexnet_cupti_counters.json.gz")
# Round numbers make the arithmetic in the comments exact.
TOY = Ceilings(device="toy", source="user", peaks={"fp32": 10e12, "bf16": 100e12}, bandwidth=1e12)


def _analyze(b: TraceBuilder, tmp_path: Path, **kw):
    return roofscope.analyze(b.write(tmp_path / "t.json"), ceilings=TOY, **kw)


def test_gemm_flops_go_to_the_gemm_kernel_and_its_reduce_epilogue_carries_bytes(tmp_path):
    # bf16 mm 1024x1024 @ 1024x1024: 2*1024^3 = 2,147,483,648 FLOPs;
    # bytes (3 * 1024*1024) * 2 = 6,291,456. The split-K reduce does none of the math: the
    # GEMM kernel gets every FLOP, the reduce moves bytes of its own.
    b = TraceBuilder()
    ext = b.op("aten::mm", 0, 100, [[1024, 1024], [1024, 1024]], ["c10::BFloat16"] * 2)
    b.launch_kernel("sm90_gemm_main", 10, 200, 30, ext=ext)
    b.launch_kernel("splitk_reduce", 20, 230, 10, ext=ext)
    b.launch_kernel("sm90_gemm_main", 21, 240, 10, ext=ext)
    k = _analyze(b, tmp_path).kernels
    # The two GEMM kernels (30 and 10 us) share FLOPs and bytes 3:1.
    assert k["flops"].tolist() == [2_147_483_648 * 0.75, 0.0, 2_147_483_648 * 0.25]
    assert k["bytes"].tolist() == [6_291_456 * 0.75, 4_194_304, 6_291_456 * 0.25]
    assert k["category"].tolist() == ["gemm", "layout", "gemm"]
    # intensity 2^31 / 6,291,456 = 341.3 FLOP/B, above the bf16 ridge 100e12/1e12 = 100 -> compute
    assert k["intensity"].iloc[0] == pytest.approx(341.333, rel=1e-4)
    assert k["ridge"].iloc[0] == pytest.approx(100.0)
    assert k["roof_precision"].iloc[0] == "bf16"
    # floor = max(1.6106e9/100e12, 4.7186e6/1e12) = 16.1 us over 30 us -> efficiency 0.537
    assert k["efficiency"].iloc[0] == pytest.approx(1_610_612_736 / 100e12 / 30e-6)
    # the reduce reads and writes one operand (2 MiB each): 4,194,304 B in 10 us = 419 GB/s
    assert k["efficiency"].iloc[1] == pytest.approx(4_194_304 / 1e12 / 10e-6)
    assert k["cls"].tolist() == ["compute", "memory", "compute"]


def cudnn_conv(b: TraceBuilder) -> None:
    """aten::convolution (which has the formula) over a backend op without one, launching cuDNN's
    layout transforms of 15, 1 and 15 us around the convolution kernel (200 us)."""
    b.op("aten::convolution", 0, 200, [[8, 64, 56, 56], [64, 64, 3, 3], [], [], [], [], [], [], []],
         ["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"],
         ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"])
    cudnn = b.op("mylib::conv_backend", 10, 150, [[8, 64, 56, 56], [64, 64, 3, 3]], ["float", "float"])
    b.launch_kernel("void cudnn::engines_precompiled::nchwToNhwcKernel<float, float>(int)", 20, 300, 15, ext=cudnn)
    b.launch_kernel("void cudnn::engines_precompiled::nchwToNhwcKernel<float, float>(int)", 25, 315, 1, ext=cudnn)
    b.launch_kernel("implicit_convolve_sgemm", 30, 320, 200, ext=cudnn)
    b.launch_kernel("nhwcToNchwKernel", 40, 520, 15, ext=cudnn)


def test_conv_cost_walks_up_from_cudnn_op(tmp_path):
    # aten::convolution has the formula; its kernels hang off a backend op without one below it.
    # fp32 conv N=8, C=64->64, 56x56, 3x3, pad 1: out 8x64x56x56;
    # FLOPs = 2 * (8*64*56*56) * (64*3*3) = 1,849,688,064, 9.2 TFLOP/s of 10 in 200 us
    b = TraceBuilder()
    cudnn_conv(b)
    a = _analyze(b, tmp_path)
    k = a.kernels
    # Every FLOP goes to the convolution kernel; cuDNN's layout transforms do none (a
    # duration split gave them 25% of the FLOPs: "compute, 498 FLOP/B" on ResNet-50).
    assert k["flops"].tolist() == [0.0, 0.0, 1_849_688_064, 0.0]
    # Operands: input and output 8*64*56*56*4 = 6,422,528 B each, weight 64*64*9*4 = 147,456 B
    # (12,992,512 compulsory, all on the conv kernel). A layout kernel reads and writes the
    # largest operand its time allows at 1 TB/s: 15 us (15 MB) -> input or output,
    # 2 x 6,422,528; 1 us (1 MB) -> the weight, 2 x 147,456.
    assert k["bytes"].tolist() == [12_845_056, 294_912, 12_992_512, 12_845_056]
    assert (k["efficiency"] <= 1).all()
    assert k["cls"].tolist() == ["memory", "latency", "compute", "memory"]
    assert set(k["cost_op_name"]) == {"aten::convolution"}
    assert set(k["op_name"]) == {"mylib::conv_backend"}
    assert k["category"].tolist() == ["layout", "layout", "conv", "layout"]
    assert a.summary.unattributed.share == 0.0


def test_classes_and_thresholds(tmp_path):
    b = TraceBuilder()
    # gelu on 64M fp32 elements: bytes 2 * 256 MiB = 536,870,912; floor 537 us at 1 TB/s; ran 600 us
    g = b.op("aten::gelu", 0, 10, [[64 * 1024 * 1024]], ["float"])
    b.launch_kernel("gelu_kernel", 1, 100, 600, ext=g)
    # relu on 1024 fp32: 8 KiB -> floor 8 ns: latency-bound
    r = b.op("aten::relu", 20, 10, [[1024]], ["float"])
    b.launch_kernel("relu_kernel", 21, 800, 4, ext=r)
    # sum over 64M fp32 running 10x slower than its floor: underutilized
    s = b.op("aten::sum", 40, 10, [[64 * 1024 * 1024]], ["float"])
    b.launch_kernel("reduce_kernel", 41, 900, 2700, ext=s)
    n = b.op("nccl:all_reduce", 60, 10)
    b.launch_kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 61, 4000, 50, ext=n)
    u = b.op("aten::_unique2", 80, 10, [[1024]], ["float"])
    b.launch_kernel("nonzero_kernel", 81, 4100, 10, ext=u)
    a = _analyze(b, tmp_path)
    k = a.kernels
    assert k["cls"].tolist() == ["memory", "latency", "underutilized", "communication", "unknown"]
    assert k["efficiency"].iloc[0] == pytest.approx(536_870_912 / 1e12 / 600e-6)
    assert k["unattributed"].tolist() == ["", "", "", "", "no_formula"]
    # unattributed share excludes communication: 10 us of (600 + 4 + 2700 + 10) us
    assert a.summary.unattributed.share == pytest.approx(10 / 3314)
    # with a 1 ns latency floor relu (8 ns floor over 4 us) becomes underutilized, and a 1%
    # threshold makes the sum (10% efficient) memory-bound
    a2 = _analyze(b, tmp_path, params=RooflineParams(latency_floor_s=1e-9, underutilized_below=0.01))
    assert a2.kernels["cls"].tolist()[:3] == ["memory", "underutilized", "memory"]


def test_memcpy_and_missing_launch(tmp_path):
    b = TraceBuilder()
    b.launch_kernel("Memcpy DtoD (Device -> Device)", 0, 100, 10, cat="gpu_memcpy", nbytes=1_000_000,
                    runtime="cudaMemcpyAsync")
    b.launch_kernel("Memcpy HtoD (Pageable -> Device)", 5, 200, 10, cat="gpu_memcpy", nbytes=1_000_000,
                    runtime="cudaMemcpyAsync")
    b.launch_kernel("orphan_kernel", 10, 300, 10)
    k = _analyze(b, tmp_path).kernels
    # DtoD reads and writes: 2 MB in 10 us = 200 GB/s; HtoD 1 MB
    assert k["bytes"].tolist()[:2] == [2_000_000, 1_000_000]
    assert k["achieved_bw"].iloc[0] == pytest.approx(2e11)
    assert k["unattributed"].tolist() == ["", "", "no_launch_op"]


def test_no_shapes_reason(tmp_path):
    b = TraceBuilder()
    ext = b.op("aten::addmm", 0, 100)
    b.launch_kernel("gemm", 10, 200, 30, ext=ext)
    k = _analyze(b, tmp_path).kernels
    assert k["unattributed"].tolist() == ["no_shapes"]
    assert k["cls"].tolist() == ["unknown"]


def test_tf32_inferred_from_speed(tmp_path):
    # fp32 mm 4096^3 = 137,438,953,472 FLOPs in 2 ms = 68.7 TFLOP/s > 1.1 * fp32 roof (19.5)
    c = Ceilings(device="toy", source="user", peaks={"fp32": 19.5e12, "tf32": 156e12}, bandwidth=2e12)
    b = TraceBuilder()
    ext = b.op("aten::mm", 0, 100, [[4096, 4096], [4096, 4096]], ["float", "float"])
    b.launch_kernel("ampere_sgemm", 10, 200, 2000, ext=ext)
    k = roofscope.analyze(b.write(tmp_path / "t.json"), ceilings=c).kernels
    assert k["roof_precision"].iloc[0] == "tf32"
    assert k["roof"].iloc[0] == 156e12


def _fixture(name: str):
    return roofscope.analyze(DATA / f"{name}.json.gz")


def _expected(name: str) -> dict:
    return json.loads((DATA / f"{name}.expected.json").read_text())


def test_h100_eager_block_matches_flop_counter():
    a = _fixture("h100_eager_block")
    exp = _expected("h100_eager_block")["flops_by_op"]
    k = a.kernels
    assert a.ceilings.datasheet.key == "h100-sxm"
    assert a.summary.unattributed.share == 0.0
    by_cat = k.groupby("category")["flops"].sum()
    # GEMM FLOPs are exactly FlopCounterMode's: 51,539,607,552 + 103,079,215,104
    assert by_cat["gemm"] == exp["aten.addmm"] + exp["aten.mm"]
    # causal attention counts half of FlopCounterMode's full square: (4.29e9 + 10.74e9) / 2
    assert by_cat["attention"] == (exp["aten._scaled_dot_product_cudnn_attention"]
                                   + exp["aten._scaled_dot_product_cudnn_attention_backward"]) / 2
    assert set(k["step"]) == {2}
    # backward kernels are launched from autograd's thread, outside the main thread's
    # record_function("backward") span on the CPU, and still land in that region
    regions = a.by_region()
    assert {"forward", "backward", "Optimizer.step#AdamW.step"} <= set(regions.index)
    assert regions.loc["backward", "calls"] == 33 and regions.loc["forward", "calls"] == 15
    gemm = k[k["category"] == "gemm"]
    assert (gemm["roof_precision"] == "bf16").all()
    # the big bf16 GEMMs run at 60-70% of the 989.5 TFLOP/s datasheet roof
    big = gemm[gemm["dur_s"] > 10e-6]
    assert ((big["efficiency"] > 0.5) & (big["efficiency"] < 0.8)).all()
    assert (big["cls"] == "compute").all()


def test_h100_compiled_block_uses_inductor_metadata():
    a = _fixture("h100_compiled_block")
    k = a.kernels
    triton = k[k["name"].astype(str).str.startswith("triton_")]
    assert len(triton) == 20
    assert (triton["cost_source"] == "inductor").all()
    # Inductor's kernel_num_gb totals about 0.224 GB over the 20 kernels
    assert triton["bytes"].sum() == pytest.approx(0.224e9, rel=0.02)
    assert a.summary.unattributed.share == 0.0


def test_h100_conv_block():
    a = _fixture("h100_conv_block")
    exp = _expected("h100_conv_block")["flops_by_op"]
    k = a.kernels
    conv = k[k["category"] == "conv"]["flops"].sum()
    assert conv == pytest.approx(exp["aten.convolution"] + exp["aten.convolution_backward"], rel=1e-9)
    assert a.summary.unattributed.share == 0.0
    assert (k.loc[k["category"] == "conv", "roof_precision"] == "fp16").all()


def test_cpu_only_trace_uses_innermost_costed_ops():
    # Without a CPU measurement: analyzed, with no ceilings (every class unknown) and a note why.
    bare = _fixture("cpu_block")
    assert bare.ceilings.source == "none" and "CPU-only trace" in bare.ceilings.notes[0]
    assert set(bare.kernels["cls"]) == {"unknown"} and bare.kernels["flops"].sum() > 0
    c = Ceilings(device="cpu: test", source="user", peaks={"fp32": 1e12, "bf16": 1e12}, bandwidth=50e9)
    a = roofscope.analyze(DATA / "cpu_block.json.gz", ceilings=c)
    assert a.cpu_only
    k = a.kernels
    assert (k["cat"] == "cpu_op").all()
    # linear layers are aten::addmm/mm below aten::linear: the innermost costed op is kept
    assert "aten::linear" not in set(k["name"].astype(str))
    assert {"aten::mm", "aten::addmm"} & set(k["name"].astype(str))
    # CPU work items get steps and regions too; backward ops run on autograd's thread
    assert set(k["step"]) == {2}
    # An op doing most of its time itself (CPU flash-attention backward, addmm) is one work
    # item with its helper copies/fills inside it, not split into those helpers.
    assert a.by_region().loc[["forward", "backward", "Optimizer.step#AdamW.step"], "calls"].tolist() == [14, 25, 108]


def test_hta_a100_report():
    a = roofscope.analyze(HTA)
    s = a.to_dict()
    assert s["device"] == "NVIDIA A100-SXM4-80GB"
    assert a.ceilings.datasheet.key == "a100-sxm4-80gb"
    assert s["kernels"] == 7_747
    # 190.345 ms of NCCL out of 449.763 ms of GPU activity
    assert s["communication_time_s"] == pytest.approx(0.190345)
    assert s["kernel_time_s"] == pytest.approx(0.449763)
    u = s["unattributed"]
    # Most non-NCCL time is kernels replayed by 70 cudaGraphLaunch calls whose capture the trace
    # does not hold (105 ms, 135 kernels: time only) and DDP internals launched outside any op (63 ms,
    # of which apex's fused Adam, 38.447 ms in 108 multi_tensor_apply launches, is costed from its grid).
    assert u["by_reason"]["no_launch_op"]["time_s"] == pytest.approx(0.063436 - 0.038447)
    assert u["by_reason"]["compiled_no_metadata"]["kernels"] == 0
    assert u["by_reason"]["graph_replay"]["kernels"] == 135
    assert u["by_reason"]["graph_replay"]["time_s"] == pytest.approx(0.105115)
    assert a.to_dict()["graphs"]["unmapped"] == {"no_capture": 70}
    assert "--graph-capture" in u["notes"][1]
    assert 0.50 < u["share"] < 0.60  # 69.3% before the Adam kernels were costed
    costed = a.kernels[a.kernels["unattributed"] == ""]
    assert np.isfinite(costed.loc[costed["category"] != "communication", "efficiency"]).all()


def test_alexnet_counter_ranges():
    a = roofscope.analyze(ALEXNET)
    s = a.to_dict()
    assert s["device"] == "NVIDIA A100-PG509-200"
    assert a.ceilings.datasheet.key == "a100-sxm4-40gb"
    assert s["untimed_kernels"] == 77
    k = a.kernels
    assert (k["cost_source"] == "counters").all()  # zero is a measurement too (copy kernels)
    # every range is linked to its launching op through the n-th cudaLaunchKernel
    assert (k["op"] >= 0).all()
    assert "aten::cudnn_convolution" in set(k["op_name"])
    # FLOPs = add + mul + 2*fma over all ranges; the largest, a conv, has 2*9,119,334,400 + 24,780,800
    assert k["counter_flops"].max() == 2 * 9_119_334_400 + 24_780_800


def test_inductor_flops_of_a_pointwise_kernel_fused_from_a_convolution_are_not_taken(tmp_path):
    """Inductor gives `kernel_flop` to kernels with a matmul-like origin; a pointwise kernel fused
    from a convolution's input cast (Lightning + torch.compile on an H100) carried the whole
    convolution's 19.3 GFLOP in a 5 us copy, 8,173% of its roof. Its FLOPs are the pointwise
    estimate; a template kernel keeps Inductor's count."""
    b = TraceBuilder()
    bf16 = "c10::BFloat16"
    # poi: 8M-element bf16 cast, Inductor's bytes 33.5 MB (0.0335 GB), kernel_flop 1.9327e10 (the conv's)
    e = b.op("triton_poi_fused__to_copy_convolution_8", ts=0, dur=10, dims=[[8388608], [8388608]],
             types=[bf16, bf16], kernel_backend="triton", kernel_num_gb=0.0335, kernel_flop=1.9327e10)
    b.launch_kernel("triton_poi_fused__to_copy_convolution_8", launch_ts=1, ts=20, dur=5, ext=e)
    # tem: a 1024^3 GEMM template, kernel_flop 2 * 1024^3 = 2.147e9
    e = b.op("triton_tem_fused_mm_0", ts=30, dur=10, dims=[[1024, 1024], [1024, 1024], [1024, 1024]],
             types=[bf16] * 3, kernel_backend="triton", kernel_num_gb=0.006291456, kernel_flop=2147483648.0)
    b.launch_kernel("triton_tem_fused_mm_0", launch_ts=31, ts=40, dur=10, ext=e)
    a = roofscope.analyze(b.write(tmp_path / "t.json"), device="h100-sxm")
    k = a.kernels.set_index(a.kernels["name"].astype(str))
    poi, tem = k.loc["triton_poi_fused__to_copy_convolution_8"], k.loc["triton_tem_fused_mm_0"]
    # poi: 1 FLOP per element of the largest operand, 8,388,608; bytes from Inductor, 33.5 MB
    assert poi["flops"] == 8388608 and poi["bytes"] == pytest.approx(33.5e6)
    # 33.5 MB / 3.35 TB/s = 10 us of floor in 5 us: above the datasheet roof, as a copy, not by 3,800x
    assert poi["efficiency"] == pytest.approx(33.5e6 / 3.35e12 / 5e-6, rel=1e-3)
    assert tem["flops"] == 2147483648.0 and tem["cost_source"] == "inductor"


def test_batch_norm_statistics_pass_carries_the_activations_it_rereads(tmp_path):
    # Training batch norm on x [32, 64, 56, 56] bf16: 6,422,528 elements = 12,845,056 B.
    # Compulsory bytes: x + y (2 x 12,845,056) + weight, bias, running mean/var read (4 x 64 x 4 = 1,024)
    # + save_mean, save_invstd (512) + running mean/var written (512) = 25,692,160.
    # CUDA runs it as a statistics pass (reads x) and a transform (reads x, writes y): on an H100
    # (ResNet-50) they moved 1.06e8 and 1.91e8 DRAM bytes for a 1.03e8-byte x.
    b = TraceBuilder()
    bn = b.op("aten::native_batch_norm", 0, 300,
              [[32, 64, 56, 56], [64], [64], [64], [64], [], [], []],
              ["c10::BFloat16", "float", "float", "float", "float", "Scalar", "Scalar", "Scalar"],
              ["", "", "", "", "", "True", "0.1", "1e-05"])
    b.launch_kernel("void at::native::batch_norm_collect_statistics_channels_last_kernel<c10::BFloat16>()",
                    10, 400, 100, ext=bn)
    b.launch_kernel("void at::native::unrolled_elementwise_kernel<float>()", 20, 500, 2, ext=bn)
    b.launch_kernel("void at::native::batch_norm_transform_input_channels_last_kernel<c10::BFloat16>()",
                    30, 510, 100, ext=bn)
    k = _analyze(b, tmp_path).kernels
    # statistics: x once; the rest split the compulsory bytes by duration: 25,692,160 x 2/102 and x 100/102
    assert k["bytes"].tolist() == pytest.approx([12_845_056, 503_767.84, 25_188_392.16])
    # FLOPs still split by duration over all three (the formula's 8 per element: 51,380,224)
    assert sum(k["flops"]) == pytest.approx(8 * 6_422_528)
