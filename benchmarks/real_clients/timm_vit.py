"""timm ViT-S/16 training as timm's own train.py sets it up: timm's AdamW (foreach), bf16 autocast,
label-smoothing loss, gradient clipping. A client the analyzers were not tuned on.

    roofscope run benchmarks/real_clients/timm_vit.py
    roofscope run benchmarks/real_clients/timm_vit.py --compile
"""
from __future__ import annotations

import argparse

import timm
import timm.loss
import timm.optim
import torch
from own_clock import StepClock

p = argparse.ArgumentParser()
p.add_argument("--compile", nargs="?", const="default", metavar="MODE", help="model = torch.compile(model, mode=MODE)")
p.add_argument("--steps", type=int, default=40)
p.add_argument("--batch", type=int, default=128)
args = p.parse_args()

model = timm.create_model("vit_small_patch16_224", pretrained=False, num_classes=1000).cuda()
opt = timm.optim.create_optimizer_v2(model, opt="adamw", lr=1e-3, weight_decay=0.05)
loss_fn = timm.loss.LabelSmoothingCrossEntropy(smoothing=0.1)
step_fn = torch.compile(model, mode=args.compile) if args.compile else model
x = torch.randn(args.batch, 3, 224, 224, device="cuda")
y = torch.randint(0, 1000, (args.batch,), device="cuda")
clock = StepClock()
for _ in range(args.steps):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(step_fn(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    clock.tick()
torch.cuda.synchronize()
clock.report()
