"""Rules on how kernels use the hardware: clocks (throttling), grid size, efficiency."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from roofscope.analyzers.diagnose.base import Context, Rule, top_kernels
from roofscope.analyzers.diagnose.blockers import graph_blockers, library_ops
from roofscope.analyzers.diagnose.fixes import channels_last_code, compile_apply, compile_code
from roofscope.analyzers.diagnose.shapes import NHWC_BATCH_NORM_SHARE, conv_transposes, nchw_batch_norm
from roofscope.analyzers.model.findings import Finding
from roofscope.analyzers.model.trace import Trace
from roofscope.hardware.devices import Ceilings

# Kernels shorter than this are launch-dominated whatever their grid.
_MIN_GRID_KERNEL_S = 20e-6
# What a tuned kernel reaches of its roofline floor (the under-utilized rule's target).
TARGET_EFFICIENCY = 0.5
# Mean SM clock at or above this share of its maximum is not worth a finding.
CLOCK_RATIO_OK = 0.95


def kernel_function(name: str) -> str:
    """The function's own name in a kernel's C++ signature (what ncu --kernel-name matches):
    'void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float>(...)' ->
    'vectorized_layer_norm_kernel'."""
    head = re.sub(r"^void\s+", "", name.replace("(anonymous namespace)::", ""))
    head = head.split("(", 1)[0] if not head.startswith("(") else head
    return head.split("<", 1)[0].rsplit("::", 1)[-1].strip() or name


def is_amd(trace: Trace, ceilings: Ceilings) -> bool:
    """An AMD GPU's trace: HIP runtime calls, a 64-wide wavefront in deviceProperties, or an AMD
    (Instinct MI) device or datasheet. Its counter tool is rocprof-compute (formerly omniperf), not ncu."""
    rt = trace.runtime
    if len(rt) and rt["name"].astype(str).str.startswith("hip").any():
        return True
    props = trace.meta.device.properties or {}
    if props.get("warpSize") == 64:
        return True
    spec = ceilings.datasheet
    names = f"{trace.meta.device.name or ''} {ceilings.device} {spec.name if spec is not None else ''}"
    return bool(re.search(r"\bAMD\b|\bMI\d{3}", names, re.IGNORECASE))


def counters_command(trace: Trace, ceilings: Ceilings, kernel: str) -> tuple[str, str]:
    """(tool, command) that measures ``kernel``'s hardware counters on this trace's GPU vendor."""
    if is_amd(trace, ceilings):
        return "rocprof-compute (omniperf)", f'rocprof-compute profile -n roofscope -k "{kernel}" -- python train.py'
    return "Nsight Compute", (f'ncu --kernel-name regex:"{re.escape(kernel)}" --launch-count 3 --set full'
                              " python train.py")


class Throttling(Rule):
    """NVML saw the SM clock held below its maximum (power cap, thermal, hardware slowdown)."""

    name = "throttling"
    binding = "clock"

    def precondition(self, ctx: Context) -> str | None:
        return None if ctx.inp.telemetry is not None else "no NVML telemetry in this run"

    def match(self, ctx: Context) -> list[Finding]:
        devices = (ctx.inp.telemetry or {}).get("devices") or []
        worst = min(devices, key=lambda d: d.get("sm_clock_ratio") or 1.0, default=None)
        if worst is None:
            return []
        ratio = worst.get("sm_clock_ratio") or 1.0
        shares = {r: v for r, v in (worst.get("throttle") or {}).items() if v and r not in ("gpu_idle", "throttled_share")}
        throttled = (worst.get("throttle") or {}).get("throttled_share") or 0.0
        # Hopper raises sw_power_cap even far below the limit; only a lower clock costs time.
        if ratio >= CLOCK_RATIO_OK:
            return []
        # Compute-bound time stretches with the clock; memory-bound time mostly does not.
        saving = ctx.terms["compute"] * (1 - ratio)
        reasons = ", ".join(f"{r} {v:.0%}" for r, v in sorted(shares.items(), key=lambda kv: -kv[1])) or "none reported"
        return [Finding(
            rule=self.name, title="GPU clocks throttled during the run",
            binding=self.binding, saving_s=saving, confidence="low",
            summary=f"SM clock at {ratio:.0%} of max on average; throttled in {throttled:.0%} of samples ({reasons})",
            fix="Check cooling, power limit and clock settings (nvidia-smi -q -d PERFORMANCE,POWER); compare"
            " with the microbenchmark ceilings measured on the same machine.",
            snippet="nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE",
            kernels=[], figures={"sm_clock_ratio": ratio, "throttled_share": throttled, **shares})]


def _blocks(grids: pd.Series) -> np.ndarray:
    """Blocks of each launch's grid (NaN without one), the product taken once per distinct grid: a
    million launches use a few hundred."""
    per_grid: dict[tuple, float] = {}
    out = np.full(len(grids), np.nan)
    for i, g in enumerate(grids):
        if isinstance(g, list) and g:
            key = tuple(g)
            blocks = per_grid.get(key)
            out[i] = per_grid.setdefault(key, np.prod(g)) if blocks is None else blocks
    return out


class SmallGrid(Rule):
    """Long kernels launching fewer blocks than the GPU has SMs leave SMs idle."""

    name = "small_grid"
    binding = "occupancy"

    def match(self, ctx: Context) -> list[Finding]:
        props = ctx.inp.trace.meta.device.properties or {}
        sms = props.get("numSms")
        k = ctx.kernels
        k = k[(k["cat"] == "kernel") & (k["dur_s"] >= _MIN_GRID_KERNEL_S) & ~k["cls"].isin(("communication", "latency"))]
        if not sms or not len(k) or "grid" not in k:
            return []
        blocks = _blocks(k["grid"])
        frac = blocks / sms
        small = k[frac < 0.5]
        f = frac[frac < 0.5]
        if not len(small) or small["dur_s"].sum() / ctx.steps < 0.05 * ctx.step_s:
            return []
        # A compile retunes PyTorch's own kernels (autotuned GEMM and Triton tilings); a library's ops
        # (torchvision's NMS and ROI kernels, custom ops) it leaves as they are.
        lib = library_ops(ctx, small)
        tunable = lib == ""
        # Spread over all SMs the same work could run up to SMs/blocks times faster.
        gain = small["dur_s"].to_numpy() * (1 - f)
        saving = float(gain[tunable].sum()) / ctx.steps
        tool, _ = counters_command(ctx.inp.trace, ctx.inp.ceilings, "")
        p = ctx.program
        summary = (f"{len(small) / ctx.steps:.0f} kernels/step of >= 20 us use < half of the {sms} SMs"
                   f" (median {np.median(f * sms):.0f} blocks), {small['dur_s'].sum() / ctx.steps * 1e3:.3f} ms/step")
        figures = {"sms": sms, "median_blocks": float(np.median(f * sms)),
                   "library_s": float(small["dur_s"].to_numpy()[~tunable].sum()) / ctx.steps}
        libs = pd.Series(lib[~tunable]).value_counts()
        if not tunable.any():
            return [Finding(
                rule=self.name, title="Kernels with fewer blocks than SMs, in a library's ops",
                binding=self.binding, saving_s=0.0, confidence="low", status="blocked", summary=summary,
                fix=f"These kernels run inside {', '.join(libs.index[:3])}: torch.compile leaves a library's ops as"
                " they are, so no compile mode retunes them. Give each call more work (batch more images per call)"
                f" and confirm their occupancy with {tool}.",
                kernels=top_kernels(small, ctx.steps),
                blockers=[{"kind": "library_kernel", "op": name, "per_step": float(n) / ctx.steps, "library": name,
                           "module": "", "detail": "a library's kernel: compile does not touch it"}
                          for name, n in libs.items()],
                figures={**figures, "unblocked_saving_s": float(gain.sum()) / ctx.steps})]
        # CUDA graphs come with max-autotune: without them where the step cannot be captured.
        mode = "max-autotune-no-cudagraphs" if p.compiled or graph_blockers(ctx) else "max-autotune"
        snippet, framework = compile_code(p, mode)
        also = (f" ({', '.join(libs.index[:3])}'s kernels among them stay as they are: no saving counted)"
                if len(libs) else "")
        return [Finding(
            rule=self.name, title="Kernels with fewer blocks than SMs",
            binding=self.binding, saving_s=saving, confidence="low", summary=summary,
            fix="Give these kernels more parallel work: a larger batch, split-K GEMMs, or torch.compile"
            f" (max-autotune) to pick other tilings{also}; confirm occupancy with {tool}. max-autotune times"
            " candidate kernels while it compiles: over 200 s on ResNet-50 and EfficientNet-B0 (H200), so give"
            " `roofscope verify` a longer `--run-timeout-s` and the program enough steps to pay it back.",
            snippet=snippet, framework=framework,
            apply=compile_apply(p, "max-autotune-no-cudagraphs"),
            kernels=top_kernels(small[tunable], ctx.steps), figures=figures)]


class Underutilized(Rule):
    """Heavy kernels far below their roofline: the analytic model cannot say why; counters can."""

    name = "underutilized"
    binding = "underutilized"

    def match(self, ctx: Context) -> list[Finding]:
        # Costed ones only: an uncosted kernel classed by its grid (roofline.class_sources) has no floor to reach.
        k = ctx.kernels[(ctx.kernels["cls"] == "underutilized") & ctx.kernels["floor_s"].notna()]
        if not len(k):
            return []
        per = k.groupby(k["name"].astype(str)).agg(time_s=("dur_s", "sum"), floor_s=("floor_s", "sum"))
        heavy = per[per["time_s"] / ctx.steps >= 0.03 * ctx.step_s]
        if not len(heavy):
            return []
        # Not a saving: inspecting them finds out why, and the fix depends on what it finds.
        gap = float(np.maximum(0.0, heavy["time_s"] - heavy["floor_s"] / TARGET_EFFICIENCY).sum()) / ctx.steps
        names = set(heavy.index)
        sel = k[k["name"].astype(str).isin(names)]
        tool, command = counters_command(ctx.inp.trace, ctx.inp.ceilings, kernel_function(heavy["time_s"].idxmax()))
        return [Finding(
            rule=self.name, title=f"Under-utilized heavy kernels: inspect with {tool.split(' (')[0]}",
            binding=self.binding, saving_s=0.0, confidence="low", kind="advice",
            summary=f"{len(heavy)} kernels below {ctx.inp.params.underutilized_below:.0%} of their roofline floor,"
            f" {heavy['time_s'].sum() / ctx.steps * 1e3:.3f} ms/step",
            fix="These kernels neither hit a roof nor are too small to; measure them with hardware counters"
            f" ({tool}: occupancy, stalls, L2/DRAM traffic). An inspection saves nothing by itself: reaching 50% of"
            f" their floor would take {gap * 1e3:.3f} ms/step off, by a fix it finds.",
            snippet=command,
            kernels=top_kernels(sel, ctx.steps), figures={"kernels": len(heavy), "gap_to_half_floor_s": gap})]


class ChannelsLast(Rule):
    """cuDNN transposes NCHW tensors to NHWC and back around each convolution, and its NCHW batch norm moves
    about half the bytes a second its NHWC kernels do: channels_last removes the transposes (their time is
    saved) and prices batch norm at the NHWC rate (shapes.nchw_batch_norm); the results are the same."""

    name = "channels_last"
    binding = "memory"
    min_share = 0.02

    def match(self, ctx: Context) -> list[Finding]:
        t, bn = conv_transposes(ctx), nchw_batch_norm(ctx)
        transpose_s = float(t["dur_s"].sum()) / ctx.steps
        bn_s = float(bn["saving_s"].sum()) / ctx.steps
        if not len(t) and not bn_s:
            return []
        saving = transpose_s + bn_s
        snippet, framework = channels_last_code(ctx.program)
        parts = ([f"{len(t) / ctx.steps:.0f} layout transposes/step around convolutions, {transpose_s * 1e3:.3f}"
                  " ms/step"] if len(t) else [])
        fix = ("cuDNN's tensor-core convolutions compute NHWC: on NCHW tensors each call transposes its input and"
               " output. Convert the model and each batch once; the transposes go and the results stay the same.")
        if bn_s:
            parts.append(f"batch norm on NCHW tensors {bn['dur_s'].sum() / ctx.steps * 1e3:.3f} ms/step, of which"
                         f" {bn_s * 1e3:.3f} above the NHWC rate")
            fix += (" Batch norm runs NHWC kernels then, which move about twice the bytes a second on large maps: the"
                    f" saving counts its NCHW kernels' time beyond {NHWC_BATCH_NORM_SHARE:.0%} of the bandwidth.")
        return [Finding(
            rule=self.name, title="Convolutions on NCHW tensors: use channels_last", binding=self.binding,
            saving_s=saving, confidence="medium", summary="; ".join(parts), fix=fix,
            snippet=snippet, framework=framework, apply="channels_last",
            kernels=top_kernels(pd.concat([t, bn[bn["saving_s"] > 0]]), ctx.steps),
            figures={"transpose_s": transpose_s, **({"batch_norm_s": bn_s} if bn_s else {})})]
