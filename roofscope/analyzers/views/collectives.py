"""NCCL collectives of one rank: type, algorithm, protocol, message size and bandwidths.

Kernel names come in two namings: NCCL < 2.19 ``ncclKernel_AllReduce_RING_LL_Sum_float(...)``
and NCCL >= 2.19 ``ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)`` (also the bare
``ncclDevKernel_SendRecv(...)``). The kernel says which NCCL primitive ran, which is not
always the collective asked for: an all-to-all runs as ``SendRecv``. The collective
therefore comes, first match wins, from the ``record_param_comms`` op's ``Collective name``
argument (PyTorch >= 2.1), the enclosing ``c10d::`` op (``c10d::allreduce_``), the
``nccl:<collective>`` annotation PyTorch records around it, and last the kernel name.

Message size, first match wins: ``In msg nelems`` / ``Out msg nelems`` x ``dtype`` of
``record_param_comms`` (PyTorch >= 2.1); the largest tensor input of the ``c10d::`` op (the
full buffer: the output of an all-gather, the input of a reduce-scatter); the largest tensor
input of ``record_param_comms``. Bandwidths follow nccl-tests: algbw = size / time; busbw =
algbw x 2(n-1)/n for all-reduce, x (n-1)/n for all-gather, reduce-scatter and all-to-all,
x 1 for broadcast, reduce and send/recv, with n the group size (``Group size``, else the
trace's world size).

CPU process groups (gloo) run no kernels: their collectives are host intervals. gloo records
``gloo:<collective>`` around each one on its worker threads (the transfer and the wait for the
peers); the ``c10d::`` op that queued it runs on the caller's thread. :func:`host_collectives` reads
both, :func:`host_comm_steps` turns them into the per-step busy / communication / exposed figures
the GPU timeline gives for NCCL, and :func:`kernel_collectives` lists them as it lists NCCL kernels
(size from the matching ``c10d::`` op: the n-th of its collective type).
"""
from __future__ import annotations

import re
from typing import Iterable

import numpy as np
import pandas as pd

from roofscope.analyzers.cost.formulas.dtypes import parse_dtype
from roofscope.analyzers.ingest.linking import ancestor_where, take
from roofscope.analyzers.ingest.names import per_name
from roofscope.analyzers.model.trace import Trace
from roofscope.analyzers.views.timeline import in_window, _split, _union, step_windows

COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast", "reduce", "sendrecv", "other")
ALGORITHMS = ("NVLS_TREE", "NVLS", "COLLNET_DIRECT", "COLLNET_CHAIN", "COLLNET", "TREE", "RING", "PAT")
PROTOCOLS = ("LL128", "LL", "SIMPLE")
_KERNEL = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")
_ALGO = re.compile(r"_(" + "|".join(ALGORITHMS) + r")(?=_|\(|$)")
_PROTO = re.compile(r"_(" + "|".join(PROTOCOLS) + r")(?=_|\(|$)")
_ALIASES = {"allreduce": "allreduce", "allgather": "allgather", "allgatherbase": "allgather",
            "allgatherintocoalesced": "allgather", "allgathercoalesced": "allgather",
            "reducescatter": "reduce_scatter", "reducescatterbase": "reduce_scatter",
            "reducescattertensorcoalesced": "reduce_scatter", "alltoall": "alltoall", "alltoallbase": "alltoall",
            "alltoallv": "alltoall", "broadcast": "broadcast", "reduce": "reduce", "sendrecv": "sendrecv",
            "send": "sendrecv", "recv": "sendrecv", "recvanysource": "sendrecv", "allreducecoalesced": "allreduce"}
# c10::ScalarType names as record_param_comms writes its dtype argument.
_SCALAR_BYTES = {"Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2, "Char": 1,
                 "Byte": 1, "Bool": 1, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1,
                 "Float8_e5m2fnuz": 1, "ComplexFloat": 8, "ComplexDouble": 16}
_BUS_FACTOR = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
               "reduce_scatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n}
TABLE_COLUMNS = ("collective", "count", "time_s", "bytes", "sized", "sized_time_s", "algorithms", "group",
                 "algbw", "busbw")


def canonical(name: str) -> str:
    """``c10d::_allgather_base_``, ``nccl:all_reduce``, ``gloo:all_reduce``, ``AllReduce``, ``all_gather`` -> a :data:`COLLECTIVES` key
    ("" when the name is no collective)."""
    key = re.sub(r"^(c10d::|nccl:|gloo:)", "", name).replace("_", "").lower()
    return _ALIASES.get(key, "")


def _canonical_each(names: object) -> np.ndarray:
    """:func:`canonical` of every name, evaluated once per distinct name (kernels repeat a few names)."""
    codes, uniques = pd.factorize(pd.Series(names, dtype=object).fillna("").astype(str))
    return np.array([canonical(u) for u in uniques] + [""], dtype=object)[codes]


def parse_kernel(name: str) -> tuple[str, str, str]:
    """NCCL kernel name -> (collective, algorithm, protocol); "" for what the name does not say."""
    m = _KERNEL.search(name)
    if not m:
        return "", "", ""
    algo, proto = _ALGO.search(name), _PROTO.search(name)
    return canonical(m.group(1)) or "other", algo.group(1) if algo else "", proto.group(1) if proto else ""


def bus_factor(collective: str, n: int | None) -> float | None:
    """busbw / algbw for ``collective`` over ``n`` ranks (nccl-tests' convention); None without n."""
    if not n or n < 1:
        return None
    f = _BUS_FACTOR.get(collective)
    return f(n) if f else 1.0


def comm_args(trace: Trace) -> pd.DataFrame:
    """``record_param_comms`` arguments by External id, checked (empty when the trace has none:
    older PyTorch records only shapes): counts as floats (NaN where absent or not an integer, so
    the size then comes from shapes), names as strings."""
    raw = trace.comm_args
    ok = np.array([_count(x) is not None for x in raw.index], dtype=bool)
    r = raw[ok]
    return pd.DataFrame({"collective": [_text(v) for v in r["collective"]], "in_nelems": _counts(r["in_nelems"]),
                         "out_nelems": _counts(r["out_nelems"]), "dtype": [_text(v) for v in r["dtype"]],
                         "group_size": _counts(r["group_size"])},
                        index=pd.Index(r.index.astype(np.int64), name="external_id"))


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _counts(values: Iterable[object]) -> np.ndarray:
    """Integer arguments as floats, NaN where absent or not an integer (the size then comes from shapes)."""
    return np.array([_count(v) for v in values], dtype=np.float64)


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _tensor_bytes(sigs: pd.DataFrame) -> np.ndarray:
    """Largest tensor input of each op signature, in bytes (NaN without shapes); one more NaN at the
    end, for the ops without a signature (-1)."""

    def largest(dims: object, types: object) -> float:
        best = np.nan
        if not isinstance(dims, list) or not isinstance(types, list):  # absent, or hostile ("Input type": 5)
            return best
        for d, t in zip(dims, types):
            dt = parse_dtype(t) if isinstance(t, str) else None
            if dt is not None and isinstance(d, list) and all(isinstance(x, int) for x in d):
                size = float(np.prod(d, dtype=np.float64)) * dt.itemsize
                best = size if not best >= size else best
        return best

    return np.array([largest(d, t) for d, t in zip(sigs["input_dims"], sigs["input_types"])] + [np.nan])


def _is_gloo(names: pd.Series) -> pd.Series:
    return names.str.startswith("gloo:")


def host_collectives(trace: Trace) -> pd.DataFrame:
    """Host-side collectives (gloo), in time order: ``collective``, ``ts_ns``, ``end_ns``, ``tid``,
    ``kind`` (``gloo`` for the worker's interval, ``c10d`` for the op that queued it), ``sig``
    (the op's signature, -1 for annotations). Empty for NCCL traces: their c10d ops only launch
    kernels, which carry the time."""
    an, ops = trace.annotations, trace.ops
    gloo = an[per_name(an["name"], _is_gloo)]
    if not len(gloo):
        return pd.DataFrame({"collective": [], "ts_ns": [], "end_ns": [], "tid": [], "kind": [], "sig": []})
    c10d_coll = _canonical_each(ops["name"].to_numpy(dtype=object))
    is_c10d = per_name(ops["name"], lambda n: n.str.startswith("c10d::")) & (c10d_coll != "")
    c10d = ops[is_c10d]
    out = pd.concat([
        pd.DataFrame({"collective": _canonical_each(gloo["name"].to_numpy()), "ts_ns": gloo["ts_ns"],
                      "end_ns": gloo["end_ns"], "tid": gloo["tid"], "kind": "gloo", "sig": -1}),
        pd.DataFrame({"collective": c10d_coll[is_c10d], "ts_ns": c10d["ts_ns"], "end_ns": c10d["end_ns"],
                      "tid": c10d["tid"], "kind": "c10d", "sig": c10d["sig"].to_numpy()})], ignore_index=True)
    out["collective"] = out["collective"].replace("", "other")
    return out.sort_values("ts_ns", kind="stable", ignore_index=True)


def host_communicates(trace: Trace, kernels: pd.DataFrame) -> bool:
    """Whether the trace's collectives are gloo's host intervals: no kernel communicates (a CPU trace's
    work items are no kernels) and gloo annotated its transfers."""
    comm_kernel = (kernels["category"] == "communication") & kernels["cat"].eq("kernel")
    return not comm_kernel.any() and bool(per_name(trace.annotations["name"], _is_gloo).any())


def _union_s(ts: np.ndarray, end: np.ndarray, w_ts: np.ndarray, w_end: np.ndarray) -> np.ndarray:
    """Length of the union of the intervals inside each window, in seconds."""
    _, win, cs, ce = _split(ts, end, w_ts, w_end)
    w, s, e, _ = _union(win, cs, ce)
    return np.bincount(w, weights=(e - s).astype(np.float64), minlength=len(w_ts)) / 1e9


def host_comm_steps(trace: Trace, work: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per step (index ``step``): ``busy_s`` (union of the work items and the collectives),
    ``comm_s`` (union of the host collectives) and ``comm_exposed_s`` (the part of it during which
    no work item of the rank runs: the rank waits for its peers), ``idle_host_s`` (the rest of the
step: the host between ops, in Python, sleeping, loading data). ``work``: the CPU work items
    (the kernels frame of a CPU trace: ``ts_ns``, ``dur_ns``, ``tid``; those on gloo's own threads
    are the transfer's, not the rank's work), or a GPU trace's kernels (gloo over CUDA tensors).
    Empty without host collectives or steps."""
    hc = host_collectives(trace)
    if not len(hc) or not len(steps):
        return pd.DataFrame({c: [] for c in ("busy_s", "comm_s", "comm_exposed_s", "idle_host_s")},
                            index=pd.Index([], dtype=np.int64, name="step"))
    ids, w_ts, w_end = step_windows(steps)
    gloo_tids = set(hc.loc[hc["kind"] == "gloo", "tid"])
    own = work[~work["tid"].isin(gloo_tids)] if "tid" in work else work   # a device's kernels: no host thread
    w_s = own["ts_ns"].to_numpy(dtype=np.int64)
    w_e = w_s + own["dur_ns"].to_numpy(dtype=np.int64)
    c_s, c_e = hc["ts_ns"].to_numpy(dtype=np.int64), hc["end_ns"].to_numpy(dtype=np.int64)
    busy = _union_s(np.concatenate([w_s, c_s]), np.concatenate([w_e, c_e]), w_ts, w_end)
    return pd.DataFrame({"busy_s": busy, "comm_s": _union_s(c_s, c_e, w_ts, w_end),
                         "comm_exposed_s": busy - _union_s(w_s, w_e, w_ts, w_end),
                         "idle_host_s": (w_end - w_ts) / 1e9 - busy},
                        index=pd.Index(ids, name="step"))


def _host_kernel_collectives(trace: Trace, steps: pd.DataFrame) -> pd.DataFrame:
    """:func:`kernel_collectives`' rows for gloo: one per ``gloo:`` interval of the profiled steps,
    its size from the n-th ``c10d::`` op of the same collective (both run in queue order)."""
    hc = host_collectives(trace)
    ids, w_ts, w_end = step_windows(steps) if len(steps) else (np.array([-1]), np.array([0]),
                                                           np.array([np.iinfo(np.int64).max]))
    win = in_window(hc["ts_ns"].to_numpy(dtype=np.int64), w_ts, w_end)
    hc = hc.assign(step=np.where(win >= 0, ids[np.maximum(win, 0)], -1))
    sizes = _tensor_bytes(trace.signatures)
    hc["bytes"] = np.where(hc["kind"] == "c10d", sizes[hc["sig"].to_numpy(dtype=np.int64)], np.nan)
    hc["nth"] = hc.groupby(["kind", "collective"]).cumcount()
    gloo = hc[hc["kind"] == "gloo"]
    c10d = hc[hc["kind"] == "c10d"].set_index(["collective", "nth"])["bytes"]
    size = c10d.reindex(pd.MultiIndex.from_arrays([gloo["collective"], gloo["nth"]])).to_numpy(dtype=np.float64)
    in_steps = gloo["step"] >= 0
    keep = in_steps.to_numpy() if in_steps.any() else np.ones(len(gloo), dtype=bool)
    return pd.DataFrame({"collective": gloo["collective"].to_numpy()[keep], "algorithm": "", "protocol": "",
                         "step": gloo["step"].to_numpy()[keep], "ts_ns": gloo["ts_ns"].to_numpy(dtype=np.int64)[keep],
                         "dur_s": ((gloo["end_ns"] - gloo["ts_ns"]).to_numpy(dtype=np.float64) / 1e9)[keep],
                         "bytes": size[keep], "group": 0})


def kernel_collectives(trace: Trace, kernels: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per NCCL kernel of ``kernels`` (or gloo collective of ``trace`` where no kernel
    communicates: a CPU process group, or gloo over CUDA tensors, whose transfers are host intervals;
    placed in the step table ``steps``) of the profiled steps: ``collective``, ``algorithm``,
    ``protocol``, ``step``, ``ts_ns``, ``dur_s``, ``bytes`` (NaN when unknown), ``group`` (0 when unknown)."""
    k = kernels
    if host_communicates(trace, kernels):
        return _host_kernel_collectives(trace, steps)
    in_steps = k["step"] >= 0
    k = k[(k["category"] == "communication") & (k["cat"] == "kernel") & (in_steps if in_steps.any() else True)]
    codes, names = pd.factorize(k["name"].astype(str))
    parsed = np.array([parse_kernel(n) for n in names] + [("", "", "")], dtype=object).reshape(-1, 3)
    by_name = parsed[np.where(codes >= 0, codes, len(names))]
    ops = trace.ops
    op_names = ops["name"].astype(str)
    parent = ops["parent"].to_numpy()
    op = k["op"].to_numpy(dtype=np.int64)
    rpc = ancestor_where(parent, op, (op_names == "record_param_comms").to_numpy())
    c10d = ancestor_where(parent, op, per_name(ops["name"], lambda s: s.str.startswith("c10d::")))
    names_arr = op_names.to_numpy(dtype=object)
    from_c10d = _canonical_each(take(names_arr, c10d, ""))
    region = k["region"].astype(str)
    from_region = _canonical_each(region.where(region.str.startswith("nccl:"), ""))
    sizes = _tensor_bytes(trace.signatures)
    sig = ops["sig"].to_numpy()
    size = np.where(c10d >= 0, sizes[take(sig, c10d, -1)], np.nan)
    size = np.where(np.isnan(size) & (rpc >= 0), sizes[take(sig, rpc, -1)], size)
    from_args = np.full(len(k), "", dtype=object)
    group = np.zeros(len(k), dtype=np.int64)
    args = comm_args(trace)
    if len(args) and len(k):
        ext = take(ops["external_id"].fillna(-1).to_numpy(np.int64), rpc, -1)
        args = args[~args.index.duplicated()]
        at = args.index.get_indexer(ext)
        hit = at >= 0
        r = args.iloc[at[hit]]
        from_args[hit] = _canonical_each(r["collective"].to_numpy())
        item = r["dtype"].map(_SCALAR_BYTES).to_numpy(dtype=np.float64)
        nel = np.fmax(r["in_nelems"].to_numpy(dtype=np.float64), r["out_nelems"].to_numpy(dtype=np.float64))
        size[hit] = np.where(np.isnan(nel * item), size[hit], nel * item)
        group[hit] = r["group_size"].fillna(0).to_numpy(dtype=np.int64)
    coll = from_args
    for fallback in (from_c10d, from_region, by_name[:, 0]):
        coll = np.where(coll == "", fallback, coll)
    return pd.DataFrame({"collective": np.where(coll == "", "other", coll), "algorithm": by_name[:, 1],
                         "protocol": by_name[:, 2], "step": k["step"].to_numpy(),
                         "ts_ns": k["ts_ns"].to_numpy(dtype=np.int64), "dur_s": k["dur_s"].to_numpy(),
                         "bytes": size, "group": group})


def collective_table(kc: pd.DataFrame, world_size: int | None) -> pd.DataFrame:
    """Per collective type: count, time, bytes, algorithms seen, group size, algbw and busbw
    (bandwidths over the kernels whose size is known)."""
    if not len(kc):
        return pd.DataFrame({c: [] for c in TABLE_COLUMNS})
    kc = kc.assign(group=kc["group"].where(kc["group"] > 0, world_size or 0),
                   sized_dur=kc["dur_s"].where(kc["bytes"].notna(), 0.0),
                   how=(kc["algorithm"] + "_" + kc["protocol"]).str.strip("_"))
    g = kc.groupby("collective", sort=False)
    t = pd.DataFrame({"count": g.size(), "time_s": g["dur_s"].sum(), "bytes": g["bytes"].sum(min_count=1),
                      "sized": g["bytes"].count(), "sized_time_s": g["sized_dur"].sum(),
                      "algorithms": g["how"].agg(lambda s: ",".join(sorted(set(s) - {""}))),
                      "group": g["group"].max()}).reset_index()
    t["algbw"] = (t["bytes"] / t["sized_time_s"].where(t["sized_time_s"] > 0)).astype(float)
    factor = [bus_factor(c, int(n)) for c, n in zip(t["collective"], t["group"])]
    t["busbw"] = t["algbw"] * np.array([np.nan if f is None else f for f in factor], dtype=np.float64)
    return t.sort_values("time_s", ascending=False, ignore_index=True)[list(TABLE_COLUMNS)]
