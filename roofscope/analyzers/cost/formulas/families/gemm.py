"""Dense GEMMs under serving names: quantized (FP8, INT8, NVFP4/MXFP4 with block scales) and unquantized.

``out (M, N) = a (M, K) @ b`` with ``b`` stored ``(N, K)`` or ``(K, N)`` (4-bit: two values a byte):

* FLOPs: ``2 M N K`` (scales and bias in the epilogue not counted).
* bytes: ``a`` and ``b`` read in their stored dtypes, their scales read, the output written
  (``(M, N)`` in the activation's dtype when not passed).

Roles: ``a`` is the activation led by the token dimension; ``b`` the 2-d tensor not led by it that
shares ``K`` with ``a`` (the larger, when several do); ``N`` is its other dimension.
"""
from __future__ import annotations

from roofscope.analyzers.cost.formulas.families.roles import Unmatched, family, item, nbytes, operands, squashed
from roofscope.analyzers.cost.formulas.records import Cost, OpCall

ALIASES = (
    "_C::cutlass_scaled_mm", "_C::cutlass_scaled_mm_azp", "_C::cutlass_scaled_fp4_mm",
    "_C::cutlass_scaled_mm_blockwise",
    "vllm::rocm_unquantized_gemm", "vllm::rocm_aiter_triton_gemm_a8w8_blockscale", "vllm::gemm_with_dynamic_quant",
    "vllm::apply_w8a8_block_fp8_linear", "vllm::cutlass_scaled_mm", "sgl_kernel::fp8_scaled_mm",
    "sgl_kernel::fp8_blockwise_scaled_mm", "sgl_kernel::int8_scaled_mm", "sgl_kernel::cutlass_scaled_fp4_mm",
    "aiter::gemm_a8w8", "aiter::gemm_a8w8_ck", "aiter::gemm_a8w8_blockscale", "aiter::gemm_a8w8_blockscale_ck",
    "aiter::gemm_a8w8_bpreshuffle", "aiter::gemm_a4w4", "aiter::gemm_a16w16", "aiter::gemm_afp4wfp4_",
    "trtllm::cublas_scaled_mm", "trtllm::fp8_block_scaling_gemm", "trtllm::nvfp4_gemm",
)


@family("dense_gemm", "gemm", r"(?<!group)(?<!grouped)(?:scaledmm|gemm(?!v)|(?:fp8|fp4|int8|a8w8|a4w4|a16w16)mm"
        r"|fp4mm|mmfp4|bmmfp8|unquantizedgemm|matmul)", ALIASES)
def dense_gemm(call: OpCall) -> Cost:
    ops = operands(call)
    weights = [t for t in ops.pools if len(t.shape) == 2]
    if not weights:
        raise Unmatched("no (N, K) weight")
    b = max(weights, key=lambda t: t.numel)
    rows = [t for t in ops.acts if len(t.shape) == 2 and t.shape[1] in b.shape]
    if not rows:
        raise Unmatched("no (M, K) activation beside the weight")
    # the input is stored like the weight (both fp8 for a W8A8 GEMM); else it follows an out= argument
    a = ([t for t in rows if t.dtype == b.dtype] or rows)[-1]
    k_stored = a.shape[1]
    n = b.shape[0] if b.shape[1] == k_stored else b.shape[1]
    fp4 = "fp4" in squashed(call.name) or (a.dtype is not None and a.dtype.name == "float4_e2m1fn_x2")
    packs = 2 if item(a) == 1 and fp4 else 1
    m, k = a.shape[0], k_stored * packs
    outs = [t for t in ops.acts if t is not a and t.shape[-1] == n]
    rest = [t for t in ops.order if t is not a and t is not b and not any(t is o for o in outs)]
    out = nbytes(outs[:1]) if outs else m * n * (item(a) if item(a) > 1 else 2.0)
    prec = a.dtype.precision if a.dtype and a.dtype.precision else ("fp8" if item(a) == 1 else None)
    return Cost(2.0 * m * n * k, a.nbytes + b.nbytes + nbytes(rest) + out, prec)
