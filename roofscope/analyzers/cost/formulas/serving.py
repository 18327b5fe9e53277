"""Serving-engine ops (vLLM, SGLang, FlashInfer, AITER): RMSNorm and fused add+RMSNorm, rotary
embedding, gated activations, KV-cache writes, quantization, MoE routing and fused experts, and
unified (varlen, paged) attention.

These ops are custom ops: Kineto records their tensors positionally (no schema binds them), and
many write into arguments they were given (``out``, ``residual``, the KV cache). Each formula
names the tensors it reads and writes; bytes follow the compulsory rule over those (inputs read
once, outputs written once), FLOPs count per element of the op's main tensor:

* RMSNorm: 4 per element (square, sum, scale by 1/rms, multiply by weight); fused add: 5.
* rotary embedding: 3 per rotated element (a pair costs 4 multiplies and 2 adds); the cos/sin
  cache rows of the positions are read, not the whole cache.
* ``silu_and_mul`` / ``gelu_and_mul``: 5 / 6 per output element (activation + multiply).
* quantization: 2 per element (scale, convert), 3 when the scale is computed (absmax).
* top-k routing: 5 per logit (softmax 3, selection 2); the router's outputs are (T, k).
* MoE (fused experts, gated): ``2 * T * k * (H * 2I + I * H)`` (gate/up and down projections of
  the ``k`` experts each token is routed to). Bytes: the weights of the experts the batch touches
  (expected distinct experts under uniform routing, ``E * (1 - (1 - k/E) ** T)``, as TraceLens
  counts them), their block scales for 4-bit weights (one byte per 32 weights), the tokens in
  and out (``2 T H``), the (T*k, I) intermediate written and read, and the (T*k, H) expert
  outputs.
* unified attention: ``2 * Hq * sum(q_i * k_i) * (D + Dv)`` over the batch's sequences (decode:
  ``q_i = 1``); the KV cache pages of every attended token are read once. The per-sequence
  lengths are not op arguments: they come from vLLM's step annotation (``sqsk``, see
  :func:`unified_attention_cost`), else the op is reported as missing them. A layer's sliding
  window is not recorded at all: the calls the kernels show to have one are reported uncosted
  (roofscope.analyzers.cost.hidden_args.windowed_attention), not costed over the whole context.
"""
from __future__ import annotations

import math

from roofscope.analyzers.cost.formulas.dtypes import DTYPE_BY_NAME, FLOAT32
from roofscope.analyzers.cost.formulas.records import TENSOR, Cost, MissingShapes, OpCall, TensorSpec, _bytes
from roofscope.analyzers.cost.formulas.registry import register

INT32 = DTYPE_BY_NAME["int32"]


def _specs(call: OpCall, positions: tuple[int, ...]) -> list[TensorSpec]:
    """The tensors at ``positions`` (absent or None arguments skipped)."""
    out = []
    for p in positions:
        a = call.arg("", p)
        if a is not None and a.kind == TENSOR and a.tensor is not None:
            out.append(a.tensor)
    return out


# name -> (FLOPs per element of the main tensor, main position, read positions, written positions,
# new outputs shaped like the main tensor). Positions are Kineto's recorded argument order.
_TABLE: dict[str, tuple[int, int, tuple[int, ...], tuple[int, ...], int]] = {
    # RMSNorm: vLLM _C (result, input, weight, eps), (input!, residual!, weight, eps)
    "_C::rms_norm": (4, 1, (1, 2), (0,), 0),
    "_C::fused_add_rms_norm": (5, 0, (0, 1, 2), (0, 1), 0),
    "_C::rms_norm_static_fp8_quant": (6, 1, (1, 2, 3), (0,), 0),
    "_C::fused_add_rms_norm_static_fp8_quant": (7, 1, (1, 2, 3, 4), (0, 2), 0),
    # AITER (ROCm): rmsnorm2d_fwd_with_add(out, input, residual_in, residual_out, weight, eps, ...)
    "aiter::rmsnorm2d_fwd_with_add_ck": (5, 1, (1, 2, 4), (0, 3), 0),
    "aiter::rmsnorm2d_fwd_with_add": (5, 1, (1, 2, 4), (0, 3), 0),
    "aiter::rms_norm": (4, 0, (0, 1), (), 1),
    "aiter::rmsnorm2d_fwd": (4, 0, (0, 1), (), 1),
    "vllm::rocm_aiter_rms_norm": (4, 0, (0, 1), (), 1),
    "vllm::rocm_aiter_rmsnorm2d_fwd_with_add": (5, 0, (0, 1, 2), (), 2),
    # SGLang / FlashInfer: rmsnorm(output, input, weight, eps), fused_add_rmsnorm(input!, residual!, ...)
    "sgl_kernel::rmsnorm": (4, 1, (1, 2), (0,), 0),
    "sgl_kernel::fused_add_rmsnorm": (5, 0, (0, 1, 2), (0, 1), 0),
    "sgl_kernel::gemma_rmsnorm": (4, 1, (1, 2), (0,), 0),
    "sgl_kernel::gemma_fused_add_rmsnorm": (5, 0, (0, 1, 2), (0, 1), 0),
    "flashinfer::rmsnorm": (4, 1, (1, 2), (0,), 0),
    "flashinfer::fused_add_rmsnorm": (5, 0, (0, 1, 2), (0, 1), 0),
    # quantization: (out, input, scale[, ...]); the scale is read (static) or written (dynamic)
    "_C::static_scaled_fp8_quant": (2, 1, (1, 2), (0,), 0),
    "_C::scaled_fp8_quant": (2, 1, (1, 2), (0,), 0),
    "_C::dynamic_scaled_fp8_quant": (3, 1, (1,), (0, 2), 0),
    "_C::dynamic_per_token_scaled_fp8_quant": (3, 1, (1,), (0, 2), 0),
    "_C::static_scaled_int8_quant": (2, 1, (1, 2), (0,), 0),
    "_C::dynamic_scaled_int8_quant": (3, 1, (1,), (0, 2), 0),
    "sgl_kernel::sgl_per_token_quant_fp8": (3, 0, (0,), (1, 2), 0),
    "sgl_kernel::sgl_per_tensor_quant_fp8": (3, 0, (0,), (1, 2), 0),
    "sgl_kernel::sgl_per_token_group_quant_fp8": (3, 0, (0,), (1, 2), 0),
}
_CATEGORY = {n: "normalization" for n in _TABLE if "norm" in n}


def _table_cost(call: OpCall) -> Cost:
    per, main, reads, writes, new = _TABLE[call.name]
    x = call.need("", main)
    outs = _specs(call, writes) + [x.like()] * new
    prec = x.dtype.precision if x.dtype else None
    return Cost(float(per * x.numel), _bytes(_specs(call, reads)) + _bytes(outs), prec)


register(*(n for n in _TABLE if n in _CATEGORY), category="normalization")(_table_cost)
register(*(n for n in _TABLE if n not in _CATEGORY), category="elementwise")(_table_cost)


# gated activations: (out, input) with input (..., 2d) and out (..., d)
_GATED = {"_C::silu_and_mul": 5, "_C::mul_and_silu": 5, "_C::gelu_and_mul": 6, "_C::gelu_tanh_and_mul": 6,
          "_C::gelu_new": 6, "_C::gelu_fast": 6, "_C::gelu_quick": 5, "_C::swigluoai_and_mul": 7,
          "sgl_kernel::silu_and_mul": 5, "sgl_kernel::gelu_and_mul": 6, "sgl_kernel::gelu_tanh_and_mul": 6}


@register(*_GATED, category="elementwise")
def _gated(call: OpCall) -> Cost:
    out, x = call.need("", 0), call.need("", 1)
    return Cost(float(_GATED[call.name] * out.numel), x.nbytes + out.nbytes)


@register("_C::rotary_embedding", "_C::batched_rotary_embedding", "sgl_kernel::rotary_embedding",
          "vllm::rotary_embedding", category="elementwise")
def _rotary(call: OpCall) -> Cost:
    """(positions, query!, key!, head_size, cos_sin_cache, is_neox): q and k rotated in place."""
    pos, q = call.need("", 0), call.need("", 1)
    cache = call.need("", 4)
    qk = _specs(call, (1, 2))
    head = call.value("", 3)
    rot = cache.shape[-1]  # rotary dims per head (cos and sin halves)
    if not isinstance(head, int) or head <= 0:
        raise MissingShapes("head_size")
    rotated = sum(t.numel // head * rot for t in qk)  # elements of q and k inside the rotary dims
    cache_rows = pos.numel * rot * (cache.dtype.itemsize if cache.dtype else math.nan)
    return Cost(3.0 * rotated, pos.nbytes + cache_rows + 2 * _bytes(qk), q.dtype.precision if q.dtype else None)


@register("_C_cache_ops::reshape_and_cache", "_C_cache_ops::reshape_and_cache_flash",
          "_C_cache_ops::concat_and_cache_mla", category="copy")
def _kv_cache_write(call: OpCall) -> Cost:
    """(key, value, key_cache!, value_cache!, slot_mapping, ...): each new token's K and V read
    and written into its cache slot (in the cache's dtype)."""
    k = call.need("", 0)
    v = call.tensor("", 1)
    kc = call.tensor("", 2)
    slots = call.tensor("", 4)
    new = [t for t in (k, v) if t is not None]
    item = kc.dtype.itemsize if kc is not None and kc.dtype else (k.dtype.itemsize if k.dtype else math.nan)
    written = sum(t.numel for t in new) * item
    return Cost(0.0, _bytes(new) + written + (slots.nbytes if slots else 0.0), k.dtype.precision if k.dtype else None)


@register("vllm::unified_kv_cache_update", category="copy")
def _kv_cache_update(call: OpCall) -> Cost:
    """(key, value, layer_name): the cache is a layer attribute, written in the key's dtype."""
    new = _specs(call, (0, 1))
    if not new:
        raise MissingShapes("key")
    return Cost(0.0, 2 * _bytes(new), new[0].dtype.precision if new[0].dtype else None)


# ---------------------------------------------------------------------------
# MoE routing and experts


def _router_outputs(t: int, k: int) -> list[TensorSpec]:
    return [TensorSpec((t, k), FLOAT32), TensorSpec((t, k), INT32)]


@register("TopK", "_moe_C::topk_softmax", "sgl_kernel::topk_softmax", "vllm::rocm_aiter_topk_softmax",
          "aiter::topk_softmax", category="reduction")
def _topk_routing(call: OpCall) -> Cost:
    """TopK(logits, k, ...) / topk_softmax(topk_weights!, topk_ids!, [token_expert_indices!,] gating, ...):
    the router logits are the widest (T, E) tensor, the (T, k) others are written."""
    if call.name == "TopK":
        logits, k = call.need("", 0), call.value("", 1)
        if not isinstance(k, int):
            raise MissingShapes("k")
        outs = _router_outputs(logits.shape[0], k)
    else:
        tensors = [a.tensor for a in call.args if a.kind == TENSOR and a.tensor is not None and a.tensor.shape]
        if len(tensors) < 2:
            raise MissingShapes("router logits")
        logits = max(tensors, key=lambda t: t.shape[-1])
        outs = [t for t in tensors if t is not logits]
    return Cost(5.0 * logits.numel, logits.nbytes + _bytes(outs), "fp32")


@register("SortTokens", category="reduction")
def _sort_tokens(call: OpCall) -> Cost:
    """SortTokens(expt_scal (T, k), expt_indx (T, k), n_expts): triton_kernels' routing: a
    histogram over experts and the gather / scatter permutations (int32, T*k each)."""
    w, idx = call.need("", 0), call.need("", 1)
    e = call.value("", 2)
    if not isinstance(e, int):
        raise MissingShapes("n_expts_tot")
    outs = [TensorSpec((e,), INT32), TensorSpec((idx.numel,), INT32), TensorSpec((idx.numel,), INT32),
            w.like(shape=(w.numel,))]
    return Cost(float(2 * idx.numel), w.nbytes + idx.nbytes + _bytes(outs), "fp32")


def expected_experts(experts: int, topk: int, tokens: int) -> float:
    """Distinct experts ``tokens`` tokens routed to ``topk`` of ``experts`` each touch, in
    expectation under uniform routing."""
    if experts <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - min(topk, experts) / experts) ** tokens)


def moe_cost(tokens: int, hidden: int, inter: int, up_n: int, experts: int, topk: int, act_item: int,
             weight_bits: int) -> Cost:
    """FLOPs and bytes of one fused-experts call (see the module docstring): ``inter`` is the
    down projection's input size, ``up_n`` the gate/up projection's output size (``2 * inter``
    when gated), ``weight_bits`` 4, 8 or 16."""
    routed = tokens * topk
    per_expert = hidden * up_n + inter * hidden  # weights of one expert
    flops = 2.0 * routed * per_expert
    wbytes = per_expert * weight_bits / 8 + (per_expert / 32 if weight_bits == 4 else 0.0)  # + block scales
    # tokens in and out, the (T*k, I) intermediate written and read, the (T*k, H) expert outputs
    acts = (2 * tokens * hidden + 2 * routed * inter + routed * hidden) * act_item
    return Cost(flops, expected_experts(experts, topk, tokens) * wbytes + acts)


_WEIGHT_BITS = {"uint8": 4, "float4_e2m1fn_x2": 4, "int8": 8, "float8_e4m3fn": 8, "float8_e4m3fnuz": 8,
                "float8_e5m2": 8, "float8_e5m2fnuz": 8, "bfloat16": 16, "float16": 16, "float32": 32}


def _weights_bits(w: list[TensorSpec]) -> int:
    return _WEIGHT_BITS.get(w[0].dtype.name if w[0].dtype else "", 16)


def _expert_cost(x: TensorSpec, w: list[TensorSpec], experts: int, k: int) -> Cost:
    bits = _weights_bits(w)
    tokens, hidden = x.shape[0], x.shape[-1]
    n = sorted(t.numel // max(t.shape[0], 1) * (2 if bits == 4 else 1) // hidden for t in w)
    cost = moe_cost(tokens, hidden, n[0], n[1], experts, k, x.dtype.itemsize if x.dtype else 2, bits)
    return Cost(cost.flops, cost.bytes, x.dtype.precision if x.dtype else None)


@register("vllm::inplace_fused_experts", "vllm::outplace_fused_experts", "sglang::inplace_fused_experts",
          "sglang::outplace_fused_experts", "vllm::rocm_aiter_fused_moe", "aiter::fused_moe", category="gemm")
def _fused_experts(call: OpCall) -> Cost:
    """(hidden_states (T, H), w1 (E, ., .), w2 (E, ., .), topk_weights (T, k), topk_ids (T, k), ...):
    the fused-experts ops that take their weights as arguments (FP8 weights' scales not counted)."""
    x, w1, w2, ids = call.need("", 0), call.need("", 1), call.need("", 2), call.need("", 4)
    if len(w1.shape) != 3 or len(w2.shape) != 3 or len(ids.shape) != 2:
        raise ValueError(f"expected stacked expert weights, got {w1.shape} {w2.shape}")
    return _expert_cost(x, [w1, w2], w1.shape[0], ids.shape[1])


@register("vllm::moe_forward", "vllm::moe_forward_shared", "vllm::fused_moe", "sglang::fused_moe", category="gemm")
def _moe(call: OpCall) -> Cost:
    """(hidden_states (T, H), router_logits (T, E), ...). The expert weights and top-k are module
    state, not arguments: roofscope.analyzers.cost.hidden_args appends them from the op's subtree
    (``hint:topk``, and the two stacked ``(E, a, b)`` weights as ``hint:weight``), else the op is
    reported as missing them. Each weight holds ``H * n`` elements per expert, whatever its
    layout (4-bit weights pack two per byte): ``n`` is ``up_n`` for gate/up, ``inter`` for down."""
    x, logits = call.need("", 0), call.need("", 1)
    hints = [a for a in call.args if a.name.startswith("hint:")]
    k = next((a.value for a in hints if a.name == "hint:topk"), None)
    w = [a.tensor for a in hints if a.name == "hint:weight" and a.tensor is not None]
    if len(w) != 2:
        raise MissingShapes("no Input Dims for the expert weights")
    if not isinstance(k, int):
        raise MissingShapes("no top-k (no routing op recorded under it)")
    return _expert_cost(x, w, logits.shape[-1], k)


# ---------------------------------------------------------------------------
# unified attention (vLLM V1): (query (T, Hq, D), key, value, output!, layer_name, ...)


def unified_attention_cost(hq: int, hkv: int, d: int, dv: int, sq: int, sk: int, sqsk: int, item: int) -> Cost:
    """FLOPs and bytes of one unified-attention call over a batch of sequences: ``sq`` query
    tokens, ``sk`` cached keys and ``sqsk = sum(q_i * k_i)`` score entries per head (vLLM's step
    annotation records all three). Reads Q and the K/V of ``sk`` tokens, writes the output."""
    flops = 2.0 * hq * sqsk * (d + dv)
    return Cost(flops, float(item * (sq * hq * d + sk * hkv * (d + dv) + sq * hq * dv)))


@register("vllm::unified_attention", "vllm::unified_attention_with_output", category="attention")
def _unified_attention(call: OpCall) -> Cost:
    q, k = call.need("", 0), call.need("", 1)
    v = call.tensor("", 2) or k
    lens = {a.name: a.value for a in call.args if a.name.startswith("hint:")}
    if not all(isinstance(lens.get(f"hint:{n}"), int) for n in ("sq", "sk", "sqsk")):
        raise MissingShapes("no sequence lengths (the KV cache and attention metadata are not arguments)")
    (_, hq, d), hkv, dv = q.shape, k.shape[-2], v.shape[-1]
    item = q.dtype.itemsize if q.dtype else 2
    return unified_attention_cost(hq, hkv, d, dv, lens["hint:sq"], lens["hint:sk"], lens["hint:sqsk"], item)
