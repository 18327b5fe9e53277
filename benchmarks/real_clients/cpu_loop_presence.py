"""The presence cost of roofscope's loop tracking on a host-bound CPU loop (collectors/loops/): a loop of
small ops (dispatch-bound, as a decode step is), timed by the script itself between consecutive iterations,
so that the cost of a step boundary falls inside its figure. With --explicit the script marks its steps
with roofscope.step(): the same boundaries, none of the loop tracking's own work (its tracker lets go at the
first explicit step). benchmarks/real_clients/cpu_presence.sh runs the pairs.

    python benchmarks/real_clients/cpu_loop_presence.py
    roofscope run benchmarks/real_clients/cpu_loop_presence.py
    roofscope run benchmarks/real_clients/cpu_loop_presence.py --explicit
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=3000)
p.add_argument("--n", type=int, default=32)
p.add_argument("--explicit", action="store_true", help="roofscope.step() once an iteration")
args = p.parse_args()
torch.set_num_threads(1)
if args.explicit:
    import roofscope
x = torch.randn(args.n, args.n)
w = torch.randn(args.n, args.n) / args.n ** 0.5
stamps = []
for i in range(args.steps):
    for _ in range(4):
        x = torch.tanh(x @ w) * 0.5 + x
    if args.explicit:
        roofscope.step()
    stamps.append(time.perf_counter())
gaps = [b - a for a, b in zip(stamps, stamps[1:])]
late = gaps[len(gaps) // 2:]    # long after the profile: the boundaries alone, timed
print(f"own steady step {statistics.median(late) * 1e6:.2f} us (median of the last {len(late)} steps)")
