"""Speed of the cost model and of the counters join: the goals the tests once asserted as wall-clock limits
(tests run on loaded machines, where a limit measures the load; the figures belong here).

* ``signature_costs`` on the HTA A100 trace's 818 distinct op signatures (goal: under 2 s),
* ``signature_costs`` on 5,085 distinct signatures (the CPU block fixture's 339, every dim scaled by
  1..15; goal: 0.5 s on 2 cores),
* the counters ``join`` of 100,000 ncu launches to 100,000 trace kernels, 7 names repeating, 3 launches
  missing from ncu (goal: 0.1 s on 2 cores; the difflib alignment it replaced took 30 s).

    python benchmarks/bench_costs.py [--trace PATH] [--repeat 3]

Prints the best of ``--repeat`` wall times of each, the cost model's cache cleared before each run.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np
import pandas as pd

from roofscope.analyzers.cost.costmodel import clear_cache, signature_costs
from roofscope.analyzers.ingest import read as load_trace
from roofscope.analyzers.ingest import ncujoin as counters_join
from roofscope.collectors.counters.ncu_csv import parse_ncu_csv

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
DEFAULT_TRACE = DATA / "external" / "hta_a100_rank0.json.gz"


def best_of(repeat: int, fn: Callable[[], Any]) -> float:
    times = []
    for _ in range(repeat):
        clear_cache()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _scale(d: Any, k: int) -> Any:
    if isinstance(d, list):
        return [_scale(x, k) for x in d]
    return d * k if isinstance(d, int) and d > 1 else d


def scaled_signatures() -> pd.DataFrame:
    """The CPU block's signatures 15 times, every dim scaled by k = 1..15: all distinct."""
    base = load_trace(DATA / "cpu_block.json.gz").signatures
    frames = []
    for k in range(1, 16):
        f = base.copy()
        f["input_dims"] = [_scale(d, k) for d in f["input_dims"]]
        frames.append(f)
    return pd.concat(frames, ignore_index=True)


def join_inputs(n: int = 100_000) -> tuple[pd.DataFrame, SimpleNamespace]:
    """The H200 probe's 7 kernel names under ncu's spelling, ``n`` launches; ncu lacks 3 of them."""
    names = parse_ncu_csv((DATA / "ncu" / "h200_probe_long.csv").read_text())["name"].iloc[:7].tolist()
    trace_names = [name.replace("at::", "at::native::", 1) for name in names]
    kernels = pd.DataFrame({"name": np.resize(np.array(trace_names, dtype=object), n), "cat": "kernel", "step": 1,
                            "launch": np.arange(n), "ts_ns": np.arange(n) * 1000, "correlation": np.arange(n) + 100})
    trace = SimpleNamespace(kernels=kernels, runtime=pd.DataFrame({"ts_ns": np.arange(n) * 1000 - 5}))
    ncu_side = pd.DataFrame({"name": np.resize(np.array(names, dtype=object), n)})
    return ncu_side.drop(index=[10, n // 2, n - 10]).reset_index(drop=True), trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    sigs = load_trace(args.trace).signatures
    signature_costs(sigs.head(100))            # imports (torch, flop_counter) out of the timings
    print(f"signature_costs, {args.trace.name} ({len(sigs)} signatures): "
          f"{best_of(args.repeat, lambda: signature_costs(sigs)):.3f} s (goal < 2 s)")
    big = scaled_signatures()
    print(f"signature_costs, {len(big)} distinct signatures: "
          f"{best_of(args.repeat, lambda: signature_costs(big)):.3f} s (goal 0.5 s on 2 cores)")
    ncu_side, trace = join_inputs()
    print(f"counters join, {len(trace.kernels):,} kernels: "
          f"{best_of(args.repeat, lambda: counters_join.join(ncu_side, trace)):.3f} s (goal 0.1 s on 2 cores)")


if __name__ == "__main__":
    main()
