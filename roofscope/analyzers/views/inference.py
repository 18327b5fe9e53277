"""Prefill and decode told apart, with the serving metrics of each.

Each profiled step is a *prefill* (a prompt's forward: many tokens per sequence) or a *decode*
step (one new token per sequence), found by, in order:

1. the step's record_function region, when it is named ``prefill`` or ``decode``;
2. roofscope's ``roofscope: forward [B, T]`` annotations (collectors/steps.py): ``T == 1`` is
   decode, ``T > 1`` prefill;
3. the query length of the step's attention ops (1 = decode), also those of CUDA-graph replays
   mapped to their capture.

Steps of neither kind (no attention, no annotation) are ``other``; a Run with no decode step
gets no inference block, and :func:`inference_note` says why when all its steps were forwards of
several tokens (a generation loop without a KV cache recomputes the whole sequence). Figures (medians over the steps of a phase, times measured on the GPU
as the step table measures them):

* TTFT: a prefill step's time (prompt forward and the first token's sampling);
* TPOT: a decode step's time, per output token of each sequence; tokens/s = batch / TPOT;
* decode MBU: bytes a decode step moves (weights + KV cache read + activations, from the
  cost model) / TPOT / the device's bandwidth; weight and KV bytes are the GEMM and attention
  kernels' bytes;
* per phase: FLOPs, bytes, achieved FLOP/s and bandwidth, time by roofline class.
"""
from __future__ import annotations

import ast
from typing import Any, Mapping

import numpy as np
import pandas as pd

from roofscope.analyzers.cost.formulas.attention import ATTENTION_OPS, query_of
from roofscope.analyzers.model.trace import FORWARD_LABEL, Trace

_PHASE_REGIONS = {"prefill": "prefill", "decode": "decode"}


def attention_queries(trace: Trace) -> pd.DataFrame:
    """Batch and query length of every attention op in the trace (ts_ns, b, q_len)."""
    ops = trace.ops
    rows = []
    if len(ops):
        names = ops["name"].astype(str)
        sig_dims = trace.signatures["input_dims"]
        for i in np.flatnonzero(names.isin(ATTENTION_OPS).to_numpy()):
            bq = query_of(names.iat[i], sig_dims.iloc[int(ops["sig"].iat[i])])
            if bq is not None:
                rows.append((int(ops["ts_ns"].iat[i]), *bq))
    return pd.DataFrame(rows, columns=["ts_ns", "b", "q_len"])


def _forward_shapes(trace: Trace) -> pd.DataFrame:
    a = trace.annotations
    if not len(a):
        return pd.DataFrame({"ts_ns": [], "b": [], "t": []})
    f = a[a["name"].astype(str).str.startswith(FORWARD_LABEL)]
    rows = []
    for ts, name in zip(f["ts_ns"], f["name"].astype(str)):
        try:
            shape = ast.literal_eval(name[len(FORWARD_LABEL):])
        except (ValueError, SyntaxError):
            continue
        if isinstance(shape, list) and len(shape) >= 2 and all(isinstance(d, int) for d in shape):
            rows.append((int(ts), shape[0], shape[1]))
    return pd.DataFrame(rows, columns=["ts_ns", "b", "t"])


def step_phases(trace: Trace, steps: pd.DataFrame, kernels: pd.DataFrame) -> pd.DataFrame:
    """One row per step of the step table ``steps``: ``step``, ``phase`` (prefill/decode/other),
    ``batch``, ``q_len``, ``source``; from the trace's annotations and attention ops and the
    ``kernels``' ``region`` (and ``attn_q`` of CUDA-graph replays, where mapped)."""
    k = kernels
    out = pd.DataFrame({"step": steps["step"].to_numpy(), "phase": "other", "batch": np.nan, "q_len": np.nan,
                        "source": ""})
    if not len(steps):
        return out
    # CPU span of each step: the annotations and ops that fall in it
    cpu_ts, cpu_end = steps["cpu_ts_ns"].to_numpy(), steps["cpu_end_ns"].to_numpy()

    def step_of(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(cpu_ts, t, side="right") - 1
        ok = (i >= 0) & (t <= cpu_end[np.maximum(i, 0)])
        return np.where(ok, i, -1)

    # 3. attention query lengths (eager ops, then CUDA-graph captures)
    att = attention_queries(trace)
    if len(att):
        att = att.assign(i=step_of(att["ts_ns"].to_numpy()))
        att = att[att["i"] >= 0]
        g = att.groupby("i")
        out.loc[g["q_len"].max().index, "q_len"] = g["q_len"].max().to_numpy()
        out.loc[g["b"].max().index, "batch"] = g["b"].max().to_numpy()
        out.loc[g["q_len"].max().index, "source"] = "attention"
    if "attn_q" in k:  # replayed attention kernels, from their capture (graphs.py)
        gq = k[k["attn_q"].notna() & (k["step"] >= 0)]
        pos = pd.Index(steps["step"]).get_indexer(gq["step"])
        for i, (b, q_len) in zip(pos, gq["attn_q"]):
            if i >= 0 and (pd.isna(out.at[i, "q_len"]) or out.at[i, "source"] == "graph capture"):
                out.loc[i, ["batch", "q_len", "source"]] = [b, q_len, "graph capture"]
    # 2. forward annotations
    fw = _forward_shapes(trace)
    if len(fw):
        fw = fw.assign(i=step_of(fw["ts_ns"].to_numpy()))
        fw = fw[fw["i"] >= 0].groupby("i").first()
        out.loc[fw.index, "q_len"] = fw["t"].to_numpy()
        out.loc[fw.index, "batch"] = fw["b"].to_numpy()
        out.loc[fw.index, "source"] = "forward"
    q = pd.to_numeric(out["q_len"], errors="coerce")
    out["q_len"], out["batch"] = q, pd.to_numeric(out["batch"], errors="coerce")
    out.loc[q == 1, "phase"] = "decode"
    out.loc[q > 1, "phase"] = "prefill"
    # 1. regions named prefill / decode
    if len(k) and (k["region"] != "").any():
        kk = k[(k["step"] >= 0) & k["region"].isin(list(_PHASE_REGIONS))]
        if len(kk):
            top = kk.groupby("step")["region"].agg(lambda r: r.value_counts().index[0])
            pos = pd.Index(steps["step"]).get_indexer(top.index)
            out.loc[pos[pos >= 0], "phase"] = top.to_numpy()[pos >= 0]
            out.loc[pos[pos >= 0], "source"] = "region"
    return out


def _phase_block(kernels: pd.DataFrame, steps: pd.DataFrame, phases: pd.DataFrame, phase: str,
                 bandwidth: float | None, own: float | None) -> dict[str, Any] | None:
    """One phase's figures; ``own``: the program's own (unprofiled) step time of this phase, when
    the Run measured it (programtime.py), which then times the phase instead of the profiled steps."""
    sel = phases["phase"] == phase
    if not sel.any():
        return None
    ids = phases.loc[sel, "step"].to_numpy()
    st = steps.set_index("step").loc[ids]
    k = kernels[kernels["step"].isin(ids)]
    per = k.groupby("step").agg(flops=("flops", "sum"), bytes=("bytes", "sum")).reindex(ids).fillna(0.0)
    cat_bytes = k.groupby(["step", "category"])["bytes"].sum().unstack(fill_value=0.0).reindex(ids).fillna(0.0)
    profiled = float(st["dur_s"].median())
    time = own or profiled
    total_k = float(k["dur_s"].sum())
    by_class = k.groupby("cls")["dur_s"].sum()
    batch = phases.loc[sel, "batch"].median()
    q_len = phases.loc[sel, "q_len"].median()
    block: dict[str, Any] = {
        "steps": int(sel.sum()), "step_time_s": time, "profiled_step_time_s": profiled,
        "step_time_source": "unprofiled" if own else "profiled",
        "batch": None if np.isnan(batch) else int(batch), "q_len": None if np.isnan(q_len) else int(q_len),
        "flops_per_step": float(per["flops"].median()), "bytes_per_step": float(per["bytes"].median()),
        "weight_bytes_per_step": float(cat_bytes["gemm"].median()) if "gemm" in cat_bytes else 0.0,
        "kv_bytes_per_step": float(cat_bytes["attention"].median()) if "attention" in cat_bytes else 0.0,
        "time_by_class": {c: float(v / total_k) for c, v in by_class.items()} if total_k > 0 else {},
        "kernels_per_step": float(k.groupby("step").size().median()),
        "gpu_busy_s": float(k.groupby("step")["dur_s"].sum().median()),
    }
    if time > 0:
        block["achieved_flops_per_s"] = block["flops_per_step"] / time
        block["achieved_bytes_per_s"] = block["bytes_per_step"] / time
        block["mbu"] = block["achieved_bytes_per_s"] / bandwidth if bandwidth else None
    return block


def inference_metrics(kernels: pd.DataFrame, steps: pd.DataFrame, phases: pd.DataFrame, captured: list[int],
                      step_time: Mapping[str, Any] | None, bandwidth: float | None) -> dict[str, Any] | None:
    """The inference block of the summary (module docstring), or None for non-inference Runs.
    ``phases``: :func:`step_phases`; ``captured``: the timeline's ``capture_steps``; ``step_time``:
    programtime.py's block (the program's own decode and prefill times, where measured)."""
    if not len(kernels) or not (phases["phase"] == "decode").any():
        return None
    # Steps that captured a CUDA graph are warm-up: left out of the figures while others remain.
    steady = ~phases["step"].isin(captured)
    if (steady & (phases["phase"] == "decode")).any():
        phases = phases[steady]
    own = step_time or {}
    decode = _phase_block(kernels, steps, phases, "decode", bandwidth, own.get("decode_median_s"))
    prefill = _phase_block(kernels, steps, phases, "prefill", bandwidth, own.get("prefill_median_s"))
    assert decode is not None
    tpot = decode["step_time_s"]
    out: dict[str, Any] = {
        "prefill": prefill, "decode": decode,
        # No profiled prefill (the profile began on steady decode tokens): the program's own prefill time.
        "ttft_s": prefill["step_time_s"] if prefill else own.get("prefill_median_s"),
        "tpot_s": tpot, "batch": decode["batch"],
        "tokens_per_s": decode["batch"] / tpot if decode["batch"] and tpot > 0 else None,
        "decode_mbu": decode.get("mbu"),
        "phase_source": sorted(set(phases.loc[phases["phase"] != "other", "source"])),
        "steps": {p: [int(s) for s in phases.loc[phases["phase"] == p, "step"]] for p in ("prefill", "decode")},
        "capture_steps": captured,
    }
    return out


def inference_note(kernels: pd.DataFrame, phases: pd.DataFrame, inference: Mapping[str, Any] | None) -> str | None:
    """Why an inference-like Run (steps of gradient-free forwards) has no ``inference`` block
    (:func:`inference_metrics`), or None: its forwards all took several tokens per sequence (the
    :func:`step_phases` ``phases``), so no step is a decode step."""
    if inference is not None or ("phase" in kernels and (kernels["phase"] == "backward").any()):
        return None
    q = phases.loc[phases["phase"] == "prefill", "q_len"].dropna()
    if not len(q) or len(q) < len(phases):
        return None
    seen = f"{int(q.min())}" if q.min() == q.max() else f"{int(q.min())} to {int(q.max())}"
    return (f"no inference section: no decode step recognized: every forward took {seen} tokens per sequence,"
            " the full sequence each time (no KV cache?); a decode step takes 1 (docs/inference.md)")
