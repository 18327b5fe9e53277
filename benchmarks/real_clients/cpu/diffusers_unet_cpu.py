"""A new user's CPU diffusion training loop, as diffusers' train_unconditional example writes it: a small
random-init UNet2DModel (convolutions, GroupNorm, SiLU, self-attention in the lower blocks), DDPM noise, an MSE
loss on the predicted noise, AdamW.

Own timer: wall clock per optimizer step with time.perf_counter; the median of the second half is printed as
`median step X ms (own timer)`.

    python diffusers_unet_cpu.py [--steps 20] [--batch 8] [--size 32] [--compile] [--channels-last]

--compile and --channels-last are roofscope's fixes as its text writes them for a plain loop over a root module
(`model = torch.compile(model)`; `model = model.to(memory_format=torch.channels_last)` and each batch), to check
its verdicts in plain runs.
"""
import argparse
import time

import torch
import torch.nn.functional as F
from diffusers import DDPMScheduler, UNet2DModel

from own_timer import report   # this folder's: the timer line plain_pairs.sh reads

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--size", type=int, default=32)
p.add_argument("--compile", action="store_true")
p.add_argument("--channels-last", action="store_true")
args = p.parse_args()
torch.manual_seed(0)
model = UNet2DModel(sample_size=args.size, in_channels=3, out_channels=3, layers_per_block=1,
                    block_out_channels=(32, 64, 64), norm_num_groups=8,
                    down_block_types=("DownBlock2D", "AttnDownBlock2D", "AttnDownBlock2D"),
                    up_block_types=("AttnUpBlock2D", "AttnUpBlock2D", "UpBlock2D"))
layout = torch.channels_last if args.channels_last else torch.contiguous_format
model = model.to(memory_format=layout)
if args.compile:
    model = torch.compile(model)
noise_scheduler = DDPMScheduler(num_train_timesteps=1000)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
images = torch.randn(args.steps * args.batch, 3, args.size, args.size)
loader = torch.utils.data.DataLoader(images, batch_size=args.batch, shuffle=True)
times, t, loss = [], time.perf_counter(), None
for clean in loader:
    clean = clean.to(memory_format=layout)
    noise = torch.randn_like(clean)
    steps = torch.randint(0, noise_scheduler.config.num_train_timesteps, (clean.shape[0],))
    noisy = noise_scheduler.add_noise(clean, noise, steps)
    pred = model(noisy, steps, return_dict=False)[0]
    loss = F.mse_loss(pred, noise)
    loss.backward()
    opt.step()
    opt.zero_grad()
    now = time.perf_counter()
    times.append(now - t)
    t = now
print(f"loss {loss.item():.4f}")
report(times)
