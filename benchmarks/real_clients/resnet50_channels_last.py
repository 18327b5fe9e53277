"""torchvision ResNet-50, channels_last, bf16 autocast, SGD with momentum: a plain loop.

    roofscope run benchmarks/real_clients/resnet50_channels_last.py
    roofscope run benchmarks/real_clients/resnet50_channels_last.py --compile
    roofscope run benchmarks/real_clients/resnet50_channels_last.py --compile reduce-overhead   # + CUDA graphs
"""
from __future__ import annotations

import argparse

import torch
import torchvision
from own_clock import StepClock

p = argparse.ArgumentParser()
p.add_argument("--compile", nargs="?", const="default", metavar="MODE", help="model = torch.compile(model, mode=MODE)")
p.add_argument("--steps", type=int, default=40)
p.add_argument("--batch", type=int, default=64)
args = p.parse_args()

model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
step_fn = torch.compile(model, mode=args.compile) if args.compile else model
x = torch.randn(args.batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (args.batch,), device="cuda")
clock = StepClock()
for _ in range(args.steps):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(step_fn(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    clock.tick()
torch.cuda.synchronize()
clock.report()
