"""The job across its ranks: per-rank medians, stragglers, communication, the scaling tax and
the job's findings (docs/multi-gpu-analysis.md).

Step time is each rank's own: its steps timed without the profiler (summary.json's step_time), the
profiled median beside it; a rank without that block (a bare trace) shows its profiled steps.

Stragglers come from the *arrival skew* at the collectives. Every rank issues the same collectives in
the same order, and a collective finishes on all ranks together, so the rank that enters one last
waits least inside it: for each call (matched across ranks by step and its place in the step, the
same collective on every rank), ``late[r] = median over the other ranks of their call's duration -
r's`` (at least 0), summed over the step's calls: how long the others waited for r in that step.
Calls that run at once (gloo's worker threads: a call begun, on most of the other ranks, before an
earlier one ended) share one wait: such a group counts its longest. This
needs no common clock, and it does not read a waiting rank's compute through the time it spent
blocked in an all-reduce. ``excess[r, s] = late[r, s] - median over the other ranks of late[., s]``;
r is a straggler when its excess is positive in at least 80% of the steps and its median excess
exceeds the noise, ``max(2% of the median step time, 3 x the MAD over steps of the other ranks, 3 x
the MAD of r's own excess)``: a lateness that swings by as much as it amounts to is jitter (two
processes' gloo transfers on one GPU differ by 1-2 ms a call, either way), a straggler's is steady.
Ranks without collective calls (older results) are compared on their *self time* instead: the step
less its exposed communication.

The saving of catching the straggler up is its median excess, bounded by the balanced step the other
ranks show: the job's own step less the other ranks' non-communication GPU work per step (their
kernels cannot run faster by waiting less).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from roofscope.analyzers.diagnose.base import Finding
from roofscope.analyzers.diagnose.communication import exposed_comm_finding
from roofscope.analyzers.job.ranks import RankResult
from roofscope.jsonsafe import json_safe

POSITIVE_SHARE = 0.8      # share of steps a straggler must be slower in
EVIDENCE_SHARE = 0.05     # share of the excess a kernel must explain to be named as evidence
NOISE_STEP_SHARE = 0.02   # noise floor: 2% of the median step time
NOISE_MADS = 3.0          # ... or 3 median absolute deviations of the other ranks' self time
EVIDENCE_KERNELS = 5
RANK_COLUMNS = ("rank", "node", "device", "steps", "step_s", "profiled_step_s", "own_steps", "mfu", "hfu", "busy_s",
                "comm_s", "comm_exposed_s", "self_s", "idle_host_s", "idle_s")
RANK_OF_OTHERS_EXACT = 64  # up to this many ranks, "the other ranks" leaves each rank out of the median


@dataclass
class Straggler:
    rank: int
    excess_s: float                 # median per step: the others' wait for it (arrival), or its extra self time
    positive_share: float           # share of steps with positive excess
    kernels: list[dict[str, Any]]   # kernels slower than the other ranks' median, ms per step
    host_idle_excess_s: float       # host-bound idle beyond the other ranks' median, per step
    basis: str = "self time"        # "arrival skew" (the collectives' durations) or "self time"
    saving_s: float = 0.0           # excess_s bounded by the balanced step (module docstring)
    bound_s: float = float("nan")   # that bound: the job's own step less the others' GPU work
    noise_s: float = float("nan")   # the noise its excess passed (rank_noise)


@dataclass
class Job:
    """The cross-rank result: :func:`combine`'s output, rendered by the merge command and reports."""

    world_size: int
    results: list[RankResult]
    ranks: pd.DataFrame                  # one row per rank: RANK_COLUMNS (medians over steps)
    self_time: pd.DataFrame              # index step, one column per rank
    step_time: pd.DataFrame              # index step, one column per rank
    noise_s: float
    stragglers: list[Straggler]
    lateness: pd.DataFrame | None        # index step, one column per rank: the others' wait for it (s)
    collectives: pd.DataFrame            # per collective: medians over ranks, per step
    findings: list[Finding]
    scaling: dict[str, Any] | None
    warnings: list[str] = field(default_factory=list)

    @property
    def step_s(self) -> float:
        return _median_step(self.ranks)

    @property
    def own_time(self) -> bool:
        """Whether the job's step is the program's own (every rank with steps timed them unprofiled)."""
        r = self.ranks[self.ranks["steps"] > 0]
        return bool(len(r)) and bool(r["own_steps"].notna().all())

    def to_dict(self) -> dict[str, Any]:
        return json_safe({
            "world_size": self.world_size, "ranks_given": len(self.results),
            "devices": sorted({r.device for r in self.results}), "step_time_s": self.step_s,
            "step_time_source": "unprofiled" if self.own_time else "profiled",
            "profiled_step_time_s": float(self.ranks["profiled_step_s"].median()),
            "per_rank": self.ranks.to_dict("records"),
            "steps": {"self_s": _columns(self.self_time), "step_s": _columns(self.step_time),
                      **({"late_s": _columns(self.lateness)} if self.lateness is not None else {})},
            "straggler_noise_s": self.noise_s,
            "stragglers": [s.__dict__ for s in self.stragglers],
            "collectives": self.collectives.to_dict("records"),
            "findings": [f.to_dict() for f in self.findings],
            "scaling": self.scaling, "warnings": self.warnings,
            "rank_findings": {str(r.rank): [f["rule"] for f in r.findings] for r in self.results},
        })


def _median_step(ranks: pd.DataFrame) -> float:
    """The job's step time: the median over ranks (ranks without steps left out; NaN without any)."""
    return float(ranks["step_s"].median())


def _exposed(ranks: pd.DataFrame) -> pd.Series:
    """Exposed communication per step of the ranks that have steps (0 where the timeline has no
    communication figures, as on CPU traces): a rank without steps is no rank that waits least."""
    return ranks.loc[ranks["steps"] > 0, "comm_exposed_s"].fillna(0.0)


def _columns(df: pd.DataFrame) -> dict[str, Any]:
    return {"steps": [int(s) for s in df.index], **{str(c): df[c].tolist() for c in df.columns}}


def _rank_row(r: RankResult) -> dict[str, Any]:
    s = r.steps
    med = s.median(numeric_only=True) if len(s) else pd.Series(dtype=float)
    idle = (s[["idle_host_s", "idle_queued_s", "idle_other_s", "idle_edge_s"]].sum(axis=1).median()
            if len(s) else np.nan)
    own, n_own = r.summary.get("own_step_s"), r.summary.get("own_steps")
    profiled = float(med.get("step_s", np.nan))
    return {"rank": r.rank, "node": r.node, "device": r.device, "steps": int(len(s)),
            **{c: float(med.get(c, np.nan)) for c in RANK_COLUMNS if c not in ("rank", "node", "device", "steps",
                                                                               "idle_s", "profiled_step_s",
                                                                               "own_steps")},
            # The program's own step where the rank timed it; its profiled median beside it.
            "step_s": float(own) if own and len(s) else profiled, "profiled_step_s": profiled,
            "own_steps": float(n_own) if own and len(s) else np.nan, "idle_s": float(idle)}


def _pivot(results: list[RankResult], col: str) -> pd.DataFrame:
    return pd.DataFrame({r.rank: r.steps[col] for r in results}).sort_index()


def lateness(results: list[RankResult]) -> pd.DataFrame | None:
    """Per step (index) and rank (columns): how long the other ranks waited for it at the collectives
    (module docstring); None unless two ranks recorded collective calls."""
    frames = [r.arrivals.assign(rank=r.rank) for r in results if len(r.arrivals)]
    if len(frames) < 2:
        return None
    calls = pd.concat(frames, ignore_index=True)
    dur = calls.pivot_table(index=["step", "seq"], columns="rank", values="dur_s", aggfunc="first")
    kinds = calls.groupby(["step", "seq"])["collective"].nunique().reindex(dur.index)
    # A call counts where every rank made it and it is the same collective everywhere.
    dur = dur[dur.notna().all(axis=1) & (kinds == 1)]
    if not len(dur):
        return None
    d = dur.to_numpy(dtype=np.float64)
    if d.shape[1] <= RANK_OF_OTHERS_EXACT:
        others = np.stack([np.median(np.delete(d, i, axis=1), axis=1) for i in range(d.shape[1])], axis=1)
    else:  # thousands of ranks: one rank moves the median of the others by nothing that matters
        others = np.repeat(np.median(d, axis=1, keepdims=True), d.shape[1], axis=1)
    late = np.clip(others - d, 0.0, None)
    # Waits that overlap are one wait: a call the other ranks (at least half of them) began while an
    # earlier call of the step still ran joins that call's group, which counts its longest wait once.
    ov = calls.pivot_table(index=["step", "seq"], columns="rank", values="overlaps", aggfunc="first")
    o = ov.reindex(index=dur.index, columns=dur.columns).fillna(False).to_numpy(dtype=np.float64)
    n = o.shape[1]
    joined = (o.sum(axis=1, keepdims=True) - o) / max(1, n - 1) >= 0.5
    steps = dur.index.get_level_values("step").to_numpy()
    first = np.r_[True, steps[1:] != steps[:-1]]
    out = {}
    for i, r in enumerate(dur.columns):
        starts = np.flatnonzero(first | ~joined[:, i])
        out[r] = pd.Series(np.maximum.reduceat(late[:, i], starts)).groupby(steps[starts]).sum()
    return pd.DataFrame(out).rename_axis("step")


def _comparable(self_time: pd.DataFrame) -> pd.DataFrame:
    # Ranks with no step at all cannot be compared; the rest are compared on the steps all recorded.
    return self_time.dropna(axis=1, how="all").dropna(how="any")


def rank_noise(self_time: pd.DataFrame, rank: int, step_s: float) -> float:
    """The noise rank ``rank``'s excess must pass: the largest of a share of the step, the other
    ranks' spread over the steps and the spread of its own excess (module docstring)."""
    st = _comparable(self_time)
    others = st.drop(columns=rank)
    if not others.size:
        return NOISE_STEP_SHARE * step_s
    mad = float(np.median((others - others.median(axis=0)).abs().to_numpy()))
    excess = st[rank] - others.median(axis=1)
    own = float((excess - excess.median()).abs().median())
    return max(NOISE_STEP_SHARE * step_s, NOISE_MADS * mad, NOISE_MADS * own)


def detect(self_time: pd.DataFrame, step_s: float) -> tuple[list[tuple[int, float, float]], float]:
    """Stragglers as (rank, median excess, share of positive steps), and the largest noise
    threshold used (see the module docstring). ``self_time``: index step, one column per rank (the
    lateness at the collectives, or self time)."""
    st = _comparable(self_time)
    if st.shape[1] < 2 or not len(st):
        return [], float("nan")
    found, noise_max = [], 0.0
    for r in st.columns:
        others = st.drop(columns=r)
        # Against the other ranks only: a median that includes the rank itself halves the gap of a
        # two-rank job, and the gap is what the others wait for.
        excess = st[r] - others.median(axis=1)
        noise = rank_noise(st, r, step_s)
        noise_max = max(noise_max, noise)
        pos = float((excess > 0).mean())
        med = float(excess.median())
        if pos >= POSITIVE_SHARE and med > noise:
            found.append((int(r), med, pos))
    return found, noise_max


def _evidence(results: list[RankResult], rank: int, excess_s: float) -> tuple[list[dict[str, Any]], float]:
    """Kernels slower on ``rank`` than the other ranks' median (ms per step), and its extra host idle.
    A kernel counts only when it explains a visible part of the excess: on a rank slowed by its host,
    every kernel differs from its peers by microseconds of jitter, which is no evidence."""
    per = {r.rank: r.kernel_steps.groupby("name")["time_s"].sum() / max(1, len(r.steps)) for r in results}
    mine = per[rank]
    others = pd.DataFrame({r: v for r, v in per.items() if r != rank}).reindex(mine.index)
    diff = (mine - others.fillna(0.0).median(axis=1)).sort_values(ascending=False)
    diff = diff[diff > EVIDENCE_SHARE * excess_s].head(EVIDENCE_KERNELS)
    kernels = [{"name": str(n), "excess_ms": float(d) * 1e3, "rank_ms": float(mine[n]) * 1e3,
                "median_ms": float(mine[n] - d) * 1e3} for n, d in diff.items()]
    host = {r.rank: float(r.steps["idle_host_s"].median()) for r in results if len(r.steps)}
    others_host = [v for r, v in host.items() if r != rank]
    extra = host.get(rank, 0.0) - float(np.median(others_host)) if others_host else 0.0
    return kernels, extra


def _collectives(results: list[RankResult]) -> pd.DataFrame:
    """Per collective: medians over ranks of count and time per step, bytes per call, bandwidths."""
    rows = []
    for r in results:
        n = max(1, len(r.steps))
        t = r.collectives
        if len(t):
            rows.append(t.assign(rank=r.rank, count=t["count"] / n, time_s=t["time_s"] / n,
                                 bytes=t["bytes"] / t["sized"].where(t["sized"] > 0)))
    if not rows:
        return pd.DataFrame({c: [] for c in ("collective", "ranks", "count", "time_s", "bytes", "algbw", "busbw",
                                             "algorithms", "group")})
    t = pd.concat(rows, ignore_index=True)
    g = t.groupby("collective", sort=False)
    out = pd.DataFrame({"ranks": g["rank"].nunique(), "count": g["count"].median(), "time_s": g["time_s"].median(),
                        "bytes": g["bytes"].median(), "algbw": g["algbw"].median(), "busbw": g["busbw"].median(),
                        "algorithms": g["algorithms"].agg(lambda s: ",".join(sorted(set(",".join(s).split(","))
                                                                                    - {""}))),
                        "group": g["group"].max()})
    return out.reset_index().sort_values("time_s", ascending=False, ignore_index=True)


def scaling_tax(baseline_step_s: float, ranks: pd.DataFrame) -> dict[str, Any]:
    """The job's median step time against a single-GPU baseline's: the tax split into exposed
    communication (on the rank that waits least: pure communication), straggler wait (the
    exposed communication of the rank that waits most, beyond that: every rank's step ends at the
    same collective, so the job loses what its earliest rank waits) and the rest (anything else
    that differs: per-rank batch, compute, host)."""
    step = _median_step(ranks)
    exposed = _exposed(ranks)
    comm = float(exposed.min())
    wait = float(exposed.max()) - comm
    tax = step - baseline_step_s
    return {"baseline_step_s": baseline_step_s, "job_step_s": step, "tax_s": tax,
            "tax_share": tax / step if step > 0 else None, "exposed_comm_s": comm, "straggler_wait_s": wait,
            "other_s": tax - comm - wait, "efficiency": baseline_step_s / step if step > 0 else None}


def _straggler_finding(s: Straggler, step_s: float) -> Finding:
    what = ", ".join(f"{k['name'][:60]} +{k['excess_ms']:.2f} ms" for k in s.kernels[:3]) or "no kernel stands out"
    host = f"; host-bound idle +{s.host_idle_excess_s * 1e3:.2f} ms/step" if s.host_idle_excess_s > 0 else ""
    if s.basis == "arrival skew":
        seen = (f"rank {s.rank} enters the collectives last: the other ranks wait {s.excess_s * 1e3:.2f} ms/step for"
                f" it (median over the steps' calls)")
    else:
        seen = f"rank {s.rank} spends {s.excess_s * 1e3:.2f} ms/step more on its own work than the other ranks (median)"
    bound = (f" The saving, {s.saving_s * 1e3:.2f} ms/step, is that wait bounded by the balanced step the other"
             f" ranks show ({s.bound_s * 1e3:.2f} ms/step: the job's step less their GPU work); it assumes the rank"
             " catches up, which only a change on that rank can check." if s.bound_s == s.bound_s else "")
    return Finding(
        rule="straggler", title=f"Rank {s.rank} is a straggler: the other ranks wait for it",
        binding="straggler", saving_s=s.saving_s, confidence="high" if s.positive_share >= 0.95 else "medium",
        summary=f"{seen}, in {100 * s.positive_share:.0f}% of the steps; slower kernels: {what}{host}",
        fix="Find what differs on that rank: its GPU (clocks, throttling, a noisy neighbour: nvidia-smi -q -d"
        " PERFORMANCE), its data (uneven batch or sequence lengths: balance the sampler), its host (data loading,"
        " logging or checkpointing only on that rank)." + bound,
        kernels=[{"name": k["name"], "op": "", "calls": 0.0, "time_s": k["excess_ms"] / 1e3, "cls": ""}
                 for k in s.kernels],
        figures={"rank": s.rank, "excess_s": s.excess_s, "positive_share": s.positive_share,
                 "host_idle_excess_s": s.host_idle_excess_s, "basis": s.basis, "bound_s": s.bound_s},
        saving_pct=s.saving_s / step_s if step_s > 0 else 0.0)


def _balanced_bound(ranks: pd.DataFrame, rank: int, step_s: float) -> float:
    """The most catching ``rank`` up can save: the job's step less the other ranks' non-communication GPU
    work per step (NaN where the ranks have no GPU timeline)."""
    others = ranks[(ranks["rank"] != rank) & (ranks["steps"] > 0)]
    work = (others["busy_s"] - others["comm_s"].fillna(0.0)).clip(lower=0).median()
    return max(0.0, step_s - float(work)) if work == work else float("nan")


def combine(results: list[RankResult], world_size: int, baseline_step_s: float | None = None,
            warnings: list[str] | None = None) -> Job:
    """The cross-rank view of per-rank results (one per rank, any order)."""
    results = sorted(results, key=lambda r: r.rank)
    ranks = pd.DataFrame([_rank_row(r) for r in results], columns=list(RANK_COLUMNS))
    self_time, step_time = _pivot(results, "self_s"), _pivot(results, "step_s")
    step_s = _median_step(ranks)
    warnings = list(warnings or [])
    empty = [int(r) for r in self_time.columns if self_time[r].isna().all()]
    if empty and len(results) > 1:
        warnings.append(f"rank{'s' if len(empty) > 1 else ''} {', '.join(map(str, empty))}: no profiled step;"
                        " left out of the straggler test and the job's medians")
    late = lateness(results)
    basis = "arrival skew" if late is not None else "self time"
    table = late if late is not None else self_time
    found, noise = detect(table, step_s)
    stragglers = []
    for r, ex, pos in found:
        bound = _balanced_bound(ranks, r, step_s)
        saving = min(ex, bound) if bound == bound else ex
        stragglers.append(Straggler(r, ex, pos, *_evidence(results, r, ex), basis=basis, saving_s=saving,
                                    bound_s=bound, noise_s=rank_noise(table, r, step_s)))
    colls = _collectives(results)
    findings = [_straggler_finding(s, step_s) for s in stragglers]
    # The rank that waits least shows the pure communication cost; the others' extra exposed time
    # is waiting for a straggler, which the straggler finding addresses. Its own NCCL time is the
    # base of the overlap share: the median rank's includes that waiting.
    exposed = _exposed(ranks)
    if len(exposed):
        least = exposed.idxmin()
        f = exposed_comm_finding(float(exposed[least]), float(ranks.at[least, "comm_s"]), step_s, colls)
        if f is not None:
            findings.append(f)
    findings.sort(key=lambda f: -f.saving_s)
    for i, f in enumerate(findings, 1):
        f.rank = i
    scaling = scaling_tax(baseline_step_s, ranks) if baseline_step_s and step_s > 0 else None
    return Job(world_size, results, ranks, self_time, step_time, noise, stragglers, late, colls, findings, scaling,
               warnings)

