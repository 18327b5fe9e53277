"""Rules for memory traffic that fusion removes: elementwise chains, unfused attention,
per-parameter optimizers."""
from __future__ import annotations

from itertools import groupby
from operator import itemgetter

import numpy as np
import pandas as pd

from roofscope.analyzers.diagnose.base import Context, Rule, top_kernels
from roofscope.analyzers.diagnose.shapes import first_numel, gemm_table, op_dims
from roofscope.analyzers.ingest.names import per_name
from roofscope.analyzers.model.findings import Finding

FUSIBLE = ("elementwise", "reduction", "normalization", "softmax", "copy")
# Inductor's kernels are already the product of fusion.
_FUSED_NAME = r"^triton_|fused"


def chains(k: pd.DataFrame) -> pd.Series:
    """Chain id of each kernel in a run of >= 2 consecutive fusible memory/latency-bound
    kernels on one stream (-1 elsewhere); ``k`` in any order, ids follow stream then time."""
    order = k.index
    k = k.sort_values(["stream", "ts_ns"], kind="stable")
    # Costed kernels only: one classed by its grid or op inputs (roofline.class_sources) has no bytes
    # to say what a fused kernel would still move.
    fusible = (k["category"].isin(FUSIBLE) & k["cls"].isin(("memory", "latency"))
               & (k["floor_s"].notna() if "floor_s" in k else True)
               & ~per_name(k["name"], lambda s: s.str.contains(_FUSED_NAME, regex=True))).to_numpy()
    stream = k["stream"].fillna(-1).to_numpy()
    prev_ok = np.r_[False, fusible[:-1] & (stream[1:] == stream[:-1])]
    cid = np.where(fusible, np.cumsum(fusible & ~prev_ok), -1)
    size = np.bincount(np.maximum(cid, 0))[np.maximum(cid, 0)]
    return pd.Series(np.where((cid >= 0) & (size >= 2), cid, -1), index=k.index).reindex(order)


def _chain_ops(c: pd.DataFrame) -> pd.Series:
    """Each chain's distinct ops in order of appearance, joined by " -> " (a string join per chain;
    pandas' per-group aggregation costs 0.1 ms a chain, and a trace has thousands)."""
    first = pd.DataFrame({"chain": c["chain"].to_numpy(), "op": c["op_name"].astype(str).to_numpy(dtype=object)})
    first = first.drop_duplicates()
    order = np.argsort(first["chain"].to_numpy(), kind="stable")
    pairs = zip(first["chain"].to_numpy()[order].tolist(), first["op"].to_numpy()[order].tolist())
    return pd.Series({chain: " -> ".join(op for _, op in group) for chain, group in groupby(pairs, key=itemgetter(0))},
                     dtype=object)


class ElementwiseFusion(Rule):
    """Consecutive memory-bound elementwise/normalization kernels write and re-read intermediates."""

    name = "fusion"
    binding = "memory"

    def match(self, ctx: Context) -> list[Finding]:
        k = ctx.kernels[ctx.kernels["timed"]] if "timed" in ctx.kernels else ctx.kernels
        cid = chains(k)
        c = k.assign(chain=cid)[cid >= 0]
        if not len(c):
            return []
        bw = ctx.inp.ceilings.bandwidth
        g = c.groupby("chain")
        per = pd.DataFrame({"n": g.size(), "time_s": g["dur_s"].sum(), "bytes": g["bytes"].sum(),
                            "max_bytes": g["bytes"].max(), "min_s": g["dur_s"].min()})
        # One fused kernel reads the chain's inputs and writes its output once: about the
        # traffic of its largest member. The rest were intermediates written and re-read.
        fused_s = np.maximum(per["max_bytes"].fillna(0) / bw, per["min_s"])
        per["saving_s"] = np.maximum(0.0, per["time_s"] - fused_s)
        saving = float(per["saving_s"].sum()) / ctx.steps
        avoided = float((per["bytes"] - per["max_bytes"]).sum()) / ctx.steps
        ops = _chain_ops(c)
        # The same chain repeats per layer: name the patterns saving most, with their counts.
        patterns = per.assign(ops=ops).groupby("ops")["saving_s"].agg(["size", "sum"]).sort_values("sum", ascending=False)
        example = "; ".join(f"{o} (x{n / ctx.steps:g})" for o, n in patterns["size"].head(2).items())
        return [Finding(
            rule=self.name, title="Fuse memory-bound elementwise chains (torch.compile)",
            binding=self.binding, saving_s=saving, confidence="medium",
            summary=f"{len(per) / ctx.steps:.0f} chains/step of {len(c) / ctx.steps:.0f} kernels,"
            f" {c['dur_s'].sum() / ctx.steps * 1e3:.3f} ms/step, {avoided / 1e9:.3g} GB/step of intermediates"
            f" (e.g. {example})",
            fix="Compile the model so Inductor fuses each chain into one kernel that reads inputs and writes"
            " outputs once; saving = the intermediate traffic at the measured bandwidth.",
            snippet="model = torch.compile(model)",
            kernels=top_kernels(c, ctx.steps),
            figures={"chains_per_step": len(per) / ctx.steps, "kernels_per_step": len(c) / ctx.steps,
             "chain_time_s": float(c["dur_s"].sum()) / ctx.steps, "intermediate_bytes": avoided,
             "bandwidth": bw})]


class UnfusedAttention(Rule):
    """matmul -> softmax -> matmul with S x S scores in memory, where SDPA would not write them."""

    name = "sdpa"
    binding = "memory"
    min_share = 0.02

    def match(self, ctx: Context) -> list[Finding]:
        trace, k = ctx.inp.trace, ctx.kernels
        sm = k[k["category"] == "softmax"]
        if not len(sm):
            return []
        dims = op_dims(trace, sm["cost_op"].to_numpy())
        scores = {first_numel(d) for d in dims if isinstance(d, list) and d and isinstance(d[0], list)
                  and len(d[0]) >= 3 and d[0][-1] >= 64}
        g = gemm_table(trace, k)
        produced = set((g["m"] * g["n"]).tolist()) if len(g) else set()
        scores = {s for s in scores if s in produced}  # a GEMM wrote the scores: attention
        if not scores:
            return []
        nongemm = k[~k["category"].isin(("gemm", "attention"))]
        numel = np.array([first_numel(d) or -1 for d in op_dims(trace, nongemm["cost_op"].to_numpy())])
        sxs = nongemm[np.isin(numel, list(scores))]
        saving = float(sxs["dur_s"].sum()) / ctx.steps
        return [Finding(
            rule=self.name, title="Unfused attention: use scaled_dot_product_attention",
            binding=self.binding, saving_s=saving, confidence="medium",
            summary=f"{len(sxs) / ctx.steps:.0f} kernels/step on S x S score tensors ({max(scores):,} elements),"
            f" {saving * 1e3:.3f} ms/step (softmax, masking, scaling, dropout)",
            fix="Flash/memory-efficient SDPA never writes the S x S scores; the matmuls' FLOPs remain,"
            " the kernels on the scores go away.",
            snippet="y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)",
            kernels=top_kernels(sxs, ctx.steps),
            figures={"score_elements": max(scores), "sxs_kernels_per_step": len(sxs) / ctx.steps})]


_FUSED = r"multi_tensor_apply|fused_adam|FusedAdam|_fused_"


class UnfusedOptimizer(Rule):
    """Hundreds of per-parameter kernels in the optimizer's own work instead of a few
    foreach/fused ones. Only the optimizer phase counts (analyzers/views/phases.py): a closure's
    forward and backward run inside ``optimizer.step(closure)`` but are not its work."""

    name = "fused_optimizer"
    binding = "optimizer"
    MIN_KERNELS = 50

    def precondition(self, ctx: Context) -> str | None:
        facts = ctx.inp.run.optimizer
        if facts is not None and (facts.fused or facts.foreach):
            return f"already {'fused' if facts.fused else 'foreach'}: {facts.cls or 'the optimizer'}"
        opt = ctx.kernels[ctx.kernels["phase"] == "optimizer"] if "phase" in ctx.kernels else ctx.kernels[:0]
        multi = opt["name"].astype(str).str.contains(_FUSED, case=False, regex=True)
        if len(opt) and multi.mean() > 0.5:
            return (f"already fused or foreach: {multi.sum() / ctx.steps:g} of the {len(opt) / ctx.steps:g}"
                    " optimizer kernels/step are multi-tensor or fused")
        return None

    def match(self, ctx: Context) -> list[Finding]:
        k = ctx.kernels
        opt = k[k["phase"] == "optimizer"]
        per_step = len(opt) / ctx.steps
        if per_step < self.MIN_KERNELS:
            return []
        # The GPU idles inside the optimizer while the host launches its next kernel.
        gaps = ctx.inp.timeline.gaps
        waits = gaps[gaps["next_kernel"].isin(opt.index) & gaps["kind"].isin(("host", "queued"))]
        idle = float(waits["dur_s"].sum()) / ctx.steps
        # A fused optimizer streams the same state once: its traffic at the measured bandwidth.
        fused_s = float(opt["bytes"].sum()) / ctx.steps / ctx.inp.ceilings.bandwidth
        kernel_s = float(opt["dur_s"].sum()) / ctx.steps
        saving = idle + max(0.0, kernel_s - fused_s)
        facts = ctx.inp.run.optimizer
        what = f"{facts.cls} over {facts.tensors} tensors" if facts is not None and facts.cls else "the optimizer"
        return [Finding(
            rule=self.name, title="Per-parameter optimizer: use fused=True / foreach=True",
            binding="host", saving_s=saving, confidence="medium",
            summary=f"{what}: {per_step:.0f} kernels/step of its own, {kernel_s * 1e3:.3f} ms of kernels"
            f" and {idle * 1e3:.3f} ms GPU idle waiting for their launches",
            fix="A fused (one kernel per group) or foreach (multi-tensor) optimizer launches a handful of kernels"
            " instead of several per parameter.",
            snippet="opt = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)",
            kernels=top_kernels(opt, ctx.steps),
            figures={"kernels_per_step": per_step, "idle_s": idle, "kernel_s": kernel_s, "fused_estimate_s": fused_s})]
