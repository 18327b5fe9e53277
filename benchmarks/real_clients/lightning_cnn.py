"""PyTorch Lightning: a small CNN, bf16-mixed, AdamW (Lightning calls optimizer.step(closure)).

    roofscope run benchmarks/real_clients/lightning_cnn.py
    roofscope run benchmarks/real_clients/lightning_cnn.py --compile     # torch.compile(model)
"""
from __future__ import annotations

import argparse

import lightning as L
import torch
from torch import nn
from own_clock import StepClock

p = argparse.ArgumentParser()
p.add_argument("--compile", nargs="?", const="default", metavar="MODE",
               help="model = torch.compile(model, mode=MODE) before fit")
p.add_argument("--steps", type=int, default=60)
p.add_argument("--batch", type=int, default=256)
args = p.parse_args()


class SmallCNN(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        def block(cin: int, cout: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(),
                                 nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(),
                                 nn.MaxPool2d(2))
        self.net = nn.Sequential(block(3, 64), block(64, 128), block(128, 256), nn.AdaptiveAvgPool2d(1),
                                 nn.Flatten(), nn.Linear(256, 10))

    def training_step(self, batch, _):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


x = torch.randn(args.batch * (args.steps + 1), 3, 32, 32)
y = torch.randint(0, 10, (len(x),))
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=args.batch)
model = SmallCNN()
if args.compile:
    model = torch.compile(model, mode=args.compile)
clock = StepClock()


class Tick(L.Callback):
    def on_train_batch_end(self, *_):
        clock.tick()


trainer = L.Trainer(accelerator="gpu", devices=1, precision="bf16-mixed", max_steps=args.steps, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                    callbacks=[Tick()])
trainer.fit(model, loader)
clock.report()
