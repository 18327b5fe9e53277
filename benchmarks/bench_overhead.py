"""Profiling overhead: GPT-example step time profiled vs not, with and without --modules, and NVML.

    python benchmarks/bench_overhead.py [--steps 12] [--device cuda] [--compile]

Every configuration runs in this process on the same model: steps are timed from Python with
a CUDA synchronize after each (so times are whole GPU steps), and the ratio is the median step
time of the configuration over the median of the unprofiled baseline. Profiled medians use the
active (recorded) steps only. Prints a markdown table.
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch

import roofscope

ROOT = Path(__file__).resolve().parents[1]


def _gpt():
    spec = importlib.util.spec_from_file_location("gpt_example", ROOT / "examples" / "gpt.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpt_example"] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


def _timed(step: Callable[[], object], n: int, cuda: bool, after: Callable[[], None] = lambda: None) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        after()
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12, help="timed steps per configuration")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--compile", action="store_true")
    args = ap.parse_args()
    gpt = _gpt()
    cuda = args.device == "cuda"
    trainer = gpt.build(gpt.parse_args(["--device", args.device]), args.device, compile=args.compile)
    step = trainer.train_step
    _timed(step, 5, cuda)  # warm-up: allocator, cuBLAS heuristics, compilation

    rows: list[tuple[str, float, str]] = []
    base = statistics.median(_timed(step, args.steps, cuda))
    rows.append(("unprofiled", base, ""))

    if cuda:
        from roofscope.collectors.nvml import NvmlSampler

        sampler = NvmlSampler(hz=50)
        sampler.start()
        t = statistics.median(_timed(step, args.steps, cuda))
        tel = sampler.stop()
        cost = tel.cost
        rows.append(("NVML sampler 50 Hz only", t, f"{cost.get('samples', 0)} samples, "
                     f"{1e6 * (cost.get('mean_sample_s') or 0):.0f} us/sample"))

    for label, modules in (("roofscope.profile()", False), ("roofscope.profile(modules=True)", True)):
        with tempfile.TemporaryDirectory() as tmp:
            wait, warmup = 1, 2
            times: list[float] = []
            with roofscope.profile(steps=args.steps, wait=wait, warmup=warmup, out=Path(tmp) / "run",
                                   modules=modules, quiet=True, report=False) as prof:
                times = _timed(step, wait + warmup + args.steps, cuda, after=prof.step)
                t0 = time.perf_counter()
            finish = time.perf_counter() - t0  # stop, analyze, write the Run
            a = prof.analysis
            unattributed = a.summary.unattributed.share if a is not None else float("nan")
            rows.append((label, statistics.median(times[wait + warmup:]),
                         f"{unattributed:.1%} of kernel time without cost; analysis + Run written in "
                         f"{finish:.1f} s"))

    print(f"device: {torch.cuda.get_device_name() if cuda else 'cpu'}, torch {torch.__version__}, "
          f"GPT {trainer.cfg}, batch {trainer.batch}, compiled={args.compile}, {args.steps} timed steps")
    print("| configuration | median step ms | ratio | note |")
    print("|---|---:|---:|---|")
    for label, t, note in rows:
        print(f"| {label} | {t * 1e3:.2f} | {t / base:.3f} | {note} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
