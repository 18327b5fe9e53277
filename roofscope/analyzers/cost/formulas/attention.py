"""Attention: SDPA and its flash / memory-efficient / cuDNN variants (forward and backward), the
flash-attn package's dense, varlen and KV-cache ops, and paged attention of serving engines.

Pure arithmetic on recorded shapes (no torch, so a trace costs the same whatever torch analyzes
it). With ``Hq`` query heads and ``Hkv <= Hq`` key/value heads (GQA / MQA: each key/value head
serves ``Hq / Hkv`` query heads), and ``P`` the score entries computed per (batch, query head):

* forward  ``2 * B * Hq * P * (D + Dv)``  (``Q K^T`` and ``S V``)
* backward ``2 * B * Hq * P * (3 D + 2 Dv)``  (recomputed ``Q K^T``, ``dO V^T``, ``S^T dO``,
  ``dS K``, ``Q^T dS``)

``P = Sq * Sk`` without a mask; causal masks count the area of the allowed region (half the
square for ``Sq == Sk``): SDPA aligns the mask top-left, the flash kernels bottom-right, so a
decode step (``Sq = 1``) attends to the whole cache. Varlen ops record only the packed token
count and the longest key sequence, so every query row is counted against ``max_k`` keys (an
upper bound). Bytes follow the compulsory rule (every input read once, every output written
once). Serving engines' paged attention is a family of its own (families/paged.py), which reads
only the pages of the attended tokens.
torch.utils.flop_counter counts the same matmuls (tests/test_attention_formulas.py checks).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from roofscope.analyzers.cost.formulas.dtypes import FLOAT32
from roofscope.analyzers.cost.formulas.records import Cost, OpCall, TensorSpec, _cost
from roofscope.analyzers.cost.formulas.registry import register

TOP_LEFT, BOTTOM_RIGHT = "top_left", "bottom_right"


def score_area(sq: int, sk: int, causal: str | None) -> float:
    """Score entries computed per (batch, head): ``sq * sk``, or the area of the causal region."""
    if causal is None:
        return float(sq * sk)
    if causal == TOP_LEFT:  # key j <= query i
        return sq * sq / 2 if sq <= sk else sq * sk - sk * sk / 2
    # bottom-right: key j <= i + (sk - sq), the last query row sees every key
    return sq * sk - sq * sq / 2 if sq <= sk else sk * sk / 2


def attention_flops(b: int, hq: int, sq: int, sk: int, d: int, dv: int, *, causal: str | None = None,
                    backward: bool = False) -> float:
    """FLOPs of one attention call (see the module docstring)."""
    per_entry = 3 * d + 2 * dv if backward else d + dv
    return 2.0 * b * hq * score_area(sq, sk, causal) * per_entry


def _check_heads(hq: int, hkv: int) -> None:
    if hkv < 1 or hq % hkv:
        raise ValueError(f"query heads {hq} are not a multiple of key/value heads {hkv}")


# name -> (forward?, is_causal position, layout, (cum_seq_q, max_k) positions or None, mask kind)
# layout "bhsd" = SDPA's (B, H, S, D); "bshd" = flash / mem-efficient internals' (B, S, H, D).
# mask kind: "sdpa" (is_causal, top-left), "flash" (is_causal, bottom-right), "custom"
# (mem-efficient custom_mask_type: 1 top-left, 2 bottom-right).
_ATEN: dict[str, tuple[bool, int, str, tuple[int, int] | None, str]] = {
    "aten::_scaled_dot_product_flash_attention": (True, 4, "bhsd", None, "sdpa"),
    "aten::_scaled_dot_product_efficient_attention": (True, 6, "bhsd", None, "sdpa"),
    "aten::_scaled_dot_product_cudnn_attention": (True, 6, "bhsd", None, "sdpa"),
    "aten::_scaled_dot_product_flash_attention_for_cpu": (True, 4, "bhsd", None, "sdpa"),
    "aten::_scaled_dot_product_fused_attention_overrideable": (True, 5, "bhsd", None, "sdpa"),
    "aten::_scaled_dot_product_flash_attention_backward": (False, 11, "bhsd", None, "sdpa"),
    "aten::_scaled_dot_product_efficient_attention_backward": (False, 11, "bhsd", None, "sdpa"),
    "aten::_scaled_dot_product_cudnn_attention_backward": (False, 14, "bhsd", None, "sdpa"),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": (False, 7, "bhsd", None, "sdpa"),
    "aten::_cudnn_attention_forward": (True, 10, "bhsd", (4, 7), "sdpa"),
    "aten::_cudnn_attention_backward": (False, 14, "bhsd", (9, 12), "sdpa"),
    "aten::_flash_attention_forward": (True, 8, "bshd", (3, 6), "flash"),
    "aten::_flash_attention_backward": (False, 11, "bshd", (6, 9), "flash"),
    "aten::_efficient_attention_forward": (True, 9, "bshd", (4, 7), "custom"),
    "aten::_efficient_attention_backward": (False, 14, "bshd", (6, 9), "custom"),
    # the flash-attn package's torch.library ops (flash_attn >= 2.6), (B, S, H, D)
    "flash_attn::_flash_attn_forward": (True, 5, "bshd", None, "flash"),
    "flash_attn::_flash_attn_backward": (False, 11, "bshd", None, "flash"),
    "flash_attn::_flash_attn_varlen_forward": (True, 9, "bshd", (3, 6), "flash"),
    "flash_attn::_flash_attn_varlen_backward": (False, 15, "bshd", (9, 12), "flash"),
}


def _causal(call: OpCall, pos: int, kind: str) -> str | None:
    flag = call.value("", pos)
    if kind == "custom":
        return {1: TOP_LEFT, 2: BOTTOM_RIGHT}.get(flag) if isinstance(flag, int) else None
    if flag is True:
        return TOP_LEFT if kind == "sdpa" else BOTTOM_RIGHT
    return None


@register(*_ATEN, category="attention")
def _attention(call: OpCall) -> Cost:
    fwd, causal_pos, layout, varlen, kind = _ATEN[call.name]
    off = 0 if fwd else 1
    q, k, v = (call.need("", off + i) for i in range(3))
    causal = _causal(call, causal_pos, kind)
    if varlen and call.tensor("", varlen[0]) is not None and len(q.shape) == 3:
        # packed (T, H, D) sequences: every query row against at most max_k keys
        max_k = call.need_int("", varlen[1], missing="max_k")
        (t, hq, d), hkv, dv = q.shape, k.shape[-2], v.shape[-1]
        _check_heads(hq, hkv)
        flops = 2.0 * t * hq * max_k * ((3 * d + 2 * dv) if not fwd else (d + dv))
    else:
        if len(q.shape) != 4 or len(k.shape) != 4 or len(v.shape) != 4:
            raise ValueError(f"attention expects 4-d q/k/v, got {q.shape} {k.shape} {v.shape}")
        if layout == "bhsd":
            (b, hq, sq, d), (_, hkv, sk, _), dv = q.shape, k.shape, v.shape[-1]
        else:
            (b, sq, hq, d), (_, sk, hkv, _), dv = q.shape, k.shape, v.shape[-1]
        _check_heads(hq, hkv)
        flops = attention_flops(b, hq, sq, sk, d, dv, causal=causal, backward=not fwd)
    if fwd:
        lse = q.shape[:-1] if layout == "bhsd" or len(q.shape) == 3 else (q.shape[0], q.shape[2], q.shape[1])
        outs = [q.like(shape=q.shape[:-1] + v.shape[-1:])]
        if call.value("compute_log_sumexp", None) is not False:
            outs.append(TensorSpec(lse, FLOAT32))  # fp32 logsumexp
    else:
        outs = [q.like(), k.like(), v.like()]
    return _cost(call, flops, outs)


# The query's layout per attention op: (batch, heads, seq, dim) unless the op says bshd.
_BSHD = {n for n, spec in _ATEN.items() if spec[2] == "bshd"}
ATTENTION_OPS = frozenset(_ATEN)


def _dims(raw: Any) -> list[int] | None:
    if isinstance(raw, (list, tuple)) and raw and all(isinstance(d, (int, np.integer)) for d in raw):
        return [int(d) for d in raw]
    return None


def query_of(name: str, dims: Any) -> tuple[int, int] | None:
    """(batch, query length) of one attention op from its recorded input dims, or None."""
    if name not in ATTENTION_OPS or not isinstance(dims, (list, tuple)) or not dims:
        return None
    q = _dims(dims[1] if name.endswith("backward") and len(dims) > 1 else dims[0])
    if q is None or len(q) != 4:
        return None
    return (q[0], q[1]) if name in _BSHD else (q[0], q[2])
