"""A timm CNN trained as a newcomer writes it: fp32, NCHW, timm's AdamW, cross-entropy, a plain loop (default
EfficientNet-B0: depthwise convolutions, batch norm, SiLU, squeeze-excitation). A client the analyzers were not
tuned on.

    roofscope run benchmarks/real_clients/timm_cnn.py
    roofscope run benchmarks/real_clients/timm_cnn.py --model convnext_tiny --batch 32
    python benchmarks/real_clients/timm_cnn.py --channels-last      # the fix by hand, for plain pairs
"""
from __future__ import annotations

import argparse

import timm
import timm.optim
import torch
from own_clock import StepClock

p = argparse.ArgumentParser()
p.add_argument("--model", default="efficientnet_b0")
p.add_argument("--compile", nargs="?", const="default", metavar="MODE", help="model = torch.compile(model, mode=MODE)")
p.add_argument("--channels-last", action="store_true", help="model and batch in torch.channels_last")
p.add_argument("--steps", type=int, default=40)
p.add_argument("--batch", type=int, default=64)
args = p.parse_args()

torch.manual_seed(0)
layout = torch.channels_last if args.channels_last else torch.contiguous_format
model = timm.create_model(args.model, pretrained=False, num_classes=1000).cuda().to(memory_format=layout)
opt = timm.optim.create_optimizer_v2(model, opt="adamw", lr=1e-3, weight_decay=0.05)
step_fn = torch.compile(model, mode=args.compile) if args.compile else model
x = torch.randn(args.batch, 3, 224, 224, device="cuda").to(memory_format=layout)
y = torch.randint(0, 1000, (args.batch,), device="cuda")
clock = StepClock()
for _ in range(args.steps):
    loss = torch.nn.functional.cross_entropy(step_fn(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    clock.tick()
torch.cuda.synchronize()
clock.report()
