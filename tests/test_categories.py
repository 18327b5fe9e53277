"""Kernel categories from real kernel names (CUDA and ROCm), matched on whole words."""
from __future__ import annotations

import pytest

from roofscope.analyzers.cost.categories import category_of

REAL = [
    # the lambda that was an optimizer: "lamb" inside "{lambda()#1}"
    ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::silu_kernel("
     "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::"
     "{lambda(float)#1}, std::array<char*, 2ul> >(int, ...)", "elementwise"),
    ("void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda("
     "at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul> >(int, ...)", "copy"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
     "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
     "unsigned int, float, 4> >(...)", "reduction"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForwardReg<float, float, float, "
     "at::native::(anonymous namespace)::SoftMaxForwardEpilogue, long, 4>(...)", "softmax"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(...)",
     "normalization"),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>(...)", "normalization"),
    # normal_ (a random distribution) is no normalization
    ("void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, "
     "at::native::templates::cuda::normal_kernel<at::CUDAGeneratorImpl*>(...)::{lambda()#1}>(...)", "elementwise"),
    ("void at::native::(anonymous namespace)::indexSelectLargeIndex<float, int, unsigned int, 1, 1, -2, true>(...)",
     "embedding"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
     "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, ...> >(...)",
     "optimizer"),
    ("cudnn_train_volta_scudnn_128x128_stridedB_splitK_interior_nn_v1", "conv"),
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16", "conv"),
    ("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)0>(...)", "copy"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off",
     "gemm"),
    ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(...)", "gemm"),
    ("ampere_sgemm_128x64_nn", "gemm"),
    ("triton_tem_fused_mm_0", "gemm"),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>(...)",
     "attention"),
    ("fmha_cutlassF_f16_aligned_64x64_rf_sm80", "attention"),
    ("triton_poi_fused_add_cos_sin_0", "elementwise"),
    ("triton_red_fused_sum_1", "reduction"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication"),
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)", "communication"),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(...)", "communication"),
    # ROCm: hipBLASLt/Tensile, Composable Kernel, aiter, RCCL, MIOpen
    ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_"
     "EPS0_GRVWA2_GRVWB2_GSUAMB_ISA90a_IU1_K1", "gemm"),
    ("Cijk_Ailk_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x256x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1", "gemm"),
    ("void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<...>, true, ...>(...)", "gemm"),
    ("void ck_tile::kentry<256, 1, ck_tile::FmhaFwdKernel<ck_tile::BlockFmhaPipelineQRKSVSAsync<...>>>(...)",
     "attention"),
    ("void aiter::paged_attention_ll4mi_QKV_mfma16_kernel<__hip_bfloat16, __hip_bfloat16, 0, 16, 128>(...)",
     "attention"),
    ("_ZN5aiter45fmoe_bf16_g1u1_vs_silu_1tg_ps_32x256E", "gemm"),
    ("void aiter::rmsnorm2d_fwd_kernel<ck_tile::bf16_t, 8192>(...)", "normalization"),
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "communication"),
    ("rccl_main_kernel_AllReduce_RING_LL_Sum_bf16", "communication"),
    ("MIOpenBatchNormFwdTrainSpatial", "normalization"),
    ("naive_conv_fwd_nchw_float_double_float", "conv"),
    ("igemm_fwd_gtcx_nhwc_fp16_bx0_ex1_bt64x256x32", "conv"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
     "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
     "elementwise"),
    ("some_custom_kernel", "other"),
]


@pytest.mark.parametrize("name,category", REAL)
def test_real_kernel_names(name, category):
    assert category_of(name) == category
