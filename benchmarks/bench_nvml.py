"""Cost of the NVML sampler: its own time per pass and CPU, and the slowdown it causes.

First, the cost of each NVML query on GPU 0 (the energy counter is the slow one, which is
why the sampler reads it only every ``ENERGY_INTERVAL_S``). Then, for each rate (10, 50,
200 Hz by default):

* an idle run of ``--seconds`` gives passes, mean pass time over all GPUs and the
  sampler thread's CPU time per second of wall time;
* a fixed CPU-bound pure-Python workload (calibrated to ~``--workload-s``) is timed with
  and without the sampler, alternating, ``--repeat`` times; the slowdown is the ratio of
  the medians. Pure Python is the worst case: the sampler's Python code competes for
  the GIL, while NVML calls themselves release it.

    python benchmarks/bench_nvml.py [--hz 10 50 200] [--seconds 2] [--workload-s 1] [--repeat 3]

Without a working NVML it prints one line and exits 0. torch is never imported.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

from roofscope.collectors.nvml import ENERGY_INTERVAL_S, NvmlSampler, _probes


def workload(n: int) -> int:
    acc = 0
    for i in range(n):
        acc = (acc + i * i) % 1_000_003
    return acc


def calibrate(target_s: float) -> int:
    """Iterations of ``workload`` that take about ``target_s`` seconds here."""
    n = 100_000
    while True:
        t0 = time.perf_counter()
        workload(n)
        dt = time.perf_counter() - t0
        if dt > 0.1:
            return max(1, int(n * target_s / dt))
        n *= 4


def timed(n: int) -> float:
    t0 = time.perf_counter()
    workload(n)
    return time.perf_counter() - t0


def query_costs(calls: int = 50) -> list[tuple[str, float, float]]:
    """(query, wall µs, CPU µs) per call on GPU 0, for each query the sampler makes."""
    import pynvml

    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        out = []
        for label, _, query, _ in _probes(pynvml, 1):
            try:
                query(h)
            except pynvml.NVMLError as e:
                out.append((f"{label} ({e})", float("nan"), float("nan")))
                continue
            t0, c0 = time.perf_counter(), time.thread_time()
            for _ in range(calls):
                query(h)
            out.append((label, (time.perf_counter() - t0) / calls * 1e6, (time.thread_time() - c0) / calls * 1e6))
        return out
    finally:
        pynvml.nvmlShutdown()


def idle_cost(hz: float, seconds: float) -> dict:
    s = NvmlSampler(hz=hz)
    t0 = time.perf_counter()
    s.start()
    time.sleep(seconds)
    tel = s.stop()
    wall = time.perf_counter() - t0
    return {"gpus": len(tel.devices), "notes": tel.notes, **tel.cost, "wall_s": wall}


def slowdown(hz: float, n: int, repeat: int) -> tuple[float, float]:
    """Median workload seconds (without, with) the sampler, runs alternating to share drift."""
    base, loaded = [], []
    for _ in range(repeat):
        base.append(timed(n))
        s = NvmlSampler(hz=hz)
        s.start()
        try:
            loaded.append(timed(n))
        finally:
            s.stop()
    return statistics.median(base), statistics.median(loaded)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hz", type=float, nargs="+", default=[10.0, 50.0, 200.0])
    ap.add_argument("--seconds", type=float, default=2.0, help="idle sampling time per rate")
    ap.add_argument("--workload-s", type=float, default=1.0, help="target duration of the CPU workload")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)

    probe = NvmlSampler(hz=10)
    probe.start()
    ok = probe.running
    tel = probe.stop()
    if not ok:
        print(f"NVML not available, nothing to measure: {'; '.join(tel.notes) or 'sampler did not start'}")
        return 0
    names = ", ".join(f"{d['nvml_index']}: {d['name']}" for d in tel.devices)
    print(f"GPUs sampled: {names}")
    print("\n| NVML query (GPU 0) | wall (µs/call) | CPU (µs/call) |\n|---|---:|---:|")
    for label, wall_us, cpu_us in query_costs():
        print(f"| {label} | {wall_us:.1f} | {cpu_us:.1f} |")
    print(f"\nenergy counter read every {ENERGY_INTERVAL_S} s per GPU, other queries every pass\n")
    n = calibrate(args.workload_s)
    print(f"workload: {n} iterations of a pure-Python loop; medians of {args.repeat}\n")
    print("| hz | samples | mean sample pass (µs) | sampler CPU (ms/s) | workload base (s) | with sampler (s) | slowdown |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for hz in args.hz:
        c = idle_cost(hz, args.seconds)
        base, loaded = slowdown(hz, n, args.repeat)
        mean_us = c["mean_sample_s"] * 1e6 if c["mean_sample_s"] is not None else float("nan")
        print(f"| {hz:g} | {c['samples']} | {mean_us:.0f} | {c['thread_cpu_s'] / c['wall_s'] * 1e3:.2f} "
              f"| {base:.3f} | {loaded:.3f} | {(loaded / base - 1) * 100:+.1f}% |")
        for note in c["notes"]:
            print(f"  note ({hz:g} Hz): {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
