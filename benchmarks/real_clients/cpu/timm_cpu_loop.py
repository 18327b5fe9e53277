"""A new user's CPU training loop over a timm model: random images through a DataLoader, AdamW.

Own timer: wall clock per iteration (loader included) with time.perf_counter; the median of the second half is
printed as `median step X ms (own timer)`.

    python timm_cpu_loop.py [--model resnet18] [--steps 30] [--batch 16] [--size 96] [--workers 0]
"""
import argparse
import statistics
import time

import timm
import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--model", default="resnet18")
p.add_argument("--steps", type=int, default=30)
p.add_argument("--batch", type=int, default=16)
p.add_argument("--size", type=int, default=96)
p.add_argument("--workers", type=int, default=0)
args = p.parse_args()
torch.manual_seed(0)
model = timm.create_model(args.model, pretrained=False, num_classes=100)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.utils.data.TensorDataset(torch.randn(args.batch * args.steps, 3, args.size, args.size),
                                      torch.randint(0, 100, (args.batch * args.steps,)))
loader = torch.utils.data.DataLoader(data, batch_size=args.batch, num_workers=args.workers)
times = []
t = time.perf_counter()
for x, y in loader:
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    now = time.perf_counter()
    times.append(now - t)
    t = now
print(f"loss {loss.item():.4f}")
half = times[len(times) // 2:]
print(f"median step {1e3 * statistics.median(half):.2f} ms (own timer, {len(half)} steps)")
