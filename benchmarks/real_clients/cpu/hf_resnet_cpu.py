"""A new user's CPU image classifier from transformers: a small random-init ResNetForImageClassification
(convolutions, batch norm, ReLU, max-pooling), cross-entropy through the model's own `labels=`, AdamW, a plain
loop. A client the CPU rules were not tuned on.

Own timer: wall clock per optimizer step with time.perf_counter; the median of the second half is printed as
`median step X ms (own timer)`.

    python hf_resnet_cpu.py [--steps 20] [--batch 8] [--size 64] [--compile] [--channels-last] [--threads N]

--compile and --channels-last are roofscope's fixes as its text writes them for a plain loop over a root module,
to check its verdicts in plain runs.
"""
import argparse
import time

import torch
from transformers import ResNetConfig, ResNetForImageClassification

from own_timer import report   # this folder's: the timer line plain_pairs.sh reads

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--size", type=int, default=64)
p.add_argument("--compile", action="store_true")
p.add_argument("--channels-last", action="store_true")
p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads(N) (0: torch's default)")
args = p.parse_args()
if args.threads:
    torch.set_num_threads(args.threads)
torch.manual_seed(0)
config = ResNetConfig(embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1],
                      layer_type="bottleneck", num_labels=10)
model = ResNetForImageClassification(config)
layout = torch.channels_last if args.channels_last else torch.contiguous_format
model = model.to(memory_format=layout)
if args.compile:
    model = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
images = torch.randn(args.batch, 3, args.size, args.size).to(memory_format=layout)
labels = torch.randint(0, 10, (args.batch,))
times = []
for step in range(args.steps):
    start = time.perf_counter()
    loss = model(pixel_values=images, labels=labels).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    times.append(time.perf_counter() - start)
report(times)
