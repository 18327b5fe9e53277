"""Serving attention over a KV cache: paged and varlen, decode and prefill, BF16 or FP8 caches.

For ``Hq`` query heads of dims ``D`` (query/key) and ``Dv`` (value), ``T`` query tokens of ``B``
sequences and ``K`` cached keys attended in all (``sum k_i``):

* FLOPs: ``2 Hq (D + Dv) P`` with ``P`` the scores computed: a decode (one query a sequence)
  ``P = K``; a prefill or extend ``P = sum(q_i k_i - q_i (q_i - 1) / 2)`` (causal, bottom-right).
* bytes: the queries read, the output written, the K/V rows of the attended keys read in the cache's
  dtype (an FP8 cache: one byte an element) -- never the whole cache, which is a pool indexed by
  block tables or page indices --, the index tensors and scales read, new keys/values passed beside
  the cache read.

The lengths are rarely arguments. In order: the step annotation's sums (vLLM's
``execute_N_context_C(sq..sk..sqsq..sqsk..)``, appended as ``hint:sq``/``hint:sk``/``hint:sqsq``/
``hint:sqsk``), exact; else the index tensors bound them, and the cost is an *estimate* with its
bounds: ``N`` page indices of ``B`` sequences (FlashInfer, AITER ragged, SGLang) hold between
``(N - B) page + B`` and ``N page`` keys (exact for SGLang's one-token pages), estimated with half of
each last page used; a ``(B, W)`` block table with a recorded ``max_seq_len`` ``L`` (vLLM, AITER's
``pa_fwd``) allows ``B`` to ``B L`` keys, estimated at ``B L`` (each sequence as long as the
longest), reading whole pages. Without either the op says it lacks the sequence lengths.

Roles by shape: the query is the first 3-d activation ``(T, Hq, D)``, the output one of its shape,
the caches the pools (two of one shape: K and V; one with a dimension of 2: both; one other: MLA's
latent cache, read once for K and V), the page size a pool dimension an integer argument names, else
read from the layout.
"""
from __future__ import annotations

import math

from roofscope.analyzers.cost.formulas.families.roles import (Operands, Unmatched, family, hint, item, missing, nbytes,
                                                              operands)
from roofscope.analyzers.cost.formulas.records import Cost, OpCall, TensorSpec

ALIASES = (
    "_C::paged_attention_v1", "_C::paged_attention_v2", "_rocm_C::paged_attention", "aiter::paged_attention_v1",
    "aiter::paged_attention_ragged", "aiter::paged_attention_rocm", "aiter::pa_fwd_asm", "aiter::pa_decode_gluon",
    "aiter::mha_batch_prefill", "aiter::mha_varlen_fwd", "aiter::fmha_v3_varlen_fwd", "aiter::mla_decode_fwd",
    "vllm::unified_attention", "vllm::unified_attention_with_output", "flashinfer::trtllm_paged_attention_decode",
    "flashinfer::trtllm_paged_attention_context", "flashinfer::cudnn_batch_decode_with_kv_cache",
    "sgl_kernel::cutlass_mla_decode", "_C::cutlass_mla_decode", "_C::sm100_cutlass_mla_decode",
    "trtllm::attention", "_vllm_fa2_C::varlen_fwd", "_vllm_fa3_C::fwd",
)
_LENGTHS = ("hint:sq", "hint:sk", "hint:sqsk")
# estimates of the keys from the index tensors' sizes (a graph capture's are its buffers: cost.graphs drops them)
FROM_PAGES, FROM_TABLE = "keys from the page indices", "keys from the block table"


@family("paged_attention", "attention", r"attention|attn|fmha|mha(?!c)|batchdecode|batchprefill|decodewith|prefillwith"
        r"|pafwd|padecode|pagedatt|mladecode|sdpa|flashdecod|xqa|varlenfwd", ALIASES)
def paged_attention(call: OpCall) -> Cost:
    q = query(call)
    ops = operands(call, tokens=q.shape[0])
    t_q, hq, d = q.shape
    # the output: of the query's shape, or of its heads with the value's dim (MLA: 512 of the query's 576),
    # not a (T, Hq, partitions) workspace
    outs = [t for t in ops.acts if t is not q and t.shape == q.shape] or \
        [t for t in ops.acts if t is not q and t.shape[:2] == q.shape[:2] and 2 * t.shape[-1] >= d]
    dv = outs[0].shape[-1] if outs else d
    new_kv = [t for t in ops.float_acts if len(t.shape) == 3 and t.shape[1] != hq and t.shape[-1] in (d, dv)]
    lens = {n: hint(call, n) for n in _LENGTHS}
    fixed = q.nbytes + (nbytes(outs[:1]) if outs else t_q * hq * dv * item(q)) + nbytes(ops.ints) + nbytes(ops.small)
    if all(isinstance(v, int) for v in lens.values()):
        return _annotated(call, ops, q, dv, new_kv, lens)  # type: ignore[arg-type]
    if not ops.pools:
        if len(new_kv) < 2:
            raise Unmatched("no KV cache and no keys")
        if not any(len(t.shape) == 1 and t.numel >= 2 for t in ops.ints):
            # the new tokens' K/V alone (vLLM's unified attention): the cache and lengths are metadata
            raise missing("no sequence lengths (the KV cache and attention metadata are not arguments)")
        return _varlen(ops, q, dv, new_kv, fixed)
    return _paged(ops, q, dv, new_kv, fixed)


def query(call: OpCall) -> TensorSpec:
    """The ``(T, Hq, D)`` query: of the 3-d float tensors the one of most heads (caches hold ``Hkv <=
    Hq``), the smallest of those (a one-token-page cache of as many heads is larger); without any, a
    4-d ``(B, S, H, D)`` one read as ``(B S, H, D)``."""
    floats = [a.tensor for a in call.args if a.tensor is not None and a.tensor.dtype is not None
              and a.tensor.dtype.kind == "float"]
    cands = [t for t in floats if len(t.shape) == 3] or \
        [t.like(shape=(t.shape[0] * t.shape[1],) + t.shape[2:]) for t in floats if len(t.shape) == 4]
    if not cands:
        raise Unmatched("no (T, Hq, D) query")
    # a query's head dim is its output's and the cache's: a (T, Hq, partitions) workspace has no twin
    ends = [t.shape[-1] for t in floats]
    cands = [t for t in cands if ends.count(t.shape[-1]) >= 2] or cands
    heads = max(t.shape[1] for t in cands)
    return min((t for t in cands if t.shape[1] == heads), key=lambda t: t.numel)


def _split(shape: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    """(pages, the dims between pages and the last) of a cache; a combined K/V cache's 2 dropped
    (FlashInfer's (pages, 2, ...), vLLM flash's (2, pages, ...))."""
    if len(shape) >= 5 and shape[0] == 2:
        return shape[1], shape[2:-1]
    if len(shape) >= 5 and shape[1] == 2:
        return shape[0], shape[2:-1]
    return shape[0], shape[1:-1]


def _token_bytes(ops: Operands, d: int, hq: int) -> tuple[float, int]:
    """Bytes one cached token's keys and values take (all the caches), and the page size."""
    pools = ops.pools
    same = [p for p in pools if p.shape == pools[0].shape]
    kv = same[:2] if len(same) >= 2 else \
        pools[:2] if len(pools) >= 2 and pools[0].numel == pools[1].numel else pools[:1]
    if not kv:
        raise Unmatched("no cache")
    layout = next((v for v in ops.scalars if v in ("NHD", "HND")), None)
    page = _page_size(kv, d, hq, ops.int_scalars(), layout)
    return sum(p.numel * item(p) / (_split(p.shape)[0] * page) for p in kv), page


def _page_size(kv: list[TensorSpec], d: int, hq: int, ints: list[int], layout: str | None) -> int:
    """Tokens a page holds: 1 for a token pool ``(tokens, Hkv, D)``. Of a ``(pages, a, b, D)`` cache:
    the layout an argument names (``NHD``: ``a``; ``HND``: ``b``), else the one of the two an integer
    argument names (``block_size``) when the other is not, else the one that does not divide the query
    heads (the other is ``Hkv``), else ``a`` (NHD: FlashInfer's and vLLM's flash backends' layout).
    Of others (vLLM's ``(blocks, Hkv, D/x, block, x)`` key cache): the last dimension an integer
    argument names; vLLM's value cache ``(blocks, Hkv, D, block)``."""
    if len(kv[0].shape) == 3:
        return 1
    _, dims = _split(kv[0].shape)
    named = [v for v in ints if v > 1 and any(v in _split(p.shape)[1] for p in kv)]
    if len(dims) == 2 and kv[0].shape[-1] == d:
        a, b = dims
        if layout:
            return a if layout == "NHD" else b
        if (a in named) != (b in named):
            return a if a in named else b
        return b if hq % a == 0 and hq % b else a
    if named:
        return named[-1]
    if len(kv) == 2 and len(kv[1].shape) == 4 and kv[1].shape[2] == d:
        return kv[1].shape[3]
    raise Unmatched(f"no page size in {kv[0].shape}")


def _scores(t_q: int, b: int, keys: float) -> float:
    """Scores computed for ``t_q`` queries of ``b`` sequences over ``keys`` keys: decode, or equal-length
    extends (bottom-right causal within each sequence's new tokens)."""
    if t_q <= b:
        return keys
    q = t_q / b
    return t_q * keys / b - b * q * (q - 1) / 2


def _paged(ops: Operands, q: TensorSpec, dv: int, new_kv: list[TensorSpec], fixed: float) -> Cost:
    t_q, hq, d = q.shape
    per_token, page = _token_bytes(ops, d, hq)
    one_d = [t for t in ops.ints if len(t.shape) == 1]
    tables = [t for t in ops.ints if len(t.shape) == 2]
    indptr = [t for t in one_d if t.numel >= 2 and any(u.numel > t.numel for u in one_d)]
    if indptr:
        b = indptr[0].numel - 1
        pages = max(t.numel for t in one_d)
        lo, hi = (pages - b) * page + b, pages * page
        keys, read, what = hi - b * (page - 1) / 2, None, FROM_PAGES
    elif tables:
        b, width = tables[0].shape
        longest = [v for v in ops.int_scalars() if page < v <= width * page]
        length = max(longest) if longest else width * page
        lo, hi = b + length - 1, b * length
        keys, read, what = float(hi), b * math.ceil(length / page) * page, FROM_TABLE
    else:
        raise missing("no sequence lengths (no step annotation, page indices or block table)")
    fl = 2.0 * hq * (d + dv)
    extra = nbytes(new_kv)
    point = fl * _scores(t_q, b, keys), fixed + extra + per_token * (read if read is not None else keys)
    if lo == hi:
        return Cost(*point, q.dtype.precision if q.dtype else None)
    bounds = (fl * _scores(t_q, b, lo), fl * _scores(t_q, b, hi), fixed + extra + per_token * lo,
              fixed + extra + per_token * (read if read is not None else hi))
    return Cost(*point, q.dtype.precision if q.dtype else None, estimate=what, bounds=bounds)


def _varlen(ops: Operands, q: TensorSpec, dv: int, new_kv: list[TensorSpec], fixed: float) -> Cost:
    """Keys and values passed whole (a prefill without a cache): ``B`` from ``cu_seqlens`` (equal
    lengths assumed), bounded by one sequence and by ``T`` of one token each."""
    t_q, hq, d = q.shape
    keys = new_kv[0].shape[0]
    cu = [t for t in ops.ints if len(t.shape) == 1 and t.numel >= 2]
    b = cu[0].numel - 1 if cu else 1
    fl = 2.0 * hq * (d + dv)
    moved = fixed + nbytes(new_kv)
    if b == 1:
        return Cost(fl * _scores(t_q, 1, keys), moved, q.dtype.precision if q.dtype else None)
    return Cost(fl * _scores(t_q, b, keys), moved, q.dtype.precision if q.dtype else None,
                estimate="sequences of equal length", bounds=(fl * keys, fl * _scores(t_q, 1, keys), moved, moved))


def _annotated(call: OpCall, ops: Operands, q: TensorSpec, dv: int, new_kv: list[TensorSpec],
               lens: dict[str, int]) -> Cost:
    """The step annotation's sums (``hint:sqsk``: the causal score area, hidden_args.step_lengths): the
    K/V of ``sk`` keys read, in the cache's layout when the cache is an argument, else (vLLM's unified
    attention, whose cache is attention metadata) in the new keys' heads and the dtype of a cache write
    of the layer (``hint:kv_item``)."""
    _, hq, d = q.shape
    flops = 2.0 * hq * lens["hint:sqsk"] * (d + dv)
    moved = item(q) * lens["hint:sq"] * hq * (d + dv)
    if ops.pools:
        per_token, _ = _token_bytes(ops, d, hq)
        return Cost(flops, moved + per_token * lens["hint:sk"], q.dtype.precision if q.dtype else None)
    hkv = (new_kv[0] if new_kv else q).shape[1]
    kv_item = hint(call, "hint:kv_item") or item(q)
    return Cost(flops, float(moved + kv_item * lens["hint:sk"] * hkv * (d + dv)),
                q.dtype.precision if q.dtype else None)
