"""Sentences about the figures that more than one renderer prints."""
from __future__ import annotations

from typing import Any, Mapping

from roofscope.model.summary import CAPPED
from roofscope.units import si


def utilization_note(m: Mapping[str, Any]) -> str | None:
    """The sentence that says which of MFU and HFU was adjusted and why, or None."""
    model, counted = m.get("model_flops_per_step"), m.get("flops_per_step")
    if not model or counted is None or model <= counted or not m.get("peak_flops"):
        return None
    if m.get("hfu_source") == "raised_to_mfu":
        return (f"HFU raised to MFU: the kernels were counted doing {si(counted, 'FLOP')} per step, less than the"
                f" model's {si(model, 'FLOP')} (--model-flops-per-step); kernels without a cost model are missing"
                " from the count")
    formula = str(m.get("mfu_formula") or "").replace(CAPPED, "")
    return (f"MFU capped at HFU: the model FLOPs estimate ({formula}), {si(model, 'FLOP')} per step, exceeds the"
            f" {si(counted, 'FLOP')} the kernels were counted doing (a first layer computes no input gradient),"
            " so MFU uses the count")
