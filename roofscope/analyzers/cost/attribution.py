"""Attribute op costs (FLOPs, bytes) to the GPU kernels the ops launched.

A kernel's cost comes from the nearest op, walking up from its launching op, that
has a cost formula; that op's cost is split across all kernels that resolve to it,
in proportion to their durations (cuDNN convolutions, for example, launch a GEMM-like
kernel plus layout transforms under one formula). Inductor's per-kernel metadata
(`kernel_num_gb`, `kernel_flop`) takes precedence over shapes. memcpy/memset carry
their own byte counts. NCCL kernels are communication, outside the roofline.

Kernels left without a cost are never given one; instead they get a reason:

* ``no_launch_op``: no CPU op encloses the launch (or no launch event was recorded),
* ``compiled_no_metadata``: launched inside a torch.compile'd region without Inductor metadata,
* ``no_shapes``: the op has a formula but the trace was recorded without shapes,
* ``no_formula``: no op on the launch stack has a cost formula,
* ``graph_replay``: replayed from a CUDA graph whose capture is unknown (graphs.py).

Two costs depend on the device's memory roof, which this stage does not know: the bytes of
a matmul-class op's layout kernels, and whether a multi-tensor stream's bound is possible.
:func:`attribute` answers without a roof and hands the choices on (:class:`RoofChoices`);
roofscope.analyzers.place.bandwidth makes them once the ceilings are known.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from roofscope.analyzers.cost.categories import kernel_categories
from roofscope.analyzers.cost.formulas.families import SIGNATURE
from roofscope.analyzers.cost.formulas.dtypes import parse_dtype
from roofscope.analyzers.cost.hidden_args import enrich, windowed_attention
from roofscope.analyzers.cost.kernelnames import fix_tensorlist_dtype, multi_tensor_streams
from roofscope.analyzers.ingest.linking import ancestor_where, take
from roofscope.analyzers.ingest.names import as_text, lookup, per_name
from roofscope.analyzers.model.trace import Trace
from roofscope.run.schema import Optimizer

UNATTRIBUTED_REASONS = ("no_launch_op", "compiled_no_metadata", "no_shapes", "no_formula", "graph_replay")
# An estimated cost's bounds (analyzers/cost/formulas/records.Cost.bounds), op and kernel columns alike.
BOUNDS = ("flops_lo", "flops_hi", "bytes_lo", "bytes_hi")
# Inductor's pointwise, reduction and persistent-reduction kernels: no matmul inside.
_ELEMENTWISE_TRITON = ("triton_poi_", "triton_red_", "triton_per_")
_COMPILED_OPS = ("Torch-Compiled Region", "CompiledFunction", "## Call CompiledFxGraph", "triton_")


def op_costs(trace: Trace, sig_costs: pd.DataFrame, region: str | None = None,
             optimizer: Optimizer | None = None) -> pd.DataFrame:
    """Per-op cost columns (aligned with ``trace.ops``), Inductor metadata applied, hidden
    arguments recovered (hidden_args.py; ``region``: a graph replay's step annotation,
    ``optimizer``: run.json's optimizer facts)."""
    ops = trace.ops
    s = sig_costs.reindex(ops["sig"].to_numpy())
    flops = s["flops"].to_numpy(dtype=np.float64, copy=True)
    nbytes = s["bytes"].to_numpy(dtype=np.float64, copy=True)
    reason = s["reason"].fillna("no_formula").to_numpy(dtype=object)
    source = np.where(reason == "", s["source"].fillna("formula").to_numpy(dtype=object), "none").astype(object)
    gb = ops["kernel_num_gb"].to_numpy()
    meta = ~np.isnan(gb)
    if meta.any():
        kflop = ops["kernel_flop"].to_numpy()
        # Inductor reports kernel_flop for kernels with a matmul-like origin (0 otherwise); a
        # pointwise kernel's shape-based estimate is then the better FLOP count. A pointwise or
        # reduction kernel fused from a convolution's input casts (triton_poi_fused__to_copy_
        # convolution_*) also carries the convolution's FLOPs, which cuDNN does: 19 GFLOP in a
        # 5 us copy put it at 8,173% of its roof (Lightning, torch.compile, H100).
        elementwise = per_name(ops["name"], lambda n: n.str.startswith(_ELEMENTWISE_TRITON)).astype(bool)
        use_kflop = meta & (np.nan_to_num(kflop) > 0) & ~elementwise
        flops = np.where(use_kflop, kflop, np.where(meta & np.isnan(flops), 0.0, flops))
        nbytes = np.where(meta, gb * 1e9, nbytes)
        reason = np.where(meta, "", reason)
        source = np.where(meta, "inductor", source)
    oc = pd.DataFrame({
        "flops": flops, "bytes": nbytes, "reason": reason, "cost_source": source,
        "dtype": s["dtype"].fillna("").to_numpy(dtype=object),
        "tensor_core": s["tensor_core"].fillna(False).to_numpy(dtype=bool),
        "category": s["category"].fillna("other").to_numpy(dtype=object),
        "estimate": np.where(meta, "", s["estimate"].fillna("").to_numpy(dtype=object)),
        **{c: np.where(meta, np.nan, s[c].to_numpy(dtype=np.float64)) for c in BOUNDS},
    }, index=ops.index)
    _signature_over_costed_ops(ops["parent"].to_numpy(), oc)
    enrich(trace, oc, region, optimizer)
    return oc


def _estimates(k: pd.DataFrame, oc: pd.DataFrame, cost_op: np.ndarray) -> None:
    """``estimate`` (what size was estimated, "" for exact costs) and the bounds of each kernel's
    share of its op's estimated cost, in the proportion of its FLOPs and bytes."""
    est = take(oc["estimate"].to_numpy(dtype=object), cost_op, "")
    est = np.where(k["cost_source"].to_numpy() == take(oc["cost_source"].to_numpy(dtype=object), cost_op, ""),
                   est, "")
    k["estimate"] = est
    for col, what in zip(BOUNDS, ("flops", "flops", "bytes", "bytes")):
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = take(oc[col].to_numpy(), cost_op, np.nan) / take(oc[what].to_numpy(), cost_op, np.nan)
        k[col] = np.where(est != "", k[what].to_numpy(dtype=np.float64) * np.where(np.isfinite(ratio), ratio, 1.0),
                          np.nan)


def _signature_over_costed_ops(parent: np.ndarray, oc: pd.DataFrame) -> None:
    """Drop the signature cost of an unknown op that encloses costed ops: its arguments are what its
    whole subtree reads and writes, which those ops already count (the op stays uncosted)."""
    sig = (oc["cost_source"] == SIGNATURE).to_numpy()
    if not sig.any():
        return
    costed = (oc["reason"] == "").to_numpy() & (oc["category"] != "view").to_numpy() & ~sig
    up = ancestor_where(parent, np.where(costed, parent, -1), sig)
    drop = np.zeros(len(oc), dtype=bool)
    drop[up[up >= 0]] = True
    if drop.any():
        at = oc.index[drop]
        oc.loc[at, ["flops", "bytes"]] = np.nan
        oc.loc[at, ["reason", "cost_source"]] = ["no_formula", "none"]


def cpu_work_items(parent: np.ndarray, oc: pd.DataFrame) -> np.ndarray:
    """Rows of the CPU ops that are the work items of a CPU-only trace, in op order.

    The innermost costed op is the work item, unless an enclosing costed op does FLOPs its
    costed descendants do not account for: CPU ``addmm`` computes the GEMM itself and calls
    ``copy_`` only to broadcast the bias, so the work item is the addmm. The choice reads the
    op tree and the cost formulas only, never durations, so identical runs pick identical
    items (a timing test picked the copy in some runs and lost the GEMM's FLOPs).
    """
    costed = (oc["reason"] == "").to_numpy() & (oc["category"] != "view").to_numpy()
    flops = np.where(costed, np.nan_to_num(oc["flops"].to_numpy(dtype=np.float64)), 0.0)
    # FLOPs of each costed op's costed descendants, summed at their nearest costed ancestor.
    up = ancestor_where(parent, np.where(costed, parent, -1), costed)
    below = np.bincount(up[up >= 0], weights=flops[up >= 0], minlength=len(parent))
    has_costed_child = np.bincount(up[up >= 0], minlength=len(parent)) > 0
    chosen = costed & (~has_costed_child | (flops > below * (1 + 1e-9)))
    # Work items must not nest: drop any whose ancestor was chosen too.
    above = ancestor_where(parent, np.where(chosen, parent, -1), chosen)
    return np.flatnonzero(chosen & (above < 0))


@dataclass(frozen=True)
class RoofChoices:
    """What :func:`attribute` leaves to the memory roof (roofscope.analyzers.place.bandwidth decides it).

    ``layout_rows``: rows of layout kernels (:func:`_split_costs`). Each reads and writes one
    operand of its op; which one, the trace does not say, so the roof picks the largest that the
    kernel's duration allows. Until then they share the op's bytes by duration.
    ``operand_bytes``: per op of those kernels, the bytes that moving each operand takes, ascending.
    ``unstreamed``: the rows costed as multi-tensor streams (:func:`_multi_tensor_streams`, an
    upper bound), indexed by row, with their cost columns as they are without the stream: what
    a row gets back when the roof rules its bound out.
    """

    layout_rows: np.ndarray
    operand_bytes: dict[int, np.ndarray]
    unstreamed: pd.DataFrame


def attribute(trace: Trace, sig_costs: pd.DataFrame, optimizer: Optimizer | None = None,
              window: int | None = None) -> tuple[pd.DataFrame, RoofChoices]:
    """The trace's GPU activity with per-kernel cost columns added (a new frame), and the
    choices only the memory roof can make (:class:`RoofChoices`). ``optimizer``: run.json's
    optimizer facts (parameter groups), for optimizer ops recorded without shapes; ``window``:
    the user's sliding-window length for windowed attention (hidden_args.windowed_attention)."""
    k = trace.kernels.copy()
    ops = trace.ops
    oc = op_costs(trace, sig_costs, optimizer=optimizer)
    parent = ops["parent"].to_numpy() if len(ops) else np.zeros(0, dtype=np.int64)
    op = k["op"].to_numpy()
    n = len(k)

    category = kernel_categories(k["name"], k["cat"])
    is_comm = category == "communication"
    is_copy = np.isin(category, ("memcpy", "memset"))

    has_formula = (oc["reason"] != "no_formula").to_numpy()
    nearest = ancestor_where(parent, op, has_formula)
    windowed_attention(trace, oc, nearest, k["name"].to_numpy(), window=window)
    costed = nearest >= 0
    costed[costed] = (oc["reason"].to_numpy()[nearest[costed]] == "")
    costed &= ~is_comm & ~is_copy
    cost_op = np.where(costed, nearest, -1)

    dur = k["dur_ns"].to_numpy(dtype=np.float64)
    flops, nbytes, layout = _split_costs(cost_op, costed, _layout_kernels(k["name"]), dur, oc)
    twice_read = _add_statistics_passes(trace, oc, k["name"], cost_op, dur, nbytes)
    layout_rows = np.flatnonzero(layout & ~twice_read)  # bytes a statistics pass set are final

    names = as_text(ops["name"])
    fix_tensorlist_dtype(k["name"], oc, names, cost_op, nbytes)
    streamed = multi_tensor_streams(k, ~costed & ~is_comm & ~is_copy, flops, nbytes)

    # Hardware counters, where the trace has them, beat any formula for FLOPs; the formula's
    # value stays visible beside them.
    counted = ~np.isnan(k["counter_flops"].to_numpy()) if "counter_flops" in k else np.zeros(n, bool)
    flops_analytic = flops.copy()
    flops[counted] = k["counter_flops"].to_numpy()[counted]

    # Device-to-device copies read and write every byte; host transfers and memsets touch HBM once.
    dtod = per_name(k["name"], lambda s: s.str.contains("DtoD|Device -> Device", regex=True))
    copy_bytes = k["bytes"].to_numpy() * np.where(dtod, 2.0, 1.0)
    flops[is_copy] = 0.0
    nbytes[is_copy] = copy_bytes[is_copy]

    def from_op(col: str, default: object) -> np.ndarray:
        return take(oc[col].to_numpy(), cost_op, default)

    op_category = from_op("category", "")
    # The op's category is better than the kernel name's, except for generic "other" ops.
    k["category"] = np.where(layout, "layout",
                             np.where(costed & (op_category != "other") & (op_category != ""),
                                      op_category, np.where(streamed != "", "optimizer", category)))
    k["dtype"] = np.where(streamed != "", streamed, from_op("dtype", ""))
    k["tensor_core"] = from_op("tensor_core", False).astype(bool) & ~layout
    k["cost_source"] = np.where(is_copy & ~np.isnan(copy_bytes), "activity",
                                np.where(counted, "counters", np.where(streamed != "", "launch",
                                                                       from_op("cost_source", "none"))))
    k["flops"] = flops
    k["flops_analytic"] = np.where(is_copy, 0.0, flops_analytic)
    k["bytes"] = nbytes
    k["cost_op"] = cost_op
    _estimates(k, oc, cost_op)
    k["op_name"] = take(names, op, "")
    k["cost_op_name"] = take(names, cost_op, "")
    # The reasons as they are without the streams' costs, for a stream the roof rules out.
    reason = _reasons(k, ops, oc, nearest, costed | counted | is_comm | (is_copy & ~np.isnan(copy_bytes)))
    missing = np.where(reason == "no_shapes", take(oc["missing"].to_numpy(), nearest, ""), "")
    k["unattributed"] = np.where(streamed != "", "", reason)
    k["missing"] = np.where(streamed != "", "", missing)
    s = np.flatnonzero(streamed != "")
    unstreamed = pd.DataFrame({
        "flops": np.where(counted[s], flops[s], np.nan), "flops_analytic": np.nan, "bytes": np.nan, "dtype": "",
        "category": category[s], "cost_source": np.where(counted[s], "counters", from_op("cost_source", "none")[s]),
        "unattributed": reason[s], "missing": missing[s]}, index=s)
    return k, RoofChoices(layout_rows, _layout_operands(trace, oc, cost_op[layout_rows]), unstreamed)


# Kernels that move data for a matmul-class op without doing its math: cuDNN's layout
# transforms and padding, transposes, im2col, workspace initialisation, split-K / split-KV
# reductions (epilogues), fills, casts. Matched on the kernel's own name (before template
# arguments, which name everything a GEMM kernel's epilogue can do), except split-K
# reductions, which CUTLASS names only in a template argument.
_LAYOUT_BASE = re.compile(r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw|transpose|permute|im2col|col2im|padding"
                          r"|workspace|splitKreduce|reduce|combine|fill|convert|cast|copy|memset|elementwise",
                          re.I)
_LAYOUT_ANYWHERE = re.compile(r"ReduceSplitK|reduction::kernel|splitKreduce", re.I)


def _base_name(name: str) -> str:
    """``void ns::fooKernel<T, ...>(args)`` -> ``fooKernel``; mangled names stay whole."""
    if name.startswith("_Z"):
        return ""
    words = re.split(r"[<(]", name, maxsplit=1)[0].split()
    return words[-1].rsplit("::", 1)[-1] if words else ""


_WORK_CATEGORIES = ("gemm", "conv", "attention")


def _layout_kernels(names: pd.Series) -> np.ndarray:
    """Kernels whose names say they only move data (see :data:`_LAYOUT_BASE`)."""
    return lookup(names, lambda u: bool(_LAYOUT_BASE.search(_base_name(u)) or _LAYOUT_ANYWHERE.search(u))).astype(bool)


def _split_costs(cost_op: np.ndarray, costed: np.ndarray, layout: np.ndarray, dur: np.ndarray,
                 oc: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An op's FLOPs and bytes split over the kernels that resolve to it, by duration, and
    which kernels are the layout kernels of a matmul-class op.

    When the op has kernels that do its math (GEMM, convolution, attention: every kernel not
    in :data:`_LAYOUT_BASE`) beside layout kernels, the FLOPs go to the math kernels only, and the
    layout kernels get no FLOPs and carry bytes of their own: each reads and writes one of
    the op's operands, so together they move about the op's compulsory bytes once more,
    split among them by duration (a cuDNN convolution launching nchwToNhwcKernel for its
    input and weight and nhwcToNchwKernel for its output moves each tensor twice). Ops whose
    kernels are all layout-like, or whose category is not matmul-class, split as one group.
    """
    n = len(cost_op)
    flops = np.full(n, np.nan)
    nbytes = np.full(n, np.nan)
    is_aux = np.zeros(n, dtype=bool)
    if not costed.any():
        return flops, nbytes, is_aux
    idx = np.flatnonzero(costed)
    op = cost_op[idx]
    matmul = np.isin(oc["category"].to_numpy()[op], _WORK_CATEGORIES)
    aux = layout[idx] & matmul
    # Ops with at least one math kernel split their layout kernels off into a second group.
    has_math = pd.Series(~aux).groupby(op).transform("any").to_numpy()
    aux &= has_math
    group = pd.Series(dur[idx]).groupby([op, aux])
    total = group.transform("sum").to_numpy()
    count = group.transform("size").to_numpy()
    share = np.where(total > 0, dur[idx] / np.where(total > 0, total, 1), 1.0 / count)
    flops[idx] = np.where(aux, 0.0, oc["flops"].to_numpy()[op] * share)
    nbytes[idx] = oc["bytes"].to_numpy()[op] * share
    is_aux[idx] = aux
    return flops, nbytes, is_aux


# Batch-norm kernels that make a separate pass over the activations to reduce them (the
# statistics; in channels-last backward, the sums) before another kernel of the op reads them
# again to write the output. Layer-norm's GammaBetaBackward and group-norm's RowwiseMoments
# follow the same pattern in the source but were not measured, so they keep the duration split.
_STATS_PASS = re.compile(r"batch_norm_collect_statistics|batch_norm_backward_reduce", re.I)


def _add_statistics_passes(trace: Trace, oc: pd.DataFrame, names: pd.Series, cost_op: np.ndarray,
                           dur: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """Bytes of batch-norm ops that read their activations twice, in place.

    The op's formula counts each tensor once (compulsory bytes), which the kernel that writes
    the output moves by itself; a statistics pass before it reads the activations once more
    (ResNet-50 training, H100: batch_norm_collect_statistics moved 1.06e8 DRAM bytes for a
    1.03e8-byte input, the transform kernel 1.91e8 for the op's 2.06e8). So a statistics kernel
    carries the op's activation-sized inputs, and the op's other kernels its compulsory bytes,
    split among them by duration. Returns which kernels' bytes it set.
    """
    stats = lookup(names, lambda u: bool(_STATS_PASS.search(u))).astype(bool) & (cost_op >= 0)
    # only where another kernel of the op writes the output: an op seen with its statistics
    # kernel alone (a trace cut between them) keeps its bytes
    stats &= np.isin(cost_op, cost_op[~stats & (cost_op >= 0)])
    if not stats.any():
        return stats
    ops = np.unique(cost_op[stats])
    touched = np.isin(cost_op, ops)
    rows = np.flatnonzero(touched)
    op_bytes = oc["bytes"].to_numpy()
    rest = rows[~stats[rows]]
    total = pd.Series(dur[rest]).groupby(cost_op[rest]).transform("sum").to_numpy()
    nbytes[rest] = op_bytes[cost_op[rest]] * np.where(total > 0, dur[rest] / np.where(total > 0, total, 1), 1.0)
    # one lookup per distinct signature: a trace repeats the same few hundred norm calls
    sig = trace.ops["sig"].to_numpy()[ops]
    read: dict[int, float] = {}
    for op, sg in zip(ops.tolist(), sig.tolist()):
        if sg not in read:
            sizes = _operand_bytes(trace, op, float(op_bytes[op]), outputs=False)
            read[sg] = sum(x for x in sizes if x == max(sizes, default=0.0))
    st = np.flatnonzero(stats)
    per_op = pd.Series([read[s] for s in sig.tolist()], index=ops)
    count = pd.Series(cost_op[st]).groupby(cost_op[st]).transform("size").to_numpy()
    nbytes[st] = per_op.reindex(cost_op[st]).to_numpy() / count
    return touched


def _operand_bytes(trace: Trace, op: int, op_bytes: float, outputs: bool = True) -> list[float]:
    """Sizes of one op's tensor operands: its inputs from their shapes and dtypes, and its
    outputs together (compulsory bytes less the inputs)."""
    sig = trace.signatures.iloc[int(trace.ops["sig"].iat[op])]
    dims, types = sig["input_dims"] or [], sig["input_types"] or []
    sizes = []
    for d, t in zip(dims, types):
        dt = parse_dtype(str(t))
        if dt is not None and isinstance(d, list) and d and all(isinstance(x, int) for x in d):
            sizes.append(float(np.prod(d)) * dt.itemsize)
    if not outputs:
        return sizes
    out = op_bytes - sum(sizes) if np.isfinite(op_bytes) else 0.0
    return sizes + ([out] if out > 0 else [])


def _layout_operands(trace: Trace, oc: pd.DataFrame, ops: np.ndarray) -> dict[int, np.ndarray]:
    """Per op of the layout kernels, the bytes a layout kernel moves if it reads and writes
    each one of the op's operands (a layout transform, a padding, a split-K reduction of the
    output), ascending."""
    op_bytes = oc["bytes"].to_numpy()
    return {op: np.sort(2.0 * np.asarray(_operand_bytes(trace, op, float(op_bytes[op])), dtype=float))
            for op in dict.fromkeys(ops.tolist())}


def _reasons(k: pd.DataFrame, ops: pd.DataFrame, oc: pd.DataFrame, nearest: np.ndarray,
             has_cost: np.ndarray) -> np.ndarray:
    op = k["op"].to_numpy()
    reason = np.full(len(k), "", dtype=object)
    missing = ~has_cost
    reason[missing & (op < 0)] = "no_launch_op"
    linked = missing & (op >= 0)
    if linked.any():
        compiled_op = per_name(ops["name"], lambda s: s.str.startswith(_COMPILED_OPS))
        in_compiled = ancestor_where(ops["parent"].to_numpy(), op, compiled_op) >= 0
        in_compiled |= per_name(k["name"], lambda s: s.str.startswith("triton_"))
        nearest_reason = take(oc["reason"].to_numpy(), nearest, "")
        reason[linked & (nearest_reason == "no_shapes")] = "no_shapes"
        rest = linked & (reason == "")
        reason[rest & in_compiled] = "compiled_no_metadata"
        reason[rest & ~in_compiled] = "no_formula"
    return reason
