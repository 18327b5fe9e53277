"""Arguments a serving engine's op hides, recovered from the trace around it.

vLLM's ``vllm::moe_forward`` receives the tokens and the router logits; its expert weights and
top-k are layer state. Its unified attention receives Q, K and V of the new tokens; the KV cache
and the sequence lengths are attention metadata. Both are still in the trace: under the MoE op,
the routing op records ``k`` (``TopK``'s concrete input, ``topk_softmax``'s output width) and the
expert kernels' wrappers view the stacked ``(E, a, b)`` weights (``aten::view`` of a 3-d tensor
whose first dimension is the router's expert count); around the attention op, vLLM's step
annotation ``execute_N_context_C(sqAskBsqsqCsqskD)_generation_G(...)`` records, per phase, the
query tokens, cached keys, and the sums ``sum(q_i^2)`` and ``sum(q_i k_i)`` the FLOPs need.
A layer's sliding window is state the trace does not record at all; the kernels a call runs
can still show it has one (:func:`windowed_attention`), and such a call is reported uncosted
rather than costed against the whole context, unless the user gives the window
(``--attention-window``): then it is costed over at most that many keys per query.

:func:`enrich` costs those ops again with what it found appended (``hint:*`` arguments the
serving formulas read) and records, for every op still without shapes, which argument was
missing (the coverage notes name it).
"""
from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pandas as pd

from roofscope.analyzers.cost import formulas as cf
from roofscope.analyzers.cost.costmodel import build_call, freeze, missing_argument
from roofscope.analyzers.ingest.frames import steps_at
from roofscope.analyzers.ingest.linking import ancestor_where

MOE_OPS = ("vllm::moe_forward", "vllm::moe_forward_shared", "vllm::fused_moe", "sglang::fused_moe")
ATTENTION_OPS = ("vllm::unified_attention", "vllm::unified_attention_with_output")
_ROUTERS = {"TopK": "concrete", "aten::topk": "concrete", "_moe_C::topk_softmax": "out0",
            "sgl_kernel::topk_softmax": "out0", "vllm::rocm_aiter_topk_softmax": "out0",
            "aiter::topk_softmax": "out0"}
_PHASE = re.compile(r"_(?:context|generation)_(\d+)\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)")
# AITER's unified attention (vLLM's ROCm backends) splits a decode call's keys into segments
# (the 3d kernel, then reduce_segments) unless the layer has a sliding window, max_seqlen_k <= 512
# or the single-pass grid already fills the device (``use_2d_kernel``).
_SINGLE_PASS, _SPLIT_KV = "kernel_unified_attention_2d", "kernel_unified_attention_3d"
WINDOW_NOT_RECORDED = ("a sliding-window layer (its window is layer state the trace does not record: "
                       "give it with --attention-window N)")
WINDOW_SOURCE = "window"   # oc's cost_source of a windowed call costed with the user's window


def step_lengths(region: str, window: int | None = None) -> dict[str, int] | None:
    """``sq``, ``sk`` and the bottom-right causal score area ``sqsk`` of a vLLM step annotation.

    Each sequence's ``q`` new tokens attend to its ``k`` keys, the last row to all of them, so
    it computes ``q k - q (q - 1) / 2`` scores: summed, ``sqsk - (sqsq - sq) / 2`` (decode,
    ``q = 1``: ``sum(k_i)``).

    With a sliding ``window`` ``W``, a query attends to at most its last ``W`` keys, so a phase of
    ``n`` sequences computes at most ``sq * W`` scores and reads the K/V of at most
    ``sq + n (W - 1)`` keys (each sequence's last ``q_i + W - 1``). The annotation keeps only
    per-phase sums, so these are upper bounds, exact when every sequence holds at least ``W`` keys
    before its new tokens (a decode of 32 sequences of 1,721 keys on average and ``W = 128``:
    ``sk = 32 * 128 = 4,096`` instead of 55,086)."""
    phases = [tuple(map(int, m)) for m in _PHASE.findall(region or "")]
    if not phases:
        return None
    sq = sk = sqsk = 0
    for n, q, k, qq, qk in phases:
        scores = qk - (qq - q) // 2
        if window is not None:
            scores, k = min(scores, q * window), min(k, q + n * (window - 1))
        sq, sk, sqsk = sq + q, sk + k, sqsk + scores
    if sq == 0:
        return None
    return {"sq": sq, "sk": sk, "sqsk": int(sqsk)}


def enrich(trace: Any, oc: pd.DataFrame, region: str | None = None, optimizer: dict | None = None) -> None:
    """Cost the hidden-argument ops of ``trace`` in ``oc`` (op_costs' frame) in place and add its
    ``missing`` column (``"op: what its formula lacked"`` for ops without shapes, else "").
    ``region``: the step annotation of a CUDA-graph replay, whose capture
    trace (``trace``) has none of its own; ``optimizer``: run.json's optimizer facts, which size
    the fused / foreach optimizer ops whose TensorList shapes were not recorded."""
    ops = trace.ops
    oc["missing"] = ""
    if not len(ops):
        return
    if optimizer and optimizer.get("groups"):
        _optimizer_streams(trace, oc, optimizer["groups"])
    unshaped = oc["reason"].to_numpy() == "no_shapes"
    moe = np.flatnonzero(ops["name"].isin(MOE_OPS).to_numpy() & unshaped)
    attention = np.flatnonzero(ops["name"].isin(ATTENTION_OPS).to_numpy() & unshaped)
    done: dict[tuple, Any] = {}  # (signature, hints) -> cost: a decode step repeats each layer's call
    if moe.size:
        for row, hints in _moe_hints(trace, ops["name"].astype(str).to_numpy(dtype=object), moe).items():
            _apply(trace, oc, row, hints, done)
    if attention.size:
        for row, step in zip(attention.tolist(), _step_annotations(trace, attention, region)):
            lens = step_lengths(step)
            if lens:
                _apply(trace, oc, row, [(f"hint:{k}", [], "Scalar", str(v)) for k, v in lens.items()], done)
    missing = np.flatnonzero(oc["reason"].to_numpy() == "no_shapes")
    if missing.size:
        sigs = ops["sig"].to_numpy()[missing]
        s = trace.signatures
        why = {g: f"{s['name'].iat[g]}: " + missing_argument(
                   s["name"].iat[g], s["input_dims"].iat[g], s["input_types"].iat[g],
                   s["concrete_inputs"].iat[g] if "concrete_inputs" in s else None) for g in np.unique(sigs).tolist()}
        oc.loc[oc.index[missing], "missing"] = pd.Series(sigs).map(why).to_numpy(dtype=object)


# Fused / foreach optimizer ops as streams over param-sized lists: FLOPs per element, lists read,
# lists written (fused AdamW: p, g, m, v read; p, m, v written; docs/cost-model.md).
_OPTIMIZER_STREAMS = {
    "aten::_fused_adamw_": (14, 4, 3), "aten::_fused_adam_": (15, 4, 3), "aten::_fused_sgd_": (2, 2, 1),
    "aten::_amp_foreach_non_finite_check_and_unscale_": (2, 1, 1), "aten::_foreach_norm": (2, 1, 0),
}


def _stream_shape(name: str, types: list) -> tuple[int, int, int] | None:
    if name in _OPTIMIZER_STREAMS:
        return _OPTIMIZER_STREAMS[name]
    if not name.startswith("aten::_foreach_"):
        return None
    base = name[len("aten::_foreach_"):].rstrip("_")
    lists = sum(1 for t in types or [] if t in ("TensorList", "GenericList"))
    if base in ("zero", "copy"):
        return (0, lists - 1, 1) if base == "copy" else (0, 0, 1)
    per = cf.ELEMENTWISE.get(base, (1, ""))[0]
    return per, max(lists, 1), 1


def _optimizer_streams(trace: Any, oc: pd.DataFrame, groups: list[dict]) -> None:
    """Fused / foreach optimizer ops without TensorList shapes, sized from the parameter groups:
    torch calls them once per group (and dtype), so the i-th call of an op in a step covers the
    i-th group when the counts agree; one call covers them all; other counts split the total."""
    ops = trace.ops
    nb = oc["reason"].to_numpy() == "no_shapes"
    if not nb.any():
        return
    sigs = trace.signatures
    rows = np.flatnonzero(nb)
    names = ops["name"].astype(str).to_numpy(dtype=object)[rows]
    shapes = {n: _stream_shape(n, sigs["input_types"].iat[int(ops["sig"].iat[r])]) for n, r in zip(names, rows)}
    keep = np.array([shapes[n] is not None for n in names], dtype=bool)
    rows, names = rows[keep], names[keep]
    if not rows.size:
        return
    numel = np.array([float(g.get("numel", 0)) for g in groups])
    nbytes = np.array([float(g.get("numel", 0) * g.get("itemsize", 4)) for g in groups])
    step = steps_at(trace.annotations, ops["ts_ns"].to_numpy()[rows])
    frame = pd.DataFrame({"row": rows, "name": names, "step": step, "ts": ops["ts_ns"].to_numpy()[rows]})
    frame = frame.sort_values("ts", kind="stable")
    frame["i"] = frame.groupby(["step", "name"]).cumcount()
    frame["n"] = frame.groupby(["step", "name"])["row"].transform("size")
    reach = _chunk_reach(trace.kernels, rows)
    for r, name, i, n in frame[["row", "name", "i", "n"]].itertuples(index=False):
        per, reads, writes = shapes[name]  # type: ignore[misc]
        if n == len(groups):
            elems, size = numel[i], nbytes[i]
        else:
            elems, size = numel.sum() / n, nbytes.sum() / n
        if elems > reach.get(r, np.inf):
            continue   # its kernels cannot cover the parameters: a list of something smaller
        j = oc.index[r]
        oc.loc[j, ["flops", "bytes", "reason", "cost_source"]] = [per * elems, (reads + writes) * size, "", "run"]


# torch's multi_tensor_apply gives each block one chunk of at most this many elements of one tensor.
CHUNK = 65536


def _chunk_reach(kernels: pd.DataFrame, rows: np.ndarray) -> dict[int, float]:
    """The most elements the ``multi_tensor_apply`` kernels launched by each op row can cover (blocks
    x chunk). ``_foreach_add_(state_steps, 1)`` has no recorded shapes either, but it runs over the
    optimizer's step counters: on an HF Trainer's BERT, one block per 1-element tensor (77 blocks,
    1.4 us), where the parameters (110M elements) would take at least 1,680."""
    if not len(kernels) or "grid" not in kernels:
        return {}
    k = kernels[kernels["op"].isin(rows).to_numpy() & kernels["name"].astype(str).str.contains(
        "multi_tensor_apply", regex=False).to_numpy()]
    if not len(k):
        return {}
    blocks = [float(np.prod(g)) if isinstance(g, (list, tuple)) and len(g) else np.inf for g in k["grid"]]
    return (pd.Series(blocks, index=k["op"].to_numpy()).groupby(level=0).sum() * CHUNK).to_dict()


def _moe_hints(trace: Any, names: np.ndarray, targets: np.ndarray) -> dict[int, list[tuple[str, Any, str, Any]]]:
    """Per MoE op row: ``k`` from the routing op under it, and the first two stacked ``(E, a, b)``
    weight views under it (``E``: its router logits' width)."""
    ops, sigs = trace.ops, trace.signatures
    sig = ops["sig"].to_numpy()
    cand = np.flatnonzero(np.isin(names, list(_ROUTERS) + ["aten::view"]))
    mask = np.zeros(len(ops), dtype=bool)
    mask[targets] = True
    owner = ancestor_where(ops["parent"].to_numpy(), ops["parent"].to_numpy()[cand], mask)
    keep = owner >= 0
    cand, owner = cand[keep], owner[keep]
    dims, types = sigs["input_dims"].to_numpy(), sigs["input_types"].to_numpy()
    concrete = sigs["concrete_inputs"].to_numpy() if "concrete_inputs" in sigs else np.full(len(sigs), None)
    out: dict[int, list[tuple[str, Any, str, Any]]] = {}
    for row in targets.tolist():
        logits = dims[sig[row]]
        experts = logits[1][-1] if len(logits) > 1 and logits[1] else None
        topk: list[tuple[str, Any, str, Any]] = []
        weights: dict[tuple, str] = {}
        for r in cand[owner == row].tolist():
            d, t, c = dims[sig[r]] or [], types[sig[r]] or [], concrete[sig[r]] or []
            kind = _ROUTERS.get(names[r])
            if kind == "concrete" and not topk and len(c) > 1 and str(c[1]).isdigit():
                topk = [("hint:topk", [], "Scalar", str(c[1]))]
            elif kind == "out0" and not topk and d and len(d[0]) == 2:
                topk = [("hint:topk", [], "Scalar", str(d[0][1]))]
            elif names[r] == "aten::view" and d and len(d[0]) == 3 and d[0][0] == experts:
                weights.setdefault(tuple(d[0]), t[0])
        out[row] = topk + [("hint:weight", list(w), t, "") for w, t in list(weights.items())[:2]]
    return out


def windowed_attention(trace: Any, oc: pd.DataFrame, cost_ops: np.ndarray, kernel_names: np.ndarray,
                       region: str | None = None, window: int | None = None) -> None:
    """Re-cost, in ``oc`` (op_costs' frame), the unified-attention calls that ran with a sliding
    window: over the user's ``window`` (:func:`step_lengths`; ``cost_source`` "window"), else uncosted.

    ``cost_ops``: the op row costing each kernel of ``kernel_names`` (-1: none); ``region``: a graph
    replay's step annotation. In one vLLM step every call of one signature has the same
    max_seqlen_k and grid, so when some run the split-KV kernel, one running the single-pass
    kernel beside them was sent there by its layer's window (GPT-OSS alternates 128-token
    windows with full layers). Such a call reads the K/V of at most the window's last keys per
    sequence, not ``sk``: costed against the whole context, GPT-OSS's windowed layers moved
    113 MB in 13.5 us, 1.6x the MI300X's memory roof. The window itself is not in the trace, so
    the call is reported uncosted (``no_shapes``) and its coverage note says why, unless the
    user gave it."""
    names = np.asarray(kernel_names, dtype=object)
    split = names == _SPLIT_KV
    pick = np.flatnonzero((split | (names == _SINGLE_PASS)) & (cost_ops >= 0))
    if not pick.size:
        return
    rows = cost_ops[pick]
    att = trace.ops["name"].astype(str).to_numpy(dtype=object)[rows]
    keep = np.isin(att, ATTENTION_OPS)
    pick, rows = pick[keep], rows[keep]
    if not pick.size:
        return
    f = pd.DataFrame({"row": rows, "sig": trace.ops["sig"].to_numpy()[rows], "split": split[pick],
                      "step": _step_annotations(trace, rows, region)})
    f = f[f["step"] != ""]  # the same step, so the same context length: else the inference fails
    mixed = f.groupby(["step", "sig"])["split"].transform("any").to_numpy(dtype=bool)
    keep = mixed & ~f["split"].to_numpy(dtype=bool)
    windowed, steps = f["row"].to_numpy()[keep], f["step"].to_numpy()[keep]
    windowed, first = np.unique(windowed, return_index=True)
    if not windowed.size:
        return
    at = oc.index[windowed]
    oc.loc[at, ["flops", "bytes"]] = np.nan
    oc.loc[at, "reason"] = "no_shapes"
    oc.loc[at, "missing"] = trace.ops["name"].astype(str).to_numpy(dtype=object)[windowed] + ": " + \
        WINDOW_NOT_RECORDED
    if window is None:
        return
    done: dict[tuple, Any] = {}
    for row, step in zip(windowed.tolist(), steps[first].tolist()):
        lens = step_lengths(step, window)
        if lens:
            _apply(trace, oc, row, [(f"hint:{k}", [], "Scalar", str(v)) for k, v in lens.items()], done)
    costed = at[oc.loc[at, "reason"].to_numpy() == ""]
    oc.loc[costed, ["cost_source", "missing"]] = [WINDOW_SOURCE, ""]


def _step_annotations(trace: Any, rows: np.ndarray, region: str | None) -> list[str]:
    """The vLLM step annotation around each op row (``region`` when given: a graph replay's)."""
    if region is not None and _PHASE.search(region):
        return [region] * len(rows)
    ann = trace.annotations
    if not len(ann):
        return [""] * len(rows)
    steps = ann[[bool(_PHASE.search(n)) for n in ann["name"].astype(str)]].sort_values("ts_ns")
    if not len(steps):
        return [""] * len(rows)
    ts, end = trace.ops["ts_ns"].to_numpy()[rows], trace.ops["end_ns"].to_numpy()[rows]
    i = np.searchsorted(steps["ts_ns"].to_numpy(), ts, side="right") - 1
    ok = (i >= 0) & (end <= steps["end_ns"].to_numpy()[np.maximum(i, 0)])
    names = steps["name"].astype(str).to_numpy(dtype=object)
    return [names[j] if good else "" for j, good in zip(i.tolist(), ok.tolist())]


def _apply(trace: Any, oc: pd.DataFrame, row: int, hints: list[tuple[str, Any, str, Any]],
           done: dict[tuple, Any]) -> None:
    g = int(trace.ops["sig"].iat[row])
    key = (g, freeze(hints))
    if key not in done:
        s = trace.signatures.iloc[g]
        name = str(s["name"])
        concrete = s["concrete_inputs"] if s["concrete_inputs"] is not None else [""] * len(s["input_types"])
        call = build_call(name, freeze(list(s["input_dims"])), freeze(list(s["input_types"])), None,
                          freeze(list(concrete)))
        for hname, dims, t, c in hints:
            parsed = build_call(name, ((tuple(dims)),), (t,), None, (c,)).args[0]
            parsed.name = hname
            call.args.append(parsed)
        try:
            done[key] = cf.lookup(name).fn(call)  # type: ignore[union-attr]
        except (cf.MissingShapes, ValueError, TypeError):
            done[key] = None
    cost = done[key]
    if cost is None:
        return
    i = oc.index[row]
    oc.loc[i, ["flops", "bytes", "reason", "cost_source"]] = [float(cost.flops), float(cost.bytes), "", "formula"]
    if cost.dtype:
        oc.loc[i, "dtype"] = cost.dtype
    if not math.isfinite(float(cost.bytes)):
        oc.loc[i, "reason"] = "no_shapes"


def missing_notes(kernels: pd.DataFrame, top: int = 5) -> list[str]:
    """Coverage notes for the serving-engine ops (not aten's) whose kernels have no cost because
    an argument was not recorded: ``vllm::moe_forward: 12.3 ms uncosted: no Input Dims for the
    expert weights``, longest first."""
    if "missing" not in kernels:
        return []
    k = kernels.loc[(kernels["missing"] != "") & (kernels["unattributed"] == "no_shapes"), ["missing", "dur_ns"]]
    k = k[~k["missing"].astype(str).str.startswith("aten::")]
    if not len(k):
        return []
    t = k.groupby(k["missing"].astype(str))["dur_ns"].sum().sort_values(ascending=False)
    notes = []
    for what, ns in t.head(top).items():
        name, _, why = what.partition(": ")
        notes.append(f"{name}: {ns / 1e6:.3f} ms uncosted: {why or 'shapes not recorded'}")
    return notes


def window_notes(kernels: pd.DataFrame) -> list[str]:
    """Coverage notes of the windowed attention costed with the user's window (an upper bound)."""
    if "cost_source" not in kernels:
        return []
    k = kernels[kernels["cost_source"].to_numpy() == WINDOW_SOURCE]
    return [f"{name}: {g['dur_ns'].sum() / 1e6:.3f} ms in {len(g):,} sliding-window kernels costed over the "
            "window given (--attention-window): at most that many keys per query, an upper bound where a "
            "sequence holds fewer" for name, g in k.groupby(k["cost_op_name"].astype(str))]
