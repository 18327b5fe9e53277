"""Speed of the timeline analysis (analyzers/views/timeline.py) on a real trace and a synthetic one.

* the HTA A100 trace (6,080 GPU activities, 5 steps; analysis done beforehand, not timed),
* a synthetic 1M-activity frame: 100 steps, 4 streams, 1 in 20 a copy, 1 in 50 an NCCL kernel,
  one launch call and one CPU op per activity, an aten::item with a stream sync per step.

    python benchmarks/bench_timeline.py [--trace PATH] [--kernels 1000000] [--repeat 3]

Prints the best of ``--repeat`` wall times of ``timeline()`` alone.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from roofscope.analyzers.views.timeline import timeline
from roofscope.analyzers.model.trace import Trace

DEFAULT_TRACE = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "external" / "hta_a100_rank0.json.gz"


def synthetic(n: int, steps: int = 100, seed: int = 0) -> tuple[Trace, pd.DataFrame, pd.DataFrame]:
    """A trace of ``n`` GPU activities whose launches sometimes lag the GPU (host gaps)."""
    rng = np.random.default_rng(seed)
    dur = rng.lognormal(np.log(5_000), 1.0, n).astype(np.int64)          # ns, median 5 us
    launch_ts = np.cumsum(rng.integers(2_000, 20_000, n))                 # the CPU launches every 2-20 us
    stream = rng.choice(np.array([7, 13, 20, 21]), n, p=[0.85, 0.05, 0.05, 0.05])
    kind = rng.random(n)
    cat = np.where(kind < 0.05, "gpu_memcpy", "kernel")
    comm = kind > 0.98
    # Each stream runs its work in launch order, no earlier than 3 us after the launch.
    ts = np.empty(n, dtype=np.int64)
    for s in np.unique(stream):  # one pass per stream, not per kernel
        idx = np.flatnonzero(stream == s)
        ready = launch_ts[idx] + 3_000
        # start_i = max(ready_i, end_{i-1}) unrolled: max over j <= i of ready_j + sum(dur_j..dur_{i-1})
        csum = np.concatenate(([0], np.cumsum(dur[idx])))
        ts[idx] = np.maximum.accumulate(ready - csum[:-1]) + csum[:-1]
    names = np.array([f"kernel_{i}" for i in range(1000)], dtype=object)
    name = np.where(cat == "gpu_memcpy", "Memcpy HtoD (Pageable -> Device)",
                    np.where(comm, "ncclKernel_AllReduce_RING_LL_Sum_float", names[rng.integers(0, 1000, n)]))
    runtime = pd.DataFrame({"name": np.where(cat == "gpu_memcpy", "cudaMemcpyAsync", "cudaLaunchKernel"),
                            "ts_ns": launch_ts, "dur_ns": np.full(n, 2_000), "end_ns": launch_ts + 2_000,
                            "op": np.arange(n)})
    ops = pd.DataFrame({"name": pd.Categorical(np.full(n, "aten::add")), "ts_ns": launch_ts - 500,
                        "end_ns": launch_ts + 2_500, "parent": np.full(n, -1)})
    bounds = np.linspace(0, launch_ts[-1], steps + 1).astype(np.int64)
    # one loss.item() per step: aten::item with a cudaStreamSynchronize inside
    item_ts = bounds[1:] - 50_000
    ops = pd.concat([ops, pd.DataFrame({"name": pd.Categorical(np.full(steps, "aten::item")), "ts_ns": item_ts,
                                        "end_ns": item_ts + 40_000, "parent": np.full(steps, -1)})],
                    ignore_index=True)
    runtime = pd.concat([runtime, pd.DataFrame({"name": "cudaStreamSynchronize", "ts_ns": item_ts + 1_000,
                                                "dur_ns": 30_000, "end_ns": item_ts + 31_000,
                                                "op": np.arange(n, n + steps)})], ignore_index=True)
    order = np.argsort(ts, kind="stable")
    kernels = pd.DataFrame({
        "name": pd.Categorical(name), "cat": pd.Categorical(cat),
        "category": np.where(comm, "communication", np.where(cat == "gpu_memcpy", "memcpy", "elementwise")),
        "ts_ns": ts, "dur_ns": dur, "device": pd.array(np.zeros(n, dtype=np.int64), dtype="Int64"),
        "stream": stream, "launch": np.arange(n), "op": np.arange(n), "bytes": np.where(cat == "kernel", np.nan, 1e6),
        "timed": True,
    }).iloc[order].reset_index(drop=True)
    step_table = pd.DataFrame({"step": np.arange(steps), "ts_ns": bounds[:-1], "end_ns": bounds[1:] - 1})
    trace = Trace(path="synthetic", ops=ops, signatures=pd.DataFrame(), kernels=kernels, runtime=runtime,
                  annotations=pd.DataFrame())
    return trace, kernels, step_table


def best(fn, repeat: int) -> tuple[float, object]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows = []
    if args.trace.exists():
        from roofscope.analysis import analyze

        a = analyze(args.trace)
        steps = a.steps
        rows.append((args.trace.name, len(a.kernels), *best(lambda: timeline(a.trace, a.kernels, steps, None),
                                                             args.repeat)))
    trace, kernels, steps = synthetic(args.kernels)
    rows.append((f"synthetic {args.kernels:,}", len(kernels), *best(lambda: timeline(trace, kernels, steps, None),
                                                                     args.repeat)))
    print(f"{'case':<24} {'activities':>10} {'steps':>6} {'gaps':>8} {'busy':>6} {'timeline() s':>13}")
    for case, n, sec, tl in rows:
        print(f"{case:<24} {n:>10,} {len(tl.steps):>6} {len(tl.gaps):>8,} {tl.overall['busy_fraction']:>6.2f}"
              f" {sec:>13.3f}")


if __name__ == "__main__":
    main()
