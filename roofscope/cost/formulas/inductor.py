"""Inductor Triton kernels (cpu_op events named after the kernel)."""

from __future__ import annotations

import math

from roofscope.cost.formulas.records import Cost, MissingShapes, OpCall
from roofscope.cost.formulas.registry import _TC_CATEGORIES, Formula
from roofscope.cost.formulas.rules import _bytes


def _triton_formula(name: str) -> Formula:
    kind = name.split("_")[1] if name.count("_") >= 1 else ""
    if kind == "tem":
        cat = "attention" if "flex_attention" in name else "conv" if "convolution" in name else "gemm"
    else:
        cat = "reduction" if kind in ("red", "per") else "elementwise"
    return Formula(_triton, cat, cat in _TC_CATEGORIES)


def _triton(call: OpCall) -> Cost:
    # Inductor passes outputs as pointer args: each tensor arg is read or written once
    specs = [s for a in call.args for s in a.specs]
    if not specs:
        raise MissingShapes("no tensor args")
    tem = call.name.startswith("triton_tem")
    # 1 FLOP per element of the largest operand: an estimate; templates (gemm) get Inductor's kernel_flop
    return Cost(math.nan if tem else float(max(s.numel for s in specs)), _bytes(specs))
