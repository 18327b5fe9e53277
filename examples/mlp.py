"""A small MLP trained with AdamW on random regression data: the smallest workload to profile.

    python examples/mlp.py [--steps 30] [--device cpu|cuda] [--tf32] [--extra-elementwise N]
    roofscope run examples/mlp.py --steps 30

A plain training script with no roofscope calls: `roofscope run` finds the step boundaries
from `torch.optim.Optimizer.step`. `--extra-elementwise N` slows every step down on purpose
with N extra elementwise multiplications by 1.0 of the (batch, width) input, the same result
at a known extra cost: the regression the CI gate demo (docs/gate.md) must catch.
"""
from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def build_mlp(width: int = 512, layers: int = 4) -> nn.Sequential:
    """`layers` Linear+GELU blocks of `width`, then a Linear to one output."""
    blocks: list[nn.Module] = []
    for _ in range(layers):
        blocks += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*blocks, nn.Linear(width, 1))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tf32", action="store_true",
                    help="let fp32 matmuls use TF32 tensor cores (torch.set_float32_matmul_precision('high'))")
    ap.add_argument("--extra-elementwise", type=int, default=0, metavar="N",
                    help="deliberately add N elementwise ops per step (the regression of the CI gate demo)")
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    if args.extra_elementwise < 0:
        ap.error("--extra-elementwise must be at least 0")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.tf32:
        torch.set_float32_matmul_precision("high")
    torch.manual_seed(0)
    model = build_mlp(args.width, args.layers).to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    # One fixed batch: the point is a steady, repeatable step to profile, not learning.
    x = torch.randn(args.batch, args.width, device=args.device)
    y = torch.randn(args.batch, 1, device=args.device)
    for _ in range(args.steps):
        inp = x
        for _ in range(args.extra_elementwise):
            inp = inp * 1.0
        loss = F.mse_loss(model(inp), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    print(f"final loss: {loss.item():.4f}")


if __name__ == "__main__":
    main()
