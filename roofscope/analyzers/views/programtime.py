"""The program's own time: step times measured without the profiler, and savings in that time.

run.json's ``step_times`` (collectors/steptimes.py) holds every step's time, profiled or not:
its GPU time (CUDA events at the boundaries) where known, else its host time. From it:

* :func:`step_time` is summary.json's ``step_time`` block. Its steady samples are the steps run
  without the profiler *after* the profiled window, and the settled steps just before it (the
  ones the collector waited for); steps before those are the cold ones, listed and left out.
  Steps of the script's own loop carry the iteration of its outer loop (a round, an epoch): an
  outer iteration whose steps ran at :data:`COLD_RATIO` of the last one's median or slower is a
  cold stretch, reported apart (``cold_stretches``) and left out of the steady samples.
  ``inflation`` is the profiled steps' median over the unprofiled one of the same stretch (their
  outer iteration, where known): what the profiler added, like against like.
* :class:`ProgramTime` carries a diagnosis into the program's time. The kernels' busy time
  ``B`` is what the profiler barely changes; the idle rest of a step is host time, and the
  profiler inflates it. Host-side terms (``host``, ``sync``, ``idle_other``) measured on the
  profiled step ``T_p`` are scaled to the unprofiled one ``T_u`` by
  ``f = (T_u - B) / (T_p - B)`` (at most 1), and no saving exceeds
  ``T_u - B - residual``: what a fix cannot remove (the kernels, and for a CUDA-graph fix the
  graph's own launch). A saving is therefore never the whole step.
* Faster kernels cannot take a step below the host's own time to issue it. Where the profiled step was
  host-bound (the GPU waited on the host for :data:`HOST_BOUND_SHARE` of it or more), that time under
  the profiler is about the profiled step ``T_p``; the profiler adds a cost per event it records (each
  CPU op and runtime call), at most :data:`PROFILER_EVENT_S`, so without it the host's work is at least
  ``T_p - PROFILER_EVENT_S x events`` (``host_floor_s``): a fix that makes kernels faster and leaves
  the host's calls as they are (:data:`KERNEL_ONLY_FIXES`) saves at most ``T_u - host_floor_s``.

Runs without step times (older Runs, ``analyze`` of a bare trace) have no block: every figure
is then the profiled one, and the summary says so.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import numpy as np
import pandas as pd

from roofscope.run.schema import RunMeta, Steps, StepTimes

# Idle terms: the host's time, which the profiler inflates (analyzers/diagnose/base.py TERMS).
HOST_TERMS = frozenset(("host", "sync", "idle_other"))
# A CUDA graph's replay still costs one launch (microbench/launch.py measures ~2.5 us a kernel on an
# H100 when eager; a whole graph's launch about 10 us): the residual of a launch-bound fix.
GRAPH_REPLAY_S = 10e-6
GRAPH_RULES = frozenset(("cuda_graphs", "launch_bound_decode"))
# What the profiler costs the host per event it records (CPU ops and runtime calls), (T_p - T_u) / events a
# step on programs host-bound with and without it (H200 hosts, roofscope's profiler options, 2026-11-29):
# 3.40 and 4.03 us (ResNet-50 batch 16, NCHW and NHWC), 3.50 (Faster R-CNN), 3.57 (EfficientNet-B0 NHWC), 3.75
# (GPT-2 generate()), 4.76 and 4.79 (a UNet block). The largest, so that the host floor it gives is the lowest.
PROFILER_EVENT_S = 4.8e-6
HOST_BOUND_SHARE = 0.2
# Fixes that change how kernels run and leave the host's calls as they are (a compile or a fused kernel in
# place of several ops issues less host work; a source edit may do either, and is not held to it).
KERNEL_ONLY_FIXES = frozenset(("tf32", "cudnn_benchmark", "channels_last"))
# An outer iteration (a decode's round, an epoch) whose steps' median is this many times the last one's
# is a cold stretch.
COLD_RATIO = 1.5


def _kernels_only(apply: str) -> bool:
    names = [part.split(":")[0] for part in apply.split(";") if part]
    return bool(names) and all(n in KERNEL_ONLY_FIXES for n in names)


def step_frame(st: StepTimes | None) -> pd.DataFrame | None:
    """run.json's step_times as a frame: index, phase, host_s, gpu_s, tokens, time_s (GPU where known)."""
    if st is None or not st.index:
        return None
    df = pd.DataFrame({"index": st.index, "phase": st.phase, "host_s": st.host_s,
                       "gpu_s": pd.to_numeric(pd.Series(st.gpu_s), errors="coerce"),
                       "tokens": pd.to_numeric(pd.Series(st.tokens), errors="coerce"),
                       "outer": pd.to_numeric(pd.Series(st.outer), errors="coerce")})
    df["time_s"] = df["gpu_s"].fillna(df["host_s"])
    return df


def _cold_stretches(df: pd.DataFrame, steady: pd.Series) -> pd.Series:
    """The steady steps of outer iterations that ran at COLD_RATIO of the last outer iteration's median
    or slower (loop steps only: others carry no outer iteration)."""
    outer = df["outer"].where(steady)
    if outer.isna().all():
        return steady & False
    medians = df["time_s"].groupby(outer).median()
    last = medians.iloc[-1]
    cold = medians.index[(medians >= COLD_RATIO * last) & (last > 0)]
    return steady & df["outer"].isin(cold)


def _wait(steps: Steps) -> int:
    return int(steps.requested.get("wait") or 0)


def _steady(df: pd.DataFrame, steps: Steps, traced: Sequence[int] = ()) -> tuple[pd.Series, pd.Series, pd.Series]:
    """(steady unprofiled samples, cold unprofiled steps before them, profiled steps) as boolean
    masks. Steps of a profile that was dropped and made again (phase ``dropped``) are none of them.
    ``traced``: the steps the trace holds, which are the profile: when a profile made again did not
    complete, the session keeps the earlier one, whose steps run.json labels dropped while the later,
    incomplete one's are labelled profiled (a 20-step trace counted 1 profiled step)."""
    phase = df["phase"]
    in_trace = df["index"].isin(list(traced))
    restored = bool(in_trace.any()) and bool((phase[in_trace] == "dropped").all())
    settle = steps.settle or {}
    k = int(settle.get("k") or 0) if settle.get("outcome") == "settled" else 0
    # The settling steps are the k unprofiled ones just before the warm-up of the profile that followed
    # them: the later one, also when it did not complete and the earlier one is kept.
    later = df.loc[phase.isin(("warmup", "active")), "index"]
    settled = ((phase == "unprofiled") & (df["index"] >= int(later.min()) - k) & (df["index"] < int(later.min()))
               if k and len(later) else phase == "")
    if restored:
        phase = phase.where(~phase.isin(("warmup", "active")), "dropped").where(~in_trace, "active")
    unprof = phase == "unprofiled"
    profiled = df.loc[phase.isin(("warmup", "active")), "index"]
    if not len(profiled):
        steady = unprof & (df["index"] > _wait(steps))
        return steady, unprof & ~steady, phase == "active"
    first, last = int(profiled.min()), int(profiled.max())
    after = unprof & (df["index"] > last)
    before = unprof & (df["index"] < first)
    # Steps the settle judged warm are the program's steady steps; without them, every step after the profile.
    if restored and settled.any():
        steady = settled & unprof
        return steady, unprof & ~steady & (df["index"] < int(df.loc[steady, "index"].min())), phase == "active"
    steady = after | (settled & before)
    if not steady.any():   # a program that ended with the profile: the waited steps are all there is
        steady = before & (df["index"] > _wait(steps))
    stretches = _cold_stretches(df, steady)
    return steady & ~stretches, (before & ~steady) | stretches, phase == "active"


def step_time(run: RunMeta | None, traced: Sequence[int] = ()) -> dict[str, Any] | None:
    """summary.json's ``step_time``: the program's own step time without and with the profiler
    (``traced``: the trace's steps, :func:`_steady`)."""
    if run is None or (df := step_frame(run.step_times)) is None:
        return None
    steady, cold, profiled = _steady(df, run.steps or Steps(), traced)
    t = df.loc[steady, "time_s"].dropna()
    is_active = profiled
    active = df.loc[is_active, "time_s"].dropna()
    unprof = float(t.median()) if len(t) else None
    prof = float(active.median()) if len(active) else None
    # Like against like: the unprofiled steps of the profiled steps' own outer iteration, where known.
    profiled_outer = df.loc[is_active, "outer"].dropna().unique()
    same = df.loc[(df["phase"] == "unprofiled") & df["outer"].isin(profiled_outer), "time_s"].dropna()
    alike = float(same.median()) if len(same) else unprof
    out: dict[str, Any] = {
        "source": "gpu" if df.loc[steady, "gpu_s"].notna().all() and steady.any() else "host",
        "unprofiled_median_s": unprof,
        "unprofiled_p10_s": float(t.quantile(0.1)) if len(t) else None,
        "unprofiled_p90_s": float(t.quantile(0.9)) if len(t) else None,
        "unprofiled_steps": int(len(t)),
        "profiled_median_s": prof,
        "profiled_steps": int(len(active)),
        "inflation": prof / alike if prof and alike else None,
        "cold_steps": [int(i) for i in df.loc[cold, "index"]],
        "cold_median_s": float(df.loc[cold, "time_s"].median()) if cold.any() else None,
    }
    if len(same) and len(profiled_outer) == 1:
        out["inflation_outer"] = int(profiled_outer[0])   # the outer iteration inflation was taken in
    if unprof and df.loc[cold, "outer"].notna().any():   # the outer iterations that ran cold, apart
        whole = df.loc[df["phase"] == "unprofiled"].groupby("outer")["time_s"].median()
        per = df.loc[cold].groupby("outer")["time_s"]
        out["cold_stretches"] = [{"outer": int(o), "steps": int(g.size), "median_s": float(g.median())}
                                 for o, g in per if whole.get(o, 0.0) >= COLD_RATIO * unprof]
    # Forward steps (inference): a step that began with a one-token forward is a decode token,
    # a longer one a prefill (its time runs to the first token's forward: the time to first token).
    tok = df.loc[steady, "tokens"]
    if tok.notna().any():
        dec, pre = t[tok.reindex(t.index) == 1], t[tok.reindex(t.index) > 1]
        out["decode_median_s"] = float(dec.median()) if len(dec) else None
        out["prefill_median_s"] = float(pre.median()) if len(pre) else None
    return out


# Per-step figures that are work over time: in the program's time, the step's work over its own time.
_RATES = ("hfu", "mfu", "mbu")


def program_samples(samples: pd.DataFrame, run: RunMeta | None) -> tuple[pd.DataFrame, str]:
    """Per-step samples in the program's time, and which time they are in (``unprofiled`` or
    ``profiled``). The steady unprofiled steps (:func:`step_time`) replace the profiled ones: one
    sample per step run without the profiler, its utilizations the profiled steps' median work over
    that step's own time. A Run without step times (an older Run, a bare trace) keeps its profiled
    samples."""
    if run is None or (df := step_frame(run.step_times)) is None or not len(samples):
        return samples, "profiled"
    steady, _, _ = _steady(df, run.steps or Steps(), samples.index.tolist())
    t = df.loc[steady, ["index", "time_s"]].dropna()
    t = t[t["time_s"] > 0]
    if not len(t):
        return samples, "profiled"
    out = pd.DataFrame({"step_time_s": t["time_s"].to_numpy()}, index=pd.Index(t["index"].to_numpy(), name="step"))
    for col in _RATES:
        if col in samples:
            work = (samples[col] * samples["step_time_s"]).dropna()
            out[col] = float(work.median()) / out["step_time_s"] if len(work) else np.nan
    return out, "unprofiled"


class Saving(Protocol):
    """What :meth:`ProgramTime.apply` reads and changes of a finding (diagnose's ``Finding``): the
    rules sit above the views, so the view names the shape, not the class."""

    rule: str
    binding: str
    saving_s: float
    figures: dict[str, Any]
    apply: str
    fix: str


@dataclass
class ProgramTime:
    """A diagnosis' passage from the profiled step to the program's own (module docstring)."""

    unprofiled_step_s: float
    profiled_step_s: float
    busy_s: float
    scale: float
    host_floor_s: float = 0.0

    @classmethod
    def of(cls, t_u: float | None, terms: dict[str, float], wall: float,
           events: float = 0.0) -> "ProgramTime | None":
        """From the unprofiled step ``t_u``, the profiled step's ``terms`` and its ``wall`` time, and the
        ``events`` (CPU ops and runtime calls) the profiler recorded a step."""
        if not t_u or wall <= 0:
            return None
        busy = sum(v for k, v in terms.items() if k not in HOST_TERMS)
        idle_p = wall - busy
        scale = min(1.0, max(0.0, t_u - busy) / idle_p) if idle_p > 0 else 1.0
        host_bound = terms.get("host", 0.0) >= HOST_BOUND_SHARE * wall
        floor = min(float(t_u), max(0.0, wall - PROFILER_EVENT_S * events)) if host_bound and events else 0.0
        return cls(float(t_u), float(wall), float(busy), float(scale), floor)

    def terms(self, terms: dict[str, float]) -> dict[str, float]:
        """The step's terms in the program's time: host-side ones scaled, kernels' kept."""
        return {k: v * self.scale if k in HOST_TERMS else v for k, v in terms.items()}

    def residual(self, rule: str) -> float:
        return GRAPH_REPLAY_S if rule in GRAPH_RULES else 0.0

    def bound(self, rule: str) -> float:
        """The most a fix can save: the unprofiled step less the kernels' busy time and what it leaves."""
        return max(0.0, self.unprofiled_step_s - min(self.busy_s, self.unprofiled_step_s) - self.residual(rule))

    def apply(self, f: Saving) -> None:
        """Scale a host-side finding's saving to the program's time, and bound it (saying so). A fix
        of the host's time leaves the kernels: it saves at most the step less their busy time. A
        fix of kernels shortens the busy time itself: it saves at most that time."""
        if f.binding in HOST_TERMS:
            f.figures["profiled_saving_s"] = f.saving_s
            f.saving_s *= self.scale
            bound = self.bound(f.rule)
        else:
            bound = min(self.busy_s, self.unprofiled_step_s)
            if self.host_floor_s and _kernels_only(f.apply):
                bound = min(bound, max(0.0, self.unprofiled_step_s - self.host_floor_s))
                f.figures["host_floor_s"] = self.host_floor_s
        if f.saving_s > bound:
            f.figures["unbounded_saving_s"] = f.saving_s
            if "host_floor_s" in f.figures and bound < min(self.busy_s, self.unprofiled_step_s):
                f.fix += (f" The host's own work, at least {self.host_floor_s * 1e3:.3f} ms a step without the profiler"
                          f" (the profiled step waited on it), then sets the step's pace: of the"
                          f" {f.saving_s * 1e3:.3f} ms of GPU time saved, at most {bound * 1e3:.3f} ms shows in it.")
            f.saving_s = bound
        f.figures["bound_s"] = bound

    def to_dict(self) -> dict[str, Any]:
        return {"unprofiled_step_s": self.unprofiled_step_s, "profiled_step_s": self.profiled_step_s,
                "busy_s": self.busy_s, "host_scale": self.scale,
                **({"host_floor_s": self.host_floor_s} if self.host_floor_s else {}),
                "bound_s": max(0.0, self.unprofiled_step_s - min(self.busy_s, self.unprofiled_step_s)),
                "note": "host-side terms (host, sync, idle_other) were measured on the profiled step and scaled to"
                        " the program's own step time; kernel time is kept; no host-side saving exceeds the"
                        " unprofiled step less the kernels' busy time and what the fix leaves (a CUDA graph's"
                        " replay launch); no kernel saving exceeds the kernels' busy time, nor, where the"
                        " profiled step was host-bound and the fix only changes kernels (tf32, cudnn_benchmark,"
                        " channels_last), the step less the host's own time"
                        f" (host_floor_s: the profiled step less {PROFILER_EVENT_S * 1e6:g} us, the profiler's"
                        " largest cost measured, for each CPU op and runtime call it recorded)"}
