"""Data-parallel (DDP) training of a Linear+GELU stack: the multi-GPU workload to profile.

    torchrun --nproc-per-node 2 examples/ddp.py --steps 20            # GPUs: NCCL, bf16 autocast
    torchrun --nproc-per-node 2 examples/ddp.py --device cpu          # CPU: gloo (what CI runs)
    python examples/ddp.py --steps 20                                 # one process, no process group
    torchrun --nproc-per-node 2 -m roofscope run examples/ddp.py      # profiled, one part per rank

Every rank trains on its own fixed random batch of `--batch` rows, so the single-process run
does the same per-rank work as each rank of the DDP run: the difference between them is the
scaling tax (gradient all-reduce and waiting for the slowest rank). `--delay-rank R --delay-ms MS`
makes rank R sleep on the host before every backward, an artificial straggler. Nothing here
calls roofscope: steps come from `optimizer.step()`.
"""
from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

# The model is mlp.py's Linear+GELU stack; this script's folder is sys.path[0] however it is
# launched (python, torchrun, roofscope run), as for any script importing a sibling module.
from mlp import build_mlp


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--hidden", type=int, help="layer width [default: 4096 on GPU, 256 on CPU]")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--batch", type=int, help="rows per rank and step [default: 8192 on GPU, 64 on CPU]")
    ap.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP gradient bucket size")
    ap.add_argument("--delay-rank", type=int, help="rank that sleeps before every backward")
    ap.add_argument("--delay-ms", type=float, default=0.0, help="how long --delay-rank sleeps")
    args = ap.parse_args(argv)
    gpu = args.device == "cuda"
    args.hidden = args.hidden or (4096 if gpu else 256)
    args.batch = args.batch or (8192 if gpu else 64)
    if min(args.steps, args.hidden, args.layers, args.batch) < 1:
        ap.error("--steps, --hidden, --layers and --batch must be at least 1")
    if args.delay_ms < 0:
        ap.error("--delay-ms must be at least 0")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    rank = int(os.environ.get("RANK", "0"))
    if args.device == "cuda":
        # Before init_process_group, so NCCL binds each rank to its own GPU.
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    if distributed:
        if device.type == "cuda":
            dist.init_process_group("nccl", device_id=device)  # binds the group (and barrier) to this GPU
        else:
            dist.init_process_group("gloo")
    torch.manual_seed(0)  # the same initial weights on every rank, as DDP expects
    model: nn.Module = build_mlp(args.hidden, args.layers).to(device)
    if distributed:
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                        bucket_cap_mb=args.bucket_cap_mb)
    opt = (torch.optim.AdamW(model.parameters(), lr=1e-4) if args.optimizer == "adamw"
           else torch.optim.SGD(model.parameters(), lr=1e-3))
    gen = torch.Generator().manual_seed(1000 + rank)  # each rank's own data shard
    x = torch.randn(args.batch, args.hidden, generator=gen).to(device)
    y = torch.randn(args.batch, 1, generator=gen).to(device)
    delayed = args.delay_rank == rank and args.delay_ms > 0
    # The script's own step timer: the time between consecutive step ends (a CUDA event per step on a GPU,
    # read once at the end, so it adds no sync), for checking a profiler's figures against.
    ends: list = []
    t0 = time.perf_counter()
    for _ in range(args.steps):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = F.mse_loss(model(x).float(), y)
        if delayed:
            time.sleep(args.delay_ms / 1000)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device.type == "cuda":
            ends.append(torch.cuda.Event(enable_timing=True))
            ends[-1].record()
        else:
            ends.append(time.perf_counter())
    final = loss.item()  # waits for the device, so the wall time below covers the work
    wall = time.perf_counter() - t0
    steps_ms = ([a.elapsed_time(b) for a, b in zip(ends, ends[1:])] if device.type == "cuda"
                else [(b - a) * 1e3 for a, b in zip(ends, ends[1:])])
    later = sorted(steps_ms[len(steps_ms) // 2:])   # the second half of the steps: warm
    median = later[len(later) // 2] if later else float("nan")
    world = dist.get_world_size() if distributed else 1
    print(f"ddp example: rank {rank} of {world}, {args.steps} steps in {wall:.3f} s"
          f" ({wall / args.steps * 1e3:.2f} ms/step wall), median step {median:.2f} ms (own timer, second half),"
          f" final loss {final:.4f}", flush=True)
    if distributed:
        # Leave together: a gloo rank whose peer tears the group down under it can abort
        # ("terminate called without an active exception").
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
