"""An elementwise-heavy model trained eagerly: memory-bound pointwise chains torch.compile fuses.

    python examples/pointwise.py [--steps 12] [--device cpu|cuda] [--compile]
    roofscope run examples/pointwise.py              # then compare with --compile

Each block is a gated MLP (LayerNorm, sigmoid gate, soft-capped with tanh, scaled residual)
at a small width over many tokens, so the chains of pointwise kernels between the two
GEMMs move more bytes than the GEMMs do. Under bf16 autocast on CUDA.
"""
from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class GatedBlock(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(width, width)
        self.scale = nn.Parameter(torch.full((width,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, g = self.up(self.norm(x)).chunk(2, dim=-1)
        h = a * torch.sigmoid(1.702 * g)       # gate: 3 pointwise kernels eagerly
        h = 3.0 * torch.tanh(h / 3.0)           # soft cap: 3 more
        return x + self.scale * self.down(h)   # scaled residual: 2 more


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tokens", type=int, default=None, help="tokens per step (default 65536 on CUDA, 2048 on CPU)")
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--compile", action="store_true", help="wrap the model in torch.compile (fuses the chains)")
    args = ap.parse_args(argv)
    if args.tokens is None:
        args.tokens = 65536 if torch.device(args.device).type == "cuda" else 2048
    if args.steps < 1 or args.tokens < 1:
        ap.error("--steps and --tokens must be at least 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    cuda = torch.device(args.device).type == "cuda"
    torch.manual_seed(0)
    net = nn.Sequential(*(GatedBlock(args.width) for _ in range(args.layers))).to(args.device)
    model = torch.compile(net) if args.compile else net
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, fused=cuda)
    x = torch.randn(args.tokens, args.width, device=args.device)
    for _ in range(args.steps):
        with torch.autocast(args.device, dtype=torch.bfloat16, enabled=cuda):
            loss = F.mse_loss(model(x).float(), x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    print(f"final loss: {loss.item():.4f}")


if __name__ == "__main__":
    main()
