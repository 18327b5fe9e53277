"""The accuracy suite (issue 8): kernels from real workloads, one of each per step, for
comparing roofscope's analytic FLOPs/bytes with Nsight Compute's counters.

    roofscope run --counters ncu -o runs/accuracy --force benchmarks/accuracy_suite.py --steps 6
    python benchmarks/accuracy.py runs/accuracy --markdown accuracy-h200.md

Each step launches, in this order: GEMMs (bf16 8192^3; fp16 with non-aligned 4095x4093x4097;
fp32 4096^3 with TF32 off, then on; bf16 bmm), a bf16 linear layer forward and backward,
3x3 convolutions (bf16 channels_last, fp32), SDPA bf16 causal and non-causal, elementwise add
and gelu on 320 MB tensors (far above the 50-60 MB of L2), a sum, layer norm, softmax, an
AdamW foreach step, an Inductor-fused pointwise+reduction Triton kernel, and a small-working-set
chain (16 MB, inside L2) whose second kernel reads what the first just wrote.
Shapes are kept small enough that ncu's replay of every kernel (about 20 metrics, several
passes each) stays within minutes.
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable

import roofscope


def workload(device: str) -> Callable[[], None]:
    """The step function, its inputs allocated once."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    bf16, fp16, fp32 = torch.bfloat16, torch.float16, torch.float32

    def rnd(*shape: int, dtype: torch.dtype = fp32) -> torch.Tensor:
        return torch.randn(*shape, device=device, dtype=dtype)

    a8k, b8k = rnd(8192, 8192, dtype=bf16), rnd(8192, 8192, dtype=bf16)
    a_odd, b_odd = rnd(4095, 4093, dtype=fp16), rnd(4093, 4097, dtype=fp16)
    a32, b32 = rnd(4096, 4096), rnd(4096, 4096)
    ba, bb = rnd(32, 1024, 1024, dtype=bf16), rnd(32, 1024, 1024, dtype=bf16)
    linear = torch.nn.Linear(4096, 4096, device=device, dtype=bf16)
    x_lin, g_lin = rnd(8192, 4096, dtype=bf16).requires_grad_(), rnd(8192, 4096, dtype=bf16)
    conv16 = torch.nn.Conv2d(256, 256, 3, padding=1, bias=False, device=device, dtype=bf16).to(
        memory_format=torch.channels_last)
    x16 = rnd(32, 256, 56, 56, dtype=bf16).to(memory_format=torch.channels_last)
    conv32 = torch.nn.Conv2d(128, 128, 3, padding=1, bias=False, device=device)
    x32 = rnd(32, 128, 56, 56)
    q, k, v = (rnd(8, 16, 2048, 128, dtype=bf16) for _ in range(3))
    big = rnd(80 * 1024 * 1024)                                   # 320 MB of fp32
    rows = rnd(16384, 4096)                                       # 256 MB
    ln = torch.nn.LayerNorm(4096, device=device)
    params = [torch.nn.Parameter(rnd(1024, 1024)) for _ in range(64)]
    for p in params:
        p.grad = torch.randn_like(p)
    adamw = torch.optim.AdamW(params, lr=1e-3, foreach=True)
    small = rnd(4 * 1024 * 1024)                                  # 16 MB: stays in L2

    @torch.compile
    def fused(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (F.gelu(x) * w).sum(-1)

    w_fused = rnd(4096)

    def step() -> None:
        a8k @ b8k
        a_odd @ b_odd
        torch.backends.cuda.matmul.allow_tf32 = False
        a32 @ b32
        torch.backends.cuda.matmul.allow_tf32 = True
        a32 @ b32
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.bmm(ba, bb)
        linear.zero_grad(set_to_none=True)
        x_lin.grad = None
        linear(x_lin).backward(g_lin)
        conv16(x16)
        conv32(x32)                     # cuDNN's default allow_tf32: the counters tell what ran
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
        F.scaled_dot_product_attention(q, k, v)
        big + 1.0
        F.gelu(big)
        big.sum()
        ln(rows)
        torch.softmax(rows, -1)
        adamw.step()
        fused(rows, w_fused)
        y = small * 2.0                 # writes 16 MB that the next kernel reads from L2
        y + 1.0

    with torch.no_grad():
        fused(rows, w_fused)            # compile before profiling starts
    return step


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=6, help="iterations (roofscope profiles wait+warmup+active of them)")
    args = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("accuracy_suite.py: needs a CUDA GPU (the suite compares GPU kernels with Nsight Compute counters)",
              file=sys.stderr)
        return 2
    step = workload("cuda")
    for _ in range(args.steps):
        step()
        roofscope.step()
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
