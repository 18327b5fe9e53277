"""A new user's CPU Lightning fit: a small CNN on random images, Trainer(accelerator="cpu").

Own timer: a Callback times each training batch (on_train_batch_start to on_train_batch_end); the median of
the second half is printed as `median step X ms (own timer)`.

    python lightning_cpu_cnn.py [--steps 40] [--batch 32] [--compile] [--channels-last]

--compile and --channels-last are roofscope's fixes as its text writes them (self.body = torch.compile(self.body)
in __init__; the module and each batch in channels_last), to check its verdicts in plain runs.
"""
import argparse
import time

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F

from own_timer import report   # this folder's: the timer line plain_pairs.sh reads

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=40)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--compile", action="store_true")
p.add_argument("--channels-last", action="store_true")
args = p.parse_args()
torch.manual_seed(0)


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))
        if args.compile:
            self.body = torch.compile(self.body)
        if args.channels_last:
            self.body = self.body.to(memory_format=torch.channels_last)

    def training_step(self, batch, i):
        x, y = batch
        if args.channels_last:
            x = x.to(memory_format=torch.channels_last)
        loss = F.cross_entropy(self.body(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


class Timer(L.Callback):
    def __init__(self):
        self.times, self.t = [], 0.0

    def on_train_batch_start(self, *a):
        self.t = time.perf_counter()

    def on_train_batch_end(self, *a):
        self.times.append(time.perf_counter() - self.t)


data = torch.utils.data.TensorDataset(torch.randn(args.batch * args.steps, 3, 64, 64),
                                      torch.randint(0, 10, (args.batch * args.steps,)))
timer = Timer()
trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=args.steps, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, callbacks=[timer])
trainer.fit(Net(), torch.utils.data.DataLoader(data, batch_size=args.batch))
report(timer.times)
