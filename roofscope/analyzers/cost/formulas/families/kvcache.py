"""KV-cache writes by index: the new tokens' keys and values stored into their cache slots.

* FLOPs: 0 (a quantizing store's scale and convert: 2 per element stored, fp8 caches).
* bytes: the new keys and values read (their dtype), written into the cache (the cache's dtype: an
  fp8 cache takes one byte an element), the slot indices read, the scales read. Never the cache
  itself: it is indexed by slot (``slot_mapping``, ``loc``, ``out_cache_loc``), and only the rows of
  the new tokens are touched.

Roles: the caches are the tensors not led by the token dimension (pools), the new keys/values the
activations led by it, the slots the index tensors. An op whose cache is not an argument (vLLM's
``unified_kv_cache_update(key, value, layer_name)``) writes in the keys' dtype unless the trace shows
the cache's (``hint:kv_item``, from a cache write of the same layer).
"""
from __future__ import annotations

from roofscope.analyzers.cost.formulas.families.roles import Unmatched, family, hint, item, nbytes, need_acts, operands
from roofscope.analyzers.cost.formulas.records import Cost, OpCall

ALIASES = (
    "_C_cache_ops::reshape_and_cache", "_C_cache_ops::reshape_and_cache_flash", "_C_cache_ops::concat_and_cache_mla",
    "_C_cache_ops::indexer_k_quant_and_cache", "vllm::unified_kv_cache_update", "sglang::store_cache",
    "sgl_kernel::store_kv_cache", "flashinfer::append_paged_kv_cache", "flashinfer::append_paged_mla_kv_cache",
    "aiter::reshape_and_cache", "aiter::reshape_and_cache_flash", "aiter::reshape_and_cache_with_pertoken_quant",
    "aiter::reshape_and_cache_with_block_quant", "aiter::concat_and_cache_mla", "trtllm::update_kv_cache",
)


@family("kv_cache_write", "copy", r"(?:reshape|store|write|set|append|concat|insert|save|quant)(?:and)?(?:paged)?"
        r"(?:kv|mla)*(?:cache|buffer)|(?:kv)?cache(?:write|store|update)", ALIASES)
def kv_cache_write(call: OpCall) -> Cost:
    ops = operands(call)
    new = need_acts(ops)
    caches = [t for t in ops.pools if t.shape[0] != ops.tokens]
    given = hint(call, "hint:kv_item")
    if caches:
        cache_item = item(caches[0])
    elif isinstance(given, (int, float)) and given > 0:
        cache_item = float(given)
    elif not ops.pools:
        cache_item = item(new[0])
    else:
        raise Unmatched("a cache led by the token dimension")
    slots = [t for t in ops.ints if t.numel == ops.tokens or len(t.shape) == 1]
    stored = sum(t.numel for t in new)
    quantizing = cache_item < item(new[0])
    return Cost(2.0 * stored if quantizing else 0.0,
                nbytes(new) + stored * cache_item + nbytes(slots) + nbytes(ops.small) + nbytes(ops.quant_acts),
                new[0].dtype.precision if new[0].dtype else None)
