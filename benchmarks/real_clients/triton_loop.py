"""A user's own Triton kernel in a plain loop: no nn.Module, no optimizer, no roofscope.step().
No step boundary ever arrives, so `roofscope run` records a 5 s time window from the first GPU work,
then, still without a boundary --stepless-after seconds (10) after it, a second one that replaces
the first (collectors/torchprof.py), and writes a Run of that one.

    roofscope run benchmarks/real_clients/triton_loop.py --seconds 12
"""
from __future__ import annotations

import argparse
import time

import torch
import triton
import triton.language as tl


@triton.jit
def scale_add(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, alpha * x + y, mask=mask)


p = argparse.ArgumentParser()
p.add_argument("--seconds", type=float, default=12.0, help="how long the loop runs")
p.add_argument("--n", type=int, default=1 << 24)
args = p.parse_args()

x, y = (torch.randn(args.n, device="cuda") for _ in range(2))
out = torch.empty_like(x)
grid = (triton.cdiv(args.n, 1024),)
t0 = time.time()
while time.time() - t0 < args.seconds:
    scale_add[grid](x, y, out, args.n, 0.5, BLOCK=1024)
    x, out = out, x
torch.cuda.synchronize()
