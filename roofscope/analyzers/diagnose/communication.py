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

from roofscope.analyzers.diagnose.base import Context, Rule, top_kernels
from roofscope.analyzers.model.findings import Finding

HIDEABLE_SHARE = 0.5     # of the exposed communication (see the module docstring)
EXPOSED_MIN_SHARE = 0.03  # of the step: below, the communication is overlapped well enough
FIX = ("Overlap the collectives with compute and send fewer bytes. DDP: tune bucket_cap_mb (smaller buckets start"
       " all-reducing earlier in the backward pass, larger ones cut per-call latency when there are many small"
       " all-reduces), gradient_as_bucket_view=True, and model.no_sync() on the micro-steps of gradient"
       " accumulation. FSDP: forward_prefetch=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE,"
       " limit_all_gathers=True. Gradient compression: the bf16_compress_hook halves all-reduce bytes (the"
       " gradients lose precision in transit: check the loss).")
# The advice follows the collective that holds most of the time: all-reduce is data parallelism
# (DDP), all-gather/reduce-scatter sharded parameters (FSDP, ZeRO), all-to-all expert parallelism
# (MoE token dispatch and combine), where bucket sizes and gradient hooks change nothing.
FIXES = {
    "allreduce": FIX,
    "allgather": "Overlap the parameter all-gathers and gradient reduce-scatters with compute (FSDP, ZeRO):"
                 " FSDP forward_prefetch=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE,"
                 " limit_all_gathers=True (FSDP2: reshard_after_forward=False for the last blocks), and larger"
                 " wrapping units so fewer, larger collectives run.",
    "alltoall": "The all-to-alls are expert parallelism (MoE token dispatch and combine): send fewer tokens"
                " (a capacity factor near 1.0, token dropping), overlap the dispatch/combine all-to-all with the"
                " experts' GEMMs of another micro-batch, run the local experts as one grouped GEMM, and keep"
                " expert-parallel groups inside a node (NVLink) where the experts fit.",
}
FIXES["reduce_scatter"] = FIXES["allgather"]
MOE_SNIPPET = ("# expert parallel: fewer routed tokens, all-to-all hidden behind the experts' GEMMs\n"
               "moe_capacity_factor = 1.0          # Megatron: --moe-expert-capacity-factor 1.0\n"
               "moe_grouped_gemm = True            # Megatron: --moe-grouped-gemm (one GEMM for the local experts)")
# Below this share of the collective time all-reduce advice is noise beside the collective that binds.
MINOR_SHARE = 0.2
# DDP's default bucket size: a snippet that sets it changes nothing.
DDP_DEFAULT_BUCKET_MB = 25
MANY_ALLREDUCES = 8          # per step: per-call latency adds up, larger buckets help
FEW_ALLREDUCES = 2           # per step: the backward waits for whole buckets, smaller ones overlap earlier


def comm_snippet(kc: pd.DataFrame | None, steps: int = 1) -> str:
    """The fix as code for this run's collectives (analyzers.collectives.kernel_collectives): one
    part per kind it runs (all-to-all: MoE; all-reduce: DDP; all-gather/reduce-scatter: FSDP), the
    kind with most time first, a kind under :data:`MINOR_SHARE` of the collective time left out
    (when ``kc`` has ``dur_s``). DDP: a bucket size only when its all-reduce count and sizes call
    for a different one (never DDP's default), the bf16 hook only for fp32 gradients."""
    if kc is None or not len(kc):
        return ""
    kind = kc["collective"].replace({"reduce_scatter": "allgather"})
    time = kc["dur_s"].groupby(kind).sum() if "dur_s" in kc else pd.Series(1.0, index=kind.unique())
    time = time[time >= MINOR_SHARE * time.sum()] if time.sum() > 0 else time
    parts = {"alltoall": [MOE_SNIPPET] if "alltoall" in time else [],
             "allreduce": _ddp_lines(kc, steps) if "allreduce" in time else [],
             "allgather": ["FSDP(model, forward_prefetch=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE,"
                           " limit_all_gathers=True)"] if "allgather" in time else []}
    lines: list[str] = []
    for k in time.sort_values(ascending=False, kind="stable").index:
        for line in parts.get(str(k), []):
            # Beside DDP's all-reduces or MoE's all-to-alls, the all-gathers may come from another
            # wrapper: say it, do not assign twice.
            if line.startswith("FSDP("):
                line = f"# the all-gathers/reduce-scatters, if FSDP: model = {line}" if lines else f"model = {line}"
            lines.append(line)
    return "\n".join(lines)


def _ddp_lines(kc: pd.DataFrame, steps: int) -> list[str]:
    ar = kc[kc["collective"] == "allreduce"]
    # steps=0: rows are not one per call (a per-collective table): no count, no bucket advice.
    per_step = len(ar) / steps if steps > 0 else float("nan")
    size = float(np.nanmedian(ar["bytes"])) if ar["bytes"].notna().any() else None
    bucket = None
    if size is not None and per_step >= MANY_ALLREDUCES:
        bucket = max(2 * size / 2 ** 20, 1.0)    # fewer, larger buckets
    elif size is not None and per_step <= FEW_ALLREDUCES:
        bucket = max(size / 4 / 2 ** 20, 1.0)    # smaller buckets start all-reducing earlier
    args = (f"bucket_cap_mb={bucket:.0f}, " if bucket is not None and round(bucket) != DDP_DEFAULT_BUCKET_MB
            else "")
    lines = [f"model = DDP(model, {args}gradient_as_bucket_view=True)"
             + (f"  # {per_step:.0f} all-reduces/step of ~{size / 2 ** 20:.1f} MB" if size and per_step == per_step
                else "")]
    names = kc.attrs.get("names", [])
    if not any(("bf16" in n or "f16" in n) for n in names):
        lines += ["from torch.distributed.algorithms.ddp_comm_hooks import default_hooks",
                  "model.register_comm_hook(None, default_hooks.bf16_compress_hook)"
                  "   # gradients sent in bf16: changes results slightly"]
    return lines


def exposed_comm_finding(exposed_s: float, comm_s: float, step_s: float, collectives: pd.DataFrame | None = None,
                         kernels: list[dict[str, Any]] | None = None, peers: int | None = None,
                         snippet: str = "", dominant: str = "") -> Finding | None:
    """The finding for ``exposed_s`` of exposed communication per step (None below the threshold);
    ``collectives`` (collective, time_s, busbw per step) names the largest in the evidence and, unless
    ``dominant`` names it, the collective whose advice the fix gives (:data:`FIXES`); ``peers``
    (the world size, when judging one rank alone) says the figure includes waiting for slower peers."""
    if not step_s > 0 or not exposed_s > 0 or exposed_s / step_s < EXPOSED_MIN_SHARE:
        return None
    share = exposed_s / step_s
    overlap = 1.0 - exposed_s / comm_s if comm_s > 0 else 0.0
    if not snippet and collectives is not None and len(collectives) and "count" in collectives:
        per_call = collectives["bytes"] / collectives["count"].where(collectives["count"] > 0)
        snippet = comm_snippet(pd.DataFrame({"collective": collectives["collective"], "bytes": per_call,
                                             "dur_s": collectives["time_s"]}), steps=0)
    if not dominant and collectives is not None and len(collectives):
        dominant = str(collectives.iloc[0]["collective"])
    top = ""
    if collectives is not None and len(collectives):
        c = collectives.iloc[0]
        bw = f", bus bandwidth {c['busbw'] / 1e9:.1f} GB/s" if np.isfinite(c.get("busbw", np.nan)) else ""
        top = f"; most time in {c['collective']} ({c['time_s'] * 1e3:.2f} ms/step{bw})"
    return Finding(
        rule="exposed_communication", title="Exposed communication: overlap the collectives with compute",
        binding="communication",
        saving_s=HIDEABLE_SHARE * exposed_s, confidence="medium" if share >= 0.1 and not peers else "low",
        summary=f"{exposed_s * 1e3:.2f} ms/step ({100 * share:.0f}% of the step) of communication runs with nothing"
        f" beside it; {100 * overlap:.0f}% of the {comm_s * 1e3:.2f} ms/step of communication overlaps compute{top}."
        f" Saving assumes {100 * HIDEABLE_SHARE:.0f}% of the exposed time can be hidden"
        + (f"; on one rank of {peers} it includes waiting for slower ranks (`roofscope merge` of all ranks"
           " separates the two)" if peers else ""),
        fix=FIXES.get(dominant, FIX), snippet=snippet, kernels=kernels or [],
        figures={"exposed_comm_s": exposed_s, "comm_s": comm_s, "exposed_share": share, "overlap_share": overlap,
         "hideable_share": HIDEABLE_SHARE, "dominant_collective": dominant},
        saving_pct=HIDEABLE_SHARE * share)


class ExposedCommunication(Rule):
    """One rank's NCCL kernels leave the GPU otherwise idle for part of the step."""

    name = "exposed_communication"
    binding = "communication"
    min_share = 0.05

    def match(self, ctx: Context) -> list[Finding]:
        tl = ctx.inp.timeline.steps
        if not len(tl):
            return []
        comm = ctx.kernels[ctx.kernels["cls"] == "communication"]
        world = d.world_size if (d := ctx.inp.trace.meta.distributed) else None
        kc = ctx.inp.collectives
        if kc is not None:   # a shallow copy: the kernel names go in its attrs, not in the input's
            kc = kc.copy(deep=False)
            kc.attrs = {**kc.attrs, "names": sorted(set(comm["name"].astype(str)))}
        dominant = str(kc.groupby("collective")["dur_s"].sum().idxmax()) if kc is not None and len(kc) else ""
        f = exposed_comm_finding(float(tl["comm_exposed_s"].median()), float(tl["comm_s"].median()), ctx.step_s,
                                 kernels=top_kernels(comm, ctx.steps),
                                 peers=world if isinstance(world, int) and world > 1 else None,
                                 snippet=comm_snippet(kc, ctx.steps), dominant=dominant)
        return [f] if f is not None else []
