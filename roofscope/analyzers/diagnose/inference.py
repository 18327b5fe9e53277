"""Rules for inference Runs (decode steps found by analyzers/views/inference.py).

Decode reads every weight and the whole KV cache once per step to produce one token per
sequence: its time is bytes / bandwidth, so its fixes cut bytes (batch more sequences per
weight read, quantize the weights or the KV cache) or, when the GPU waits on the host between
its many short kernels, launches (CUDA graphs).
"""
from __future__ import annotations

from roofscope.analyzers.diagnose.base import Context, Rule, top_kernels
from roofscope.analyzers.diagnose.fixes import decode_graph_code
from roofscope.analyzers.model.findings import Finding

# A CUDA graph replays the step with one launch; what remains of the launch cost.
GRAPH_LAUNCH_S = 10e-6

# Bytes kept by a weight-only / KV-cache quantization from 16-bit values.
INT8_KEEPS = 0.5
INT4_KEEPS = 0.25


def is_inference(ctx: Context) -> bool:
    """The Run decodes tokens (so training-only fixes do not apply)."""
    return ctx.inp.inference is not None


class _Decode(Rule):
    share_key: str

    def precondition(self, ctx: Context) -> str | None:
        inf = ctx.inp.inference
        if inf is None:
            return "no decode steps"
        d = inf["decode"]
        if not d["bytes_per_step"]:
            return "decode bytes unknown"
        if d[self.share_key] / d["bytes_per_step"] < self.min_bytes_share:
            return f"{self.share_key.split('_')[0]} bytes are under {100 * self.min_bytes_share:.0f}% of decode bytes"
        return None

    min_bytes_share = 0.3

    def _memory_s(self, ctx: Context) -> float:
        """Memory-bound kernel time of one decode step."""
        d = ctx.inp.inference["decode"]  # type: ignore[index]
        return d["gpu_busy_s"] * d["time_by_class"].get("memory", 0.0)


class WeightBoundDecode(_Decode):
    """Decode time is spent reading the weights: batch more, or quantize them."""

    name = "weight_bound_decode"
    binding = "memory"
    share_key = "weight_bytes_per_step"
    min_bytes_share = 0.5

    def match(self, ctx: Context) -> list[Finding]:
        inf = ctx.inp.inference
        d = inf["decode"]  # type: ignore[index]
        w = d["weight_bytes_per_step"]
        share = w / d["bytes_per_step"]
        saving = self._memory_s(ctx) * share * (1 - INT8_KEEPS)
        batch = d["batch"] or 1
        k = ctx.kernels[ctx.kernels["category"] == "gemm"]
        return [Finding(
            rule=self.name, title="Weight-bound decode: more sequences per weight read, or smaller weights",
            binding=self.binding, saving_s=saving,
            confidence="high" if share >= 0.7 else "medium",
            summary=f"decode reads {w / 1e6:,.1f} MB of weights per step ({100 * share:.0f}% of its bytes) for {batch} "
            f"token{'s' if batch != 1 else ''}; MBU {100 * (inf['decode_mbu'] or 0):.0f}%",  fix=# type: ignore[index]
            f"Batch more sequences per decode step (the weights are read once for the whole batch: weight bytes per "
            f"token fall by the batch factor), or quantize the weights only (this changes the model's outputs: check "
            f"its accuracy): INT8/FP8 halves them "
            f"({w / 1e6:,.1f} -> {w * INT8_KEEPS / 1e6:,.1f} MB per step, saving shown), INT4 quarters them "
            f"(-> {w * INT4_KEEPS / 1e6:,.1f} MB).",
            snippet="from torchao.quantization import quantize_, int8_weight_only\nquantize_(model, int8_weight_only())",
            kernels=top_kernels(k, ctx.steps),
            figures={"weight_bytes_per_step": w, "weight_share": share, "batch": batch,
             "int8_bytes_per_step": w * INT8_KEEPS, "int4_bytes_per_step": w * INT4_KEEPS})]


class KvBoundDecode(_Decode):
    """Decode time is spent reading the KV cache: quantize it, or share KV heads."""

    name = "kv_bound_decode"
    binding = "memory"
    share_key = "kv_bytes_per_step"

    def match(self, ctx: Context) -> list[Finding]:
        d = ctx.inp.inference["decode"]  # type: ignore[index]
        kv = d["kv_bytes_per_step"]
        share = kv / d["bytes_per_step"]
        saving = self._memory_s(ctx) * share * (1 - INT8_KEEPS)
        k = ctx.kernels[ctx.kernels["category"] == "attention"]
        return [Finding(
            rule=self.name, title="KV-bound decode: a smaller KV cache",
            binding=self.binding, saving_s=saving, confidence="medium",
            summary=f"decode reads {kv / 1e6:,.1f} MB of KV cache per step ({100 * share:.0f}% of its bytes)",
            fix="Quantize the KV cache (FP8/INT8 halves the bytes read per token, saving shown; it changes the outputs:"
            " check their accuracy), or use fewer key/value heads (grouped-query attention: Hq/Hkv times fewer KV"
            " bytes) in models you train.",
            snippet='model.generation_config.cache_implementation = "quantized"   # generate()'
            if ctx.program.kind == "generate" else "",
            kernels=top_kernels(k, ctx.steps), figures={"kv_bytes_per_step": kv, "kv_share": share})]


class LaunchBoundDecode(Rule):
    """Decode steps of many short kernels with the GPU waiting on the host: replay them as CUDA graphs."""

    name = "launch_bound_decode"
    binding = "host"
    min_share = 0.10

    def precondition(self, ctx: Context) -> str | None:
        if ctx.inp.inference is None:
            return "no decode steps"
        if "graph" in ctx.kernels and (ctx.kernels["graph"] >= 0).mean() > 0.5:
            return "decode already replays CUDA graphs"
        return None

    def match(self, ctx: Context) -> list[Finding]:
        d = ctx.inp.inference["decode"]  # type: ignore[index]
        idle = ctx.terms["host"]
        saving = max(0.0, idle - GRAPH_LAUNCH_S)
        k = ctx.kernels[ctx.kernels["cat"] == "kernel"]
        text, snippet = decode_graph_code(ctx.program)
        return [Finding(
            rule=self.name, title="Launch-bound decode: replay each token's step as a CUDA graph",
            binding=self.binding, saving_s=saving,
            confidence="high" if ctx.share("host") >= 0.3 else "medium",
            summary=f"GPU idle {idle * 1e3:.3f} ms/step ({100 * ctx.share('host'):.0f}%) waiting for launches; "
            f"{d['kernels_per_step']:.0f} kernels per decode step, {d['gpu_busy_s'] * 1e3:.3f} ms of them busy",
            fix="Capture the decode step once and replay it per token (static shapes: a preallocated KV cache). "
            + text + " Saving ~ the host-bound idle time.",
            snippet=snippet, apply="static_cache" if ctx.program.kind == "generate" else "",
            kernels=top_kernels(k, ctx.steps), figures={"host_idle_s": idle, "host_idle_share": ctx.share("host"),
                                        "kernels_per_step": d["kernels_per_step"]})]
