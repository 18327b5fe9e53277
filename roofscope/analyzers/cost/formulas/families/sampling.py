"""Token sampling: from probabilities or logits, with top-k / top-p / min-p filtering.

* FLOPs: 2 per vocabulary element (compare and accumulate one pass; rejection sampling's further
  rounds re-read cached rows: the compulsory pass is counted), 5 when it starts from logits
  (the softmax: max, subtract, exp, sum, divide).
* bytes: the ``(B, V)`` probabilities or logits read once, the per-row parameters (top-k, top-p,
  seeds, uniform samples) read, the ``(B,)`` samples (and a renormalized ``(B, V)`` output, if any)
  written.

Roles: the probabilities are the widest activation; everything else is per row.
"""
from __future__ import annotations

from roofscope.analyzers.cost.formulas.families.roles import family, nbytes, need_acts, operands, squashed
from roofscope.analyzers.cost.formulas.records import Cost, OpCall

ALIASES = (
    "flashinfer::sampling_from_probs", "flashinfer::sampling_from_logits", "flashinfer::top_k_sampling_from_probs",
    "flashinfer::top_p_sampling_from_probs", "flashinfer::min_p_sampling_from_probs",
    "flashinfer::top_k_top_p_sampling_from_probs", "flashinfer::top_k_top_p_sampling_from_logits",
    "flashinfer::top_p_renorm_probs", "flashinfer::top_k_renorm_probs", "flashinfer::top_k_mask_logits",
    "sgl_kernel::top_k_top_p_sampling_from_probs", "sgl_kernel::top_p_sampling_from_probs",
    "sgl_kernel::min_p_sampling_from_probs", "sgl_kernel::top_k_renorm_probs", "sgl_kernel::top_p_renorm_probs",
    "aiter::mixed_sample_outer_exponential", "aiter::greedy_sample", "aiter::random_sample",
    "trtllm::top_k_top_p_sampling", "vllm::flashinfer_sample",
)


@family("sampling", "reduction", r"sampl|renormprobs|masklogits|topktopp|minp", ALIASES)
def sampling(call: OpCall) -> Cost:
    ops = operands(call)
    probs = max(need_acts(ops), key=lambda t: t.numel)
    per = 5 if "logit" in squashed(call.name) else 2
    rest = [t for t in ops.order if t is not probs]
    written = 0.0 if any(t.numel == probs.numel for t in rest) else probs.shape[0] * 8.0  # int64 samples
    return Cost(float(per * probs.numel), probs.nbytes + nbytes(rest) + written, probs.dtype.precision
                if probs.dtype else None)
