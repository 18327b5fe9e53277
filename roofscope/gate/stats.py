"""Is a shift between two small sets of per-step samples clear, or noise? And if the samples
cannot tell, how many steps would?

The gate has few samples per side (3 to 20 profiled steps), not normally distributed
(one slow step from a page fault or a GC pause is common). It uses the one-sided
Mann-Whitney U (Wilcoxon rank-sum) test, SciPy's ``scipy.stats.mannwhitneyu``: exact
without ties up to ``EXACT_MAX_N`` pooled samples, exact with ties by enumerating every
split of the pooled samples while there are at most ``ENUMERATE_MAX`` of them (SciPy's
``method="exact"`` ignores ties), else the normal approximation with tie and continuity
corrections, as good as exact at those sizes.

The smallest p-value a test can reach is that of complete separation: 1 / C(n + m, n)
without ties. With 3 steps against 3 it is 1/20 = 0.05, so at alpha 0.05 three steps a
side can show a clear shift (every run step worse than every baseline step); 2 against 3
(1/10) never can: :attr:`RankTest.attainable` says so and the gate cannot decide (see
gate/evaluate.py). :func:`steps_to_decide` says how many steps would.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ALPHA = 0.05
EXACT_MAX_N = 60
ENUMERATE_MAX = 13_000     # splits of the pooled samples enumerated for an exact p with ties
MAX_STEPS = 200           # steps_to_decide looks no further


@dataclass(frozen=True)
class RankTest:
    """One-sided Mann-Whitney U: do ``worse`` samples tend to exceed ``base`` samples?"""

    u: float            # pairs (worse_i, base_j) with worse_i > base_j, ties counted 1/2
    p_value: float      # P(U >= u) when both come from one distribution
    min_p: float        # the smallest p-value these pooled values could give
    n_worse: int
    n_base: int
    exact: bool

    def attainable(self, alpha: float = ALPHA) -> bool:
        """Whether any outcome at all could be significant at ``alpha`` with these samples."""
        return self.min_p <= alpha

    def clear(self, alpha: float = ALPHA) -> bool:
        return self.p_value <= alpha


def _method(x: np.ndarray, y: np.ndarray) -> tuple[object, bool]:
    """SciPy's method for these samples, and whether its p-value is exact."""
    from scipy.stats import PermutationMethod

    n, m = len(x), len(y)
    pooled = np.concatenate([x, y])
    if len(np.unique(pooled)) == len(pooled):
        return ("exact", True) if n + m <= EXACT_MAX_N else ("asymptotic", False)
    if math.comb(n + m, n) <= ENUMERATE_MAX and min(n, m) > 1:   # SciPy permutes two or more a side
        # n_resamples past the number of distinct splits: permutation_test enumerates them all.
        return PermutationMethod(n_resamples=np.inf), True
    return "asymptotic", False


def _p(x: np.ndarray, y: np.ndarray, method: object) -> tuple[float, float]:
    from scipy.stats import mannwhitneyu

    r = mannwhitneyu(x, y, alternative="greater", method=method)
    return float(r.statistic), min(float(r.pvalue), 1.0)


def mann_whitney(worse: np.ndarray, base: np.ndarray) -> RankTest:
    """One-sided test that ``worse`` is shifted above ``base`` (orient the metric first:
    negate higher-is-better samples). NaNs are dropped; each side needs one sample."""
    x = np.asarray(worse, dtype=np.float64)
    y = np.asarray(base, dtype=np.float64)
    x, y = x[~np.isnan(x)], y[~np.isnan(y)]
    n, m = len(x), len(y)
    if n == 0 or m == 0:
        raise ValueError("the rank test needs at least one sample on each side")
    method, exact = _method(x, y)
    u, p = _p(x, y, method)
    # Complete separation (the run holds the n largest pooled values) is the most extreme outcome.
    pooled = np.sort(np.concatenate([x, y]))
    _, min_p = _p(pooled[m:], pooled[:m], method)
    return RankTest(u=u, p_value=p, min_p=min_p, n_worse=n, n_base=m, exact=exact)


def min_steps(alpha: float = ALPHA) -> int:
    """The fewest steps a side whose complete separation, 1 / C(2k, k), reaches ``alpha``."""
    return next(k for k in range(1, MAX_STEPS) if 1.0 / math.comb(2 * k, k) <= alpha)


def steps_to_decide(worse: np.ndarray, base: np.ndarray, alpha: float = ALPHA) -> int | None:
    """About how many steps a side would make a shift like the observed one clear at ``alpha``
    if more steps scattered as these did (each side's samples repeated; the normal
    approximation, an estimate); None when the run is not worse or even :data:`MAX_STEPS`
    would not do (the two sides overlap too much)."""
    x = np.asarray(worse, dtype=np.float64)
    y = np.asarray(base, dtype=np.float64)
    x, y = x[~np.isnan(x)], y[~np.isnan(y)]
    if not len(x) or not len(y) or np.median(x) <= np.median(y):
        return None
    for n in range(max(len(x), len(y), min_steps(alpha)), MAX_STEPS + 1):
        xs, ys = np.resize(x, n), np.resize(y, n)
        if _p(xs, ys, "asymptotic")[1] <= alpha:
            return n
    return None
