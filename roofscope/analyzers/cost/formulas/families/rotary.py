"""Rotary position embedding: queries and keys rotated by the cos/sin rows of their positions.

* FLOPs: 3 per rotated element (a pair costs 4 multiplies and 2 adds), of the query and key heads'
  first ``R`` dims (``R``: the cos/sin table's width, the rotary dims); a fused QK-norm adds 4 per
  element of the heads it normalizes.
* bytes: the positions; the ``T`` rows of the cos/sin table(s) the positions select (never the
  whole ``max_positions``-row table); the queries and keys read and written (in place, or to
  outputs of their shapes: the same bytes).

Roles by shape: the table is the float tensor not led by the token dimension (or two: cos and sin),
the positions the index tensor of ``T`` elements, the rotated tensors the activations; the head size
is the integer argument that divides their width, else the query's last dimension.
"""
from __future__ import annotations

from roofscope.analyzers.cost.formulas.families.roles import (Unmatched, family, item, nbytes, need_acts, operands,
                                                              squashed)
from roofscope.analyzers.cost.formulas.records import Cost, OpCall

ALIASES = (
    "_C::rotary_embedding", "_C::batched_rotary_embedding", "vllm::rotary_embedding", "sgl_kernel::rotary_embedding",
    "sgl_kernel::apply_rope_pos_ids_cos_sin_cache", "flashinfer::apply_rope_pos_ids_cos_sin_cache",
    "flashinfer::apply_rope_pos_ids", "flashinfer::apply_rope", "aiter::rope_cached_positions_2c_fwd_impl",
    "aiter::rope_cached_positions_fwd_impl", "aiter::rope_fwd_impl", "_C::fused_qk_norm_rope",
    "flashinfer::fused_qk_norm_rope", "LigerRopeFunction", "FusedRoPEFunc",
)


@family("rotary", "elementwise", r"rotary|(?<!p)rope(?!rt)", ALIASES)
def rotary(call: OpCall) -> Cost:
    ops = operands(call)
    acts = need_acts(ops)
    tables = [t for t in ops.pools if not ops.tokens or t.shape[0] != ops.tokens] or \
             [t for t in ops.small if len(t.shape) == 1 and t.numel > ops.tokens > 0]
    if not tables:
        raise Unmatched("no cos/sin table")
    positions = [t for t in ops.ints if t.numel in (ops.tokens, 3 * ops.tokens)]
    rot = tables[0].numel // tables[0].shape[0] * (2 if len(tables) == 2 else 1)
    head = _head_size(ops.int_scalars(), acts, rot)
    # in place: each rotated tensor read and written; out of place: as many outputs as inputs
    out_of_place = len(acts) >= 4 and len(acts) % 2 == 0
    rotated = sum(t.numel // head * min(rot, head) for t in acts) // (2 if out_of_place else 1)
    rows = sum(ops.tokens * (t.numel // t.shape[0]) * item(t) for t in tables)
    moved = nbytes(acts) * (1 if out_of_place else 2)
    per_norm = 4 * sum(t.numel for t in acts) if "norm" in squashed(call.name) else 0
    return Cost(3.0 * rotated + per_norm, nbytes(positions) + rows + moved, acts[0].dtype.precision
                if acts[0].dtype else None)


def _head_size(ints: list[int], acts: tuple, rot: int) -> int:
    width = acts[0].numel // acts[0].shape[0]
    for v in ints:
        if v >= rot and v > 1 and all((t.numel // t.shape[0]) % v == 0 for t in acts):
            return v
    if len(acts[0].shape) >= 3:
        return acts[0].shape[-1]
    if width % rot == 0:
        return rot
    raise Unmatched("no head size")
