"""torchvision Faster R-CNN training on random images and boxes, as torchvision's detection
reference trains it: the model computes its own losses (RPN, RoIAlign heads, NMS), SGD with
momentum. Random init, nothing downloaded. Prints its own per-step time (CUDA events).

    roofscope run benchmarks/real_clients/torchvision_detection.py                      # MobileNetV3 FPN
    roofscope run benchmarks/real_clients/torchvision_detection.py --model resnet50 --bf16
    roofscope run benchmarks/real_clients/torchvision_detection.py --compile
"""
from __future__ import annotations

import argparse

import torch
import torchvision

p = argparse.ArgumentParser()
p.add_argument("--model", choices=("mobilenet", "resnet50"), default="mobilenet")
p.add_argument("--bf16", action="store_true", help="torch.autocast('cuda', dtype=torch.bfloat16)")
p.add_argument("--compile", nargs="?", const="default", metavar="MODE", help="model = torch.compile(model, mode=MODE)")
p.add_argument("--steps", type=int, default=7)
p.add_argument("--batch", type=int, default=4)
p.add_argument("--size", type=int, default=640)
args = p.parse_args()

build = {"mobilenet": torchvision.models.detection.fasterrcnn_mobilenet_v3_large_fpn,
         "resnet50": torchvision.models.detection.fasterrcnn_resnet50_fpn}[args.model]
model = build(weights=None, weights_backbone=None, num_classes=91).cuda().train()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
step_fn = torch.compile(model, mode=None if args.compile == "default" else args.compile) if args.compile else model
g = torch.Generator(device="cuda").manual_seed(0)


def batch() -> tuple[list[torch.Tensor], list[dict[str, torch.Tensor]]]:
    images = [torch.rand(3, args.size, args.size, device="cuda", generator=g) for _ in range(args.batch)]
    targets = []
    for _ in range(args.batch):
        n = 8
        xy = torch.rand(n, 2, device="cuda", generator=g) * (args.size * 0.7)
        wh = torch.rand(n, 2, device="cuda", generator=g) * (args.size * 0.25) + 16
        targets.append({"boxes": torch.cat([xy, xy + wh], dim=1),
                        "labels": torch.randint(1, 91, (n,), device="cuda", generator=g)})
    return images, targets


start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
for step in range(args.steps):
    images, targets = batch()
    start.record()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.bf16):
        losses = step_fn(images, targets)
    loss = sum(losses.values())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    end.record()
    end.synchronize()
    print(f"step {step}: {start.elapsed_time(end):.2f} ms", flush=True)
