"""Rules on GEMM precision and shape: TF32/bf16 for fp32, tensor-core alignment,
weight-bound (small-batch) GEMMs."""
from __future__ import annotations

import numpy as np

from roofscope.analyzers.diagnose.base import Context, Rule, top_kernels
from roofscope.analyzers.diagnose.shapes import gemm_table
from roofscope.analyzers.diagnose.fixes import tf32_code
from roofscope.analyzers.model.findings import Finding

_ELT = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
# Tensor cores need the contiguous GEMM dimensions to be multiples of this many elements.
ALIGN = {"bf16": 8, "fp16": 8, "fp8": 16, "int8": 16}
# Reference efficiency when the profile has no aligned GEMM of the same dtype to compare with.
ASSUMED_EFFICIENCY = 0.5
# Weights must be at least this share of a memory-bound GEMM's bytes for it to be weight-bound.
WEIGHT_SHARE = 0.5


def _floor(flops: np.ndarray, nbytes: np.ndarray, peak: float, bw: float) -> np.ndarray:
    return np.maximum(np.nan_to_num(flops) / peak, np.nan_to_num(nbytes) / bw)


class Tf32(Rule):
    """fp32 GEMMs/convolutions on CUDA cores while tensor cores idle."""

    name = "tf32"
    binding = "compute"

    def precondition(self, ctx: Context) -> str | None:
        if not ctx.inp.ceilings.peaks.get("tf32"):
            return "the device has no TF32 tensor cores"
        precision = ctx.inp.run.program.backends.get("float32_matmul_precision")
        if precision in ("high", "medium"):
            return f"TF32 already allowed (float32_matmul_precision {precision!r}): the fp32 kernels are cuDNN's or torch's own"
        return None

    def match(self, ctx: Context) -> list[Finding]:
        k = ctx.kernels
        c = ctx.inp.ceilings
        # cuDNN runs fp32 convolutions on TF32 already unless the program turned it off (torch's default):
        # set_float32_matmul_precision changes matmuls only.
        cats = ("gemm", "conv") if ctx.inp.run.program.backends.get("cudnn_allow_tf32") is False else ("gemm",)
        g = k[k["category"].isin(cats) & (k["dtype"] == "fp32") & (k["roof_precision"] == "fp32")
              & ~k["cls"].isin(("latency", "unknown"))]
        if not len(g):
            return []
        f, b, t = g["flops"].to_numpy(), g["bytes"].to_numpy(), g["dur_s"].to_numpy()
        old = _floor(f, b, c.peaks["fp32"], c.bandwidth)
        # Same efficiency against the new roof: time scales with the roofline floor.
        new_tf32 = t * _floor(f, b, c.peaks["tf32"], c.bandwidth) / old
        saving = float((t - new_tf32).sum()) / ctx.steps
        figures = {"fp32_gemm_s": float(t.sum()) / ctx.steps, "fp32_roof": c.peaks["fp32"], "tf32_roof": c.peaks["tf32"],
                   "tf32_saving_s": saving}
        if c.peaks.get("bf16"):
            new_bf16 = t * _floor(f, b / 2, c.peaks["bf16"], c.bandwidth) / old
            figures["bf16_saving_s"] = float((t - new_bf16).sum()) / ctx.steps
        snippet, framework = tf32_code(ctx.program)
        if "conv" in cats:
            snippet += "\ntorch.backends.cudnn.allow_tf32 = True   # the program turned it off for convolutions"
        return [Finding(
            rule=self.name, title="fp32 matmuls on CUDA cores: allow TF32",
            binding=self.binding, saving_s=saving, confidence="high",
            summary=f"{len(g) / ctx.steps:.0f} fp32 GEMM/conv kernels/step,"
            f" {figures['fp32_gemm_s'] * 1e3:.3f} ms/step at"
            f" the fp32 roof ({c.peaks['fp32'] / 1e12:.0f} TFLOP/s) vs TF32 {c.peaks['tf32'] / 1e12:.0f}",
            fix="Allow TF32 tensor cores for fp32 matmuls: inputs rounded to a 10-bit mantissa, fp32 accumulate. It"
            " changes results in the low bits: check the loss or outputs (roofscope verify compares them). bf16"
            " autocast (the bf16 roof, half the bytes) changes them more.",
            snippet=snippet, framework=framework, apply="tf32",
            kernels=top_kernels(g, ctx.steps), figures=figures)]


class Alignment(Rule):
    """16-bit (8-bit) GEMMs whose N or K is not a multiple of 8 (16)."""

    name = "alignment"
    binding = "compute"
    min_share = 0.02

    def match(self, ctx: Context) -> list[Finding]:
        g = gemm_table(ctx.inp.trace, ctx.kernels)
        g = g[g["dtype"].isin(tuple(ALIGN)) & ~g["cls"].isin(("latency", "unknown"))]
        if not len(g):
            return []
        need = g["dtype"].map(ALIGN).to_numpy()
        bad = ((g["n"].to_numpy() % need) != 0) | ((g["kk"].to_numpy() % need) != 0)
        mis, ok = g[bad], g[~bad]
        if not len(mis):
            return []
        saving = 0.0
        ref_used = {}
        for dtype, m in mis.groupby("dtype"):
            ref = ok[ok["dtype"] == dtype]
            # Time-weighted efficiency = total floor / total time.
            eff_ref = float(ref["floor_s"].sum() / ref["dur_s"].sum()) if len(ref) else ASSUMED_EFFICIENCY
            ref_used[str(dtype)] = eff_ref
            target = m["floor_s"].to_numpy() / eff_ref
            saving += float(np.maximum(0.0, m["dur_s"].to_numpy() - target).sum()) / ctx.steps
        if saving <= 0:
            return []
        shapes = (mis.assign(shape=mis["m"].astype(str) + "x" + mis["n"].astype(str) + "x" + mis["kk"].astype(str))
                  .groupby("shape")["dur_s"].sum().sort_values(ascending=False).head(3))
        measured = all(len(ok[ok["dtype"] == d]) for d in ref_used)
        return [Finding(
            rule=self.name, title="Pad GEMM dimensions to tensor-core multiples", binding=self.binding, saving_s=saving,
            confidence="medium" if measured else "low",
            summary=f"{len(mis) / ctx.steps:.0f} misaligned GEMM kernels/step (MxNxK {', '.join(shapes.index)}),"
            f" {mis['dur_s'].sum() / ctx.steps * 1e3:.3f} ms/step at efficiency"
            f" {mis['floor_s'].sum() / mis['dur_s'].sum():.0%} vs {', '.join(f'{v:.0%}' for v in ref_used.values())}"
            f" for aligned ones{'' if measured else ' (assumed)'}",
            fix="Pad vocabulary/hidden/head sizes to multiples of 8 for 16-bit (16 for 8-bit) types, e.g. a"
            " vocabulary of 50257 -> 50304.",
            snippet="vocab = (vocab + 63) // 64 * 64   # pad, and ignore the extra logits",
            kernels=top_kernels(mis, ctx.steps), figures={"reference_efficiency": ref_used})]


class WeightBoundGemm(Rule):
    """GEMMs with few rows (small batch, decode) stream their weights: memory-bound."""

    name = "weight_bound_gemm"
    binding = "memory"

    def match(self, ctx: Context) -> list[Finding]:
        g = gemm_table(ctx.inp.trace, ctx.kernels)
        g = g[(g["cls"] == "memory") & g["dtype"].isin(tuple(_ELT))]
        if not len(g):
            return []
        elt = g["dtype"].map(_ELT).to_numpy(dtype=float)
        weight = g["n"].to_numpy() * g["kk"].to_numpy() * elt
        share = np.clip(weight / np.where(g["bytes"].to_numpy() > 0, g["bytes"].to_numpy(), np.nan), 0, 1)
        share = np.nan_to_num(share, nan=1.0)
        # Weight-bound means the weights are most of the traffic (few rows); a GEMM that is
        # memory-bound for a small K moves activations instead, and quantizing weights saves little.
        keep = share >= WEIGHT_SHARE
        if not keep.any():
            return []
        g, elt, share = g[keep], elt[keep], share[keep]
        t = g["dur_s"].to_numpy()
        # Memory-bound time scales with bytes: int8 weights halve 16-bit weight bytes, int4 quarter them.
        int8 = float((t * share * np.clip(1 - 1 / elt, 0, None)).sum()) / ctx.steps
        int4 = float((t * share * np.clip(1 - 0.5 / elt, 0, None)).sum()) / ctx.steps
        m_med = float(np.median(g["m"]))
        return [Finding(
            rule=self.name, title="Weight-bound GEMMs: quantize weights or batch more",
            binding=self.binding, saving_s=int8, confidence="medium",
            summary=f"{len(g) / ctx.steps:.0f} memory-bound GEMM kernels/step (median M = {m_med:.0f} rows),"
            f" {t.sum() / ctx.steps * 1e3:.3f} ms/step, intensity {g['flops'].sum() / g['bytes'].sum():.1f} FLOP/B",
            fix="With few rows the GEMM reads every weight to do little work: weight-only INT8 (saving shown)"
            " or INT4/FP8 cuts the bytes (it changes the outputs: check the model's accuracy); a larger batch raises"
            " FLOPs per byte (more tokens/s per step).",
            snippet="# torchao: from torchao.quantization import quantize_, int8_weight_only\n"
            "quantize_(model, int8_weight_only())",
            kernels=top_kernels(g, ctx.steps),
            figures={"int8_saving_s": int8, "int4_saving_s": int4, "median_m": m_med})]
