"""Exposed communication: NCCL time during which the GPU runs nothing else.

Communication that overlaps compute is free; the exposed part (timeline.py: busy time minus
the busy time of everything but communication) adds to the step. The saving assumes a
better overlap or smaller messages hide :data:`HIDEABLE_SHARE` of it: with gradient buckets
all-reduced during the backward pass, all but the last bucket can hide behind the
remaining backward compute, and compressing gradients to bf16 halves the bytes of what is
left. The rest (the last bucket, the first FSDP all-gather) stays exposed.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .base import Context, Finding, Rule, top_kernels

HIDEABLE_SHARE = 0.5     # of the exposed communication (see the module docstring)
EXPOSED_MIN_SHARE = 0.03  # of the step: below, the communication is overlapped well enough
FIX = ("Overlap the collectives with compute and send fewer bytes. DDP: tune bucket_cap_mb (smaller buckets start"
       " all-reducing earlier in the backward pass, larger ones cut per-call latency when there are many small"
       " all-reduces), gradient_as_bucket_view=True, and model.no_sync() on the micro-steps of gradient"
       " accumulation. FSDP: forward_prefetch=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE,"
       " limit_all_gathers=True. Gradient compression: the bf16_compress_hook halves all-reduce bytes.")
SNIPPET = ("model = DDP(model, bucket_cap_mb=25, gradient_as_bucket_view=True)\n"
           "from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
           "model.register_comm_hook(None, default_hooks.bf16_compress_hook)\n"
           "# FSDP: FSDP(model, forward_prefetch=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE,"
           " limit_all_gathers=True)")


def exposed_comm_finding(exposed_s: float, comm_s: float, step_s: float, collectives: pd.DataFrame | None = None,
                         kernels: list[dict[str, Any]] | None = None, peers: int | None = None) -> Finding | None:
    """The finding for ``exposed_s`` of exposed communication per step (None below the threshold);
    ``collectives`` (collective, time_s, busbw per step) names the largest in the evidence; ``peers``
    (the world size, when judging one rank alone) says the figure includes waiting for slower peers."""
    if not step_s > 0 or not exposed_s > 0 or exposed_s / step_s < EXPOSED_MIN_SHARE:
        return None
    share = exposed_s / step_s
    overlap = 1.0 - exposed_s / comm_s if comm_s > 0 else 0.0
    top = ""
    if collectives is not None and len(collectives):
        c = collectives.iloc[0]
        bw = f", bus bandwidth {c['busbw'] / 1e9:.1f} GB/s" if np.isfinite(c.get("busbw", np.nan)) else ""
        top = f"; most time in {c['collective']} ({c['time_s'] * 1e3:.2f} ms/step{bw})"
    return Finding(
        "exposed_communication", "Exposed communication: overlap the collectives with compute", "communication",
        HIDEABLE_SHARE * exposed_s, "medium" if share >= 0.1 and not peers else "low",
        f"{exposed_s * 1e3:.2f} ms/step ({100 * share:.0f}% of the step) of communication runs with nothing"
        f" beside it; {100 * overlap:.0f}% of the {comm_s * 1e3:.2f} ms/step of NCCL time overlaps compute{top}."
        f" Saving assumes {100 * HIDEABLE_SHARE:.0f}% of the exposed time can be hidden"
        + (f"; on one rank of {peers} it includes waiting for slower ranks (`roofscope merge` of all ranks"
           " separates the two)" if peers else ""),
        FIX, SNIPPET, kernels or [],
        {"exposed_comm_s": exposed_s, "comm_s": comm_s, "exposed_share": share, "overlap_share": overlap,
         "hideable_share": HIDEABLE_SHARE},
        saving_pct=HIDEABLE_SHARE * share)


class ExposedCommunication(Rule):
    """One rank's NCCL kernels leave the GPU otherwise idle for part of the step."""

    name = "exposed_communication"
    binding = "communication"
    min_share = 0.05

    def match(self, ctx: Context) -> list[Finding]:
        tl = ctx.analysis.timeline().steps
        if not len(tl):
            return []
        comm = ctx.kernels[ctx.kernels["cls"] == "communication"]
        world = (ctx.analysis.trace.meta.get("distributedInfo") or {}).get("world_size")
        f = exposed_comm_finding(float(tl["comm_exposed_s"].median()), float(tl["comm_s"].median()), ctx.step_s,
                                 kernels=top_kernels(comm, ctx.steps),
                                 peers=world if isinstance(world, int) and world > 1 else None)
        return [f] if f is not None else []
