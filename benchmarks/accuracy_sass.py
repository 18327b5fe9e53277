"""roofscope's FLOP formulas against the SASS-instruction FLOPs of a real A100 trace.

    python benchmarks/accuracy_sass.py [TRACE] [--markdown]

TRACE defaults to ../shared/traces/external/hta_a100_alexnet_cupti_counters.json.gz: two
forward passes of torchvision's AlexNet on an A100, recorded with CUPTI per-kernel counters
(77 ``cuda_profiler_range`` events; FLOPs = fadd + fmul + 2*ffma, fp16 and fp64 alike, summed
by analyzers/ingest/kineto_frames.py). The trace was recorded without shapes, so the analytic side applies
roofscope's own cost formulas (costmodel.cost_signature) to AlexNet's layer shapes; the batch,
128, is the one the fc1 GEMM's SASS count implies (9.667e9 / (2 * 9216 * 4096) = 128.05).
One row per op of the first forward pass (the second one's counts are identical): analytic
FLOPs, SASS FLOPs summed over the op's kernels, their ratio (analytic / SASS), the kernels.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from roofscope.analyzers.cost.costmodel import cost_signature
from roofscope.text import md_code, md_table, shorten, si, table

TRACE = (Path(__file__).resolve().parents[2] / "shared" / "traces" / "external"
         / "hta_a100_alexnet_cupti_counters.json.gz")
BATCH = 128
_F, _S, _L = "float", "Scalar", "ScalarList"


def _conv(name: str, x: list[int], w: list[int], stride: int, pad: int) -> tuple:
    # aten::cudnn_convolution(input, weight, padding, stride, dilation, groups, benchmark, deterministic, allow_tf32)
    return (name, "aten::cudnn_convolution", [x, w] + [[]] * 7, [_F, _F, _L, _L, _L, _S, _S, _S, _S],
            ["", "", f"[{pad}, {pad}]", f"[{stride}, {stride}]", "[1, 1]", "1", "False", "False", "True"])


def _fc(name: str, k: int, n: int) -> tuple:
    return (name, "aten::addmm", [[n], [BATCH, k], [k, n], [], []], [_F, _F, _F, _S, _S], ["", "", "", "1", "1"])


def _bias(name: str, shape: list[int]) -> tuple:
    return (name, "aten::add_", [shape, [shape[1], 1, 1], []], [_F, _F, _S], ["", "", "1"])


def _relu(name: str, shape: list[int]) -> tuple:
    return (name, "aten::clamp_min_", [shape, []], [_F, _S], ["", "0"])


def _pool(name: str, shape: list[int]) -> tuple:
    return (name, "aten::max_pool2d_with_indices", [shape] + [[]] * 5, [_F, _L, _L, _L, _L, _S],
            ["", "[3, 3]", "[2, 2]", "[0, 0]", "[1, 1]", "False"])


def _act(c: int, hw: int) -> list[int]:
    return [BATCH, c, hw, hw]


# torchvision AlexNet, 224x224 input, in the order its ops run (conv biases are separate add_).
LAYERS: tuple[tuple, ...] = (
    _conv("conv1 11x11/4 3->64", _act(3, 224), [64, 3, 11, 11], 4, 2), _bias("conv1 bias", _act(64, 55)),
    _relu("relu1", _act(64, 55)), _pool("pool1", _act(64, 55)),
    _conv("conv2 5x5 64->192", _act(64, 27), [192, 64, 5, 5], 1, 2), _bias("conv2 bias", _act(192, 27)),
    _relu("relu2", _act(192, 27)), _pool("pool2", _act(192, 27)),
    _conv("conv3 3x3 192->384", _act(192, 13), [384, 192, 3, 3], 1, 1), _bias("conv3 bias", _act(384, 13)),
    _relu("relu3", _act(384, 13)),
    _conv("conv4 3x3 384->256", _act(384, 13), [256, 384, 3, 3], 1, 1), _bias("conv4 bias", _act(256, 13)),
    _relu("relu4", _act(256, 13)),
    _conv("conv5 3x3 256->256", _act(256, 13), [256, 256, 3, 3], 1, 1), _bias("conv5 bias", _act(256, 13)),
    _relu("relu5", _act(256, 13)), _pool("pool5", _act(256, 13)),
    _fc("fc1 9216->4096", 9216, 4096), _relu("relu6", [BATCH, 4096]),
    _fc("fc2 4096->4096", 4096, 4096), _relu("relu7", [BATCH, 4096]),
    _fc("fc3 4096->1000", 4096, 1000),
)


def sass_table(trace: str | Path = TRACE) -> pd.DataFrame:
    """One row per layer op of the first forward pass: analytic vs SASS FLOPs."""
    import roofscope

    a = roofscope.analyze(trace, device="a100-sxm4-40gb")
    k = a.kernels[a.kernels["counter_flops"].notna()]
    names = [layer[1] for layer in LAYERS]
    # Each op's n-th launch in the first pass is the n-th layer of that op name.
    ops = k.drop_duplicates("op")[["op", "op_name"]]
    ops = ops[ops["op_name"].isin(set(names))]
    ops = ops.assign(nth=ops.groupby("op_name").cumcount())
    want = pd.DataFrame({"op_name": names, "layer": [layer[0] for layer in LAYERS],
                         "nth": pd.Series(names).groupby(names).cumcount().to_numpy(), "row": range(len(LAYERS))})
    rows = want.merge(ops, on=["op_name", "nth"], how="left").sort_values("row")
    g = k.groupby("op")
    sass = g["counter_flops"].sum()
    kernels = g["name"].agg(lambda n: ", ".join(sorted({shorten(str(x), 28) for x in n})))
    costs = [cost_signature(op, dims, types, None, concrete) for _, op, dims, types, concrete in LAYERS]
    out = pd.DataFrame({
        "layer": rows["layer"].to_numpy(), "op": rows["op_name"].to_numpy(),
        "analytic": np.array([c[0] for c in costs]),
        "sass": sass.reindex(rows["op"].to_numpy()).to_numpy(),
        "kernels": kernels.reindex(rows["op"].to_numpy()).fillna("").to_numpy()})
    with np.errstate(divide="ignore", invalid="ignore"):
        out["ratio"] = np.where(out["sass"] > 0, out["analytic"] / out["sass"], np.nan)
    return out


def render(t: pd.DataFrame, markdown: bool) -> str:
    code = md_code if markdown else str
    rows = [[code(r.layer), code(r.op), si(r.analytic), si(r.sass), "-" if np.isnan(r.ratio) else f"{r.ratio:.4g}",
             code(r.kernels)] for r in t.itertuples()]
    headers, align = ["layer", "op", "analytic FLOPs", "SASS FLOPs", "ratio", "kernels"], "<<>>><"
    return "\n".join(md_table(headers, rows, align) if markdown else table(headers, rows, align)) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace", nargs="?", default=str(TRACE))
    p.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = p.parse_args(argv)
    if not Path(args.trace).exists():
        print(f"accuracy_sass: error: {args.trace} not found", file=sys.stderr)
        return 2
    print(render(sass_table(args.trace), args.markdown), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
