"""Mixture of experts: routing, token permutation, grouped GEMMs, fused experts, finalize.

With ``T`` tokens of width ``H``, ``E`` experts, top-``k`` routing, an expert's gate/up projection
``H -> n`` (``n = 2I`` gated) and down projection ``I -> H``:

* routing (``topk_softmax``, ``grouped_topk``, ``TopK``): 5 FLOPs per router logit (softmax 3,
  selection 2); the ``(T, E)`` logits read, the ``(T, k)`` weights and ids written.
* permutation (``moe_align_block_size``, ``moe_sorting``, ``SortTokens``, ``shuffle_rows``,
  ``moe_permute``): 2 FLOPs per routed row (count, place); every argument read or written once
  (ids, sorted ids, offsets, the rows moved).
* grouped GEMM (one GEMM per expert over its rows; ``cutlass_moe_mm``, ``cutlass_fp4_group_mm``,
  ``ck_moe_stage1``): ``2 M N K`` for the ``M`` routed rows; bytes: the rows in and out, the weights
  of the experts the rows touch (*estimated*: ``E (1 - (1 - 1/E)^M)`` distinct experts under uniform
  routing, bounds 1 .. ``min(E, M)`` experts), their block scales.
* fused experts (``fused_experts``, ``fused_moe``, ``fmoe``, FlashInfer's ``trtllm_*_moe``):
  ``2 T k (H n + I H)``; bytes: the touched experts' weights (*estimated*: ``E (1 - (1 - k/E)^T)``
  distinct experts, as TraceLens counts them; bounds ``k`` .. ``min(E, T k)``), 4-bit weights' block
  scales (1 byte per 32 weights), the tokens in and out, the ``(T k, I)`` intermediate written and
  read, the ``(T k, H)`` expert outputs.
* finalize (``moe_sum``, ``finalize``, ``combine``): 1 FLOP per expert output element (the weighted
  sum); the ``(T, k, H)`` outputs read, ``(T, H)`` written: the signature's arguments once each.

Roles: the tokens are the 2-d activation (its first dimension, ``T``), the expert weights the pools
led by ``E``, the ids and offsets the index tensors. vLLM's ``moe_forward(hidden_states,
router_logits, layer_name)`` has no weights or ``k`` among its arguments: hidden_args.py appends them
from the ops under it (``hint:topk``, ``hint:weight``).
"""
from __future__ import annotations

from roofscope.analyzers.cost.formulas.dtypes import DTYPE_BY_NAME
from roofscope.analyzers.cost.formulas.families.roles import (INT32, Unmatched, family, hint, item, missing, nbytes,
                                                              operands, squashed)
from roofscope.analyzers.cost.formulas.records import TENSOR, Cost, OpCall, TensorSpec

FLOAT32 = DTYPE_BY_NAME["float32"]


def expected_experts(experts: int, topk: int, tokens: int) -> float:
    """Distinct experts ``tokens`` tokens routed to ``topk`` of ``experts`` each touch, in
    expectation under uniform routing."""
    if experts <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - min(topk, experts) / experts) ** tokens)


def moe_cost(tokens: int, hidden: int, inter: int, up_n: int, experts: int, topk: int, act_item: float,
             weight_bits: int) -> Cost:
    """FLOPs and bytes of one fused-experts call (module docstring), an estimate with its bounds:
    ``inter`` is the down projection's input size, ``up_n`` the gate/up projection's output size."""
    routed = tokens * topk
    per_expert = hidden * up_n + inter * hidden
    flops = 2.0 * routed * per_expert
    wbytes = per_expert * weight_bits / 8 + (per_expert / 32 if weight_bits == 4 else 0.0)  # + block scales
    acts = (2 * tokens * hidden + 2 * routed * inter + routed * hidden) * act_item
    lo, hi = min(topk, experts), min(experts, routed)
    return Cost(flops, expected_experts(experts, topk, tokens) * wbytes + acts,
                estimate="experts touched: expected under uniform routing",
                bounds=(flops, flops, lo * wbytes + acts, hi * wbytes + acts))


_WEIGHT_BITS = {"uint8": 4, "float4_e2m1fn_x2": 4, "int8": 8, "float8_e4m3fn": 8, "float8_e4m3fnuz": 8,
                "float8_e5m2": 8, "float8_e5m2fnuz": 8, "bfloat16": 16, "float16": 16, "float32": 32}


def _bits(w: TensorSpec) -> int:
    return _WEIGHT_BITS.get(w.dtype.name if w.dtype else "", 16)


def expert_cost(x: TensorSpec, weights: list[TensorSpec], topk: int) -> Cost:
    """Fused experts over stacked ``(E, a, b)`` weights: each holds ``H n`` elements per expert in any
    layout (4-bit ones two a byte): the smaller ``n`` is the down projection's input ``I``."""
    bits = _bits(weights[0])
    experts, hidden = weights[0].shape[0], x.shape[-1] * (2 if item(x) == 1 and bits == 4 else 1)
    n = sorted(t.numel // max(t.shape[0], 1) * (2 if bits == 4 else 1) // hidden for t in weights[:2])
    c = moe_cost(x.shape[0], hidden, n[0], n[-1], experts, topk, item(x) if item(x) > 1 else 2.0, bits)
    return Cost(c.flops, c.bytes, x.dtype.precision if x.dtype and item(x) > 1 else "bf16", estimate=c.estimate,
                bounds=c.bounds)


ROUTERS = ("TopK", "_moe_C::topk_softmax", "_moe_C::topk_sigmoid", "_moe_C::grouped_topk", "sgl_kernel::topk_softmax",
           "sgl_kernel::topk_sigmoid", "sgl_kernel::moe_fused_gate", "sgl_kernel::biased_grouped_topk",
           "vllm::rocm_aiter_topk_softmax", "vllm::rocm_aiter_biased_grouped_topk", "aiter::topk_softmax",
           "aiter::topk_softmax_asm", "aiter::topk_sigmoid", "aiter::grouped_topk", "aiter::biased_grouped_topk",
           "aiter::biased_grouped_topk_hip", "aiter::moe_fused_gate", "trtllm::noaux_tc_op", "flashinfer::noaux_tc")


@family("moe_routing", "reduction", r"topk(?:softmax|sigmoid|softplus)|groupedtopk|moefusedgate|noauxtc|router"
        r"|gating|^topk$", ROUTERS)
def routing(call: OpCall) -> Cost:
    """``TopK(logits, k, ...)`` / ``topk_softmax(weights!, ids!, [indices!,] logits, ...)``: the router
    logits are the widest ``(T, E)`` tensor, the ``(T, k)`` ones are written."""
    if call.name == "TopK":
        logits, k = call.need("", 0), call.value("", 1)
        if not isinstance(k, int):
            raise missing("k")
        outs = [TensorSpec((logits.shape[0], k), FLOAT32), TensorSpec((logits.shape[0], k), INT32)]
    else:
        ts = [a.tensor for a in call.args if a.kind == TENSOR and a.tensor is not None and len(a.tensor.shape) == 2]
        if len(ts) < 2:
            raise missing("router logits")
        logits = max(ts, key=lambda t: t.shape[-1])
        outs = [t for t in ts if t is not logits and t.shape[0] == logits.shape[0]]
        if not outs:
            raise Unmatched("no (T, k) outputs")
    return Cost(5.0 * logits.numel, logits.nbytes + nbytes(outs), "fp32")


PERMUTES = ("SortTokens", "_moe_C::moe_align_block_size", "_moe_C::batched_moe_align_block_size",
            "_moe_C::moe_permute", "_moe_C::moe_unpermute", "_moe_C::shuffle_rows", "_C::shuffle_rows",
            "_C::get_cutlass_moe_mm_data", "_C::get_cutlass_pplx_moe_mm_data", "sgl_kernel::moe_align_block_size",
            "sgl_kernel::prepare_moe_input", "sgl_kernel::shuffle_rows", "aiter::moe_sorting_fwd",
            "aiter::moe_sorting_opus_fwd", "aiter::moe_align_block_size", "aiter::mxfp4_moe_sort_hip",
            "trtllm::moe_permute_op", "trtllm::moe_unpermute_op")


@family("moe_permute", "copy", r"moe(?:align|sort|permute|unpermute)|sorttokens|shufflerows|moemmdata|preparemoe",
        PERMUTES)
def permute(call: OpCall) -> Cost:
    ts = [a.tensor for a in call.args if a.kind == TENSOR and a.tensor is not None and a.tensor.dtype]
    if not ts:
        raise missing("tensors")
    routed = max((t.numel for t in ts if t.dtype and t.dtype.kind == "int" and len(t.shape) == 2), default=0) or \
        max(t.shape[0] for t in ts if t.shape)
    if call.name == "SortTokens":  # (scales (T, k), ids (T, k), n_expts): histogram, gather and scatter indices
        e = call.value("", 2)
        if not isinstance(e, int):
            raise missing("n_expts_tot")
        w, idx = ts[0], ts[1]
        outs = [TensorSpec((e,), INT32), TensorSpec((idx.numel,), INT32), TensorSpec((idx.numel,), INT32),
                w.like(shape=(w.numel,))]
        return Cost(float(2 * idx.numel), w.nbytes + idx.nbytes + nbytes(outs), "fp32")
    return Cost(2.0 * routed, nbytes(ts), "")


GROUPED = ("_C::cutlass_moe_mm", "_C::cutlass_fp4_group_mm", "_C::cutlass_mxfp8_grouped_mm", "aiter::ck_moe_stage1",
           "aiter::ck_moe_stage2", "aiter::moe_cktile2stages_gemm1_ck", "aiter::moe_cktile2stages_gemm2_ck",
           "sgl_kernel::cutlass_fp4_group_mm", "sgl_kernel::fp8_blockwise_scaled_grouped_mm", "aten::_grouped_mm",
           "aten::_scaled_grouped_mm", "primus_turbo::grouped_gemm", "grouped_gemm::gmm")


@family("moe_grouped_gemm", "gemm", r"group(?:ed)?(?:gemm|mm)|moemm|moestage|moe(?:cktile)?2?stages?gemm|gmm$", GROUPED)
def grouped_gemm(call: OpCall) -> Cost:
    """``out (M, N) = a (M, K) @ w[e] (E, N, K)`` per routed row (module docstring)."""
    ts = [t for t in (a.tensor for a in call.args if a.kind == TENSOR) if t is not None and t.dtype is not None]
    ws = [t for t in ts if len(t.shape) == 3 and t.dtype.kind == "float" or len(t.shape) == 3 and item(t) == 1]
    if not ws:
        raise Unmatched("no (E, N, K) weights")
    w = max(ws, key=lambda t: t.numel)
    experts, packs = w.shape[0], 2 if _bits(w) == 4 else 1
    rows_in = [t for t in ts if len(t.shape) == 2 and t.shape[-1] == w.shape[-1] and t.dtype.kind != "bool"]
    if not rows_in:
        raise Unmatched("no (M, K) rows beside (E, N, K) weights")
    a = max(rows_in, key=lambda t: t.numel)
    ops = operands(call, tokens=a.shape[0])
    k = a.shape[1] * (2 if item(a) == 1 and packs == 2 else 1)
    n = w.numel // experts * packs // k if (w.numel // experts * packs) % k == 0 else w.shape[1]
    outs = [t for t in ops.acts if t is not a]
    # rows routed: each token's k copies, when the output is (T, k, n) (AITER's stage 1)
    rows = a.shape[0] * next((t.shape[1] for t in outs if len(t.shape) == 3 and t.shape[-1] in (n, n // 2)), 1)
    per_expert = w.numel // experts * item(w)
    # the other stacks: scales of the weights (the second weight of a two-stage op, never touched here, is not)
    scales = [t for t in ops.pools if t is not w and t.numel * 8 <= w.numel] + list(ops.small)
    touched = expected_experts(experts, 1, rows)
    rest = nbytes([a] + outs) + (rows * n * 2 if not outs else 0) + nbytes(ops.ints) + nbytes(scales)
    flops = 2.0 * rows * n * k
    return Cost(flops, touched * per_expert + rest, a.dtype.precision if a.dtype and item(a) > 1 else "fp8",
                estimate="experts touched: expected under uniform routing",
                bounds=(flops, flops, per_expert + rest, min(experts, rows) * per_expert + rest))


FUSED = ("vllm::inplace_fused_experts", "vllm::outplace_fused_experts", "sglang::inplace_fused_experts",
         "sglang::outplace_fused_experts", "vllm::rocm_aiter_fused_moe", "aiter::fused_moe", "aiter::fused_moe_",
         "aiter::fmoe", "aiter::fmoe_g1u1", "aiter::fmoe_fp8_blockscale_g1u1", "aiter::fmoe_int8_g1u0",
         "flashinfer::cutlass_fused_moe", "flashinfer::trtllm_fp4_block_scale_moe",
         "flashinfer::trtllm_fp8_block_scale_moe", "flashinfer::trtllm_fp8_per_tensor_scale_moe", "trtllm::fused_moe",
         "vllm::flashinfer_fused_moe_blockscale_fp8",
         "vllm::flashinfer_fused_moe_per_tensor_scale_fp8", "vllm::moe_forward", "vllm::moe_forward_shared",
         "vllm::fused_moe", "sglang::fused_moe")


@family("moe_experts", "gemm", r"fusedmoe|fusedexperts|fmoe|moeforward|blockscalemoe|scalemoe|moerun", FUSED)
def fused_experts(call: OpCall) -> Cost:
    """The experts of a layer at once: stacked ``(E, ., .)`` weights among the arguments, or appended
    as ``hint:weight`` with ``hint:topk`` (vLLM's ``moe_forward``, whose weights are layer state)."""
    given = [a.tensor for a in call.args if a.name == "hint:weight" and a.tensor is not None]
    ts = [a.tensor for a in call.args if a.kind == TENSOR and a.tensor is not None and a.tensor.dtype
          and not a.name.startswith("hint:")]
    stacks = given or [t for t in ts if len(t.shape) == 3]
    lead = max({t.shape[0] for t in stacks}, key=lambda e: sum(t.numel for t in stacks if t.shape[0] == e)) \
        if stacks else 0
    weights = sorted((t for t in stacks if t.shape[0] == lead), key=lambda t: -t.numel)[:2]
    widths = {d * f for t in weights for d in t.shape[1:] for f in (1, 2)}
    rows = [t for t in ts if len(t.shape) == 2]
    x = next((t for t in rows if t.shape[-1] in widths and item(t) > 1), None) or \
        next((t for t in rows if t.shape[-1] * 2 in widths), None) or next(iter(rows), None)
    if x is None:
        raise Unmatched("no (T, H) tokens")
    if len(weights) < 2 or ("moeforward" in squashed(call.name) and not given):
        raise missing("no Input Dims for the expert weights")
    ops = operands(call, tokens=x.shape[0])
    experts = weights[0].shape[0]
    k = hint(call, "hint:topk")
    if not isinstance(k, int):
        ids = [t for t in ops.ints if len(t.shape) == 2 and t.shape[0] == x.shape[0]]
        k = ids[0].shape[1] if ids else next((v for v in reversed(ops.int_scalars()) if 0 < v <= min(experts, 16)),
                                             None)
    if not isinstance(k, int):
        raise missing("no top-k (no routing op recorded under it)")
    return expert_cost(x, weights, k)
