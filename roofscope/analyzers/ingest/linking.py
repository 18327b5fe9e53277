"""Vectorized time-containment linking of profiler intervals.

Kineto's CPU ops on one thread form a properly nested forest. Instead of a Python
stack walk per event, parents are found by pointer jumping in numpy: each interval
starts with the previous interval (in start order) as its candidate parent and, while
the candidate does not contain it, jumps to the candidate's own candidate. A
candidate that ends before an interval ends cannot contain it, and neither can
anything nested inside that candidate, so the true parent is always on the
candidate's ancestor chain; candidates only move to earlier indices, so the loop
ends, in about log(depth) rounds once chains compress.
"""
from __future__ import annotations

import numpy as np


def _order(thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    # Parents first: by thread, then start, then the longer interval first.
    return np.lexsort((-end, start, thread))


def interval_parents(thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Index of the innermost interval strictly enclosing each interval on its thread, or -1.

    An interval encloses another when it starts no later and ends no earlier; among
    identical intervals the one that sorts first is the parent.
    """
    n = len(start)
    parent = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return parent
    order = _order(thread, start, end)
    th, e = thread[order], end[order]
    cur = np.arange(-1, n - 1, dtype=np.int64)  # candidate: previous interval in sorted order
    cur[1:][th[1:] != th[:-1]] = -1
    active = np.flatnonzero(cur >= 0)
    while active.size:
        c = cur[active]
        # A candidate on another thread ends the search (threads are contiguous).
        contains = (e[c] >= e[active]) & (th[c] == th[active])
        other_thread = th[c] != th[active]
        cur[active[other_thread]] = -1
        jump = ~contains & ~other_thread
        cur[active[jump]] = cur[c[jump]]
        # Resolved entries keep their candidate as the parent.
        active = active[jump & (cur[active] >= 0)]
    parent_sorted = cur
    parent[order] = np.where(parent_sorted >= 0, order[np.maximum(parent_sorted, 0)], -1)
    return parent


def enclosing(thread: np.ndarray, start: np.ndarray, end: np.ndarray, parent: np.ndarray,
              q_thread: np.ndarray, q_start: np.ndarray, q_end: np.ndarray) -> np.ndarray:
    """For each query interval, the innermost interval on the same thread containing it, or -1.

    ``parent`` must come from :func:`interval_parents` on the same intervals.
    """
    m = len(q_start)
    result = np.full(m, -1, dtype=np.int64)
    if m == 0 or len(start) == 0:
        return result
    order = _order(thread, start, end)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    th_s, st_s, en_s = thread[order], start[order], end[order]
    par_s = np.where(parent[order] >= 0, rank[np.maximum(parent[order], 0)], -1)
    # Last interval (in sorted order) of the query's thread that starts at or before it.
    # Intervals sharing a start are ordered longest first, so this is the innermost of them.
    cand = np.full(m, -1, dtype=np.int64)
    bounds = np.searchsorted(th_s, np.unique(th_s), side="left").tolist() + [len(th_s)]
    for lo, hi in zip(bounds[:-1], bounds[1:]):  # one vectorized search per thread
        sel = np.flatnonzero(q_thread == th_s[lo])
        if sel.size:
            cand[sel] = lo + np.searchsorted(st_s[lo:hi], q_start[sel], side="right") - 1
            cand[sel[cand[sel] < lo]] = -1
    active = np.flatnonzero(cand >= 0)
    while active.size:
        c = cand[active]
        contains = en_s[c] >= q_end[active]
        cand[active[~contains]] = par_s[c[~contains]]
        active = active[~contains & (cand[active] >= 0)]
    found = cand >= 0
    result[found] = order[cand[found]]
    return result


def ancestor_where(parent: np.ndarray, start: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """For each start index (-1 allowed), the nearest ancestor-or-self ``i`` with ``mask[i]``, or -1."""
    cur = np.asarray(start, dtype=np.int64).copy()
    if len(mask) == 0:
        return np.full(len(cur), -1, dtype=np.int64)
    active = np.flatnonzero((cur >= 0) & ~mask[np.maximum(cur, 0)])
    while active.size:
        cur[active] = parent[cur[active]]
        active = active[(cur[active] >= 0) & ~mask[np.maximum(cur[active], 0)]]
    return cur


def take(values: np.ndarray, index: np.ndarray, default: object) -> np.ndarray:
    """``values[index]`` where ``index >= 0``, else ``default`` (also when ``values`` is empty)."""
    index = np.asarray(index)
    ok = index >= 0
    if not len(values):
        # the dtype the non-empty path gives, so that int ids taken from nothing stay usable as indices
        return np.where(ok, np.zeros(len(index), dtype=values.dtype), default)
    return np.where(ok, values[np.where(ok, index, 0)], default)
