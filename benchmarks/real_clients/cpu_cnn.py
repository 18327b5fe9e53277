"""A small CNN trained on the CPU, as a user would write it: a DataLoader over synthetic images, conv /
BatchNorm / ReLU / max-pool blocks, cross-entropy, SGD. What the CPU rules are checked on
(docs/diagnosis.md, "CPU runs"): the thread count against the cores the process gets, channels_last for
the convolutions, DataLoader workers. Prints its own steady step time (own_clock.py).

    python benchmarks/real_clients/cpu_cnn.py --threads 2
    roofscope run -o cnn2 benchmarks/real_clients/cpu_cnn.py --threads 2
    roofscope run -o cnn1 benchmarks/real_clients/cpu_cnn.py --threads 1 --channels-last
    roofscope run -o load benchmarks/real_clients/cpu_cnn.py --threads 1 --decode 4   # batches built in the step
"""
from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from own_clock import StepClock

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=30)
p.add_argument("--batch", type=int, default=16)
p.add_argument("--size", type=int, default=64, help="image side in pixels")
p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
p.add_argument("--channels-last", action="store_true")
p.add_argument("--workers", type=int, default=0, help="DataLoader num_workers")
p.add_argument("--decode", type=int, default=0, help="resize passes per sample: host work a dataset's decoding costs")
args = p.parse_args()
if args.threads:
    torch.set_num_threads(args.threads)


class Images(Dataset):
    """Random images made per item, as a decoding/augmenting dataset spends host time per sample."""

    def __init__(self, n: int, size: int) -> None:
        self.n, self.size = n, size

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        x = torch.rand(3, self.size, self.size, generator=g)
        for _ in range(args.decode):   # decoding and augmentation stand-in: a 4x bicubic resize and back
            x = torch.nn.functional.avg_pool2d(torch.nn.functional.interpolate(x[None], scale_factor=4,
                                                                               mode="bicubic"), 4)[0]
        x = (x - 0.5) / 0.25     # normalization, per sample
        return x, i % 10


def block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                         nn.MaxPool2d(2))


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(block(3, 32), block(32, 64), block(64, 128))
        self.head = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean((2, 3)))


model = SmallCNN()
fmt = torch.channels_last if args.channels_last else torch.contiguous_format
model = model.to(memory_format=fmt)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loader = DataLoader(Images(args.batch * args.steps, args.size), batch_size=args.batch, num_workers=args.workers)
clock = StepClock()
for x, y in loader:
    x = x.to(memory_format=fmt)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    clock.tick()
clock.report(skip=5)
