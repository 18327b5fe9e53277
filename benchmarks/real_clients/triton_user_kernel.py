"""A user's own @triton.jit kernel in a plain loop: no optimizer, no nn.Module, no step markers.
Only a time window (or --step-on) can give roofscope steps. Prints its own per-iteration time.

    roofscope run benchmarks/real_clients/triton_user_kernel.py
    roofscope run --step-on triton_user_kernel.scaled_add benchmarks/real_clients/triton_user_kernel.py
"""
from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=50)
p.add_argument("--n", type=int, default=1 << 26)
args = p.parse_args()


@triton.jit
def _scaled_add(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, alpha * x + y, mask=mask)


def scaled_add(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    out = torch.empty_like(x)
    _scaled_add[(triton.cdiv(x.numel(), 1024),)](x, y, out, alpha, x.numel(), BLOCK=1024)
    return out


x = torch.randn(args.n, device="cuda")
y = torch.randn(args.n, device="cuda")
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
for i in range(args.steps):
    start.record()
    y = scaled_add(x, y, 0.5)
    end.record()
    end.synchronize()
    print(f"step {i}: {start.elapsed_time(end):.3f} ms", flush=True)
