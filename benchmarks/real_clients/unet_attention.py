"""A UNet-style block trained on the GPU: convolutions, GroupNorm and spatial self-attention through
`F.scaled_dot_product_attention` on transposed views (heads as channel groups, pixels as the sequence:
the head dimension is strided, so SDPA falls to its math backend). The issue-37 client that was told
"use scaled_dot_product_attention(q, k, v, is_causal=True)": it calls SDPA already, and its attention is
not causal. `--contiguous` applies roofscope's fix (q, k, v made contiguous: the fused kernels run,
results the same).

    python benchmarks/real_clients/unet_attention.py [--contiguous]
    roofscope run benchmarks/real_clients/unet_attention.py
"""
from __future__ import annotations

import argparse

import torch
from torch import nn

from own_clock import StepClock

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=30)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--size", type=int, default=32, help="feature map side at the attention")
p.add_argument("--contiguous", action="store_true", help="q, k, v = q.contiguous(), ... before SDPA")
args = p.parse_args()
dev = "cuda"


class SpatialAttention(nn.Module):
    def __init__(self, c: int, heads: int = 4) -> None:
        super().__init__()
        self.heads, self.norm = heads, nn.GroupNorm(32, c)
        self.qkv, self.proj = nn.Conv2d(c, 3 * c, 1), nn.Conv2d(c, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        q, k, v = (t.reshape(b, self.heads, c // self.heads, h * w).transpose(-1, -2)
                   for t in self.qkv(self.norm(x)).chunk(3, dim=1))
        if args.contiguous:
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        a = nn.functional.scaled_dot_product_attention(q, k, v)
        return x + self.proj(a.transpose(-1, -2).reshape(b, c, h, w))


def res(c: int) -> nn.Module:
    return nn.Sequential(nn.GroupNorm(32, c), nn.SiLU(), nn.Conv2d(c, c, 3, padding=1),
                         nn.GroupNorm(32, c), nn.SiLU(), nn.Conv2d(c, c, 3, padding=1))


class MidBlock(nn.Module):
    def __init__(self, c: int = 256) -> None:
        super().__init__()
        self.inp, self.r1, self.attn, self.r2 = nn.Conv2d(4, c, 3, padding=1), res(c), SpatialAttention(c), res(c)
        self.out = nn.Conv2d(c, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        h = h + self.r1(h)
        h = self.attn(h)
        h = h + self.r2(h)
        return self.out(h)


model = MidBlock().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
clock = StepClock()
for _ in range(args.steps):
    x = torch.randn(args.batch, 4, args.size, args.size, device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = (model(x) - x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    clock.tick()
torch.cuda.synchronize()
clock.report()
