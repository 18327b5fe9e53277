"""Normalization: RMSNorm and LayerNorm, fused with a residual add, with quantization of the output.

For ``N`` activation elements of row width ``H``:

* FLOPs per element: RMSNorm 4 (square, sum, scale by 1/rms, weight); LayerNorm 8 (mean 1, variance
  3, normalize 2, weight 1, bias 1); a fused residual add 1 more; a quantized output 2 more (scale,
  convert), 3 when the scale is computed (dynamic: the absolute maximum first).
* bytes: the input read; the residual read and written back (fused add); the weight (and bias) read
  once, ``H`` elements; the output written, in its own dtype (fp8 or int8: one byte an element); a
  dynamic quantization's scales written, a static one's read.

Roles by shape (roles.py): the activations are the tensors led by the token dimension, the weights the
1-d tensors of ``H`` elements; a residual is there when the name says ``add``/``residual`` or when
two float activations stand beside a quantized output. The argument order is no matter:
vLLM's ``rms_norm(result, input, weight, eps)``, AITER's ``rmsnorm2d_fwd_with_add(out, input,
residual_in, residual_out, weight, eps)``, FlashInfer's ``fused_add_rmsnorm(input, residual, weight,
eps)`` and an unknown ``foo::my_rms_norm(input, weight, eps)`` are costed by the same lines.
"""
from __future__ import annotations

from roofscope.analyzers.cost.formulas.families.roles import (Unmatched, family, item, nbytes, need_acts, operands,
                                                              squashed)
from roofscope.analyzers.cost.formulas.records import Cost, OpCall

RMS_ALIASES = (
    "_C::rms_norm", "_C::fused_add_rms_norm", "_C::rms_norm_static_fp8_quant",
    "_C::fused_add_rms_norm_static_fp8_quant",
    "_C::rms_norm_dynamic_per_token_quant", "_C::rms_norm_per_block_quant",
    "aiter::rmsnorm2d_fwd_with_add_ck", "aiter::rmsnorm2d_fwd_with_add", "aiter::rms_norm", "aiter::rmsnorm2d_fwd",
    "aiter::rmsnorm2d_fwd_ck", "aiter::rms_norm_cu", "aiter::fused_add_rms_norm_cu", "aiter::rmsnorm",
    "aiter::add_rmsnorm", "aiter::rmsnorm2d_fwd_with_dynamicquant_ck", "aiter::rmsnorm2d_fwd_with_add_dynamicquant_ck",
    "aiter::rmsnorm_quant", "vllm::rocm_aiter_rms_norm", "vllm::rocm_aiter_rmsnorm2d_fwd_with_add",
    "vllm::rocm_aiter_rmsnorm_fp8_group_quant", "vllm::rocm_aiter_rmsnorm_with_add_fp8_group_quant",
    "sgl_kernel::rmsnorm", "sgl_kernel::fused_add_rmsnorm", "sgl_kernel::gemma_rmsnorm",
    "sgl_kernel::gemma_fused_add_rmsnorm", "flashinfer::rmsnorm", "flashinfer::fused_add_rmsnorm",
    "flashinfer::gemma_rmsnorm", "flashinfer::gemma_fused_add_rmsnorm", "trtllm::flashinfer_rmsnorm",
    "trtllm::flashinfer_fused_add_rmsnorm",
    # autograd Functions (torch records their inputs): Liger's Triton kernels, apex's fused CUDA norms
    "LigerRMSNormFunction", "FusedRMSNormAffineFunction", "FusedRMSNormFunction",
    "FusedRMSNormAffineMixedDtypesFunction",
)
LAYER_ALIASES = ("LigerLayerNormFunction", "FusedLayerNormAffineFunction", "FusedLayerNormFunction",
                 "FusedLayerNormAffineMixedDtypesFunction")
_STATIC = ("static",)


def norm_cost(call: OpCall, layer: bool, add: bool, quant: str) -> Cost:
    """FLOPs and bytes of one normalization call (module docstring); ``quant``: "" (none), "static"
    or "dynamic" (the scale computed)."""
    ops = operands(call)
    floats = need_acts(ops)
    x = max(floats, key=lambda t: (t.numel, -floats.index(t)))
    width = x.shape[-1]
    out_q = [t for t in ops.quant_acts if t.numel == x.numel]
    if not add and out_q and sum(t.numel == x.numel for t in floats) >= 2:
        add = True  # rms_norm_dynamic_per_token_quant(result, input, weight, scale, eps, scale_ub, residual)
    weights = [t for t in ops.small if t.shape == (width,)]
    if any(t.numel != x.numel for t in floats if t.shape[-1:] == (width,)) and not weights:
        raise Unmatched("activations of different sizes and no (H,) weight")
    scales = [t for t in ops.small if t.shape != (width,)] + [t for t in ops.float_acts if t.numel < x.numel]
    if not quant and out_q:
        quant = "dynamic"
    per = (8 if layer else 4) + (1 if add else 0) + (0 if not quant else 2 if quant == "static" else 3)
    out = out_q[0] if out_q else x
    moved = x.nbytes + nbytes(weights[:2]) + out.numel * item(out) + nbytes(scales)
    if add:
        moved += 2 * x.numel * item(x)
    return Cost(float(per * x.numel), moved, x.dtype.precision if x.dtype else None)


def _variant(call: OpCall) -> tuple[bool, str]:
    words = squashed(call.name)
    add = "add" in words or "residual" in words
    quant = "" if "quant" not in words else "static" if any(w in words for w in _STATIC) else "dynamic"
    return add, quant


@family("rmsnorm", "normalization", r"rmsnorm|rmsn(?!a)|rootmeansquare", RMS_ALIASES)
def rms_norm(call: OpCall) -> Cost:
    return norm_cost(call, False, *_variant(call))


@family("layernorm", "normalization", r"layernorm|(?<![a-z])lnfwd", LAYER_ALIASES)
def layer_norm(call: OpCall) -> Cost:
    return norm_cost(call, True, *_variant(call))

