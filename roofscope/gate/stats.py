"""Is a shift between two small sets of per-step samples clear, or noise?

The gate has few samples per side (3 to 20 profiled steps), not normally distributed
(one slow step from a page fault or a GC pause is common). It uses the one-sided
Mann-Whitney U (Wilcoxon rank-sum) test: rank the pooled samples, and ask how likely a
rank sum at least as large as the run's is when both sides come from one distribution.
Up to ``EXACT_MAX_N`` pooled samples the p-value is exact: the permutation distribution
of the rank sum is counted by dynamic programming over (doubled, so integral) mid-ranks,
which is exact with ties too. Beyond that, the normal approximation with tie and
continuity corrections is as good as exact and the counts would grow too large.

The smallest p-value a test can reach is that of complete separation: 1 / C(n + m, n)
without ties. With 3 steps against 3 it is 1/20 = 0.05, so at alpha 0.05 three steps a
side can show a clear shift (every run step worse than every baseline step); 2 against 3
(1/10) never can: :attr:`RankTest.attainable` says so and the gate decides on the
threshold alone (see gate/evaluate.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ALPHA = 0.05
EXACT_MAX_N = 60


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


def midranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..N with tied values sharing the mean of their ranks."""
    order = np.argsort(values, kind="stable")
    s = values[order]
    # Run boundaries of equal values; each run's mid-rank is the mean of its first and last rank.
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    ends = np.r_[starts[1:], len(s)]
    run_rank = (starts + 1 + ends) / 2.0
    ranks = np.empty(len(s))
    ranks[order] = np.repeat(run_rank, ends - starts)
    return ranks


def _exact_tail(doubled: np.ndarray, n: int, observed: int) -> tuple[float, float]:
    """P(sum of n doubled ranks drawn without replacement >= observed), and the same at the
    largest attainable sum, from the count of n-subsets per sum (as float: C(60, 30) ~ 1e17
    loses integer exactness, not the ratio's precision)."""
    top = int(np.sort(doubled)[-n:].sum())
    counts = np.zeros((n + 1, top + 1))
    counts[0, 0] = 1.0
    for v in doubled.astype(np.int64):
        # Subsets of size k with sum s either skip this value or extend a (k-1)-subset with sum s-v.
        counts[1:, v:] = counts[1:, v:] + counts[:-1, : top + 1 - v]
    dist = counts[n]
    total = dist.sum()
    return float(dist[observed:].sum() / total), float(dist[top] / total)


def mann_whitney(worse: np.ndarray, base: np.ndarray) -> RankTest:
    """One-sided test that ``worse`` is shifted above ``base`` (orient the metric first:
    negate higher-is-better samples). NaNs are dropped; each side needs one sample."""
    x = np.asarray(worse, dtype=np.float64)
    y = np.asarray(base, dtype=np.float64)
    x, y = x[~np.isnan(x)], y[~np.isnan(y)]
    n, m = len(x), len(y)
    if n == 0 or m == 0:
        raise ValueError("the rank test needs at least one sample on each side")
    ranks = midranks(np.concatenate([x, y]))
    rank_sum = float(ranks[:n].sum())
    u = rank_sum - n * (n + 1) / 2.0
    if n + m <= EXACT_MAX_N:
        doubled = np.rint(2 * ranks).astype(np.int64)
        p, min_p = _exact_tail(doubled, n, int(round(2 * rank_sum)))
        return RankTest(u=u, p_value=min(p, 1.0), min_p=min_p, n_worse=n, n_base=m, exact=True)
    N = n + m
    _, tie_sizes = np.unique(ranks, return_counts=True)
    var = n * m / 12.0 * ((N + 1) - float(np.sum(tie_sizes ** 3 - tie_sizes)) / (N * (N - 1)))
    mean = n * m / 2.0
    p = 0.5 * math.erfc((u - mean - 0.5) / math.sqrt(2 * var)) if var > 0 else (0.0 if u > mean else 1.0)
    min_p = 0.5 * math.erfc((n * m - mean - 0.5) / math.sqrt(2 * var)) if var > 0 else 1.0
    return RankTest(u=u, p_value=min(p, 1.0), min_p=min_p, n_worse=n, n_base=m, exact=False)
