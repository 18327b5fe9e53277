"""The tensor-core table (analyzers/place/tensorcore.py), name by name, and what it does to a kernel's roof:
an fp32 convolution whose cuDNN kernel is a CUTLASS tensorop GEMM runs in TF32 and is placed on that roof."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from roofscope.analyzers.place.roofline import place
from roofscope.analyzers.place.tensorcore import CUDA_CORES, MATRIX_CORES, TENSOR_CORES, TF32, UNSAID, unit_of
from roofscope.hardware.datasheets import match_device
from roofscope.hardware.devices import Ceilings

# Real kernel names, as traces of each library spell them.
NAMES = [
    # CUTLASS 2: tensorop with the MMA's accumulator class and shape
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(cutlass_80_tensorop_s1688gemm_"
     "128x128_32x3_nn_align4::Params)", TENSOR_CORES),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s16816gemm_bf16_64x64_64x6_tn_align8>(Params)", TENSOR_CORES),
    ("void cutlass::Kernel2<cutlass_80_tensorop_h16816gemm_256x128_32x3_nn_align8>(Params)", TENSOR_CORES),
    ("void cutlass::Kernel2<cutlass_80_tensorop_i8816gemm_s8_128x128_64x3_tn_align16>(Params)", TENSOR_CORES),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(Params)", TENSOR_CORES),
    ("void cutlass::Kernel2<cutlass_80_tensorop_d884gemm_64x64_16x4_nn_align1>(Params)", TENSOR_CORES),
    ("cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x256x64_1x2x1_0_tnn_align8_warpspecialized_cooperative",
     TENSOR_CORES),
    # CUTLASS SIMT: CUDA cores
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_nn_align1>(Params)", CUDA_CORES),
    # cuBLAS
    ("ampere_sgemm_128x64_nn", CUDA_CORES),
    ("volta_sgemm_128x64_nt", CUDA_CORES),
    ("volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_nn", TENSOR_CORES),
    ("turing_fp16_s1688gemm_fp16_256x128_ldg8_f2f_tn", TENSOR_CORES),
    ("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn", TENSOR_CORES),
    ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x3_tn", TENSOR_CORES),
    ("sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel",
     TENSOR_CORES),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
     "__5x_cublas", TENSOR_CORES),
    ("sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_"
     "kernel_trt", CUDA_CORES),
    ("sm80_xmma_gemm_tf32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8_kernel", TF32),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", TENSOR_CORES),
    ("nvjet_hsh_256x128_64x4_2x1_v_bz_coopB_TNN", TENSOR_CORES),
    ("void gemmSN_TN_kernel<float, 128, 16, 2, 4, 4, 4, true, cublasGemvTensorStridedBatched<float const>>", UNSAID),
    # cuDNN convolutions
    ("sm86_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16_stage4_warpsize2x2x1_g1_"
     "tensor16x8x8_kernel_cudnn", TF32),
    ("sm80_xmma_dgrad_implicit_gemm_indexed_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_stage5_warpsize2x2x1_"
     "g1_tensor16x8x16_kernel_cudnn", TENSOR_CORES),
    ("void cudnn::cnn::implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>(int, int, "
     "int, float const*, int, float*, float const*, kernel_conv_params, unsigned long long, int, float, float, int, "
     "float const*, float const*, bool, int, int)", CUDA_CORES),
    ("void xmma_cudnn_infer::implicit_gemm::fprop_nhwc::kernel<xmma_cudnn_infer::implicit_gemm::fprop_nhwc::Kernel_"
     "traits<xmma_cudnn_infer::Ampere_hmma_fp32_traits>>(Params)", TENSOR_CORES),
    ("sm90_xmma_wgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_"
     "g1_execute_kernel__5x_cudnn", TENSOR_CORES),
    # Hopper warpgroup MMA in CUTLASS kernels named by their tile
    ("void cutlass::device_kernel<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, "
     "cute::C<1>, cute::C<1>>, cute::tuple<cute::C<128>, cute::C<128>, cute::C<128>>, 128, cutlass::bfloat16_t, "
     "float, cutlass::arch::Sm90, true, false, false, true, true, false, false, true, true, false, false>, "
     "flash::CollectiveEpilogueFwd<cute::tuple<cute::C<128>, cute::C<128>, cute::C<128>>, cute::tuple<cute::C<1>, "
     "cute::C<1>, cute::C<1>>, cutlass::bfloat16_t, cutlass::arch::Sm90, 256, true, true, false, false>, "
     "flash::VarlenDynamicPersistentTileScheduler<128, 256, 128, false, true, true>>>", UNSAID),
    ("sm90_gemm_bf16_bf16_bf16_wgmma_128x128x64", TENSOR_CORES),
    # AMD: CK and hipBLASLt / Tensile
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HAS_SAV_UserArgs_MT32x32x256_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0",
     MATRIX_CORES),
    ("Cijk_Ailk_Bljk_SB_MT64x64x8_SE_1LDSB0_APM1_AF0EM1_AF1EM1_AMAS3_ASE_ASGT_ASLT_ASAE01", UNSAID),
    ("void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<ck::tensor_layout::gemm::RowMajor>>",
     MATRIX_CORES),
    ("_ZN7ck_tile6kentryILi1ENS_13FmhaFwdKernelINS_37BlockFmhaPipelineQRKSVSAsync_mfma_bf16", MATRIX_CORES),
    ("void ck::kernel_grouped_conv_fwd_wmma_cshuffle<ck::half_t>", MATRIX_CORES),
    # what names say nothing of
    ("triton_tem_fused_mm_0", UNSAID),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>>"
     "(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)", UNSAID),
    ("aten::mm", UNSAID),
]


@pytest.mark.parametrize(("name", "unit"), NAMES, ids=[n[:48] for n, _ in NAMES])
def test_unit_of_each_library_naming(name: str, unit: str) -> None:
    assert unit_of(name) == unit


def _kernels(name: str, dtype: str, flops: float, dur_ns: float, tensor_core: bool) -> pd.DataFrame:
    return pd.DataFrame({"name": [name], "cat": ["kernel"], "dur_ns": [dur_ns], "flops": [flops], "bytes": [1e6],
                         "dtype": [dtype], "tensor_core": [tensor_core], "category": ["conv"], "grid": [[132, 1, 1]]})


def test_an_fp32_convolution_on_a_tensorop_kernel_is_placed_on_the_tf32_roof() -> None:
    # H100 SXM datasheet: fp32 67 TFLOP/s, tf32 495 TFLOP/s. An fp32 cuDNN conv running
    # cutlass_80_tensorop_s1688gemm at 56 TFLOP/s (56 GFLOP in 1 ms) was at 84% of fp32 -- at 104-108% in the
    # Faster R-CNN traces whose measured fp32 roof is lower; on the TF32 roof it is at 56 / 495 = 11.3%.
    c = Ceilings.from_spec(match_device("NVIDIA H100 80GB HBM3"))
    tf32, fp32 = c.peaks["tf32"], c.peaks["fp32"]
    k = place(_kernels("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_nhwc_align4>(Params)",
                       "fp32", 56e9, 1e6, True), c)
    assert k["roof_precision"].iat[0] == "tf32" and k["roof"].iat[0] == tf32
    assert k["efficiency"].iat[0] == pytest.approx(56e12 / tf32)
    # the same op on cuDNN's SIMT kernel stays on the fp32 CUDA-core roof
    k = place(_kernels("void cudnn::cnn::implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false>", "fp32",
                       56e9, 1e6, True), c)
    assert k["roof_precision"].iat[0] == "fp32" and k["roof"].iat[0] == fp32
    # a bf16 GEMM on CUDA cores (a SIMT kernel) is held to the CUDA-core roof, not the bf16 tensor roof
    k = place(_kernels("void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_nn_align1>(Params)", "bf16", 1e9, 1e6,
                       True), c)
    assert k["roof_precision"].iat[0] == "fp32"
    assert not np.isnan(k["efficiency"].iat[0])
    # AMD matrix cores multiply fp32 natively: a Tensile fp32 GEMM stays on the fp32 peak (CDNA's MFMA rate)
    k = place(_kernels("Cijk_Ailk_Bljk_SB_MT128x128x16_MI32x32x2x1_SN_LDSB0", "fp32", 1e9, 1e6, True), c)
    assert k["roof_precision"].iat[0] == "fp32"
