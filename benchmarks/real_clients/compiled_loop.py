"""A compiled function in a plain loop: torch.compile, no optimizer, no nn.Module, no step markers (the
program imports Dynamo, so roofscope opens no step-less window: it steps on the looped function instead).
Prints its own per-iteration time after the compile.

    roofscope run benchmarks/real_clients/compiled_loop.py
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=200)
p.add_argument("--n", type=int, default=4096)
args = p.parse_args()


@torch.compile
def step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x @ w) * 0.5 + x


x = torch.randn(args.n, args.n, device="cuda", dtype=torch.bfloat16)
w = torch.randn(args.n, args.n, device="cuda", dtype=torch.bfloat16) / args.n ** 0.5
times = []
for i in range(args.steps):
    t = time.perf_counter()
    x = step(x, w)
    torch.cuda.synchronize()
    times.append(time.perf_counter() - t)
print(f"first call {times[0] * 1e3:.1f} ms (the compile); own steady step "
      f"{statistics.median(times[10:]) * 1e3:.3f} ms (median of steps 10..{args.steps - 1})")
