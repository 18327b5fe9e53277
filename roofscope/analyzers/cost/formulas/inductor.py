"""Inductor Triton kernels (cpu_op events named after the kernel)."""

from __future__ import annotations

import math

from roofscope.analyzers.cost.formulas.records import Cost, MissingShapes, OpCall, TensorSpec, _bytes
from roofscope.analyzers.cost.formulas.registry import _TC_CATEGORIES, Formula


def _triton_formula(name: str) -> Formula:
    kind = name.split("_")[1] if name.count("_") >= 1 else ""
    if kind == "tem":
        cat = "attention" if "flex_attention" in name else "conv" if "convolution" in name else "gemm"
    else:
        cat = "reduction" if kind in ("red", "per") else "elementwise"
    return Formula(_triton, cat, cat in _TC_CATEGORIES)


def gathered_rows(specs: list[TensorSpec]) -> dict[int, int]:
    """Tables a kernel reads only at the rows an index tensor selects: position -> rows read.

    An embedding lookup or a cache read by position fused into a kernel passes the whole
    ``(V, *row)`` table, an integer index tensor of ``n < V`` elements and an ``n``-row result
    (``n * prod(row)`` elements, ending in ``row``): the kernel reads ``n`` rows of the table,
    not ``V`` (``triton_poi_fused_0`` of a vLLM GPT-OSS decode gathers 32 token ids from the
    (201088, 2880) embedding: 1.16 GB counted for 184 KB read put it 21x above the memory roof).
    Inductor's own byte estimate makes the same cut: a buffer larger than the kernel's
    iteration space is read once per iteration, not whole."""
    out: dict[int, int] = {}
    for j, idx in enumerate(specs):
        if idx.dtype is None or idx.dtype.kind != "int" or not idx.shape:
            continue
        n = idx.numel
        for i, t in enumerate(specs):
            if i == j or not t.shape or t.shape[0] <= n:
                continue
            row = t.shape[1:]
            size = n * math.prod(row)
            if any(k not in (i, j) and o.numel == size and o.shape[len(o.shape) - len(row):] == row
                   for k, o in enumerate(specs)):
                out[i] = max(out.get(i, 0), n)
    return out


def _triton(call: OpCall) -> Cost:
    """Inductor passes its outputs as pointer arguments too, so every tensor argument is read or
    written once: bytes = the arguments' bytes, a gathered table (:func:`gathered_rows`) counting
    the rows read only. FLOPs: 1 per element of the largest argument (of a gathered table, its
    rows read), an estimate; templates (``triton_tem_*``: gemm, conv, flex attention) get NaN,
    and Inductor's ``kernel_flop`` metadata where recorded (attribution.py)."""
    specs = [s for a in call.args for s in a.specs]
    if not specs:
        raise MissingShapes("no tensor args")
    gathered = gathered_rows(specs)
    rows = [s.like(shape=(gathered[i], *s.shape[1:])) if i in gathered else s for i, s in enumerate(specs)]
    tem = call.name.startswith("triton_tem")
    return Cost(math.nan if tem else float(max(s.numel for s in rows)), _bytes(rows))
