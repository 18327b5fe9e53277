"""The verdict: every limit and bound checked, warnings, and the kernels behind a regression.

A regression check fails only when both hold:

1. the run's median is worse than the baseline's median by more than the limit, and
2. the one-sided Mann-Whitney test on the per-step samples says the run is worse at
   ``alpha`` (gate/stats.py).

It passes when the median is within the limit. Otherwise the gate *cannot decide*
(``undecided``, never a pass): too few steps for any outcome to reach ``alpha`` (fewer
than 3 a side at 0.05), or a median past the limit that the steps' scatter does not make
clear; the note says how many steps would decide. Absolute bounds compare the run's
median with the bound (a sign test on 3-10 steps cannot reach 0.05 either).

MFU, HFU and MBU depend on the ceilings as much as on the run: the run's samples are
re-expressed on the baseline's ceilings (stored in it) before they are compared, so
ceilings re-measured between two runs of unchanged code move nothing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping

import numpy as np
import pandas as pd

from roofscope.analyzers.compare.comparable import IncomparableError, refuse_other_device
from roofscope.analyzers.compare.diff import compare_kernels
from roofscope.gate.snapshot import Snapshot
from roofscope.gate.stats import ALPHA, mann_whitney, min_steps, steps_to_decide
from roofscope.gate.thresholds import REGION_PREFIX, Bound, Limit, Metric, limit_for, metric
from roofscope.text import plural

THROTTLE_WARN = 0.05     # share of telemetry samples with a throttle reason set
MIN_REGION_SHARE = 0.01  # of the baseline's median step: shorter regions are not gated by default
PASS, FAIL, SKIP, UNDECIDED = "pass", "fail", "skip", "undecided"
CEILING_METRICS = {"mfu": "peak_flops", "hfu": "peak_flops", "mbu": "bandwidth"}


@dataclass
class Check:
    """One limit or bound on one metric (a JUnit testcase)."""

    metric: Metric
    kind: str                    # "regression" (against the baseline) or "bound" (absolute)
    limit: str                   # 5%, 2pp, 1.5ms, ">= 35.00%"
    status: str                  # pass | fail | skip | undecided
    relative: bool = True        # the limit is a share of the baseline (else points or time)
    run: float | None = None     # the run's median
    base: float | None = None    # the baseline's median (regression) or the bound
    change: float | None = None  # relative change of the median, run vs baseline
    worse_by: float | None = None  # how much worse, in the limit's terms (share, points, seconds)
    p_value: float | None = None
    n_run: int = 0
    n_base: int = 0
    note: str = ""
    unprofiled: bool = False     # the run's samples are steps run without the profiler (snapshot.py)

    @property
    def name(self) -> str:
        return self.metric.name if self.kind == "regression" else f"{self.metric.name} {self.limit}"

    def delta_text(self) -> str:
        """The change as the limit measures it: +6.1%, +2.0pp, +1.250 ms."""
        if self.kind != "regression" or self.change is None or self.worse_by is None:
            return "-"
        if self.relative:
            return f"{100 * self.change:+.1f}%" if math.isfinite(self.change) else "new"
        delta = -self.worse_by if self.metric.higher_is_better else self.worse_by
        return f"{1e3 * delta:+.3f} ms" if self.metric.is_time else f"{100 * delta:+.1f}pp"

    def message(self) -> str:
        """One line: what moved, by how much, against which limit, how sure."""
        m = self.metric
        if self.status == SKIP:
            return f"{m.label}: not checked ({self.note})"
        if self.status == UNDECIDED and self.run is None:
            return f"{m.label}: cannot decide ({self.note})"
        if self.kind == "bound":
            side = "below" if m.higher_is_better else "above"
            state = f"{side} the bound" if self.status == FAIL else "within the bound"
            return (f"{m.label} {m.format(self.run)} is {state} {self.limit} (median of {plural(self.n_run, 'step')})"
                    + (f": {self.note}" if self.note else ""))
        moved = "fell" if (self.run or 0) < (self.base or 0) else "rose"
        head = (f"{m.label} {moved} {self.delta_text().lstrip('+-')} vs baseline"
                f" ({m.format(self.base)} -> {m.format(self.run)}; limit {self.limit}")
        steps = f"{self.n_run} vs {plural(self.n_base, 'step')}" + (" without the profiler" if self.unprofiled else "")
        stat = f"Mann-Whitney p={self.p_value:.3g}, {steps}" if self.p_value is not None else steps
        return f"{head}; {stat})" + (f": {self.note}" if self.note else "")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "metric": self.metric.name, "label": self.metric.label, "kind": self.kind,
                "unit": self.metric.unit, "higher_is_better": self.metric.higher_is_better, "limit": self.limit,
                "status": self.status, "run": self.run, "base": self.base, "change": self.change,
                "worse_by": self.worse_by, "p_value": self.p_value, "n_run": self.n_run, "n_base": self.n_base,
                "note": self.note, "message": self.message()}


def _values(s: Snapshot, name: str) -> np.ndarray:
    v = s.samples.get(name)
    return v[~np.isnan(v)] if v is not None else np.empty(0)


def check_regression(m: Metric, limit: Limit, run: Snapshot, base: Snapshot, alpha: float = ALPHA) -> Check:
    r, b = _values(run, m.name), _values(base, m.name)
    c = Check(m, "regression", limit.text, SKIP, limit.relative, n_run=len(r), n_base=len(b))
    if not len(b) or not len(r):
        c.note = "no samples in the " + ("baseline" if not len(b) else "run")
        return c
    c.run, c.base = float(np.median(r)), float(np.median(b))
    c.change = (c.run - c.base) / abs(c.base) if c.base else (0.0 if c.run == c.base else math.inf)
    c.worse_by, exceeded = limit.exceeded_by(c.base, c.run, m)
    # Orient so that larger is worse: the test asks whether the run's samples sit above the baseline's.
    sign = -1.0 if m.higher_is_better else 1.0
    test = mann_whitney(sign * r, sign * b)
    c.p_value = test.p_value
    c.unprofiled = run.unprofiled(m.name)
    # Too few steps for the test ever to reject: this check could never fail, so it decides nothing.
    # (Tied values, not the counts, can also put alpha out of reach: then the medians decide.)
    if 1.0 / math.comb(len(r) + len(b), len(r)) > alpha:
        k = min_steps(alpha)
        c.status = UNDECIDED
        c.note = (f"{len(r)} vs {plural(len(b), 'step')} cannot show a regression: the rank test's best possible"
                  f" p is {test.min_p:.3g} > alpha {alpha:g}; record at least {k} steps a side"
                  f" ({_knob(c.unprofiled, k)}, 8-10 tolerate a slow step"
                  f"{', and rewrite the baseline' if len(b) < k else ''})")
    elif exceeded and (test.clear(alpha) or not test.attainable(alpha)):
        c.status = FAIL
        if not test.clear(alpha):
            c.note = f"tied samples: the best possible p is {test.min_p:.3g} > alpha {alpha:g}; the limit decided"
    elif exceeded:
        need = steps_to_decide(sign * r, sign * b, alpha)
        c.status = UNDECIDED
        c.note = (f"past the limit but not clear (p={test.p_value:.3g} > alpha {alpha:g}): the steps scatter too"
                  " much to tell this from noise; "
                  + (f"{_more_steps(need, len(b), c.unprofiled)} would decide a shift like this one" if need
                     else "more steps would not decide it: widen the limit or steady the machine"))
    else:
        c.status = PASS
        c.note = _power_note(sign * r, sign * b, limit.value * abs(c.base) if limit.relative else limit.value,
                             limit.text, alpha, c.unprofiled)
    return c


def _power_note(worse: np.ndarray, base: np.ndarray, shift: float, text: str, alpha: float,
                unprofiled: bool) -> str:
    """On a pass: whether a regression of exactly the limit, with the run's scatter, would have been
    clear; if not, these steps could not have caught one, and the note says so and what would."""
    at_limit = worse - (np.median(worse) - np.median(base)) + shift
    p = mann_whitney(at_limit, base).p_value
    if p <= alpha:
        return ""
    need = steps_to_decide(at_limit, base, alpha)
    return (f"within the limit, but these steps could not have caught a regression of {text} (p={p:.2g} for one)"
            + (f"; {_more_steps(need, len(base), unprofiled)} would" if need else ""))


def _knob(unprofiled: bool, k: int) -> str:
    """What sets the number of a check's samples, for ``k`` of them: --active for the profiled steps;
    for a Run's unprofiled samples (its step time and utilizations) the steps the program runs past
    its profile (views/programtime.py: also the --settle steps before it; --active sets neither)."""
    if unprofiled:
        return f"steps run without the profiler: let the program run {k} steps past its profile, not --active"
    return f"--active {k}"


def _more_steps(need: int, n_base: int, unprofiled: bool) -> str:
    return f"about {need} steps a side ({_knob(unprofiled, need)}" + (", the baseline's too)" if need > n_base else ")")


def check_bound(bound: Bound, run: Snapshot) -> Check:
    r = _values(run, bound.metric.name)
    c = Check(bound.metric, "bound", bound.text, SKIP, False, base=bound.value, n_run=len(r))
    if not len(r):
        c.note = "not measured in the run"
        return c
    c.run = float(np.median(r))
    c.worse_by = (bound.value - c.run) if bound.metric.higher_is_better else (c.run - bound.value)
    c.status = FAIL if bound.violated(c.run) else PASS
    if bound.metric.name == "mfu" and op_counted(run):
        c.note = "op-counted MFU (= HFU: the FLOPs the kernels did); give --model-flops-per-step for model FLOPs"
    return c


def same_figure(s: Snapshot, name: str, other: str) -> bool:
    """Whether two metrics of a snapshot are one figure: op-counted MFU is HFU, step by step."""
    a, b = s.samples.get(name), s.samples.get(other)
    return a is not None and b is not None and len(a) == len(b) and bool(np.allclose(a, b, equal_nan=True))


def op_counted(s: Snapshot) -> bool:
    """MFU from the FLOPs the kernels did (no model FLOPs given): wasted work raises it."""
    return s.metrics.mfu_source == "op_counted"


def _ceiling(s: Snapshot, key: str, precision: str | None) -> float | None:
    """The snapshot's peak FLOP/s for ``precision`` (``key`` peak_flops) or its bandwidth."""
    c = s.ceilings
    if key == "bandwidth":
        return c.get("bandwidth") or None
    if precision and precision == c.get("peak_roof"):
        return c.get("peak_flops") or None
    return (c.get("peaks") or {}).get(precision) or None


def on_baseline_ceilings(run: Snapshot, base: Snapshot) -> tuple[Snapshot, dict[str, str]]:
    """The run with its MFU, HFU and MBU samples re-expressed on the baseline's ceilings, and why
    each metric that cannot be is not. Each is a figure over (step time x one ceiling), so the
    run's value times its ceiling over the baseline's is the run measured on the baseline's:
    step time and achieved rates do not depend on ceilings."""
    samples, unaligned = dict(run.samples), {}
    precision = run.ceilings.get("peak_roof")
    for name, key in CEILING_METRICS.items():
        if name not in samples or not len(_values(run, name)):
            continue
        mine, theirs = _ceiling(run, key, precision), _ceiling(base, key, precision)
        if mine and theirs:
            samples[name] = samples[name] * (mine / theirs)
        elif mine:
            what = f"no {precision} peak" if key == "peak_flops" else "no bandwidth"
            unaligned[name] = (f"cannot compare on one set of ceilings: the baseline stores {what}"
                               f" (the run's {name.upper()} is against {precision or 'its'} {key});"
                               " rewrite the baseline")
    return replace(run, samples=samples), unaligned


def regression_checks(run: Snapshot, base: Snapshot, limits: Mapping[str, Limit | None],
                      alpha: float = ALPHA) -> list[Check]:
    """One check per metric of the baseline that has a limit; metrics only the run has are new.
    MFU, HFU and MBU are compared on the baseline's ceilings (:func:`on_baseline_ceilings`).
    Regions under :data:`MIN_REGION_SHARE` of the baseline step are left out of ``region:*``:
    a 10 us region (torch's own zero_grad annotation) moves by 10 % with the scheduler.
    One figure counts once: op-counted MFU (HFU by another name) is not checked beside HFU."""
    out = []
    step = base.median("step_time")
    run, unaligned = on_baseline_ceilings(run, base)
    for name in base.samples:
        m = metric(name)
        limit = limit_for(m, limits)
        if limit is None:
            continue
        median, n_base = base.median(name), len(_values(base, name))
        if name == "mfu" and (op_counted(run) or op_counted(base)):
            twin = same_figure(run, "mfu", "hfu") and same_figure(base, "mfu", "hfu") and limit_for(
                metric("hfu"), limits) is not None
            out.append(Check(m, "regression", limit.text, SKIP, limit.relative, base=median, n_base=n_base,
                             note="op-counted (the FLOPs the kernels did, so extra work raises it)"
                                  + (": the same figure as HFU, checked once as hfu" if twin else "")
                                  + "; give --model-flops-per-step or --tokens-per-step for model FLOPs"))
            continue
        if (name not in limits and m.name.startswith(REGION_PREFIX) and step and median is not None
                and median < MIN_REGION_SHARE * step):
            out.append(Check(m, "regression", limit.text, SKIP, limit.relative, base=median, n_base=n_base,
                             note=f"under {MIN_REGION_SHARE:.0%} of the step; give it its own limit to gate it"))
            continue
        if name not in run.samples:
            out.append(Check(m, "regression", limit.text, SKIP, limit.relative, base=median, n_base=n_base,
                             note="not measured in the run"))
            continue
        if name in unaligned and n_base:
            out.append(Check(m, "regression", limit.text, UNDECIDED, limit.relative, base=median, n_base=n_base,
                             note=unaligned[name]))
            continue
        out.append(check_regression(m, limit, run, base, alpha))
    return out


def refuse_incomparable(run: Snapshot, base: Snapshot, where: str) -> None:
    """Refuse a baseline (named ``where``) of another device or precision (exit 2): the run's step
    times would be judged against another machine's, its MFU and HFU against another peak. A
    change of precision may be the change under test: the baseline is then written again."""
    write = "(roofscope gate --write-baseline RUN BASELINE.json)"
    refuse_other_device(base.device, run.device, f"{where} is a baseline of {{a}}, the run ran on {{b}}",
                        f"write a baseline on this device {write}")
    roof_b, roof_r = base.ceilings.get("peak_roof"), run.ceilings.get("peak_roof")
    if roof_b and roof_r and roof_b != roof_r:
        raise IncomparableError(f"{where}: the baseline computes mostly in {roof_b}, the run in {roof_r}: their"
                                f" MFU and HFU are shares of different peaks; if the change of precision is"
                                f" intended, write the baseline again {write}")


def warnings_for(run: Snapshot, base: Snapshot | None) -> list[str]:
    """Reasons to distrust a comparison that do not fail the gate: software or ceilings that
    differ, throttling, a trace cut short (--allow-partial)."""
    out = []
    for who, s in (("run", run), ("baseline", base)):
        frac = (s.metrics.throttled_fraction if s is not None else None) or 0.0
        if frac > THROTTLE_WARN:
            why = f" ({', '.join(s.throttle_reasons)})" if s.throttle_reasons else ""
            out.append(f"the {who} throttled in {frac:.0%} of telemetry samples{why}: its clocks were lowered")
    for who, s in (("run", run), ("baseline", base)):
        if s is not None and s.cut_short:
            out.append(f"the {who}'s trace was cut short ({s.cut_short}): compared on the part it holds"
                       " (--allow-partial)")
    if base is None:
        return out
    if base.time_source != run.time_source:
        old = "baseline" if base.time_source == "profiled" else "run"
        out.append(f"the {old}'s step times are profiled ones (an older Run or a bare trace), the other's the"
                   " program's own (without the profiler): step time and utilizations compare unlike times;"
                   f" record the {old} again with this roofscope")
    for key, b in base.environment.items():
        r = run.environment.get(key)
        if b and r and b != r:
            out.append(f"different {key} versions: baseline {b}, run {r}")
    moved = [(key, what, b, r) for key, what in (("peak_flops", "MFU/HFU"), ("bandwidth", "MBU"))
             for b, r in [(base.ceilings.get(key), run.ceilings.get(key))]
             if b and r and not math.isclose(b, r, rel_tol=1e-6)]
    if moved:
        out.append("the run's ceilings differ from the baseline's ("
                   + ", ".join(f"{key}: baseline {b:.4g}, run {r:.4g}" for key, _, b, r in moved)
                   + f"): {'/'.join(w for _, w, _, _ in moved)} compared on the baseline's;"
                   " kernel classes are each run's own")
    return out


def kernel_evidence(run: Snapshot, base: Snapshot) -> pd.DataFrame:
    """The diff's kernel comparison (baseline = A, run = B), per step. When the baseline kept only
    its largest kernels, a run kernel below that cutoff may have been there unseen: not 'appeared'."""
    changes = compare_kernels(base.kernels, run.kernels)
    cutoff = base.kernel_cutoff_s
    if cutoff is not None:
        changes = changes[~((changes["status"] == "appeared") & (changes["time_b_s"] < cutoff))]
    return changes.reset_index(drop=True)
