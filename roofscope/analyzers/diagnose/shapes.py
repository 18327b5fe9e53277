"""Op shapes the rules look at: GEMM dimensions, tensor sizes and convolutions, from the trace's signatures.

Lookups go per signature (a few thousand), never per kernel.

Convolutions' memory layout: cuDNN's NCHW/NHWC transposes, and whether torch.compile removes them.
cuDNN's tensor-core convolutions compute NHWC: on NCHW tensors each call transposes its input and output
(kernels named nchwToNhwc / nhwcToNchw). The channels_last rule prices those kernels. torch.compile takes
them away too where Inductor's layout optimization applies: it computes a graph's convolutions
channels_last (``GraphLowering.decide_layout_opt`` in torch/_inductor/graph.py, torch 2.1 to 2.13; on by
default except on ROCm). Measured on an H200 (2026-11-29, ResNet-50 fp32 training, 32 ms a step): compile
saved 12.1 ms a step [11.9, 12.3] against the fusion rule's 3.14 ms, and channels_last alone 8.9 ms; the
fusion rule now adds the transposes to compile's saving where Inductor would convert.

Batch norm is the rest of channels_last's gain: cuDNN's NCHW batch-norm kernels (``bn_*_1C11_*``) move 1.1-1.6
TB/s on large maps, its NHWC ones 2.0-2.3 (``nchw_batch_norm``). On that ResNet-50, NCHW less NHWC per op: the
convolutions 4.25 ms a step (the transposes 3.42 of it), batch norm 4.22 ms; plain runs saved 8.88 ms a step.

Inductor decides from the graph's convolutions (their weights ``[out, in/groups, kh, kw]`` and groups),
which the trace records as the arguments of ``aten::convolution``:
- training: not when a grouped convolution has more than one input channel per group, not when a
  convolution with a kernel wider than 1 has at least twice as many input as output channels, not when
  every convolution has at most 64 input and 64 output channels;
- inference: when the convolutions' FLOPs weighted by its measured speed-ups (grouped 1.358, at most 64
  channels 0.783, input channels at least twice the output 0.725, others 0.823) come to no more than
  their FLOPs;
- neither when the graph has at least 300 nodes per convolution (a stem convolution in a transformer).
  The trace has no graph: its top-level aten calls per convolution stand for it (a decomposed graph
  holds more nodes than that, so a borderline model may be said to convert when Inductor would not).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from roofscope.analyzers.diagnose.base import Context
from roofscope.analyzers.ingest.linking import ancestor_where, take
from roofscope.analyzers.ingest.names import per_name
from roofscope.analyzers.model.trace import INT64_MAX, Trace

# GEMM ops and how their inputs give (M, N, K); linear's weight is stored (N, K).
_GEMM_LAYOUT = {"aten::mm": "mm", "aten::addmm": "addmm", "aten::bmm": "mm", "aten::baddbmm": "addmm",
                "aten::matmul": "mm", "aten::linear": "linear", "aten::_scaled_mm": "mm", "aten::_int_mm": "mm"}


def gemm_mnk(name: str, dims: Any) -> tuple[int, int, int] | None:
    """(M, N, K) of a GEMM op call, batch and leading dims folded into M; None if unknown or past
    int64 (no tensor has such a dim: a Trace built in-process, which ingest did not check)."""
    layout = _GEMM_LAYOUT.get(name)
    if layout is None or not isinstance(dims, list):
        return None
    shapes = [d for d in dims if isinstance(d, list) and d]
    try:
        if layout == "mm":
            a, b = shapes[0], shapes[1]
        elif layout == "addmm":
            a, b = shapes[1], shapes[2]
        else:  # linear(input [..., K], weight [N, K])
            a, b = shapes[0], shapes[1][::-1]
        if layout != "linear" and (len(a) < 2 or len(b) < 2):
            return None
        mnk = math.prod(a[:-1]), int(b[-1]), int(a[-1])
    except (IndexError, TypeError, ValueError, OverflowError):
        return None
    return mnk if all(abs(x) <= INT64_MAX for x in mnk) else None


def op_dims(trace: Trace, ops: np.ndarray) -> list[Any]:
    """Input dims of each op row (None for -1 or no shapes)."""
    sig = np.where(ops >= 0, trace.ops["sig"].to_numpy()[np.maximum(ops, 0)], -1)
    table = trace.signatures["input_dims"].to_numpy(dtype=object)
    return [table[s] if s >= 0 else None for s in sig]


def first_numel(dims: Any) -> int | None:
    """Element count of an op's first tensor input (of the first tensor of a TensorList
    argument, whose dims are nested: ``[[[5, 128], [5, 128]], ...]``); None when unknown."""
    first = dims[0] if isinstance(dims, list) and dims else None
    while isinstance(first, list) and first and isinstance(first[0], list):
        first = first[0]
    if isinstance(first, list) and first and all(type(x) is int for x in first):
        return math.prod(first)
    return None


def gemm_table(trace: Trace, k: pd.DataFrame) -> pd.DataFrame:
    """GEMM kernels of ``k`` with their cost op's M, N, K (rows with unknown shapes dropped)."""
    g = k[k["category"] == "gemm"]
    if not len(g):
        return g.assign(m=[], n=[], kk=[])
    ops = g["cost_op"].to_numpy() if "cost_op" in g else g["op"].to_numpy()
    # take(): a replay-only trace has no ops at all (its GEMMs are costed from a capture's)
    names = take(trace.ops["name"].astype(str).to_numpy(dtype=object), ops, "")
    pairs = pd.DataFrame({"name": names, "sig": take(trace.ops["sig"].to_numpy(), ops, -1)})
    codes = pairs.groupby(["name", "sig"], sort=False).ngroup().to_numpy()
    table = trace.signatures["input_dims"].to_numpy(dtype=object)
    per_sig = [gemm_mnk(n, table[s]) if s >= 0 else None for n, s in pairs.drop_duplicates().itertuples(index=False)]
    arr = np.array([x or (-1, -1, -1) for x in per_sig], dtype=np.int64).reshape(-1, 3)[codes]
    out = g.assign(m=arr[:, 0], n=arr[:, 1], kk=arr[:, 2])
    return out[out["m"] >= 0]


_TRANSPOSE = r"nchwToNhwc|nhwcToNchw|NchwToNhwc|NhwcToNchw"
_CONV_OPS = ("aten::cudnn_convolution", "aten::convolution_backward", "aten::cudnn_convolution_transpose",
             "aten::_convolution", "aten::convolution")
# Inductor's measured channels_last speed-up per kind of convolution (inference; < 1 is faster).
_SPEEDUP = {"grouped": 1.358, "small": 0.783, "in_out": 0.725, "default": 0.823}
_NODES_PER_CONV = 300
# cuDNN's NHWC batch norm, fp32 ResNet-50 batch 64 on an H200 (4.8 TB/s): forward 5.69 GB a step in 2.83 ms
# (2.0 TB/s), backward 8.54 GB in 3.66 ms (2.3 TB/s), where the NCHW kernels took 3.55 and 7.24 ms. The share of
# the device's bandwidth an NCHW batch-norm kernel is priced at once channels_last.
NHWC_BATCH_NORM_SHARE = 0.45


def conv_transposes(ctx: Context) -> pd.DataFrame:
    """The profiled steps' cuDNN layout transposes launched under a convolution op."""
    if "conv_transposes" not in ctx.memo:
        k = ctx.kernels
        t = k[per_name(k["name"], lambda s: s.str.contains(_TRANSPOSE, regex=True))]
        if len(t):
            ops = ctx.inp.trace.ops
            conv = ops["name"].astype(str).isin(_CONV_OPS).to_numpy()
            t = t[ancestor_where(ops["parent"].to_numpy(), t["op"].to_numpy(dtype=np.int64), conv) >= 0]
        ctx.memo["conv_transposes"] = t
    return ctx.memo["conv_transposes"]


def nchw_batch_norm(ctx: Context) -> pd.DataFrame:
    """The profiled steps' kernels under a batch-norm op whose input is a 4-D NCHW-contiguous tensor, each with
    ``saving_s``: its time above moving its bytes at ``NHWC_BATCH_NORM_SHARE`` of the bandwidth (none for a
    kernel whose bytes are not known, or that already runs that fast)."""
    if "nchw_batch_norm" not in ctx.memo:
        k, ops = ctx.kernels, ctx.inp.trace.ops
        out = k.iloc[:0].assign(saving_s=0.0)
        bn = per_name(ops["name"], lambda s: s.str.contains("batch_norm", regex=False)) if len(ops) else []
        if len(k) and np.any(bn):
            at = ancestor_where(ops["parent"].to_numpy(), k["op"].to_numpy(dtype=np.int64), bn)
            sig = take(ops["sig"].to_numpy(), at, -1).astype(np.int64)
            nchw = [s for s in np.unique(sig[sig >= 0]) if _nchw(ctx.inp.trace.signatures.iloc[int(s)])]
            on = np.isin(sig, nchw)
            t = k[on]
            rate = NHWC_BATCH_NORM_SHARE * ctx.inp.ceilings.bandwidth
            fast_s = t["bytes"].fillna(0).to_numpy(dtype=float) / rate
            saving = np.where(fast_s > 0, np.maximum(0.0, t["dur_s"].to_numpy(dtype=float) - fast_s), 0.0)
            out = t.assign(saving_s=saving)
        ctx.memo["nchw_batch_norm"] = out
    return ctx.memo["nchw_batch_norm"]


def _nchw(sig: pd.Series) -> bool:
    """Whether a signature's first input is a contiguous N x C x H x W tensor with channels and a spatial map."""
    dims, strides = sig["input_dims"], sig["input_strides"]
    if not (isinstance(dims, list) and dims and isinstance(strides, list) and strides):
        return False
    d, st = dims[0], strides[0]
    if not (isinstance(d, list) and isinstance(st, list) and len(d) == 4 == len(st)):
        return False
    return d[1] > 1 and d[2] * d[3] > 1 and list(st) == [d[1] * d[2] * d[3], d[2] * d[3], d[3], 1]


def convolutions(trace: Trace) -> pd.DataFrame:
    """One row per distinct recorded ``aten::convolution`` call (its weight's dims ``w``, input's ``x``,
    groups and stride) with how many ``calls``; empty when the trace holds no shapes."""
    ops, sigs = trace.ops, trace.signatures
    rows = np.flatnonzero(ops["name"].astype(str).to_numpy() == "aten::convolution") if len(ops) else []
    out = []
    for s, n in pd.Series(ops["sig"].to_numpy()[rows] if len(rows) else []).value_counts(sort=False).items():
        sig = sigs.iloc[int(s)]
        dims, concrete = sig["input_dims"], sig["concrete_inputs"]
        if not (isinstance(dims, list) and len(dims) > 1 and isinstance(dims[0], list) and isinstance(dims[1], list)
                and len(dims[1]) >= 3 and len(dims[0]) == len(dims[1])):
            continue
        concrete = concrete if isinstance(concrete, list) else []
        try:   # aten::convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
            groups = int(concrete[8]) if len(concrete) > 8 and concrete[8] else 1
            stride = [int(x) for x in str(concrete[3]).strip("[]").split(",")] if len(concrete) > 3 else [1]
        except ValueError:
            groups, stride = 1, [1]
        out.append({"w": dims[1], "x": dims[0], "groups": groups, "stride": stride, "calls": int(n)})
    return pd.DataFrame(out, columns=["w", "x", "groups", "stride", "calls"])


def _kind(w: list[int], groups: int) -> str:
    if groups > 1 and w[1] > 1:
        return "grouped"
    if w[0] <= 64 and w[1] <= 64:
        return "small"
    if w[0] * 2 <= w[1] and w[2] > 1:
        return "in_out"
    return "default"


def _flops(x: list[int], w: list[int], stride: list[int]) -> float:
    """2 x the output's elements x the multiply-adds per output element (padding and dilation left out)."""
    spatial = float(np.prod([d // max(1, stride[min(i, len(stride) - 1)]) for i, d in enumerate(x[2:])]))
    return 2.0 * x[0] * w[0] * spatial * float(np.prod(w[1:]))


def keeps_nchw(convs: pd.DataFrame, top_ops: int, training: bool) -> str:
    """Why Inductor's layout optimization would leave ``convs`` (``convolutions``) NCHW, with ``top_ops``
    top-level aten calls in the trace (see the module docstring); "" when it computes them channels_last."""
    if not len(convs):
        return "the trace holds no convolution shapes (recorded without record_shapes)"
    if top_ops >= _NODES_PER_CONV * int(convs["calls"].sum()) * (2 if training else 1):   # forward and backward
        return "few convolutions among the model's operations (Inductor keeps the layout then)"
    kinds = [_kind(w, g) for w, g in zip(convs["w"], convs["groups"])]
    if training:
        if "grouped" in kinds:
            return "a grouped convolution with more than one input channel per group"
        if "in_out" in kinds:
            return "a convolution with a kernel wider than 1 and twice as many input as output channels"
        if set(kinds) == {"small"}:
            return "every convolution has at most 64 input and output channels"
        return ""
    flops = np.array([_flops(x, w, st) for x, w, st in zip(convs["x"], convs["w"], convs["stride"])])
    flops = flops * convs["calls"].to_numpy()
    weighted = float(sum(f * _SPEEDUP[k] for f, k in zip(flops, kinds)))
    return "" if weighted <= flops.sum() else "its kinds of convolution run slower channels_last, by Inductor's measure"


def compile_keeps_nchw(ctx: Context, training: bool) -> str:
    """``keeps_nchw`` of the program's trace: "" when torch.compile would compute its convolutions channels_last."""
    ops = ctx.inp.trace.ops
    aten = ops["name"].astype(str).str.startswith("aten::").to_numpy()
    parent = ops["parent"].to_numpy()
    top = aten & ~np.where(parent >= 0, aten[np.maximum(parent, 0)], False)
    return keeps_nchw(convolutions(ctx.inp.trace), int(top.sum()), training)
