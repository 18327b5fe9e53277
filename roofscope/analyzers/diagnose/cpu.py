"""Rules for programs that run on the CPU: threads against the cores the process gets, the memory
layout of convolutions, elementwise chains a compile fuses (docs/diagnosis.md, "CPU runs").

Their "kernels" are the trace's CPU ops (analysis.py ``_cpu_work``); the engine (base.run_cpu_rules)
scales their savings from the profiled step to the program's own.

**Threads.** torch's intra-op pool runs each op on ``torch.get_num_threads()`` threads that meet at
a barrier at its end: when a thread has no core (more threads than cores, or other processes on
them), every other thread of the op waits for it. run.json's ``cpu`` (collectors/metadata.py) keeps
the cores the process may run on, the machine's load, and the process's clocks over the profiled
steps: its CPU time ``c`` and the time its threads waited, runnable, for a core ``d`` (the
scheduler's run delay), over the window's wall time ``w``. ``c / w`` is how many cores the process
kept busy on average; ``N`` threads that never wait would do the same work in ``c / (N w)`` of the
time. The saving is the rest of the step, ``step (1 - c / (N w))``, for the ``N`` below ``T`` (and
at most the cores it may use) that saves most; none when every ``N`` would be slower. The CPU time
counts the threads' spinning at the barriers too, so the saving errs low. On this project's 2-core
machine: 2 threads under a load of 6.7 (``c / w`` 0.32) predicted 1.16 s of a 1.71 s step for 1
thread, which saved 0.86 s; 4 threads on the quiet machine (``c / w`` 1.76) predicted 17.65 ms of
146 ms for 2 threads, which saved 29.3 ms in plain runs (1.66x: it errs low; docs/validation.md).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from roofscope.analyzers.diagnose.base import UNSTEADY_SPREAD, Context, Rule, top_kernels
from roofscope.analyzers.diagnose.fusion import FUSIBLE
from roofscope.analyzers.diagnose.fixes import channels_last_code, compile_apply, compile_code, threads_code
from roofscope.analyzers.ingest.linking import ancestor_where
from roofscope.analyzers.model.findings import Finding

# Of the threads' runnable time, the share waiting for a core above which the threads contend.
WAIT_SHARE = 0.2
# What channels_last saves of the time of each op on an NCHW input, measured on this project's 2-core
# AMD EPYC (torch 2.13, one thread, the CNN of benchmarks/real_clients/cpu_cnn.py, 2026-11-28): oneDNN
# reorders an NCHW input to its blocked layout and back on every call; max-pooling runs in place on NHWC.
CHANNELS_LAST_GAIN = {"aten::mkldnn_convolution": 0.15, "aten::convolution_backward": 0.15,
                      "aten::max_pool2d_with_indices": 0.8}


class CpuThreads(Rule):
    """More intra-op threads than the cores the process gets: the threads wait for each other."""

    name = "cpu_threads"
    binding = "threads"

    def precondition(self, ctx: Context) -> str | None:
        f = ctx.inp.run.cpu
        if f is None or not f.threads:
            return "run.json records no thread count (a bare trace, or a Run older than the cpu block)"
        return None

    def match(self, ctx: Context) -> list[Finding]:
        f = ctx.inp.run.cpu
        assert f is not None
        t = int(f.threads or 1)
        free = f.cores_free
        have = f.affinity or f.cores or t
        wait = f.run_delay_s / (f.cpu_s + f.run_delay_s) if f.run_delay_s is not None and f.cpu_s else None
        over = t > have or (wait is not None and wait >= WAIT_SHARE)
        figures = {"threads": t, "cores": f.cores, "affinity": f.affinity, "load1": f.load1, "cores_free": free,
                   "wait_share": wait, "cpu_s": f.cpu_s, "run_delay_s": f.run_delay_s, "window_s": f.wall_s}
        load = (f"load average {f.load1:g} on {f.cores} cores" if f.load1 is not None else "")
        waited = (f"its threads waited {100 * wait:.0f}% of their runnable time for a core" if wait is not None else "")
        threads = f"{t} thread{'s' if t > 1 else ''} on {have} core{'s' if have > 1 else ''} it may use"
        said = "; ".join(x for x in (threads, load, waited) if x)
        if not over:
            return []
        choices = range(1, min(t - 1, have) + 1)
        spread = ctx.inp.run.unprofiled_spread
        if spread is not None and spread > UNSTEADY_SPREAD:
            said += f"; its steps without the profiler ran {spread:.1f}x apart (90th percentile over 10th)"
        busy_machine = Finding(
            rule=self.name, title="Busy machine: the process waits for cores", binding=self.binding,
            saving_s=0.0, confidence="low", kind="advice", summary=said,
            fix="Other processes hold the cores: this run's times include waiting for them, and its savings may"
            " not hold when the machine is quiet. Profile on a quiet machine (or pin the process to free cores"
            " with taskset) before judging its speed, and check a fix with `roofscope verify`.",
            snippet="taskset -c 0 python train.py   # cores no other process uses", figures=figures)
        if not choices:
            return [busy_machine]
        busy = f.busy_cores
        if busy is not None:
            saving, n = max((ctx.step_s * (1 - busy / n), n) for n in choices)
            figures["busy_cores"] = busy
        else:   # no clocks (not Linux): only the cores the threads outnumber
            n = choices[-1]
            saving = ctx.step_s * (1 - have / t)
        if saving <= 0:   # fewer threads would not help: the cores are taken
            return [busy_machine]
        snippet, _ = threads_code(n)
        return [Finding(
            rule=self.name, title=f"{t} threads on {have} core{'s' if have > 1 else ''}: use {n}",
            binding=self.binding, saving_s=saving, confidence="medium" if t > have else "low", summary=said,
            fix=f"torch's intra-op threads meet at the end of every op; a thread without a core stalls the others."
            f" With {n} thread{'s' if n > 1 else ''} the CPU time this process got is spent without waiting:"
            " saving ~ the step less that CPU time shared by them. It assumes the other load stays as it was.",
            snippet=snippet, figures=figures, apply=f"threads:{n}")]


def _nchw(strides: object, dims: object) -> bool:
    """A 4-D contiguous (NCHW) tensor with more than one channel: not channels_last."""
    if not (isinstance(dims, list) and len(dims) == 4 and isinstance(strides, list) and len(strides) == 4):
        return False
    n, c, h, w = dims
    return c > 1 and h * w > 1 and strides[3] == 1 and strides[1] == h * w


class CpuChannelsLast(Rule):
    """Convolutions and max-pooling on NCHW (contiguous) inputs: oneDNN reorders them every call."""

    name = "channels_last"
    binding = "layout"

    def match(self, ctx: Context) -> list[Finding]:
        k = ctx.kernels[ctx.kernels["name"].astype(str).isin(list(CHANNELS_LAST_GAIN))]
        if not len(k):
            return []
        trace = ctx.inp.trace
        sig = trace.ops["sig"].to_numpy()[k["op"].to_numpy()]
        table = trace.signatures
        nchw = np.array([_nchw(_first(table["input_strides"].iat[s]), _first(table["input_dims"].iat[s]))
                         for s in sig], dtype=bool)
        k = k[nchw]
        if not len(k):
            return []
        gain = k["name"].astype(str).map(CHANNELS_LAST_GAIN).to_numpy(dtype=float)
        saving = float((k["dur_s"].to_numpy() * gain).sum()) / ctx.steps
        snippet, framework = channels_last_code(ctx.program)
        return [Finding(
            rule=self.name, title="Convolutions on NCHW tensors: use channels_last",
            binding=self.binding, saving_s=saving, confidence="medium",
            summary=f"{len(k) / ctx.steps:.0f} convolution/pooling ops/step take NCHW inputs,"
            f" {k['dur_s'].sum() / ctx.steps * 1e3:.3f} ms/step",
            fix="oneDNN computes convolutions in a channels-last (blocked) layout: on NCHW tensors it reorders"
            " every input and output, and max-pooling runs a slower path. Convert the model and each batch once;"
            " results stay the same.",
            snippet=snippet, framework=framework, kernels=top_kernels(k, ctx.steps),
            figures={"nchw_time_s": float(k["dur_s"].sum()) / ctx.steps, "gain": CHANNELS_LAST_GAIN},
            apply="channels_last")]


# Dropout in training: aten::dropout draws its mask with bernoulli_ (native_dropout where fused). Compiled,
# Inductor's C++ draws each element with its own generator code: on a 4-layer BERT (dropout 0.1, 2 cores,
# 2026-11-29) compile cost 29.4 ms a step [7.5, 51.3] inside runs (59.7 ms in plain runs), and the same
# program without dropout saved 17-86 ms a step. A dropout alone (a 262k-element mask, forward and backward,
# one thread) took beyond eager 1.9-2.3x its eager forward's time compiled, 0.46x with fallback_random (masks
# drawn by ATen's generator). On the BERT, quiet, compile with fallback_random saved 21.2 ms a step [12.3, 30.2]
# inside runs (1.49x the fusion's 14.2 ms) where plain compile cost 31.5 [3.7, 59.3]. So the fix comes with it.
DROPOUT_OPS = ("aten::dropout", "aten::native_dropout", "aten::feature_dropout", "aten::alpha_dropout")
_MASK_OPS = ("aten::bernoulli_", "aten::bernoulli", "aten::native_dropout")


def _dropout(ctx: Context, k: pd.DataFrame) -> tuple[np.ndarray, int, float]:
    """Which of ``k``'s ops run inside a dropout, how many dropouts a step drew a mask (0: none active), and
    the dropouts' own time a step (their outermost ops)."""
    ops = ctx.inp.trace.ops
    names = ops["name"].astype(str)
    drop = names.isin(DROPOUT_OPS).to_numpy()
    if not drop.any():
        return np.zeros(len(k), bool), 0, 0.0
    parent = ops["parent"].to_numpy()
    inside = ancestor_where(parent, k["op"].to_numpy(dtype=np.int64), drop) >= 0
    ts = ops["ts_ns"].to_numpy()
    # The steps analyzed: between the first and the last of their ops.
    lo, hi = ctx.kernels["ts_ns"].min(), ctx.kernels["ts_ns"].max()
    masks = np.flatnonzero(names.isin(_MASK_OPS).to_numpy())
    active = masks[(ancestor_where(parent, masks, drop) >= 0) & (ts[masks] >= lo) & (ts[masks] <= hi)]
    outer = np.flatnonzero(drop)
    outer = outer[(ancestor_where(parent, np.where(parent[outer] >= 0, parent[outer], -1), drop) < 0)
                  & (ts[outer] >= lo) & (ts[outer] <= hi)]
    own_s = float(ops["dur_ns"].to_numpy()[outer].sum()) / 1e9 / ctx.steps
    return inside, round(len(active) / ctx.steps), (own_s if len(active) else 0.0)


def _first(v: object) -> object:
    return v[0] if isinstance(v, list) and v else None


class CpuFusion(Rule):
    """Consecutive elementwise/normalization ops of the model on one thread: Inductor's C++ backend
    runs each chain as one loop over the data."""

    name = "fusion"
    binding = "fusion"

    def precondition(self, ctx: Context) -> str | None:
        if ctx.program.compiled:
            return "already compiled: the chains left run outside its graphs"
        return None

    def match(self, ctx: Context) -> list[Finding]:
        k = ctx.kernels
        model = k["phase"].isin(("forward", "backward")).to_numpy() if "phase" in k else np.ones(len(k), bool)
        k = k[model & k["category"].isin(FUSIBLE).to_numpy() & k["op_name"].astype(str).str.startswith("aten::")]
        if not len(k):
            return []
        # A dropout's ops end a chain: compiled, its mask is drawn apart (DROPOUT_OPS).
        inside, dropouts, dropout_s = _dropout(ctx, k)
        k = k[~inside]
        if not len(k):
            return []
        k = k.sort_values(["tid", "ts_ns"], kind="stable")
        # Consecutive in the model's op order on one thread: no other costed op between them.
        order = ctx.kernels[["tid", "ts_ns"]].sort_values(["tid", "ts_ns"], kind="stable").index
        pos = pd.Series(np.arange(len(order)), index=order).reindex(k.index).to_numpy()
        tid = k["tid"].to_numpy()
        joined = np.r_[False, (pos[1:] == pos[:-1] + 1) & (tid[1:] == tid[:-1])]
        cid = np.cumsum(~joined)
        size = np.bincount(cid)[cid]
        c = k.assign(chain=cid)[size >= 2]
        if not len(c):
            return []
        g = c.groupby("chain")["dur_s"]
        # One fused loop costs about its longest member (one pass over the data); the rest goes.
        saving = float((g.sum() - g.max()).sum()) / ctx.steps
        ops = c.groupby("chain")["op_name"].agg(lambda s: " -> ".join(dict.fromkeys(map(str, s))))
        example = "; ".join(f"{o} (x{n / ctx.steps:g})" for o, n in ops.value_counts().head(2).items())
        snippet, framework = compile_code(ctx.program)
        apply = compile_apply(ctx.program)
        if dropouts:
            snippet = "torch._inductor.config.fallback_random = True   # masks drawn as eager draws them\n" + snippet
            apply += ";fallback_random" if apply else ""
        return [Finding(
            rule=self.name, title="Fuse elementwise chains (torch.compile)", binding=self.binding,
            saving_s=saving, confidence="low",
            summary=f"{ops.size / ctx.steps:.0f} chains/step of {len(c) / ctx.steps:.0f} ops,"
            f" {c['dur_s'].sum() / ctx.steps * 1e3:.3f} ms/step (e.g. {example})",
            fix="Compiled, each chain is one C++ loop that reads its inputs and writes its output once; the saving"
            " assumes the fused loop takes as long as the chain's longest op." + (
                f" The model draws {dropouts} dropout masks a step ({dropout_s * 1e3:.3f} ms/step eager), left out"
                " of the chains: compiled, Inductor's own generator draws them element by element, about 2x their"
                " eager time more, which made a small BERT's step slower; with `torch._inductor.config."
                "fallback_random = True` ATen draws them as eager does (the same masks), and the same BERT gained."
                " Check it with `roofscope verify` before keeping it." if dropouts else ""),
            snippet=snippet, framework=framework, kernels=top_kernels(c, ctx.steps),
            figures={"chains_per_step": ops.size / ctx.steps, "chain_time_s": float(c["dur_s"].sum()) / ctx.steps,
                     **({"dropouts_per_step": dropouts, "dropout_s": dropout_s} if dropouts else {})},
            apply=apply)]


__all__ = ["CHANNELS_LAST_GAIN", "CpuChannelsLast", "CpuFusion", "CpuThreads"]
