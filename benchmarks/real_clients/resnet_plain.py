"""torchvision ResNet-50 trained the way a newcomer writes it: fp32, NCHW, SGD with momentum, no TF32 for
matmuls, no cudnn.benchmark, no compile. The client `roofscope verify` injects those into
(device_verify.sh: tf32, channels_last, cudnn_benchmark, compile), unedited.

    python benchmarks/real_clients/resnet_plain.py
    roofscope run benchmarks/real_clients/resnet_plain.py && roofscope verify roofscope-out/resnet_plain-*
"""
from __future__ import annotations

import argparse

import torch
import torchvision
from own_clock import StepClock

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=60)
p.add_argument("--batch", type=int, default=64)
args = p.parse_args()

torch.manual_seed(0)   # the same weights and data in every run: verify compares the losses
model = torchvision.models.resnet50().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
x = torch.randn(args.batch, 3, 224, 224, device="cuda")
y = torch.randint(0, 1000, (args.batch,), device="cuda")
clock = StepClock()
for _ in range(args.steps):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    clock.tick()
torch.cuda.synchronize()
clock.report()
