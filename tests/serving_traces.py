"""Serving traces of other frameworks, built from their real op signatures: a step of decode as the profiler
records it, layer by layer, with kernel names and durations of the kind those runs show.

* :func:`sglang_mi300_decode`: SGLang serving a Llama-3.1-8B-shaped model on an MI300X, decode of 32
  sequences replayed from a HIP graph (a replay trace and its capture trace). Op names and argument orders
  are those of the frameworks: AITER's ``add_rmsnorm(out, input, residual_in, residual_out, weight, eps)``
  and ``rmsnorm(out, input, weight, eps)`` (aiter/ops/rmsnorm.py's compile_ops), sgl-kernel's ROCm
  ``rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)`` (common_extension_rocm.cc),
  ``sglang::store_cache(k, v, k_cache, v_cache, indices)`` (mem_cache/memory_pool.py), AITER's
  ``paged_attention_ragged(out, workspace, query, key_cache, value_cache, scale, kv_indptr,
  kv_page_indices, kv_last_page_lens, block_size, max_num_partitions, alibi_slopes, kv_cache_dtype,
  kv_cache_layout, logits_soft_cap, k_scale, v_scale, ...)`` under the ``sglang_profiler::<module>_<fn>_<n>``
  wrapper TraceLens' kernel-shape tool registers, and ``aiter::silu_and_mul(out, input)``; the GEMMs are
  ``aten::mm`` on hipBLASLt. The replay carries the step annotation of sequence sums TraceLens reads.
* :func:`vllm_b200_moe`: vLLM serving a Qwen3-30B-A3B-shaped MoE on a B200 with NVFP4 experts, FP8
  dense layers and an FP8 KV cache, eager, decode of 64 sequences: ``vllm::moe_forward(hidden_states,
  router_logits, layer_name)`` over ``_moe_C::topk_softmax``, ``_C::get_cutlass_moe_mm_data``,
  ``_C::shuffle_rows``, ``_C::scaled_fp4_experts_quant``, ``_C::cutlass_fp4_group_mm`` (twice: the expert
  weights are its arguments) and ``_C::silu_and_mul_scaled_fp4_experts_quant``
  (vllm/model_executor/layers/fused_moe/cutlass_moe.py's run_cutlass_moe_fp4); attention
  ``vllm::unified_attention_with_output`` over ``_C_cache_ops::reshape_and_cache_flash`` into an fp8 cache
  and FlashInfer's batch decode ``flashinfer::..._run`` (decode.py's registered op: workspaces, plan, q,
  paged K/V caches, indptr, indices, last page lengths, out, ...); FP8 projections
  ``_C::cutlass_scaled_mm(out, a, b, a_scales, b_scales, bias)``, ``_C::dynamic_per_token_scaled_fp8_quant``.

Durations are chosen to sit below the devices' roofs, as the recorded kernels of such runs do.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.kineto import PID, TID, TraceBuilder

BF16, F32, FP8, U8, I32, I64 = "c10::BFloat16", "float", "c10::Float8_e4m3fn", "unsigned char", "int", "long int"
MI300X_PROPS = {"id": 0, "name": "", "totalGlobalMem": 206141652992, "computeMajor": 9, "computeMinor": 4,
                "warpSize": 64, "numSms": 304}
SGLANG_STEP = "execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk65536sqsq32sqsk65536)"

# (op name, Input Dims, Input type, Concrete Inputs, [(kernel, µs), ...]); "" concrete = not recorded
Op = tuple[str, list, list, list, list[tuple[str, float]]]


def _sglang_layer(i: int) -> list[Op]:
    t, h, q, kv, d, inter, pages = 32, 4096, 32, 8, 128, 14336, 8192
    ck_norm = "_ZN7ck_tile6kentryILi1ENS_13Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePassINS_26Rmsnorm2dFwdPipelineProblem"
    gemm = "Cijk_Alik_Bljk_BBS_BH_Bias_HAS_SAV_UserArgs_MT32x32x256_MI16x16x1_SN_LDSB1_AFC1_AFEM1"
    norm = ("aiter::add_rmsnorm", [[t, h]] * 4 + [[h], []], [BF16] * 5 + ["Scalar"], [""] * 5 + ["1e-05"],
            [(ck_norm, 6.0)])
    return [
        norm,
        ("aten::mm", [[t, h], [h, (q + 2 * kv) * d]], [BF16, BF16], ["", ""], [(gemm, 14.0)]),
        ("sgl_kernel::rotary_embedding", [[t], [t, q * d], [t, kv * d], [], [131072, d], []],
         [I64, BF16, BF16, "Scalar", BF16, "Scalar"], ["", "", "", str(d), "", "True"],
         [("void vllm::rotary_embedding_kernel<c10::BFloat16, true>", 4.0)]),
        ("sglang::store_cache", [[t, kv * d], [t, kv * d], [pages * 16, kv * d], [pages * 16, kv * d], [t], [], []],
         [BF16, BF16, BF16, BF16, I64, "", ""], [""] * 7, [("store_kvcache_kernel", 3.0)]),
        (f"sglang_profiler::attention_paged_attention_ragged_{i}",
         [[t, q, d], [t, q, 8], [t, q, d], [pages, 16, kv, d], [pages, 16, kv, d], [], [t + 1], [t * 256], [t], [],
          [], [], [], [], [], [1], [1], [], [], []],
         [BF16, F32, BF16, BF16, BF16, "Scalar", I32, I32, I32, "Scalar", "Scalar", "", "", "", "Scalar", F32, F32,
          "", "Scalar", "Scalar"],
         ["", "", "", "", "", "0.08838834764831845", "", "", "", "16", "8", "", "", "", "0.0", "", "", "", "256", "1"],
         [("_paged_attention_ll4mi_QKV_mfma16_kernel<__hip_bfloat16, __hip_bfloat16, 16, 128, 256, 4>", 66.0),
          ("_paged_attention_ll4mi_reduce_kernel<__hip_bfloat16, 128, 256, 8>", 4.0)]),
        ("aten::mm", [[t, q * d], [q * d, h]], [BF16, BF16], ["", ""], [(gemm, 9.0)]),
        norm,
        ("aten::mm", [[t, h], [h, 2 * inter]], [BF16, BF16], ["", ""], [(gemm, 60.0)]),
        ("aiter::silu_and_mul", [[t, inter], [t, 2 * inter]], [BF16, BF16], ["", ""],
         [("void aiter::act_and_mul_kernel<__hip_bfloat16, &aiter::silu_kernel<float>, 8>", 5.0)]),
        ("aten::mm", [[t, inter], [inter, h]], [BF16, BF16], ["", ""], [(gemm, 32.0)]),
    ]


def sglang_program(layers: int = 4) -> list[Op]:
    t, h = 32, 4096
    ck_norm = "_ZN7ck_tile6kentryILi1ENS_13Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePassINS_26Rmsnorm2dFwdPipelineProblem"
    ops: list[Op] = [("aten::embedding", [[128256, h], [t], [], [], []], [BF16, I64, "Scalar", "Scalar", "Scalar"],
                      ["", "", "-1", "False", "False"], [("void at::native::indexSelectLargeIndex<c10::BFloat16>", 3.0)])]
    for i in range(layers):
        ops += _sglang_layer(i)
    ops += [("aiter::rmsnorm", [[t, h], [t, h], [h], []], [BF16, BF16, BF16, "Scalar"], ["", "", "", "1e-05"],
             [(ck_norm, 5.0)]),
            ("aten::mm", [[t, h], [h, 128256]], [BF16, BF16], ["", ""],
             [("Cijk_Alik_Bljk_BBS_BH_Bias_HAS_SAV_UserArgs_MT64x64x128_MI16x16x1_SN_LDSB1", 260.0)])]
    return ops


def sglang_mi300_decode(tmp: Path, layers: int = 4) -> tuple[Path, Path]:
    """The replay trace and its capture trace (module docstring)."""
    program = sglang_program(layers)
    cap = TraceBuilder(device_name=None, extra={"deviceProperties": [MI300X_PROPS]})
    _runtime(cap, "hipStreamBeginCapture", 0)
    ts = 10.0
    for name, dims, types, concrete, kernels in program:
        ext = cap.op(name, ts, 5.0 + 3.0 * len(kernels), dims=dims, types=types, concrete=concrete)
        for j, (kname, _) in enumerate(kernels):
            _runtime(cap, "hipLaunchKernel", ts + 2 + 3 * j, ext=ext, kernel=kname)
        ts += 10.0 + 3.0 * len(kernels)
    _runtime(cap, "hipStreamEndCapture", ts + 5)
    rep = TraceBuilder(device_name=None, extra={"deviceProperties": [MI300X_PROPS]})
    total = sum(dur for *_, ks in program for _, dur in ks)
    rep.annotation(SGLANG_STEP, 0, total + 200)
    corr = _runtime(rep, "hipGraphLaunch", 20)
    at = 50.0
    for *_, kernels in program:
        for kname, dur in kernels:
            rep.events.append({"ph": "X", "cat": "kernel", "name": kname, "pid": 2, "tid": 0, "ts": at, "dur": dur,
                               "args": {"device": 0, "stream": 0, "correlation": corr}})
            at += dur + 0.5
    return rep.write(tmp / "sglang_replay.json.gz"), cap.write(tmp / "sglang_capture.json.gz")


def _runtime(b: TraceBuilder, name: str, ts: float, ext: int | None = None, kernel: str | None = None) -> int:
    b._corr += 1
    args: dict[str, Any] = {"correlation": b._corr}
    if ext is not None:
        args["External id"] = ext
    if kernel is not None:
        args["kernel"] = kernel
    b.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": PID, "tid": TID, "ts": ts, "dur": 1.0,
                     "args": args})
    return b._corr


# ---------------------------------------------------------------- vLLM on a B200, NVFP4 MoE

VLLM_STEP = "execute_64_context_0(sq0sk0sqsq0sqsk0)_generation_64(sq64sk131072sqsq64sqsk131072)"


def _vllm_moe_layer(i: int) -> list[tuple[str, list, list, list, list[tuple[str, float]], list]]:
    """(name, dims, types, concrete, kernels, children): one decoder layer, children nested under their op."""
    t, h, q, kv, d, e, k, inter, pages = 64, 2048, 32, 4, 128, 128, 8, 768, 16384
    routed = t * k
    fi_decode = ("flashinfer::batch_decode_with_kv_cache_dtype_q_bf16_dtype_kv_e4m3_dtype_o_bf16_dtype_idx_i32_"
                 "head_dim_qk_128_head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False_run")
    rms = ("_C::fused_add_rms_norm", [[t, h], [t, h], [h], []], [BF16, BF16, BF16, "Scalar"], ["", "", "", "1e-06"],
           [("void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>", 4.0)], [])
    quant = ("_C::dynamic_per_token_scaled_fp8_quant", [[t, h], [t, h], [t, 1], []], [FP8, BF16, F32, ""],
             [""] * 4, [("void vllm::dynamic_per_token_scaled_fp8_quant_kernel<c10::BFloat16, c10::Float8_e4m3fn>",
                         3.0)], [])
    fp8_gemm = "void cutlass::device_kernel<vllm::cutlass_3x_gemm_sm100<cutlass::float_e4m3_t, cutlass::bfloat16_t>>"
    attention = ("vllm::unified_attention_with_output",
                 [[t, q, d], [t, kv, d], [t, kv, d], [t, q, d], [], [], []], [BF16] * 4 + ["", "", ""], [""] * 7, [], [
                     ("_C_cache_ops::reshape_and_cache_flash",
                      [[t, kv, d], [t, kv, d], [pages, 16, kv, d], [pages, 16, kv, d], [t], [], [], []],
                      [BF16, BF16, FP8, FP8, I64, "", F32, F32], [""] * 8,
                      [("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, unsigned char, "
                        "(vllm::Fp8KVCacheDataType)1>", 3.0)], []),
                     (fi_decode,
                      [[128 << 20], [8 << 20], [], [t, q, d], [pages, 16, kv, d], [pages, 16, kv, d], [t + 1],
                       [8192], [t], [t, q, d], [], [], [], [], [], [], [], [], []],
                      [U8, U8, "GenericList", BF16, FP8, FP8, I32, I32, I32, BF16, "", "Scalar", "Scalar", "Scalar", "",
                       "Scalar", "Scalar", "Scalar", "Scalar"],
                      [""] * 11 + ["0", "-1", "True", "", "0.0", "0.08838834764831845", "1.0", "10000.0"],
                      [("void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u, 8u, "
                        "4u, __nv_fp8_e4m3, __nv_bfloat16, int>", 40.0)], [])])
    moe = ("vllm::moe_forward", [[t, h], [t, e], []], [BF16, BF16, ""], ["", "", ""], [], [
        ("_moe_C::topk_softmax", [[t, k], [t, k], [t, k], [t, e], []], [F32, I32, I32, BF16, "Scalar"], [""] * 5,
         [("void vllm::moe::topkGatingSoftmax<8, 128, 4, 16>", 4.0)], []),
        ("_C::get_cutlass_moe_mm_data", [[t, k], [e + 1], [e, 3], [e, 3], [routed], [routed], [], [], [], [e + 1], []],
         [I32, I32, I32, I32, I32, I32, "Scalar", "Scalar", "Scalar", I32, "Scalar"],
         [""] * 6 + [str(e), str(inter), str(h), "", "True"],
         [("void vllm::compute_expert_offsets<false>", 3.0)], []),
        ("_C::shuffle_rows", [[t, h], [routed]], [BF16, I32], ["", ""],
         [("void vllm::shuffleInputRowsKernel<__nv_bfloat16>", 3.0)], []),
        ("_C::scaled_fp4_experts_quant", [[routed, h // 2], [routed, h // 16], [routed, h], [e], [e + 1], [e + 1]],
         [U8, FP8, BF16, F32, I32, I32], [""] * 6, [("void vllm::cvt_fp16_to_fp4<__nv_bfloat16, false>", 4.0)], []),
        ("_C::cutlass_fp4_group_mm", [[routed, 2 * inter], [routed, h // 2], [e, 2 * inter, h // 2],
                                      [routed, h // 16], [e, 2 * inter, h // 16], [e], [e, 3], [e], [e]],
         [BF16, U8, U8, FP8, FP8, F32, I32, I32, I32], [""] * 9,
         [("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GroupProblemShape"
           "<cute::tuple<int, int, int>>, cutlass::nv_float4_t<cutlass::float_e2m1_t>>>", 70.0)], []),
        ("_C::silu_and_mul_scaled_fp4_experts_quant",
         [[routed, inter // 2], [routed, inter // 16], [routed, 2 * inter], [e], [e + 1], [e + 1]],
         [U8, FP8, BF16, F32, I32, I32], [""] * 6,
         [("void vllm::silu_mul_cvt_fp16_to_fp4<__nv_bfloat16, true>", 4.0)], []),
        ("_C::cutlass_fp4_group_mm", [[routed, h], [routed, inter // 2], [e, h, inter // 2],
                                      [routed, inter // 16], [e, h, inter // 16], [e], [e, 3], [e], [e]],
         [BF16, U8, U8, FP8, FP8, F32, I32, I32, I32], [""] * 9,
         [("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GroupProblemShape"
           "<cute::tuple<int, int, int>>, cutlass::nv_float4_t<cutlass::float_e2m1_t>>>", 36.0)], []),
        ("_C::shuffle_rows", [[routed, h], [routed]], [BF16, I32], ["", ""],
         [("void vllm::shuffleInputRowsKernel<__nv_bfloat16>", 4.0)], []),
        ("aten::mul", [[t, k, h], [t, k, 1]], [BF16, BF16], ["", ""],
         [("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<at::native::BinaryFunctor"
           "<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float>>>>", 4.0)], []),
        ("aten::sum", [[t, k, h], [], [], []], [BF16, "ScalarList", "Scalar", ""], ["", "[1]", "False", ""],
         [("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t"
           "<float, at::native::sum_functor<c10::BFloat16, float, float>>>>", 4.0)], []),
    ])
    return [
        rms, quant,
        ("_C::cutlass_scaled_mm", [[t, (q + 2 * kv) * d], [t, h], [h, (q + 2 * kv) * d], [t, 1], [1, (q + 2 * kv) * d],
                                   []], [BF16, FP8, FP8, F32, F32, ""], [""] * 6, [(fp8_gemm, 8.0)], []),
        ("_C::rotary_embedding", [[t], [t, q * d], [t, kv * d], [], [40960, d], []],
         [I64, BF16, BF16, "Scalar", BF16, "Scalar"], ["", "", "", str(d), "", "True"],
         [("void vllm::rotary_embedding_kernel<c10::BFloat16, true>", 3.0)], []),
        attention, quant,
        ("_C::cutlass_scaled_mm", [[t, h], [t, q * d], [q * d, h], [t, 1], [1, h], []],
         [BF16, FP8, FP8, F32, F32, ""], [""] * 6, [(fp8_gemm, 6.0)], []),
        rms,
        ("aten::mm", [[t, h], [h, e]], [BF16, BF16], ["", ""], [("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", 4.0)], []),
        moe,
    ]


def vllm_b200_moe(tmp: Path, layers: int = 4) -> Path:
    b = TraceBuilder(device_name="NVIDIA B200")
    program = [op for i in range(layers) for op in _vllm_moe_layer(i)]
    total = _emit(b, program, 100.0, [1000.0])
    b.annotation(VLLM_STEP, 0, total + 1000)
    return b.write(tmp / "vllm_b200_moe.json.gz")


def _emit(b: TraceBuilder, ops: list, ts: float, gpu: list[float]) -> float:
    """The ops (nested by their children) launching their kernels one after the other on the GPU clock ``gpu[0]``."""
    for name, dims, types, concrete, kernels, children in ops:
        start = ts
        ext = b.op(name, start, 1.0, dims=dims, types=types, concrete=concrete)
        event = b.events[-1]
        ts += 1.0
        for kname, dur in kernels:
            b.launch_kernel(kname, ts, gpu[0], dur, ext=ext)
            gpu[0] += dur + 1.0
            ts += 3.0
        ts = _emit(b, children, ts, gpu)
        event["dur"] = ts - start + 1.0
        ts += 2.0
    return max(ts, gpu[0])
