"""ncu's profiled launches joined to the trace's kernels: each gets the ``correlation`` of its kernel.

The join: ncu numbers launches in the order the process issued them, which is the order
of the trace's runtime launch events, so both sides are aligned in that order; the kernel
name (normalized, since ncu and Kineto demangle differently) checks the alignment. Where
names stop agreeing, the alignment skips the fewest launches on either side after which
the next few agree again, so a few extra or missing launches do not shift all the rest.
It stays on the diagonal it is on: training steps repeat the same launches, so a global
alignment (longest common block first, as difflib does) happily pairs step 2's kernels
with step 3's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from roofscope.run.counters import CountersError

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.analyzers.model.trace import Trace

# Anonymous namespaces are spelled "(anonymous namespace)" by Kineto and "<unnamed>" by ncu;
# both would otherwise end the name at their bracket.
_ANON = re.compile(r"\(anonymous namespace\)::|<unnamed>::")
_CUT = re.compile(r"[<(]")


@dataclass(frozen=True)
class JoinStats:
    ncu_kernels: int
    trace_kernels: int
    matched: int            # pairs, name mismatches included
    unmatched_ncu: int
    unmatched_trace: int
    name_mismatches: int    # pairs aligned by position whose names differ


def normalize_names(names: pd.Series) -> pd.Series:
    """``void at::native::vectorized_elementwise_kernel<4, ...>(...)`` and ncu's
    ``void at::vectorized_elementwise_kernel<4, ...>(...)`` -> ``vectorized_elementwise_kernel``."""
    # A run launches a few hundred distinct kernels many times over: normalize each name once.
    codes, uniques = pd.factorize(names.astype(str))
    s = pd.Series(uniques, dtype=object).str.removeprefix("void ").str.replace(_ANON, "", regex=True)
    s = s.str.split(_CUT, n=1, regex=True).str[0]
    short = s.str.rsplit("::", n=1).str[-1].str.strip().to_numpy(dtype=object)
    return pd.Series(short[codes], index=names.index, dtype=object)


def kernel_filter(kernel_name: str | None) -> re.Pattern[str] | None:
    """``--kernel-name REGEX`` compiled, or a :class:`CountersError` naming the regex's mistake."""
    if kernel_name is None:
        return None
    try:
        return re.compile(kernel_name)
    except re.error as e:
        raise CountersError(f"--kernel-name {kernel_name!r} is not a regular expression: {e}") from None


def trace_kernels(trace: "Trace", kernel_name: str | None = None, nvtx: str | None = None) -> pd.DataFrame:
    """The trace's kernels in the recorded steps, in launch order (ncu profiles no memcpy/memset).

    The filters select what ncu's do: ``kernel_name``, a regex searched in the kernel's function
    name (no namespace, template or parameters: ncu's default ``--kernel-name-base function``);
    ``nvtx``, a region whose span (any of them, on any thread) holds the launch."""
    k = trace.kernels
    k = k[(k["cat"] == "kernel") & (k["step"] >= 0)]
    launch = k["launch"].to_numpy()
    launch_ts = trace.runtime["ts_ns"].to_numpy()
    t = np.where(launch >= 0, launch_ts[np.maximum(launch, 0)] if len(launch_ts) else 0, k["ts_ns"].to_numpy())
    corr = k["correlation"].fillna(-1).to_numpy(np.int64)
    order = np.lexsort((corr, t))
    out = pd.DataFrame({"name": k["name"].to_numpy()[order], "correlation": corr[order]})
    keep = np.ones(len(out), dtype=bool)
    pattern = kernel_filter(kernel_name)
    if pattern is not None:
        keep &= normalize_names(out["name"]).str.contains(pattern, regex=True).to_numpy(dtype=bool)
    if nvtx is not None:
        keep &= _inside(t[order], trace.annotations, nvtx)
    return out[keep].reset_index(drop=True)


def _inside(t: np.ndarray, annotations: pd.DataFrame, name: str) -> np.ndarray:
    """Whether each time lies in a span of the annotation ``name`` (spans of one name may nest or
    overlap across threads: merged first)."""
    spans = annotations[annotations["name"] == name].sort_values("ts_ns")
    if not len(spans):
        return np.zeros(len(t), dtype=bool)
    st, en = spans["ts_ns"].to_numpy(np.int64), np.maximum.accumulate(spans["end_ns"].to_numpy(np.int64))
    i = np.searchsorted(st, t, side="right") - 1
    return (i >= 0) & (t <= en[np.maximum(i, 0)])


def join(ncu: pd.DataFrame, trace: "Trace", skip: int = 0, kernel_name: str | None = None,
         nvtx: str | None = None) -> tuple[pd.DataFrame, JoinStats]:
    """``ncu`` (parse_ncu_csv's frame) plus the ``correlation`` of the trace kernel each launch matched;
    ``skip``: ncu left out the first launches of the recorded steps (``--launch-skip``);
    ``kernel_name`` / ``nvtx``: ncu profiled only the launches these select (:func:`trace_kernels`),
    and its launch skip and count apply to those, so the join aligns with them alone."""
    tk = trace_kernels(trace, kernel_name, nvtx).iloc[skip:]
    names = pd.concat([normalize_names(ncu["name"]), normalize_names(tk["name"])], ignore_index=True)
    codes = pd.factorize(names)[0]
    a, b = codes[:len(ncu)], codes[len(ncu):]
    ia, ib, mismatches = align(a, b)
    corr = np.full(len(ncu), -1, np.int64)
    corr[ia] = tk["correlation"].to_numpy()[ib]
    out = ncu.reset_index(drop=True).copy()
    out["correlation"] = corr
    stats = JoinStats(ncu_kernels=len(a), trace_kernels=len(b), matched=len(ia), unmatched_ncu=len(a) - len(ia),
                      unmatched_trace=len(b) - len(ib), name_mismatches=mismatches)
    return out, stats


def check_join(stats: JoinStats) -> list[str]:
    """Warnings about a join; a :class:`CountersError` when it is not worth storing, because
    fewer than half of the profiled launches met a trace kernel of their own name (positional
    pairs of other names would put one kernel's counters on another)."""
    by_name = stats.matched - stats.name_mismatches
    if stats.ncu_kernels and 2 * by_name < stats.ncu_kernels:
        if stats.trace_kernels == 0:
            raise CountersError("the Run's trace has no GPU kernels in its recorded steps to join counters to")
        raise CountersError(f"only {by_name} of the {stats.ncu_kernels} profiled launches match a kernel of the "
                            f"Run's recorded steps ({stats.trace_kernels} kernels) by name: the counters are not of "
                            "these steps; profile the Run's own command over the same steps (docs/counters.md), "
                            "with ncu's default demangled kernel names")
    if stats.unmatched_ncu or stats.name_mismatches:
        return [f"{stats.unmatched_ncu} of {stats.ncu_kernels} profiled launches matched no trace kernel and "
                f"{stats.name_mismatches} matched one of another name: the two passes launched different kernels "
                "(data-dependent control flow, autotuning?)"]
    return []


def align(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Pair positions of two name-code sequences in order: ``(ia, ib, name_mismatches)``.

    Runs of equal names are paired with one vectorized comparison each; Python only runs at
    the places where names disagree. There the fewest launches are skipped (on either side)
    after which :data:`_RESYNC_RUN` names agree again; a skip of the same length on both
    sides is the same launches under names the normalization did not reconcile: paired,
    and counted as name mismatches. Where nothing agrees again within the largest window,
    the rest stays unmatched.
    """
    na, nb = len(a), len(b)
    pa: list[np.ndarray] = []
    pb: list[np.ndarray] = []
    mismatches = 0
    i = j = 0
    while i < na and j < nb:
        run = _equal_run(a, b, i, j)
        if run:
            pa.append(np.arange(i, i + run))
            pb.append(np.arange(j, j + run))
            i, j = i + run, j + run
            continue
        skip = _resync(a, b, i, j)
        if skip is None:
            break
        di, dj = skip
        if di == dj:
            pa.append(np.arange(i, i + di))
            pb.append(np.arange(j, j + dj))
            mismatches += di
        i, j = i + di, j + dj
    empty = np.empty(0, np.int64)
    return (np.concatenate(pa) if pa else empty), (np.concatenate(pb) if pb else empty), mismatches


# Names that must agree after a skip before the alignment trusts it, and the windows (launches
# skipped on each side, at most) tried in turn: most disagreements are one or two launches.
_RESYNC_RUN = 8
_RESYNC_WINDOWS = (16, 128, 1024)


def _equal_run(a: np.ndarray, b: np.ndarray, i: int, j: int) -> int:
    """How many names agree from ``a[i]`` and ``b[j]`` on (compared in growing chunks, so a
    disagreement early in a long sequence costs little)."""
    n = min(len(a) - i, len(b) - j)
    done, chunk = 0, 4096
    while done < n:
        m = min(chunk, n - done)
        differ = np.flatnonzero(a[i + done:i + done + m] != b[j + done:j + done + m])
        if len(differ):
            return done + int(differ[0])
        done, chunk = done + m, chunk * 2
    return n


def _windows(x: np.ndarray, start: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """``x[start + d + t]`` for d < width, t < _RESYNC_RUN, and whether each lies inside ``x``."""
    idx = start + np.arange(width)[:, None] + np.arange(_RESYNC_RUN)[None, :]
    inside = idx < len(x)
    return np.where(inside, x[np.minimum(idx, len(x) - 1)], -1), inside


def _resync(a: np.ndarray, b: np.ndarray, i: int, j: int) -> tuple[int, int] | None:
    """The cheapest skip ``(di, dj)`` after which the names agree again, or None."""
    for w in _RESYNC_WINDOWS:
        xa, ina = _windows(a, i, min(w, len(a) - i))
        xb, inb = _windows(b, j, min(w, len(b) - j))
        # A run cut short by the end of either sequence agrees as far as it goes.
        agree = ((xa[:, None, :] == xb[None, :, :]) | ~ina[:, None, :] | ~inb[None, :, :]).all(axis=2)
        di, dj = np.nonzero(agree)
        if len(di):
            best = np.lexsort((np.abs(di - dj), di + dj))[0]
            # A cheaper skip could only lie outside this window when this one costs more than it.
            if di[best] + dj[best] <= w or w == _RESYNC_WINDOWS[-1]:
                return int(di[best]), int(dj[best])
    return None
