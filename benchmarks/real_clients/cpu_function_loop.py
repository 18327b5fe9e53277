"""A host-bound loop of the script's own function on the CPU: no optimizer, no nn.Module, no step
markers. The step for `roofscope run --step-on __main__.step`, and with no flags the script's loop
(docs/steps.md), compiled or not; prints its own per-call time for comparison with roofscope's own time.

    python benchmarks/real_clients/cpu_function_loop.py
    roofscope run --step-on __main__.step benchmarks/real_clients/cpu_function_loop.py
    roofscope run benchmarks/real_clients/cpu_function_loop.py --compile
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=400)
p.add_argument("--n", type=int, default=256)
p.add_argument("--compile", action="store_true", help="torch.compile step() (the eager backend: Dynamo without "
                                                     "Inductor): roofscope then opens no step-less window; the "
                                                     "script's loop is the step all the same")
args = p.parse_args()
torch.set_num_threads(1)


def step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    for _ in range(8):   # small ops: launch- and dispatch-bound, as a decode step is
        x = torch.tanh(x @ w) * 0.5 + x
    return x


if args.compile:
    step = torch.compile(step, backend="eager")
x = torch.randn(args.n, args.n)
w = torch.randn(args.n, args.n) / args.n ** 0.5
times = []
step(x, w)        # the compile, if any, outside the timed steps
for i in range(args.steps):
    t = time.perf_counter()
    x = step(x, w)
    times.append(time.perf_counter() - t)
print(f"own steady step {statistics.median(times[20:]) * 1e3:.3f} ms (median of steps 20..{args.steps - 1})")
