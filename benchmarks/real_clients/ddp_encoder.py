"""A DDP training loop as people write it: torch's own nn.TransformerEncoder (6 layers), bf16 autocast,
AdamW, run under torchrun; `--stall-rank R --stall-ms MS` makes rank R do MS of extra host work per step
(a sleep before its forward: a slow data loader or logging on one rank). `--share-gpu` puts every rank on
cuda:0 over gloo (NCCL refuses two ranks on one GPU), for a machine of one GPU. It prints its own step timer
(CUDA events between step ends, median of the second half), per rank, for checking roofscope's job view
against (issue 42)."""
from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--stall-rank", type=int, default=-1)
    ap.add_argument("--stall-ms", type=float, default=0.0)
    ap.add_argument("--share-gpu", action="store_true")
    args = ap.parse_args()
    rank, local = int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0))
    if args.share_gpu:
        local = 0
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    if args.share_gpu:
        dist.init_process_group("gloo")
    else:
        dist.init_process_group("nccl", device_id=device)
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(args.d_model, nhead=16, dim_feedforward=4 * args.d_model, batch_first=True)
    model = DistributedDataParallel(nn.TransformerEncoder(layer, args.layers).to(device), device_ids=[local])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device=device).manual_seed(100 + rank)
    x = torch.randn(args.batch, args.seq, args.d_model, device=device, generator=gen)
    ends = []
    for _ in range(args.steps):
        if rank == args.stall_rank and args.stall_ms > 0:
            time.sleep(args.stall_ms / 1e3)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.mse_loss(model(x).float(), x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        ends.append(torch.cuda.Event(enable_timing=True))
        ends[-1].record()
    torch.cuda.synchronize()
    steps = sorted(a.elapsed_time(b) for a, b in zip(ends[len(ends) // 2:], ends[len(ends) // 2 + 1:]))
    print(f"ddp_encoder: rank {rank}, own step median {steps[len(steps) // 2]:.2f} ms over the last"
          f" {len(steps)} steps (stall {args.stall_ms:g} ms on rank {args.stall_rank})", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
