"""Calls of ``scaled_dot_product_attention`` in a trace: the backend each fell to, and why.

``aten::scaled_dot_product_attention`` dispatches to one backend, whose op is its child:
flash (``_scaled_dot_product_flash_attention``, ``..._for_cpu`` on the CPU), memory-efficient
(``_scaled_dot_product_efficient_attention``), cuDNN (``_scaled_dot_product_cudnn_attention``) or the
math fallback (``_scaled_dot_product_attention_math``), which writes the S x S scores out like
attention written by hand. Why the fused backends refused is read from the call's arguments, which
the trace records (Input Dims, Input type, Input Strides, Concrete Inputs: q, k, v, attn_mask,
dropout_p, is_causal, scale), following PyTorch's own checks (aten/src/ATen/native/transformers:
sdp_utils_cpp.cpp on the CPU, cuda/sdp_utils.cpp on CUDA):

* **strides**: every fused backend needs q, k and v contiguous in their last dimension (stride 1);
  a transposed or permuted view (heads as channels, ``x.view(B, C, HW).transpose(1, 2)``) is not.
  The fix keeps results: ``.contiguous()`` on q, k, v (or build them with the head dimension last).
* **head dim**: q, k and v need one head size (flash: at most 256; memory-efficient on CUDA: a
  multiple of 8 for 16-bit types, of 4 for fp32). Zero-padding q, k and v to the next multiple and
  passing ``scale=1/sqrt(d)`` keeps results (the padded dot products are the same; slice the output).
* **dtype**: fp64 runs only on the math backend on CUDA: a lower precision changes results.
* **dropout** (CPU): the CPU's flash kernel refuses dropout; dropping it changes training.

A reason is ``keeps`` when the fix leaves results unchanged; a fallback whose every reason changes
results is a blocked fix. The call's ``is_causal`` and mask are reported as recorded, never changed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from roofscope.analyzers.cost.formulas.dtypes import parse_dtype
from roofscope.analyzers.model.trace import Trace

SDPA = "aten::scaled_dot_product_attention"
BACKENDS = {"aten::_scaled_dot_product_flash_attention": "flash",
            "aten::_scaled_dot_product_flash_attention_for_cpu": "flash",
            "aten::_scaled_dot_product_efficient_attention": "efficient",
            "aten::_scaled_dot_product_cudnn_attention": "cudnn",
            "aten::_scaled_dot_product_attention_math": "math",
            "aten::_scaled_dot_product_fused_attention_overrideable": "overrideable"}
FLASH_MAX_HEAD_DIM = 256


@dataclass(frozen=True)
class Reason:
    kind: str        # strides, head_dim, dtype, dropout
    text: str
    keeps: bool      # its fix leaves the results as they are
    fix: str = ""


@dataclass(frozen=True)
class SdpaCall:
    """One distinct SDPA signature of the trace and what its calls fell to."""

    backend: str                       # flash, efficient, cudnn, math, overrideable, or "" (no child recorded)
    calls: int
    q: list[int]
    k: list[int]
    v: list[int]
    dtype: str
    is_causal: str                     # as recorded: "True", "False" or "" (not recorded)
    mask: bool                         # an attn_mask was passed
    dropout: str                       # dropout_p as recorded
    reasons: tuple[Reason, ...] = field(default_factory=tuple)

    def words(self) -> str:
        shape = "x".join(map(str, self.q))
        mask = ", attn_mask" if self.mask else ""
        causal = f", is_causal={self.is_causal}" if self.is_causal else ""
        drop = f", dropout_p={self.dropout}" if _dropout(self) else ""
        return f"scaled_dot_product_attention(q {shape} {self.dtype}{mask}{drop}{causal}) x{self.calls}: {self.backend}"

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "calls": self.calls, "q": self.q, "k": self.k, "v": self.v, "dtype": self.dtype,
                "is_causal": self.is_causal, "mask": self.mask, "dropout": self.dropout,
                "reasons": [r.text for r in self.reasons]}


def _arg(values: Any, i: int, default: Any = None) -> Any:
    return values[i] if isinstance(values, list) and len(values) > i else default


def sdpa_calls(trace: Trace, on_cpu: bool, sm_major: int | None = None) -> list[SdpaCall]:
    """Every distinct SDPA call signature of ``trace`` with its backend and, for the math fallback, why."""
    ops = trace.ops
    if not len(ops):
        return []
    names = ops["name"].astype(str).to_numpy()
    rows = np.flatnonzero(names == SDPA)
    if not len(rows):
        return []
    # The backend is the SDPA op's child: the op starting inside it whose parent it is.
    child = pd.Series(names, index=np.arange(len(ops)))[ops["parent"].isin(rows).to_numpy()]
    parent = ops["parent"].to_numpy()[child.index.to_numpy()]
    backend = pd.Series(child.map(BACKENDS).fillna("").to_numpy(), index=parent)
    backend = backend[backend != ""].groupby(level=0).first()
    sig = ops["sig"].to_numpy()[rows]
    df = pd.DataFrame({"sig": sig, "backend": backend.reindex(rows).fillna("").to_numpy()})
    out = []
    for (s, b), g in df.groupby(["sig", "backend"], sort=False):
        out.append(_call(trace.signatures.iloc[int(s)], str(b), len(g), on_cpu, sm_major))
    return sorted(out, key=lambda c: -c.calls)


def _call(sig: pd.Series, backend: str, calls: int, on_cpu: bool, sm_major: int | None) -> SdpaCall:
    dims, types = sig["input_dims"], sig["input_types"]
    strides, concrete = sig["input_strides"], sig["concrete_inputs"]
    q, k, v = (list(_arg(dims, i, []) or []) for i in range(3))
    dt = parse_dtype(str(_arg(types, 0, "")))
    call = SdpaCall(backend=backend, calls=calls, q=q, k=k, v=v, dtype=dt.precision if dt is not None else "",
                    is_causal=str(_arg(concrete, 5, "") or ""), mask=bool(_arg(types, 3, "")),
                    dropout=str(_arg(concrete, 4, "") or ""))
    if backend != "math":
        return call
    return replace(call, reasons=tuple(fallback_reasons(call, strides, on_cpu, sm_major)))


def _dropout(call: SdpaCall) -> bool:
    try:
        return float(call.dropout) > 0
    except ValueError:
        return False


def fallback_reasons(call: SdpaCall, strides: Any, on_cpu: bool, sm_major: int | None = None) -> list[Reason]:
    """Why the fused backends refused ``call`` (see the module docstring), as far as its recorded
    arguments show; empty when nothing recorded explains it."""
    reasons = []
    bad = [f"{name} {st[-1]}" for name, st in zip("qkv", [_arg(strides, i) for i in range(3)])
           if isinstance(st, list) and st and st[-1] != 1]
    if bad:
        reasons.append(Reason("strides", f"last-dim stride not 1 ({', '.join(bad)}): a transposed or permuted view",
                              True, "make q, k and v contiguous in their last dimension before the call"
                              " (q = q.contiguous(), or build them with the head dimension last)"))
    if call.q and call.k and call.v:
        d_q, d_k, d_v = call.q[-1], call.k[-1], call.v[-1]
        half = call.dtype in ("fp16", "bf16")
        align = 8 if half else 4
        # Memory-efficient takes any mask and fp32; flash takes 16-bit, no mask, one head size up to 256.
        efficient = d_q == d_k and not d_q % align and not d_v % align
        flash = half and not call.mask and d_q == d_k == d_v <= FLASH_MAX_HEAD_DIM
        if d_q != d_k:
            reasons.append(Reason("head_dim", f"q's head size {d_q} differs from k's {d_k}", False))
        elif not on_cpu and not efficient and not flash:
            pad = math.ceil(max(d_q, d_v) / align) * align
            reasons.append(Reason(
                "head_dim", f"head size {d_q} (v {d_v}) is not a multiple of {align}, as the memory-efficient kernel"
                " needs" + ("" if half and not call.mask else " (and flash takes only 16-bit inputs without a mask)"),
                True, f"zero-pad q, k and v to {pad} in the last dimension, pass scale={1 / math.sqrt(d_q):.6g}"
                f" (1/sqrt({d_q}), what the call used) and slice the output back to {d_v}"))
    if call.dtype == "fp64" and not on_cpu:
        reasons.append(Reason("dtype", "fp64 inputs: the fused CUDA kernels take fp16, bf16 (flash) and fp32"
                              " (memory-efficient)", False))
    if on_cpu and _dropout(call):
        reasons.append(Reason("dropout", f"dropout_p={call.dropout}: the CPU's flash kernel takes no dropout", False))
    if not on_cpu and sm_major is not None and sm_major < 5:
        reasons.append(Reason("device", f"compute capability {sm_major}.x has no fused attention kernels", False))
    return reasons


__all__ = ["BACKENDS", "SDPA", "Reason", "SdpaCall", "fallback_reasons", "sdpa_calls"]
