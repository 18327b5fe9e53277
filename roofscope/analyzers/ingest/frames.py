"""What every reader's tables go through: thread codes, linking (op tree, kernel launches, steps,
regions) and, for a reader that has its rows as plain columns, :func:`assemble` into a Trace.

Shapes no tensor can have (a dim or an element count past int64, torch's size type) are dropped
from their signatures by :func:`drop_impossible_shapes`: their ops stay, uncosted, and are counted.

Linking follows the Trace contract (analyzers/model/trace.py): a kernel's ``correlation`` is its launch
call's in ``runtime``; without one, its ``external_id`` names the launching op's. Steps are the
``ProfilerStep#N`` annotations, regions the other user annotations but roofscope's own labels.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from roofscope.analyzers.ingest.linking import enclosing, interval_parents, take
from roofscope.analyzers.ingest.names import per_name
from roofscope.analyzers.ingest.runtime_names import KERNEL_LAUNCHES
from roofscope.analyzers.model.trace import (ANNOTATION_COLUMNS, INT64_MAX, KERNEL_COLUMNS, MODULE_PREFIX,
                                             OPS_COLUMNS, ROOFSCOPE_PREFIX, RUNTIME_COLUMNS, SIGNATURE_COLUMNS,
                                             STEP_PREFIX, Trace, TraceMeta)
from roofscope.errors import TraceError


def _plain(ids: pd.Series) -> np.ndarray:
    # int64 ids factorize as integers; anything else (str, None, mixed) as Python objects
    return ids.to_numpy() if ids.dtype == np.int64 else ids.to_numpy(dtype=object)


def thread_codes(pids: pd.Series, tids: pd.Series, registry: dict[tuple[str, str], int]) -> np.ndarray:
    """Integer code per (pid, tid), shared through ``registry`` by every table of one trace,
    so ops, runtime calls and annotations on one thread compare equal (ids compare as text:
    4515 and "4515" are one thread; codes in order of first appearance)."""
    if not len(pids):
        return np.zeros(0, dtype=np.int64)
    # The text keys of the few distinct (pid, tid) pairs, not of every row.
    pc, pu = pd.factorize(_plain(pids), use_na_sentinel=False)
    tc, tu = pd.factorize(_plain(tids), use_na_sentinel=False)
    pair, first = pd.factorize(pc.astype(np.int64) * len(tu) + tc)
    first_p, first_t = first // len(tu), first % len(tu)
    keys = pd.MultiIndex.from_arrays([pd.Series(np.asarray(pu, dtype=object)[first_p], dtype=object).astype(str),
                                      pd.Series(np.asarray(tu, dtype=object)[first_t], dtype=object).astype(str)])
    codes, uniques = pd.factorize(keys)
    remap = np.asarray([registry.setdefault(u, len(registry)) for u in uniques], dtype=np.int64)
    return remap[codes][pair]


def link(ops: pd.DataFrame, runtime: pd.DataFrame, kernels: pd.DataFrame, annotations: pd.DataFrame) -> None:
    """Fill ``ops.parent``, ``runtime.op`` and ``kernels.op``/``launch``/``step``/``region`` in place."""
    ops["parent"] = interval_parents(ops["thread"].to_numpy(), ops["ts_ns"].to_numpy(),
                                     ops["end_ns"].to_numpy())
    runtime["op"] = enclosing(ops["thread"].to_numpy(), ops["ts_ns"].to_numpy(),
                              ops["end_ns"].to_numpy(), ops["parent"].to_numpy(),
                              runtime["thread"].to_numpy(), runtime["ts_ns"].to_numpy(),
                              runtime["end_ns"].to_numpy())
    # kernel -> runtime launch through the CUPTI correlation id
    corr = runtime["correlation"].astype("Int64")
    launch_index = pd.Index(corr.where(corr.notna(), -1).to_numpy(np.int64))
    kcorr = kernels["correlation"].fillna(-2).to_numpy(np.int64)
    if launch_index.has_duplicates:
        first = ~launch_index.duplicated()
        launch = pd.Index(launch_index[first]).get_indexer(kcorr)
        launch = np.where(launch >= 0, np.flatnonzero(first)[np.maximum(launch, 0)], -1)
    else:
        launch = launch_index.get_indexer(kcorr)
    ranges = (kernels["cat"] == "cuda_profiler_range").to_numpy()
    if ranges.any():
        # Counter ranges carry no correlation id; they follow kernel launch calls one to one,
        # in launch order. Link them only when the counts agree.
        launches = runtime.index[runtime["name"].isin(KERNEL_LAUNCHES)]
        launches = runtime.loc[launches].sort_values("ts_ns").index.to_numpy()
        rows = np.flatnonzero(ranges)
        rows = rows[np.argsort(kernels["ts_ns"].to_numpy()[rows], kind="stable")]
        if len(launches) == len(rows):
            launch[rows] = launches
    kernels["launch"] = launch
    kernels["timed"] = ~ranges
    # ROCm copies carry no bytes of their own; their runtime call (hipMemcpy*) has the size.
    nbytes = kernels["bytes"].to_numpy()
    copies = np.isnan(nbytes) & kernels["cat"].isin(("gpu_memcpy", "gpu_memset")).to_numpy() & (launch >= 0)
    if copies.any():
        nbytes = nbytes.copy()
        nbytes[copies] = runtime["size"].to_numpy()[launch[copies]]
        kernels["bytes"] = nbytes
    op = take(runtime["op"].to_numpy(), launch, -1)
    # Without a launch event, a modern trace's kernel External id names its launching op;
    # in older traces it merely repeats the correlation id and must not be trusted.
    ext = kernels["external_id"].fillna(-1).to_numpy(np.int64)
    trusted = (op < 0) & (ext >= 0) & (ext != kcorr)
    if trusted.any() and len(ops):
        op_ext = ops["external_id"].fillna(-1).to_numpy(np.int64)
        ext_index = pd.Index(op_ext)
        if ext_index.has_duplicates:
            ext_index = ext_index.where(~ext_index.duplicated(), -3)
        by_ext = ext_index.get_indexer(ext[trusted])
        op[trusted] = by_ext
    kernels["op"] = op
    _assign_steps(kernels, runtime, annotations)
    _assign_regions(kernels, runtime, annotations)


def _assign_steps(kernels: pd.DataFrame, runtime: pd.DataFrame, annotations: pd.DataFrame) -> None:
    """Step number of each kernel, by the time of its launch (or of itself, unlaunched)."""
    launch = kernels["launch"].to_numpy()
    t = np.where(launch >= 0, take(runtime["ts_ns"].to_numpy(), launch, 0), kernels["ts_ns"].to_numpy())
    kernels["step"] = steps_at(annotations, t)


def is_step(names: pd.Series) -> np.ndarray:
    """Which annotation names are step markers, ``ProfilerStep#N`` with an integer N."""
    return per_name(names, lambda s: s.str.fullmatch(STEP_PREFIX + r"\d{1,18}")).astype(bool)


def steps_at(annotations: pd.DataFrame, t: np.ndarray) -> np.ndarray:
    """``N`` of the ``ProfilerStep#N`` annotation spanning each time, or -1."""
    step = np.full(len(t), -1, dtype=np.int64)
    steps = annotations[is_step(annotations["name"])] if len(annotations) else annotations
    if len(steps) and len(t):
        steps = steps.sort_values("ts_ns")
        numbers = steps["name"].str.slice(len(STEP_PREFIX)).astype(np.int64).to_numpy()
        idx = np.searchsorted(steps["ts_ns"].to_numpy(), t, side="right") - 1
        ok = (idx >= 0) & (t <= steps["end_ns"].to_numpy()[np.maximum(idx, 0)])
        step = np.where(ok, numbers[np.maximum(idx, 0)], -1)
    return step


def is_region(names: pd.Series) -> np.ndarray:
    # Step markers are steps, module labels are modules, and "## ... ##" annotations are
    # torch.compile's own bookkeeping.
    return per_name(names, lambda n: ~n.str.startswith((STEP_PREFIX, "## ", MODULE_PREFIX, ROOFSCOPE_PREFIX)))


def _assign_regions(kernels: pd.DataFrame, runtime: pd.DataFrame, annotations: pd.DataFrame) -> None:
    """Innermost record_function region around each kernel's launch (see :func:`regions_at`)."""
    launch = kernels["launch"].to_numpy()
    kernels["region"] = regions_at(annotations, take(runtime["thread"].to_numpy(), launch, -1),
                                   take(runtime["ts_ns"].to_numpy(), launch, 0),
                                   take(runtime["end_ns"].to_numpy(), launch, 0), launch >= 0)


def regions_at(annotations: pd.DataFrame, thread: np.ndarray, start: np.ndarray, end: np.ndarray,
               valid: np.ndarray) -> np.ndarray:
    """Name of the innermost region (user annotation) containing each query span, or "".

    The query thread's own regions come first; spans on other threads (autograd's
    backward thread) fall back to any thread's region covering them.
    """
    region = np.full(len(start), "", dtype=object)
    regions = annotations[is_region(annotations["name"])] if len(annotations) else annotations
    if not len(regions) or not valid.any():
        return region
    th, st, en = (regions[c].to_numpy() for c in ("thread", "ts_ns", "end_ns"))
    names = regions["name"].to_numpy(dtype=object)
    found = enclosing(th, st, en, interval_parents(th, st, en), thread, start, end)
    miss = valid & (found < 0)
    if miss.any():
        anywhere = np.zeros(len(th), dtype=np.int64)
        found[miss] = enclosing(anywhere, st, en, interval_parents(anywhere, st, en),
                                np.zeros(int(miss.sum()), dtype=np.int64), start[miss], end[miss])
    return np.where(valid & (found >= 0), take(names, found, ""), "")


# --- assemble: a Trace from plain columns ----------------------------------------------------
# Columns a reader may leave out, and their kind; a missing value (None) is NA, NaN or None.
_NULLABLE_INTS = {"external_id", "rf_id", "seq", "correlation", "device", "stream"}
_FLOATS = {"kernel_num_gb", "kernel_flop", "size", "bytes", "counter_flops"}
_DEFAULTS: dict[str, Any] = {"pid": 0, "tid": 0, "cat": "kernel", "device": 0, "stream": 0}
_TABLES = {"ops": OPS_COLUMNS, "runtime": RUNTIME_COLUMNS, "kernels": KERNEL_COLUMNS,
           "annotations": ANNOTATION_COLUMNS}


def _column(name: str, given: Mapping[str, Sequence[Any]], n: int) -> Any:
    values = list(given[name]) if name in given else [_DEFAULTS.get(name)] * n
    if len(values) != n:
        raise ValueError(f"column {name!r} has {len(values)} values, not {n}")
    if name in _NULLABLE_INTS:
        return pd.array(values, dtype="Int64")
    if name in _FLOATS:
        return np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)
    if name in ("pid", "tid"):  # int64 when every id is an int, as Kineto's tables have them
        return pd.Series(values, dtype=np.int64 if all(type(v) is int for v in values) else object)
    return pd.Series(values, dtype=object)


def _table(kind: str, given: Mapping[str, Sequence[Any]], origin: int, sig: np.ndarray | None) -> pd.DataFrame:
    n = len(given["name"])
    ts = np.asarray(given["ts_ns"], dtype=np.int64) - origin
    dur = np.asarray(given["dur_ns"], dtype=np.int64)
    cols: dict[str, Any] = {"ts_ns": ts, "dur_ns": dur, "end_ns": ts + dur, "sig": sig}
    for c in _TABLES[kind]:
        if c not in cols:
            cols[c] = _column(c, given, n)
    for c in ("name", "cat") if kind != "annotations" else ():
        if c in cols:
            cols[c] = pd.Categorical([str(v) for v in cols[c]])
    return pd.DataFrame({c: cols[c] for c in _TABLES[kind]})


def _signatures(ops: Mapping[str, Sequence[Any]]) -> tuple[np.ndarray, pd.DataFrame]:
    """Each op's row in the signature table, and the table (one row per distinct signature)."""
    n = len(ops["name"])
    columns = [list(ops[c]) if c in ops else [None] * n for c in SIGNATURE_COLUMNS]
    ids: dict[str, int] = {}
    rows: list[tuple[Any, ...]] = []
    sig = np.empty(n, dtype=np.int64)
    for i, row in enumerate(zip(*columns)):
        key = repr(row)
        if key not in ids:
            ids[key] = len(rows)
            rows.append(row)
        sig[i] = ids[key]
    table = pd.DataFrame({c: [r[j] for r in rows] for j, c in enumerate(SIGNATURE_COLUMNS)},
                         index=pd.RangeIndex(len(rows), name="sig"))
    return sig, table


def assemble(path: str, meta: TraceMeta, *, kernels: Mapping[str, Sequence[Any]],
             ops: Mapping[str, Sequence[Any]] | None = None, runtime: Mapping[str, Sequence[Any]] | None = None,
             annotations: Mapping[str, Sequence[Any]] | None = None) -> Trace:
    """A linked :class:`Trace` from a reader's tables given as columns (lists or arrays): each
    table needs ``name``, ``ts_ns``, ``dur_ns`` (int ns from any one origin), the other columns of
    analyzers/model/trace.py's ``*_COLUMNS`` are optional (``pid``/``tid``/``device``/``stream`` default to 0,
    ``cat`` to "kernel", the rest to unknown); ops may carry ``input_dims``, ``input_types``,
    ``input_strides``, ``concrete_inputs`` (JSON-like, as Kineto records them) for the formulas.
    Times are moved to the first event; ``meta.clock_base_ns``, if given, is the Unix ns of the
    columns' origin."""
    given = {"ops": ops or {}, "runtime": runtime or {}, "kernels": kernels, "annotations": annotations or {}}
    given = {k: v if "name" in v else {"name": [], "ts_ns": [], "dur_ns": []} for k, v in given.items()}
    starts = [int(np.min(t["ts_ns"])) for t in given.values() if len(t["ts_ns"])]
    if not starts:
        raise TraceError(f"{path}: no events")
    origin = min(starts)
    sig, signatures = _signatures(given["ops"])
    tables = {k: _table(k, v, origin, sig if k == "ops" else None) for k, v in given.items()}
    threads: dict[tuple[str, str], int] = {}
    for k in ("ops", "runtime", "annotations"):
        tables[k]["thread"] = thread_codes(tables[k]["pid"], tables[k]["tid"], threads)
    k_table = tables["kernels"].sort_values("ts_ns", kind="stable").reset_index(drop=True)
    link(tables["ops"], tables["runtime"], k_table, tables["annotations"])
    if meta.clock_base_ns is not None:
        meta = replace(meta, clock_base_ns=meta.clock_base_ns + origin)
    return Trace(path=path, ops=tables["ops"], signatures=signatures, kernels=k_table, runtime=tables["runtime"],
                 annotations=tables["annotations"], meta=meta)


IMPOSSIBLE_SHAPES = "Input Dims past int64, which no tensor has (the op kept, uncosted)"


def _past_int64(dims: Any) -> bool:
    """Whether recorded Input Dims (per argument: ``[]``, a shape, or a TensorList's shapes) hold a
    number past int64, in a dim (a float too: NaN, 1e300) or in a shape's element count."""
    stack = [dims]
    while stack:       # iterative: a hostile nesting must not exhaust the recursion limit
        x = stack.pop()
        if isinstance(x, list):
            if x and all(type(v) in (int, float) for v in x) and not abs(math.prod(x)) <= INT64_MAX:
                return True
            stack.extend(x)
        elif type(x) in (int, float) and not abs(x) <= INT64_MAX:
            return True
    return False


def drop_impossible_shapes(trace: Trace) -> Trace:
    """``trace`` with the Input Dims of every signature that holds a number past int64 dropped: its
    ops go uncosted (as ops without shapes do) and every stage that reads shapes is spared numbers
    no int64 or float holds; the ops are counted in ``meta.skipped_events``."""
    sigs = trace.signatures
    if not len(sigs) or "input_dims" not in sigs:
        return trace
    bad = np.fromiter((_past_int64(d) for d in sigs["input_dims"]), dtype=bool, count=len(sigs))
    if not bad.any():
        return trace
    dims = sigs["input_dims"].astype(object).copy()
    dims[bad] = None
    ops = int(np.isin(trace.ops["sig"].to_numpy(), np.flatnonzero(bad)).sum())
    skipped = {**trace.meta.skipped_events, IMPOSSIBLE_SHAPES: ops}
    return replace(trace, signatures=sigs.assign(input_dims=dims), meta=replace(trace.meta, skipped_events=skipped))
