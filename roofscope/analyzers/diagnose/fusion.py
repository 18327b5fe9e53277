"""Rules for memory traffic that fusion removes: elementwise chains, unfused attention,
per-parameter optimizers."""
from __future__ import annotations

from itertools import groupby
from operator import itemgetter

import numpy as np
import pandas as pd

from roofscope.analyzers.diagnose.base import Context, Rule, top_kernels
from roofscope.analyzers.diagnose.blockers import dynamic_shapes, library_ops
from roofscope.analyzers.diagnose.sdpa import SDPA, SdpaCall, sdpa_calls
from roofscope.analyzers.diagnose.shapes import (compile_keeps_nchw, conv_transposes, first_numel, gemm_table,
                                                 nchw_batch_norm, op_dims)
from roofscope.analyzers.diagnose.fixes import compile_apply, compile_code, optimizer_code
from roofscope.analyzers.diagnose.inference import is_inference
from roofscope.analyzers.diagnose.overhead import in_model_idle
from roofscope.analyzers.ingest.linking import ancestor_where
from roofscope.analyzers.ingest.names import per_name
from roofscope.analyzers.model.findings import Finding
from roofscope.text import number

FUSIBLE = ("elementwise", "reduction", "normalization", "softmax", "copy")
# Inductor's kernels are already the product of fusion.
_FUSED_NAME = r"^triton_|fused"


def chains(k: pd.DataFrame, eligible: np.ndarray | None = None) -> pd.Series:
    """Chain id of each kernel in a run of >= 2 consecutive fusible memory/latency-bound
    kernels on one stream (-1 elsewhere); ``k`` in any order, ids follow stream then time.
    ``eligible`` (aligned with ``k``) leaves kernels out of any chain, breaking chains there."""
    order = k.index
    ok = pd.Series(np.ones(len(k), dtype=bool) if eligible is None else eligible, index=k.index)
    # The columns read here only: sorting takes every column it is given.
    k = k[[c for c in ("stream", "ts_ns", "category", "cls", "floor_s", "name") if c in k]]
    k = k.sort_values(["stream", "ts_ns"], kind="stable")
    # Costed kernels only: one classed by its grid or op inputs (roofline.class_sources) has no bytes
    # to say what a fused kernel would still move.
    fusible = (k["category"].isin(FUSIBLE) & k["cls"].isin(("memory", "latency"))
               & (k["floor_s"].notna() if "floor_s" in k else True)
               & ~per_name(k["name"], lambda s: s.str.contains(_FUSED_NAME, regex=True))
               & ok.reindex(k.index).to_numpy()).to_numpy()
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


def model_chains(ctx: Context) -> tuple[pd.DataFrame, int]:
    """The kernels of the model's fusible chains (with their ``chain`` id), and how many kernels the model
    launched. Compiling the model fuses its own work: the forward and backward (the loss with them), not
    the optimizer, gradient clipping or the loss scaler after it, nor a library's kernels (blockers.py)."""
    if "model_chains" not in ctx.memo:
        k = ctx.kernels[ctx.kernels["timed"]] if "timed" in ctx.kernels else ctx.kernels
        model = k["phase"].isin(("forward", "backward")).to_numpy() if "phase" in k else np.ones(len(k), dtype=bool)
        library = library_ops(ctx, k) != ""
        cid = chains(k, model & ~library)
        ctx.memo["model_chains"] = (k.assign(chain=cid)[cid >= 0], int(model.sum()))
    return ctx.memo["model_chains"]


class LaunchFusion(Rule):
    """A launch-bound step compiled without CUDA graphs: each chain of fusible kernels becomes one kernel, so
    the host issues fewer launches. Saving = the host-bound idle inside forward and backward times the share
    of the model's launches fused away (the host's time per launch taken as it is on this trace: Inductor's
    generated code launches more cheaply than eager dispatch, which this leaves as margin)."""

    name = "launch_fusion"
    binding = "host"
    min_share = 0.10

    def precondition(self, ctx: Context) -> str | None:
        if is_inference(ctx):
            return "inference Run: launch_bound_decode covers it"
        if ctx.program.compiled:
            return f"the model is already compiled ({ctx.program.compiled})"
        return None

    def match(self, ctx: Context) -> list[Finding]:
        c, launched = model_chains(ctx)
        if not len(c) or not launched:
            return []
        n_chains = int(c["chain"].nunique())
        removed = len(c) - n_chains
        idle = ctx.terms["host"]
        inside = min(idle, in_model_idle(ctx)) if "phase" in ctx.kernels else idle
        saving = inside * removed / launched
        p = ctx.program
        snippet, framework = compile_code(p)
        dynamic = dynamic_shapes(ctx)
        fix = (f"The GPU waits on the host between the model's kernels, and compiling it fuses {number(removed / ctx.steps, 3)}"
               f" of its {number(launched / ctx.steps, 3)} launches a step away ({100 * removed / launched:.0f}%): each of"
               f" {number(n_chains / ctx.steps, 3)} chains of elementwise/normalization kernels becomes one. Without CUDA"
               " graphs (the default mode) it holds for any number of forwards per step, host syncs and data"
               " loading; saving ~ that share of the host-bound idle inside forward and backward.")
        if dynamic:
            fix += (f" Input shapes change between steps ({dynamic[0].text()}): torch.compile recompiles for new"
                    " shapes; pad inputs to a few fixed sizes first.")
        return [Finding(
            rule=self.name, title="Launch-bound: compile to fuse launches away",
            binding=self.binding, saving_s=saving, confidence="low" if dynamic else "medium",
            summary=f"GPU idle {inside * 1e3:.3f} ms/step inside forward/backward waiting for launches;"
            f" {number(removed / ctx.steps, 3)} of {number(launched / ctx.steps, 3)} model kernels/step would be fused away",
            fix=fix, snippet=snippet, framework=framework, apply="" if dynamic else compile_apply(p),
            kernels=top_kernels(c, ctx.steps),
            figures={"model_kernels_per_step": launched / ctx.steps, "fused_away_per_step": removed / ctx.steps,
                     "chains_per_step": n_chains / ctx.steps, "in_model_idle_s": inside, "host_idle_s": idle})]


class ElementwiseFusion(Rule):
    """Consecutive memory-bound elementwise/normalization kernels write and re-read intermediates."""

    name = "fusion"
    binding = "memory"

    def match(self, ctx: Context) -> list[Finding]:
        c = model_chains(ctx)[0]
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
        p = ctx.program
        snippet, framework = compile_code(p)
        fix = ("Compile the model so Inductor fuses each chain into one kernel that reads inputs and writes"
               " outputs once; saving = the intermediate traffic at the measured bandwidth (chains of the forward"
               " and backward only: the optimizer and what runs after the backward stay eager).")
        # Shapes that change between steps make a compile recompile (then compile shape-generic kernels).
        dynamic = dynamic_shapes(ctx)
        if dynamic:
            fix += (f" Input shapes change between steps ({dynamic[0].text()}): torch.compile recompiles for new"
                    " shapes, then compiles shape-generic kernels; pad inputs to a few fixed sizes first.")
        layout_s, bn_s, transposes = 0.0, 0.0, conv_transposes(ctx)
        if len(transposes) and not dynamic and not p.compiled and not compile_keeps_nchw(ctx, p.training):
            layout_s = float(transposes["dur_s"].sum()) / ctx.steps
            # batch norm outside the chains (the backward's): Inductor generates it, channels_last; the chains'
            # own are priced above already
            bn = nchw_batch_norm(ctx)
            bn_s = float(bn["saving_s"][~bn.index.isin(c.index)].sum()) / ctx.steps
            saving += layout_s + bn_s
            fix += (f" Inductor also computes the convolutions channels_last (its layout optimization): the"
                    f" {len(transposes) / ctx.steps:.0f} cuDNN layout transposes a step go too"
                    f" (their {layout_s * 1e3:.3f} ms/step of GPU time is in the saving)")
            fix += (f", and so does the time cuDNN's NCHW batch norm takes beyond the NHWC rate ({bn_s * 1e3:.3f}"
                    " ms/step)." if bn_s else ".")
        if p.compiled:
            fix = ("The model is already compiled: these chains run eagerly outside its graphs (graph breaks, or"
                   " code outside the compiled module). Find the breaks and compile the code around them.")
            snippet, framework = "torch._dynamo.explain(model)(*example_inputs)   # lists the graph breaks", ""
        return [Finding(
            rule=self.name, title="Fuse memory-bound elementwise chains (torch.compile)",
            binding=self.binding, saving_s=saving, confidence="low" if dynamic else "medium",
            summary=f"{len(per) / ctx.steps:.0f} chains/step of {len(c) / ctx.steps:.0f} kernels,"
            f" {c['dur_s'].sum() / ctx.steps * 1e3:.3f} ms/step, {avoided / 1e9:.3g} GB/step of intermediates"
            f" (e.g. {example})",
            fix=fix, snippet=snippet, framework=framework, apply="" if dynamic else compile_apply(p),
            kernels=top_kernels(c, ctx.steps),
            figures={"chains_per_step": len(per) / ctx.steps, "kernels_per_step": len(c) / ctx.steps,
             "chain_time_s": float(c["dur_s"].sum()) / ctx.steps, "intermediate_bytes": avoided,
             "bandwidth": bw, **({"layout_transposes_s": layout_s} if layout_s else {}),
             **({"batch_norm_s": bn_s} if bn_s else {})})]


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
        figures = {"score_elements": max(scores), "sxs_kernels_per_step": len(sxs) / ctx.steps}
        summary = (f"{len(sxs) / ctx.steps:.0f} kernels/step on S x S score tensors ({max(scores):,} elements),"
                   f" {saving * 1e3:.3f} ms/step (softmax, masking, scaling, dropout)")
        ops = trace.ops
        in_sdpa = ancestor_where(ops["parent"].to_numpy(), sxs["op"].to_numpy(dtype=np.int64),
                                 (ops["name"].astype(str) == SDPA).to_numpy()) >= 0
        if in_sdpa.any():
            sm = (trace.meta.device.properties or {}).get("computeMajor")
            calls = [c for c in sdpa_calls(trace, on_cpu=False, sm_major=sm) if c.backend == "math"]
            return [_fallback(ctx, calls, float(sxs["dur_s"].to_numpy()[in_sdpa].sum()) / ctx.steps, summary,
                              figures, top_kernels(sxs[in_sdpa], ctx.steps))]
        names = set(sxs["op_name"].astype(str))
        mask = bool(names & {"aten::masked_fill", "aten::masked_fill_", "aten::where", "aten::add", "aten::add_"})
        dropout = bool(names & {"aten::dropout", "aten::native_dropout", "aten::bernoulli_"})
        args = "".join((", attn_mask=mask" if mask else "",
                        ", dropout_p=p if self.training else 0.0" if dropout else ""))
        note = ("   # mask: what your code adds to (or fills in) the scores; is_causal=True in its place only if it"
                " is the causal triangle" if mask else "   # your code masks nothing: no mask, not causal")
        return [Finding(
            rule=self.name, title="Unfused attention: use scaled_dot_product_attention",
            binding=self.binding, saving_s=saving, confidence="medium", summary=summary,
            fix="Flash/memory-efficient SDPA never writes the S x S scores; the matmuls' FLOPs remain, the kernels on"
            " the scores go away. Pass what your attention does now (its mask, its dropout, scale= if it does not"
            " scale by 1/sqrt(head dim)): the results stay the same.",
            snippet=f"y = torch.nn.functional.scaled_dot_product_attention(q, k, v{args}){note}",
            kernels=top_kernels(sxs, ctx.steps), figures={**figures, "mask": mask, "dropout": dropout})]


def _fallback(ctx: Context, calls: list[SdpaCall], saving: float, summary: str, figures: dict,
              kernels: list) -> Finding:
    """The program calls SDPA already, and it falls to the math backend: why (sdpa.py), and the fix
    that keeps its results; blocked when every reason's fix would change them, advice when none shows."""
    reasons = list(dict.fromkeys(r for c in calls for r in c.reasons))
    said = "; ".join(c.words() for c in calls[:2]) or "scaled_dot_product_attention: math"
    head = ("The program already calls scaled_dot_product_attention, and it runs on the math backend, which writes"
            f" the S x S scores ({said})")
    figures = {**figures, "sdpa": [c.to_dict() for c in calls]}
    keeps = [r for r in reasons if r.keeps]
    if keeps:
        snippet = "\n".join(_REASON_CODE[r.kind] for r in keeps if r.kind in _REASON_CODE)
        return Finding(
            rule="sdpa", title=f"SDPA falls back to the math backend ({', '.join(r.kind for r in keeps)})",
            binding="memory", saving_s=saving, confidence="medium", summary=summary,
            fix=f"{head}: {'; '.join(r.text for r in reasons)}. Fix: {'; '.join(r.fix for r in keeps)}. Keep"
            " is_causal, the mask and dropout as they are: the fused kernels then run and the results stay the same.",
            snippet=snippet, kernels=kernels, figures=figures)
    if reasons:
        return Finding(
            rule="sdpa", title="SDPA falls back to the math backend, for reasons that set its results",
            binding="memory", saving_s=0.0, confidence="low", status="blocked", summary=summary,
            fix=f"{head}: {'; '.join(r.text for r in reasons)}. Changing these changes the results: keep them unless"
            " the model tolerates it (check the loss or the outputs).", kernels=kernels,
            blockers=[{"kind": "sdpa_" + r.kind, "op": SDPA, "per_step": float(sum(c.calls for c in calls)) / ctx.steps,
                       "library": "", "module": "", "detail": r.text} for r in reasons],
            figures={**figures, "unblocked_saving_s": saving})
    return Finding(
        rule="sdpa", title="SDPA falls back to the math backend: ask it why", binding="memory", saving_s=0.0,
        confidence="low", kind="advice", summary=summary,
        fix=f"{head}, and nothing its recorded arguments show explains it (storage offsets, backends turned off,"
        " nested tensors). Run it once with the math backend excluded: PyTorch then raises, saying why each fused"
        " backend refused.",
        snippet="from torch.nn.attention import SDPBackend, sdpa_kernel\n"
        "with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]):\n"
        "    model(*example_inputs)   # raises, with each backend's reason",
        kernels=kernels, figures=figures)


# The code of each result-keeping fix of a math fallback (sdpa.Reason.kind).
_REASON_CODE = {
    "strides": "q, k, v = q.contiguous(), k.contiguous(), v.contiguous()   # before scaled_dot_product_attention:"
               " stride 1 in the head dimension",
    "head_dim": "d = q.shape[-1]; pad = -d % 8\n"
                "q, k, v = (torch.nn.functional.pad(t, (0, pad)) for t in (q, k, v))\n"
                "y = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=d ** -0.5)[..., :d]"
                "   # with your call's mask / is_causal / dropout unchanged",
}


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
        gaps = ctx.gaps
        waits = gaps[gaps["next_kernel"].isin(opt.index) & gaps["kind"].isin(("host", "queued"))]
        idle = float(waits["dur_s"].sum()) / ctx.steps
        # A fused optimizer streams the same state once: its traffic at the measured bandwidth.
        fused_s = float(opt["bytes"].sum()) / ctx.steps / ctx.inp.ceilings.bandwidth
        kernel_s = float(opt["dur_s"].sum()) / ctx.steps
        saving = idle + max(0.0, kernel_s - fused_s)
        facts = ctx.inp.run.optimizer
        what = (f"{facts.cls} over {facts.tensors} tensors" if facts is not None and facts.cls
                else ctx.program.optimizer or "the optimizer")
        snippet, framework, apply = optimizer_code(ctx.program)
        return [Finding(
            rule=self.name, title="Per-parameter optimizer: use fused=True / foreach=True",
            binding="host", saving_s=saving, confidence="medium",
            summary=f"{what}: {per_step:.0f} kernels/step of its own, {kernel_s * 1e3:.3f} ms of kernels"
            f" and {idle * 1e3:.3f} ms GPU idle waiting for their launches",
            fix="A fused (one kernel per group) or foreach (multi-tensor) optimizer launches a handful of kernels"
            " instead of several per parameter; the update is the same.",
            snippet=snippet, framework=framework, apply=apply,
            kernels=top_kernels(opt, ctx.steps),
            figures={"kernels_per_step": per_step, "idle_s": idle, "kernel_s": kernel_s, "fused_estimate_s": fused_s})]
