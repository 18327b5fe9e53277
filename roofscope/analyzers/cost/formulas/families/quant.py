"""Quantization and dequantization: fp8, int8, FP4 (NVFP4, MXFP4) with per-tensor, per-token or block scales.

* FLOPs per element: quantize 2 (scale, convert), 3 when the scale is computed (dynamic: the
  absolute maximum of the tensor, token or block first); dequantize 2 (convert, scale).
* bytes: the input read, the output written in its dtype (fp8/int8 one byte an element, FP4 two
  elements a byte, recorded as uint8 or ``Float4_e2m1fn_x2`` of half the width), the scales written
  (dynamic) or read (static), a block-scaled format's scales included (one per 16 or 32 elements).

Roles: quantize reads the widest float activation and writes the 1-byte ones; dequantize the
reverse. A functional op's output is not recorded: it is implied, one byte an element for a
quantize (half a byte when the name says FP4), the input's dtype for a dequantize... of 2 bytes
when the scale's dtype says nothing.
"""
from __future__ import annotations

from roofscope.analyzers.cost.formulas.families.roles import (Unmatched, family, is_quantized, item, nbytes, operands,
                                                              squashed)
from roofscope.analyzers.cost.formulas.records import Cost, OpCall

ALIASES = (
    "_C::static_scaled_fp8_quant", "_C::scaled_fp8_quant", "_C::dynamic_scaled_fp8_quant",
    "_C::dynamic_per_token_scaled_fp8_quant", "_C::static_scaled_int8_quant", "_C::dynamic_scaled_int8_quant",
    "_C::scaled_fp4_quant", "_C::scaled_fp4_experts_quant", "_C::per_token_group_fp8_quant",
    "_C::per_token_group_quant_fp8", "sgl_kernel::sgl_per_token_quant_fp8", "sgl_kernel::sgl_per_tensor_quant_fp8",
    "sgl_kernel::sgl_per_token_group_quant_fp8", "sgl_kernel::sgl_per_token_group_quant_int8",
    "sgl_kernel::scaled_fp4_quant", "aiter::dynamic_per_token_scaled_quant", "aiter::dynamic_per_group_scaled_quant",
    "aiter::dynamic_per_tensor_quant", "aiter::static_per_tensor_quant", "aiter::dynamic_per_group_scaled_quant_fp4",
    "vllm::triton_per_token_group_quant_fp8", "trtllm::fp4_quantize", "trtllm::fp8_quantize_1x128",
    "trtllm::static_quantize_e4m3_per_tensor", "trtllm::quantize_e4m3_per_tensor", "flashinfer::fp4_quantize",
    "torchao::quantize_affine", "torchao::dequantize_affine", "torchao::choose_qparams_affine",
)


@family("quantize", "elementwise", r"quant", ALIASES)
def quantize(call: OpCall) -> Cost:
    ops = operands(call)
    words = squashed(call.name)
    floats, packed = ops.float_acts, ops.quant_acts
    if "dequant" in words:
        if not packed:
            raise Unmatched("no quantized input")
        x = max(packed, key=lambda t: t.numel)
        elements = x.numel * (2 if _fp4(words, x) else 1)
        outs = [t for t in floats if t.numel == elements]
        out = nbytes(outs) if outs else elements * (max((item(t) for t in ops.small), default=2.0))
        rest = [t for t in ops.acts + ops.small if t is not x and not any(t is o for o in outs)]
        return Cost(2.0 * elements, x.nbytes + out + nbytes(rest), "")
    if not floats:
        raise Unmatched("no float input")
    x = max(floats, key=lambda t: t.numel)
    outs = [t for t in packed if t.numel in (x.numel, x.numel // 2)]
    out = nbytes(outs) if outs else x.numel * (0.5 if "fp4" in words else 1.0)
    # scales: float, or fp8 scales viewed as int32 (vLLM's swizzled NVFP4 block scales)
    scales = [t for t in ops.acts + ops.small + ops.ints if t is not x and not any(t is o for o in outs)]
    per = 3 if _dynamic(words, scales) else 2
    return Cost(float(per * x.numel), x.nbytes + out + nbytes(scales), x.dtype.precision if x.dtype else None)


_COMPUTED_SCALES = ("dynamic", "pertoken", "group", "block", "fp4", "mx", "pertensor", "choose")


def _dynamic(words: str, scales: list) -> bool:
    """The scale is computed (an absolute maximum first), unless the name says static; a name that
    says neither with one scale of one element was given it (static)."""
    if "static" in words:
        return False
    if any(w in words for w in _COMPUTED_SCALES):
        return True
    return not (len(scales) <= 1 and all(t.numel <= 1 for t in scales))


def _fp4(words: str, t) -> bool:  # noqa: ANN001 - a TensorSpec
    return t.dtype is not None and (t.dtype.name == "float4_e2m1fn_x2" or ("fp4" in words and is_quantized(t.dtype)
                                                                           and t.dtype.name == "uint8"))
