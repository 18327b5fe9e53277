"""Gated activations: ``act(x[..., :d]) * x[..., d:]`` (SwiGLU, GeGLU), quantized or not.

* FLOPs per output element: SiLU 4 + the multiply 1 = 5; GELU (erf or tanh) 5 + 1 = 6; GPT-OSS's
  clamped SwiGLU 7; ReLU-family 2; a quantized output 2 more (3 when its scale is computed).
* bytes: the input ``(..., 2d)`` read, the output ``(..., d)`` written (in its dtype: one byte an
  element for fp8/int8; 0.5 for FP4 packed two to a byte), a quantization's scales.

Roles: the input is the widest activation; the output the activation of half its width (a function
returning it: none recorded, one of the input's dtype implied).
"""
from __future__ import annotations

from roofscope.analyzers.cost.formulas.families.roles import family, item, nbytes, need_acts, operands, squashed
from roofscope.analyzers.cost.formulas.records import Cost, OpCall

ALIASES = (
    "_C::silu_and_mul", "_C::mul_and_silu", "_C::gelu_and_mul", "_C::gelu_tanh_and_mul", "_C::fatrelu_and_mul",
    "_C::swigluoai_and_mul", "_C::silu_and_mul_quant", "_C::silu_and_mul_per_block_quant",
    "_C::silu_and_mul_nvfp4_quant", "_C::silu_and_mul_scaled_fp4_experts_quant",
    "_C::persistent_masked_m_silu_mul_quant",
    "sgl_kernel::silu_and_mul", "sgl_kernel::gelu_and_mul", "sgl_kernel::gelu_tanh_and_mul",
    "flashinfer::silu_and_mul", "flashinfer::gelu_and_mul", "flashinfer::gelu_tanh_and_mul",
    "aiter::silu_and_mul", "aiter::gelu_and_mul", "aiter::gelu_tanh_and_mul", "aiter::scaled_silu_and_mul",
    "vllm::rocm_aiter_silu_and_mul", "LigerSiLUMulFunction", "LigerGELUMulFunction",
)


def _per_element(words: str) -> int:
    if "swigluoai" in words or "clamp" in words:
        return 7
    if "gelu" in words or "geglu" in words:
        return 6
    if "relu" in words and "gelu" not in words:
        return 2
    return 5


@family("act_and_mul", "elementwise", r"(?:silu|gelu|swish|relu|swiglu|geglu|act)(?:tanh)?(?:and)?mul|mul(?:and)?silu"
        r"|swiglu|geglu|reglu", ALIASES)
def act_and_mul(call: OpCall) -> Cost:
    ops = operands(call)
    x = max(need_acts(ops), key=lambda t: t.shape[-1])
    outs = [t for t in ops.acts if t is not x and t.numel in (x.numel // 2, x.numel // 4)]  # (…, d), fp4 (…, d/2)
    scales = list(ops.small) + [t for t in ops.acts if t is not x and not any(t is o for o in outs)]
    words = squashed(call.name)
    quant = any(item(t) == 1 for t in outs) or "quant" in words
    per = _per_element(words) + ((2 if "static" in words else 3) if quant else 0)
    out_bytes = nbytes(outs) if outs else x.numel // 2 * item(x)
    return Cost(float(per * (x.numel // 2)), x.nbytes + out_bytes + nbytes(scales),
                x.dtype.precision if x.dtype else None)
