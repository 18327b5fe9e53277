"""Op families: an op costed by what it is, not by its name.

Serving engines and kernel libraries each name the same few ops their own way: an RMSNorm is
vLLM's ``_C::rms_norm``, AITER's ``rmsnorm2d_fwd_with_add``, SGLang's ``sgl_kernel::rmsnorm``, a
profiler wrapper's ``sglang_profiler::layernorm_rmsnorm_7``, tomorrow's ``foo::my_rms_norm``. One
formula per family (the modules below, each documenting its FLOPs and bytes) reads the call's tensors
by their roles (roles.py), whatever their order; the frameworks' names are registered as aliases, and
an op no formula is registered for is proposed a family by the words of its name and costed by it
when its tensors have the family's shape (``cost_source`` ``family``):

=================  ==========================================================================
module             family
=================  ==========================================================================
``norms``          RMSNorm, LayerNorm; fused residual add; quantized output
``rotary``         rotary embedding (cos/sin rows of the positions)
``activation``     gated activations (SiLU/GELU-and-mul), quantized or not
``quant``          quantize / dequantize: fp8, int8, FP4 with per-tensor/token/block scales
``kvcache``        KV-cache writes by slot index
``paged``          paged and varlen attention, decode and prefill, BF16/FP8 caches
``moe``            routing, permutation, grouped GEMM, fused experts, finalize
``gemm``           dense GEMMs under serving names: FP8, INT8, FP4 (block scales), unquantized
``sampling``       top-k / top-p / min-p sampling
=================  ==========================================================================

An op of a custom namespace that no family takes is costed from its signature when every tensor it
gets is activation-sized (roles.activation_sized): memory-bound, each tensor read or written once,
no FLOPs (``cost_source`` ``signature``). One that gets a pool (a cache, a table, stacked weights)
may read any part of it: it stays uncosted.
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Callable

from roofscope.analyzers.cost.formulas.families import (activation, gemm, kvcache, moe, norms, paged, quant, rotary,
                                                       sampling)
from roofscope.analyzers.cost.formulas.families.roles import (Family, Unmatched, activation_sized, nbytes, operands,
                                                              squashed)
from roofscope.analyzers.cost.formulas.records import Cost, OpCall
from roofscope.analyzers.cost.formulas.registry import _TC_CATEGORIES, Formula, register

# Tried in this order: the first family whose words a name has and whose shape its tensors fit.
FAMILIES: tuple[Family, ...] = (
    paged.paged_attention, moe.fused_experts, moe.grouped_gemm, gemm.dense_gemm, moe.routing, moe.permute,
    kvcache.kv_cache_write,
    norms.rms_norm, norms.layer_norm, rotary.rotary, activation.act_and_mul, sampling.sampling, quant.quantize,
)
# Namespaces of PyTorch's own ops: aten's are costed by name only; the others launch no kernels of
# their own or communicate.
_PYTORCH = ("aten", "torch", "prim", "prims", "c10d", "_c10d_functional", "c10d_functional", "_dtensor", "profiler",
            "autograd", "inductor", "cuda", "quantized", "_quantized", "mkldnn", "onednn", "_inductor_test")
FAMILY, SIGNATURE = "family", "signature"

for _f in FAMILIES:
    register(*_f.aliases, category=_f.category)(_f.fn)


def _namespace(name: str) -> str | None:
    ns, sep, _ = name.partition("::")
    return ns if sep else None


def signature_cost(call: OpCall) -> Cost:
    """An unknown op whose tensors are all activation-sized: each read or written once, no FLOPs."""
    ops = operands(call)
    if not activation_sized(ops):
        raise Unmatched("a tensor is not activation-sized")
    return Cost(0.0, nbytes(ops.order), source=SIGNATURE, category="other", tensor_core=False)


def _trying(families: tuple[Family, ...], fallback: bool) -> Callable[[OpCall], Cost]:
    def formula(call: OpCall) -> Cost:
        for f in families:
            try:
                c = f.fn(call)
            except Unmatched:
                continue
            return replace(c, category=c.category or f.category, source=c.source or FAMILY,
                           tensor_core=f.category in _TC_CATEGORIES if c.tensor_core is None else c.tensor_core)
        if fallback:
            return signature_cost(call)
        raise Unmatched(f"{call.name}: no family fits its tensors")
    return formula


@lru_cache(maxsize=8192)
def match(name: str) -> Formula | None:
    """The formula of an op no formula is registered for: its name's families tried in order, then
    (a custom namespace's op) its signature; None for PyTorch's own ops and backward nodes."""
    ns = _namespace(name)
    words = squashed(name)
    if ns in _PYTORCH or "backward" in words:
        return None
    families = tuple(f for f in FAMILIES if f.pattern.search(words))
    if not families and ns is None:
        return None
    return Formula(_trying(families, ns is not None), "other", False)


__all__ = ["FAMILIES", "FAMILY", "SIGNATURE", "match", "signature_cost", "Family", "Unmatched"]
