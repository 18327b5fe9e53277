"""The coverage section's notes: how each kernel without a cost, or with a cost of less than a formula's
certainty, came to be so. summary.json keeps them under ``unattributed.notes``; every renderer shows
them beside the coverage table.

* :func:`missing_notes`: serving ops whose formula lacked an argument the trace did not record,
* :func:`window_notes`: windowed attention costed over the user's window (an upper bound),
* :func:`fused_notes`: Inductor's C++ kernels on a CPU, time no op records (counted uncosted),
* :func:`costing_notes`: ops costed by their family (name words and tensor shapes) or from their
  signature alone (memory-bound), never silently,
* :func:`estimate_notes`: costs on an estimated size (experts touched, keys attended), with bounds.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from roofscope.analyzers.cost.compiled_cpu import FUSED_NAME, GRAPH_CALL
from roofscope.analyzers.cost.formulas.families import FAMILY, SIGNATURE
from roofscope.analyzers.cost.hidden_args import WINDOW_SOURCE
from roofscope.analyzers.ingest.names import per_name

_LAYER_SUFFIX = r"_\d+$"


# The kernels frame's columns the notes read (the analysis hands them these alone: a copy of every column
# of a million-kernel frame costs more than the notes).
NOTE_COLUMNS = ("dur_ns", "unattributed", "missing", "cost_source", "cost_op_name", "op_name", "name", "category",
                "estimate", "flops", "flops_lo", "flops_hi", "bytes", "bytes_lo", "bytes_hi")


def missing_notes(kernels: pd.DataFrame, top: int = 5) -> list[str]:
    """Coverage notes for the serving-engine ops (not aten's) whose kernels have no cost because
    an argument was not recorded: ``vllm::moe_forward: 12.3 ms uncosted: no Input Dims for the
    expert weights``, longest first."""
    if "missing" not in kernels:
        return []
    k = kernels[(kernels["missing"] != "") & (kernels["unattributed"] == "no_shapes")]
    k = k[~k["missing"].astype(str).str.startswith("aten::")]
    if not len(k):
        return []
    t = k.groupby(k["missing"].astype(str))["dur_ns"].sum().sort_values(ascending=False)
    notes = []
    for what, ns in t.head(top).items():
        name, _, why = what.partition(": ")
        notes.append(f"{name}: {ns / 1e6:.3f} ms uncosted: {why or 'shapes not recorded'}")
    return notes


def window_notes(kernels: pd.DataFrame) -> list[str]:
    """Coverage notes of the windowed attention costed with the user's window (an upper bound)."""
    if "cost_source" not in kernels:
        return []
    k = kernels[kernels["cost_source"].to_numpy() == WINDOW_SOURCE]
    return [f"{name}: {g['dur_ns'].sum() / 1e6:.3f} ms in {len(g):,} sliding-window kernels costed over the "
            "window given (--attention-window): at most that many keys per query, an upper bound where a "
            "sequence holds fewer" for name, g in k.groupby(k["cost_op_name"].astype(str))]


def fused_notes(kernels: pd.DataFrame) -> list[str]:
    """The coverage note of the compiled graphs' own time (the work items :func:`fused_kernel_items` made)."""
    if "op_name" not in kernels:
        return []
    k = kernels[per_name(kernels["name"], lambda s: s.str.startswith(FUSED_NAME))
                & per_name(kernels["op_name"], lambda s: s.str.startswith(GRAPH_CALL))]
    if not len(k):
        return []
    return [f"{FUSED_NAME}: {k['dur_ns'].sum() / 1e6:.3f} ms in {len(k):,} calls of compiled graphs ran code no op "
            "records (Inductor's fused kernels: no shapes, no cost), counted uncosted"]


def costing_notes(kernels: pd.DataFrame, top: int = 5) -> list[str]:
    """Ops costed by their family rather than their name, and from their signature alone, longest first."""
    if "cost_source" not in kernels:
        return []
    out = []
    for source, how in ((FAMILY, "costed as their family (by their name's words and their tensors' shapes)"),
                        (SIGNATURE, "costed from their signature alone: memory-bound, each tensor read or written "
                                    "once, no FLOPs")):
        k = kernels[kernels["cost_source"].to_numpy() == source]
        if not len(k):
            continue
        # one line for a profiler wrapper's per-layer names (sglang_profiler::attention_..._12)
        op = k["cost_op_name"].astype(str).str.replace(_LAYER_SUFFIX, "", regex=True)
        t = k.groupby([op, k["category"].astype(str)])["dur_ns"].sum()
        t = t.sort_values(ascending=False)
        listed = ", ".join(f"{op}{f' ({cat})' if source == FAMILY else ''} {ns / 1e6:.3f} ms"
                           for (op, cat), ns in t.head(top).items())
        more = f" and {len(t) - top} more" if len(t) > top else ""
        out.append(f"{k['dur_ns'].sum() / 1e6:.3f} ms {how}: {listed}{more}")
    return out


def estimate_notes(kernels: pd.DataFrame, top: int = 5) -> list[str]:
    """Costs on an estimated size, per op and estimate, longest first: the share of their bytes' and
    FLOPs' bounds the estimate lies within."""
    if "estimate" not in kernels:
        return []
    k = kernels[kernels["estimate"].astype(str).to_numpy() != ""]
    if not len(k):
        return []
    g = k.groupby([k["cost_op_name"].astype(str), k["estimate"].astype(str)])
    t = g[["dur_ns", "bytes", "bytes_lo", "bytes_hi", "flops", "flops_lo", "flops_hi"]].sum(min_count=1)
    notes = []
    for (op, what), r in t.sort_values("dur_ns", ascending=False).head(top).iterrows():
        parts = [f"bytes {_range(r['bytes'], r['bytes_lo'], r['bytes_hi'], 'B')}"]
        if r["flops_lo"] != r["flops_hi"]:
            parts.append(f"FLOPs {_range(r['flops'], r['flops_lo'], r['flops_hi'], 'FLOP')}")
        notes.append(f"{op}: {r['dur_ns'] / 1e6:.3f} ms costed on an estimate ({what}): " + ", ".join(parts))
    return notes


def _range(point: float, lo: float, hi: float, unit: str) -> str:
    return f"{_si(point)}{unit} (bounds {_si(lo)}{unit} to {_si(hi)}{unit})"


def _si(x: float) -> str:
    if not np.isfinite(x):
        return "?"
    for div, pre in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g} {pre}"
    return f"{x:.3g} "


def all_notes(kernels: pd.DataFrame) -> list[str]:
    """Every note of the kernels frame, in the order the coverage section shows them."""
    return (missing_notes(kernels) + window_notes(kernels) + fused_notes(kernels) + costing_notes(kernels)
            + estimate_notes(kernels))
