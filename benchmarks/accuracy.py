"""How accurate is roofscope's analytic cost model? Analytic vs Nsight Compute counters, per kernel.

    roofscope run --counters ncu -o runs/accuracy --force benchmarks/accuracy_suite.py --steps 2
    python benchmarks/accuracy.py runs/accuracy [--markdown OUT] [--force]

One row per distinct kernel per step position (the suite's step launches the same kernels in
the same order every step; rows average over the profiled steps), named by its op, shapes
and dtype: working set (the analytic compulsory bytes) against the L2 size, analytic vs
measured FLOPs and DRAM bytes with their ratios (analytic / measured), the class from
analytic costs vs from counters, and whether tensor cores ran. Then the scorecard against
issue 8's targets and each disagreement with its likely cause (docs/accuracy.md explains
the causes with arithmetic).
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
import pandas as pd

from roofscope.analyzers.model.result import Result
from roofscope.analyzers.place.measured import MATMUL_CATEGORIES
from roofscope.errors import RoofscopeError
from roofscope.text import md_code, md_table, md_text, pct, shorten, si, table

FLOPS_WITHIN = 0.02      # GEMM/conv/attention FLOPs within 2% of the counters
BYTES_WITHIN = 0.25      # DRAM bytes within 25% where the working set exceeds L2
CLASS_AGREEMENT = 0.90   # the class agrees on >= 90% of kernel time
DEFAULT_L2_BYTES = 50e6  # H100/H200 when neither run.json nor the trace names the L2 size
_SUMS = ("flops_analytic", "m_flops", "m_tensor_flops", "bytes_analytic", "m_dram_bytes")


def l2_size(a: Result) -> tuple[float, str]:
    """The device's L2 size in bytes and where it came from."""
    device = (a.run_meta or {}).get("device") or {}
    if device.get("l2_cache_size"):
        return float(device["l2_cache_size"]), "run.json"
    props = a.trace.meta.device.properties or {}
    size = props.get("l2CacheSize") or props.get("L2CacheSize")
    if size:
        return float(size), "trace deviceProperties"
    return DEFAULT_L2_BYTES, "assumed (H100/H200)"


def _labels(a: Result, k: pd.DataFrame) -> pd.Series:
    """``op (shapes) dtype`` of the op each kernel's cost came from."""
    ops, sigs = a.trace.ops, a.trace.signatures
    op = np.where(k["cost_op"].to_numpy() >= 0, k["cost_op"].to_numpy(), k["op"].to_numpy())
    sig = np.where(op >= 0, ops["sig"].to_numpy(dtype=np.int64)[np.maximum(op, 0)], -1)
    dims = sigs["input_dims"].tolist()
    shapes = ["; ".join("x".join(map(str, d)) for d in dims[s] if isinstance(d, list) and d)
              if s >= 0 and isinstance(dims[s], list) else "" for s in sig.tolist()]
    name = k["cost_op_name"].where(k["cost_op_name"] != "", k["op_name"]).astype(str)
    return name + pd.Series([f" ({s})" if s else "" for s in shapes], index=k.index) + " " + k["dtype"].astype(str)


def accuracy_table(a: Result, l2_bytes: float) -> pd.DataFrame:
    """One row per step position of the op calls whose kernels have counters (see the module
    docstring). An op's kernels are summed: attribution splits a cuDNN convolution's FLOPs
    over its GEMM and layout kernels by duration, so only their sum compares with counters."""
    if "m_flops" not in a.kernels:
        raise RoofscopeError(f"{a.trace.path}: the Run has no hardware counters; record it with"
                             " `roofscope run --counters ncu`")
    k = a.kernels[a.kernels["m_flops"].notna() & (a.kernels["step"] >= 0)]
    known = k["cls_analytic"].astype(str) != "unknown"
    # A call: the op whose cost the kernel carries, else its launching op (uncosted foreach ops
    # launch several kernels too), else the kernel alone.
    call = np.where(k["cost_op"] >= 0, k["cost_op"], np.where(k["op"] >= 0, k["op"], -1 - k.index.to_numpy()))
    k = k.assign(call=call, label=_labels(a, k), time_s=k["dur_s"], known_s=np.where(known, k["dur_s"], 0.0),
                 agree_s=np.where(known & (k["cls"].astype(str) == k["cls_analytic"].astype(str)), k["dur_s"], 0.0),
                 tc=k["tc_used"].astype("Float64"), kernels=1)
    # Each call's name, category and classes are those of its longest kernel; NaN stays NaN in sums.
    g = k.sort_values("dur_s", ascending=False, kind="stable").groupby("call", sort=False)
    calls = g.agg(step=("step", "first"), ts=("ts_ns", "min"), op=("label", "first"), kernel=("name", "first"),
                  category=("category", "first"), cls_analytic=("cls_analytic", "first"), cls=("cls", "first"),
                  tc=("tc", "max"))
    calls = calls.join(g[["kernels", "time_s", "known_s", "agree_s", *_SUMS]].sum(min_count=1))
    calls = calls.sort_values("ts", kind="stable")
    calls["pos"] = calls.groupby("step").cumcount()
    p = calls.groupby("pos", sort=True)
    t = p.agg(op=("op", "first"), kernel=("kernel", "first"), kernels=("kernels", "first"),
              category=("category", "first"), steps=("step", "nunique"), cls_analytic=("cls_analytic", "first"),
              cls=("cls", "first"), tc=("tc", "first"))
    t = t.join(p[["time_s", "known_s", "agree_s"]].sum()).join(p[list(_SUMS)].mean())
    with np.errstate(divide="ignore", invalid="ignore"):
        t["flops_ratio"] = np.where(t["m_flops"] > 0, t["flops_analytic"] / t["m_flops"], np.nan)
        t["bytes_ratio"] = np.where(t["m_dram_bytes"] > 0, t["bytes_analytic"] / t["m_dram_bytes"], np.nan)
    short = t["kernel"].astype(str).map(lambda n: shorten(n, 44))
    t["kernel"] = short.where(t["kernels"] == 1, short + " +" + (t["kernels"] - 1).astype(str))
    t["tensor_cores"] = np.select([t["tc"].eq(1).fillna(False), t["tc"].eq(0).fillna(False)], ["yes", "NO"], "-")
    t["above_l2"] = t["bytes_analytic"] > l2_bytes
    t["matmul"] = t["category"].isin(MATMUL_CATEGORIES)
    t["flops_ok"] = (t["flops_ratio"] - 1).abs() <= FLOPS_WITHIN
    t["bytes_ok"] = (t["bytes_ratio"] - 1).abs() <= BYTES_WITHIN
    t["cause"] = _causes(t)
    return t


def _causes(t: pd.DataFrame) -> np.ndarray:
    """The likely reasons a row misses the targets, "; "-joined ("" when it meets them all)."""
    cat = t["category"].to_numpy(dtype=object)
    measured_more = (t["flops_ratio"] < 1).to_numpy()
    cuda_share = ((t["m_flops"] - t["m_tensor_flops"]) / t["m_flops"]).to_numpy()
    tensor = (t["m_tensor_flops"] > 0).to_numpy()
    flops_miss = t["matmul"].to_numpy() & ~t["flops_ok"].to_numpy()
    flops = np.select(
        [flops_miss & (cat == "attention") & measured_more,
         flops_miss & tensor & measured_more & (cuda_share > 0.01),
         flops_miss & measured_more,
         flops_miss & (cat == "conv"),
         flops_miss],
        ["causal masking: diagonal tiles are computed in full, softmax runs on CUDA cores",
         "split-K / epilogue: reduction and epilogue FLOPs on CUDA cores beside the tensor-core work",
         "padding / tile quantization: tiles past the matrix edge are computed",
         "algorithm: Winograd/FFT convolution does fewer multiplies than the direct formula",
         "the formula counts work the kernel skips"], "")
    bytes_miss = t["above_l2"].to_numpy() & ~t["bytes_ok"].to_numpy() & t["bytes_ratio"].notna().to_numpy()
    nbytes = np.select(
        [bytes_miss & (t["bytes_ratio"] > 1).to_numpy(),
         bytes_miss & np.isin(cat, MATMUL_CATEGORIES),
         bytes_miss],
        ["L2 reuse: inputs still in L2 from the previous kernel or aliased (one tensor passed twice)",
         "operand re-reads: tiles fetched from DRAM more than once (operands larger than L2), or a split-K workspace",
         "recompute / extra passes: input read more than once, or a workspace written"], "")
    cls = np.select([(t["cls_analytic"].astype(str) == "unknown").to_numpy(),
                     (t["cls"].astype(str) != t["cls_analytic"].astype(str)).to_numpy()],
                    ["no analytic cost (coverage, not accuracy: left out of the class agreement)",
                     "class moved with the measured FLOPs/bytes"], "")
    out = flops.astype(object)
    for part in (nbytes.astype(object), cls.astype(object)):
        out = np.where((out != "") & (part != ""), out + "; " + part, out + part)
    return out


def scorecard(t: pd.DataFrame) -> dict[str, Any]:
    """The issue's three targets, each with its evidence and a pass flag."""
    mm = t[t["matmul"] & t["flops_ratio"].notna()]
    big = t[t["above_l2"] & t["bytes_ratio"].notna()]
    known = float(t["known_s"].sum())
    agreement = float(t["agree_s"].sum()) / known if known > 0 else float("nan")
    return {
        "flops": {"kernels": int(len(mm)), "within": int(mm["flops_ok"].sum()),
                  "pass": bool(len(mm)) and bool(mm["flops_ok"].all())},
        "bytes": {"kernels": int(len(big)), "within": int(big["bytes_ok"].sum()),
                  "pass": bool(len(big)) and bool(big["bytes_ok"].all())},
        "class": {"agreement": agreement, "pass": agreement >= CLASS_AGREEMENT,
                  "no_analytic_cost_s": float(t["time_s"].sum()) - known},
    }


def _ratio(x: float) -> str:
    return "-" if not np.isfinite(x) else f"{x:.3f}"


def render(t: pd.DataFrame, card: dict[str, Any], l2: tuple[float, str], markdown: bool) -> str:
    code, text = (md_code, md_text) if markdown else (str, str)
    headers = ["#", "op", "kernel", "working set", "FLOPs analytic", "FLOPs measured", "ratio", "DRAM analytic",
               "DRAM measured", "ratio", "class analytic", "class measured", "tensor cores", "time"]
    rows = [[str(i), code(r.op), code(r.kernel),
             "-" if np.isnan(r.bytes_analytic) else si(r.bytes_analytic, "B") + (" > L2" if r.above_l2 else " < L2"),
             si(r.flops_analytic), si(r.m_flops), _ratio(r.flops_ratio), si(r.bytes_analytic, "B"),
             si(r.m_dram_bytes, "B"), _ratio(r.bytes_ratio), r.cls_analytic, r.cls, r.tensor_cores,
             f"{r.time_s * 1e3:.3f} ms"] for i, r in zip(t.index, t.itertuples())]
    align = "><<>>>>>>><<<>"
    out = [f"L2 size {si(l2[0], 'B')} ({l2[1]}); ratios are analytic / measured; {int(t['steps'].max())} steps", ""]
    out += md_table(headers, rows, align) if markdown else table(headers, rows, align)
    f, b, c = card["flops"], card["bytes"], card["class"]
    verdict = {True: "met", False: "missed"}
    score = [["GEMM/conv/attention FLOPs within 2% of counters", f"{f['within']} of {f['kernels']} kernels",
              verdict[f["pass"]]],
             ["DRAM bytes within 25% (working set > L2)", f"{b['within']} of {b['kernels']} kernels",
              verdict[b["pass"]]],
             ["class agrees on >= 90% of kernel time (with an analytic cost)", pct(c["agreement"]),
              verdict[c["pass"]]]]
    out += ["", "Scorecard", ""]
    out += (md_table if markdown else table)(["target", "result", ""], score, "<><")
    miss = t[t["cause"] != ""]
    if len(miss):
        out += ["", "Disagreements", ""]
        rows = [[str(i), code(r.op), _ratio(r.flops_ratio), _ratio(r.bytes_ratio), text(r.cause)]
                for i, r in zip(miss.index, miss.itertuples())]
        headers = ["#", "op", "FLOPs ratio", "DRAM ratio", "likely cause"]
        out += (md_table if markdown else table)(headers, rows, "<<>><")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    import roofscope
    from roofscope.fileio import atomic_write, check_writable

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", help="a Run recorded with `roofscope run --counters ncu`")
    p.add_argument("--markdown", metavar="OUT", help="also write the tables as markdown to OUT")
    p.add_argument("--force", action="store_true", help="overwrite OUT")
    args = p.parse_args(argv)
    try:
        if args.markdown:
            check_writable(args.markdown, args.force)
        a = roofscope.analyze(args.run)
        l2 = l2_size(a)
        t = accuracy_table(a, l2[0])
        card = scorecard(t)
        print(render(t, card, l2, markdown=False), end="")
        if args.markdown:
            atomic_write(args.markdown, render(t, card, l2, markdown=True), force=args.force)
    except RoofscopeError as e:
        print(f"accuracy: error: {e}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
