"""An accelerate training loop: Accelerator(mixed_precision="bf16"), a small transformer encoder,
AdamW, batches from a DataLoader of CPU tensors (copied to the GPU by accelerate).

    roofscope run benchmarks/real_clients/accelerate_loop.py
    roofscope run benchmarks/real_clients/accelerate_loop.py --compile   # Accelerator(dynamo_backend="inductor")
"""
from __future__ import annotations

import argparse

import torch
from accelerate import Accelerator
from own_clock import StepClock
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--compile", action="store_true", help='Accelerator(dynamo_backend="inductor")')
p.add_argument("--steps", type=int, default=40)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--seq", type=int, default=256)
args = p.parse_args()

accelerator = Accelerator(mixed_precision="bf16", dynamo_backend="inductor" if args.compile else "no")
d = 512
model = nn.Sequential(nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 8, 4 * d, batch_first=True), 6),
                      nn.Linear(d, d))
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(args.batch * (args.steps + 1), args.seq, d)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x), batch_size=args.batch)
model, opt, loader = accelerator.prepare(model, opt, loader)
clock = StepClock()
for step, (xb, yb) in enumerate(loader):
    if step >= args.steps:
        break
    loss = nn.functional.mse_loss(model(xb), yb)
    accelerator.backward(loss)
    opt.step()
    opt.zero_grad()
    clock.tick()
torch.cuda.synchronize()
clock.report()
