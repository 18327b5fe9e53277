"""The figures of a verification: a run's step time, the saving's confidence interval, the status, and
whether a fix changed what the program computed. Pure functions of the runs' records (docs/verify.md).

A pair is one run without the fix and one with it in the same round; its difference is the baseline's
median step time less the fix run's (positive: the fix saves). The saving is the mean difference over
the pairs, with its 95% Student's t interval. A fix's status, in this order: crashed
(a run with it failed), not applicable (it changed nothing in this program), changes results (its
losses or outputs moved beyond the tolerance while two baseline runs agreed), slower (the interval
below 0), no effect (the interval holds 0 and no saving past the precision asked for), undecided (it
holds 0 and a saving past that: too few pairs to tell), verified (the saving within :data:`VERIFIED`
times the prediction), mispredicted (outside, or no prediction).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from roofscope.text import number

VERIFIED = (0.5, 1.5)   # realized / predicted
# Student's t at 97.5% (a two-sided 95% interval) for 1..30 degrees of freedom (scipy.stats.t.ppf, to 3
# decimals); past 30, the first terms of its expansion around the normal's 1.960 (within 0.001).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
_Z975 = 1.959964


def t975(dof: int) -> float:
    """The 97.5% quantile of Student's t with ``dof`` degrees of freedom."""
    if dof <= len(_T975):
        return _T975[dof - 1]
    z = _Z975
    return z + (z ** 3 + z) / (4 * dof) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * dof ** 2)


def step_time(record: dict[str, Any], fixed: bool | None = None) -> float | None:
    """The median of a run's timed steps (their GPU time where every one has it, else host time); of an
    alternated run (``--alternate``: ``fixed`` says which way each timed step ran), of its steps with the
    fix on (``fixed`` True) or off (False) only."""
    steps = record.get("steps") or {}
    start = steps.get("timed_from")
    if start is None:
        return None
    index = steps.get("index") or []
    timed = [i for i, ix in enumerate(index) if ix > start]
    if fixed is not None:
        ways = steps.get("fixed") or []
        timed = [i for i in timed if index[i] - start - 1 < len(ways) and ways[index[i] - start - 1] == fixed]
    gpu = [steps["gpu_s"][i] for i in timed]
    values = gpu if gpu and all(v is not None for v in gpu) else [steps["host_s"][i] for i in timed]
    return statistics.median(values) if values else None


@dataclass(frozen=True)
class Interval:
    mean: float
    lo: float
    hi: float
    n: int

    @property
    def half_width(self) -> float:
        return (self.hi - self.lo) / 2


def interval(diffs: list[float]) -> Interval | None:
    """Mean of ``diffs`` and its two-sided t interval; None for fewer than 2."""
    n = len(diffs)
    if n < 2:
        return None
    mean = statistics.fmean(diffs)
    half = t975(n - 1) * statistics.stdev(diffs) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def timing_status(ci: Interval, predicted: float | None, negligible_s: float) -> tuple[str, str]:
    """(status, reason) of a fix that ran and kept the results, from its saving's interval.
    ``negligible_s``: a saving no larger is none (``--precision`` of the baseline's step); an interval that
    holds 0 and reaches past it has not told "no effect" from a saving."""
    span = f"{_ms(ci.mean)} ms/step [{_ms(ci.lo)}, {_ms(ci.hi)}] over {ci.n} pairs"
    cost = f"costs {_ms(-ci.mean)} ms/step more [{_ms(-ci.hi)}, {_ms(-ci.lo)}] over {ci.n} pairs"
    if ci.hi < 0:
        return "slower", cost
    if ci.lo <= 0:
        said = 'saves ' + span if ci.mean >= 0 else cost
        if ci.hi <= negligible_s:
            return "no effect", f"{said}: not told apart from 0"
        return "undecided", (f"{said}: not told apart from 0 nor from a saving of {_ms(ci.hi)} ms;"
                             " more pairs would tell (--pairs, --budget-s)")
    if not predicted or predicted <= 0:
        return "mispredicted", f"saves {span}; roofscope predicted no saving for it"
    ratio = ci.mean / predicted
    verdict = "verified" if VERIFIED[0] <= ratio <= VERIFIED[1] else "mispredicted"
    return verdict, f"saves {span}: {ratio:.2f}x the predicted {_ms(predicted)} ms"


def decided(ci: Interval | None, predicted: float | None, baseline_s: float, precision: float) -> bool:
    """Whether more pairs can no longer change the status: the interval is narrow (half-width at most
    ``precision`` of the baseline step), or lies wholly within one status's band."""
    if ci is None:
        return False
    if ci.half_width <= precision * baseline_s:
        return True
    if ci.hi < 0:
        return True
    if ci.lo <= 0:
        return False
    if not predicted or predicted <= 0:
        return True
    bands = (VERIFIED[0] * predicted, VERIFIED[1] * predicted)
    return ci.hi < bands[0] or ci.lo > bands[1] or (bands[0] <= ci.lo and ci.hi <= bands[1])


def follows_speed(pairs: list[tuple[float, float]]) -> str | None:
    """Why an undecided saving spread, where the program's own speed decides it: a clause naming the
    saving in the pairs whose step without the fix ran slow and in those that ran fast, or None.

    A fix that removes host work pays only while the host is the bound: on a host that runs the same
    program at two speeds (an HF Trainer BERT on the H200: 29-31 or 35-42 ms a step), compile saved 2-10
    ms in the slow runs and nothing in the fast ones, whose steps were the GPU's. Said where the saving
    rises with the step without the fix (correlation at least 0.8, four pairs or more) and the slowest
    step is at least 10% above the fastest."""
    if len(pairs) < 4:
        return None
    base = [b for b, _ in pairs]
    saved = [b - f for b, f in pairs]
    if max(base) < 1.1 * min(base) or len(set(saved)) < 2:
        return None
    r = statistics.correlation(base, saved)
    if r < 0.8:
        return None
    order = sorted(range(len(pairs)), key=base.__getitem__)
    fast, slow = order[:len(order) // 2], order[len(order) // 2:]

    def half(idx: list[int]) -> str:
        return (f"{_ms(statistics.fmean(saved[i] for i in idx))} ms/step where it ran"
                f" {_ms(min(base[i] for i in idx))}-{_ms(max(base[i] for i in idx))} ms")
    fixed = [f for _, f in pairs]
    return (f"; the saving follows the program's own speed (correlation"
            f" {r:.2f}): {half(slow)}, {half(fast)}; with the fix it ran"
            f" {_ms(min(fixed))}-{_ms(max(fixed))} ms either way")


def _ms(s: float) -> str:
    """Milliseconds to 3 significant digits, without an exponent past 999 (a step of seconds)."""
    return number(s * 1e3, 3)


def span_ms(seconds: list[float]) -> str:
    """The range of ``seconds`` in milliseconds: "50.4 to 86.1"."""
    return f"{_ms(min(seconds))} to {_ms(max(seconds))}"


# -- results -------------------------------------------------------------------------------------------


def results_distance(a: dict[str, Any], b: dict[str, Any]) -> tuple[float, str] | None:
    """How far run ``b``'s results lie from run ``a``'s: the largest relative difference of their
    losses, pair by pair, when both recorded losses; else of the model's outputs (relative L2 of the
    sampled values) over the forwards whose inputs are equal. (distance, what was compared), or None
    when nothing compares (no loss, no output, or different inputs from the first forward on)."""
    la, lb = a.get("losses") or [], b.get("losses") or []
    n = min(len(la), len(lb))
    if n:
        d = max(abs(x - y) / max(abs(x), abs(y), 1e-12) for x, y in zip(la[:n], lb[:n]))
        return d, f"the loss of the first {n} backward{'s' if n > 1 else ''}"
    worst, compared = 0.0, 0
    for oa, ob in zip(a.get("outputs") or [], b.get("outputs") or []):
        if oa.get("input") != ob.get("input") or not oa.get("output") or not ob.get("output"):
            break
        xa, xb = oa["output"], ob["output"]
        if xa["shape"] != xb["shape"]:
            return math.inf, f"the model's output shape ({xa['shape']} against {xb['shape']})"
        norm = math.sqrt(sum(v * v for v in xa["values"])) or 1e-12
        worst = max(worst, math.sqrt(sum((x - y) ** 2 for x, y in zip(xa["values"], xb["values"]))) / norm)
        compared += 1
    if not compared:
        return None
    s = "s" if compared > 1 else ""
    return worst, f"the model's output{s} of the first {compared} forward{s}"


def results_verdict(baselines: list[dict[str, Any]], fixed: list[dict[str, Any]], rtol: float,
                    redraws: bool = False) -> tuple[bool | None, str]:
    """(changed, note): whether the fix's runs computed otherwise than the baseline's, beyond ``rtol``;
    None when undecided: fewer than two baseline runs, nothing comparable, a program whose own runs
    differ beyond ``rtol`` (not seeded: its results cannot tell a fix), or a fix that ``redraws`` the
    random numbers (compiled code has its own stream) of a model whose forward draws some (dropout)."""
    if not baselines or not fixed:
        return None, ""
    moved = [d for f in fixed if (d := results_distance(baselines[0], f)) is not None]
    if not moved:
        return None, "results not compared: no loss or model output in the first steps, or other inputs"
    distance, what = max(moved, key=lambda d: d[0])
    if len(baselines) < 2:
        return None, ""
    noise = results_distance(baselines[0], baselines[1])
    if noise is None or noise[0] > rtol:
        shown = f" ({_pct(noise[0])})" if noise is not None else ""
        return None, f"results not compared: two runs without the fix differ{shown} in {what} (not seeded?)"
    if distance > rtol and redraws and any(b.get("random") for b in baselines):
        # A BERT fine-tune with dropout, compiled: its loss moved 1.2% with the same seed, the training unchanged.
        return None, (f"results not compared: the model draws random numbers in its forward (dropout), and the"
                      f" compiled code draws them from a stream of its own ({what} moved by {_pct(distance)})")
    if distance > rtol:
        return True, f"{what} moved by {_pct(distance)} (tolerance {_pct(rtol)}; without the fix {_pct(noise[0])})"
    return False, f"{what} within {_pct(distance)} (tolerance {_pct(rtol)})"


def _pct(x: float) -> str:
    return "a different shape" if math.isinf(x) else f"{100 * x:.2g}%"
