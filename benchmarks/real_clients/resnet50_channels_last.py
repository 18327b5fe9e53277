"""torchvision ResNet-50, channels_last, bf16 autocast, SGD with momentum: a plain loop.

    roofscope run benchmarks/real_clients/resnet50_channels_last.py
    roofscope run benchmarks/real_clients/resnet50_channels_last.py --compile
    roofscope run benchmarks/real_clients/resnet50_channels_last.py --compile reduce-overhead   # + CUDA graphs
    roofscope run benchmarks/real_clients/resnet50_channels_last.py --plain   # fp32 NCHW, as a newcomer writes it
    roofscope run benchmarks/real_clients/resnet50_channels_last.py --plain --channels-last   # fp32 NHWC

``--plain`` leaves out channels_last and autocast: the program `roofscope verify` injects tf32,
channels_last, cudnn_benchmark and compile into (device_verify.sh). Weights and data are seeded, so
that runs of it compute the same losses.
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
p.add_argument("--plain", action="store_true", help="fp32 and NCHW: no autocast, no channels_last")
p.add_argument("--channels-last", action="store_true", help="with --plain: channels_last kept (fp32 NHWC)")
args = p.parse_args()

torch.manual_seed(0)
layout = torch.contiguous_format if args.plain and not args.channels_last else torch.channels_last
model = torchvision.models.resnet50().cuda().to(memory_format=layout)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
step_fn = torch.compile(model, mode=args.compile) if args.compile else model
x = torch.randn(args.batch, 3, 224, 224, device="cuda").to(memory_format=layout)
y = torch.randint(0, 1000, (args.batch,), device="cuda")
clock = StepClock()
for _ in range(args.steps):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=not args.plain):
        loss = torch.nn.functional.cross_entropy(step_fn(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    clock.tick()
torch.cuda.synchronize()
clock.report()
