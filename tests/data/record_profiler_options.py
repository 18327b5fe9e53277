#!/usr/bin/env python3
"""Record one small GPU trace per torch.profiler option a user might set (fixtures for
tests/test_profiler_options.py): what each option adds to or takes from the Kineto JSON must not
stop roofscope from reading it.

    python tests/data/record_profiler_options.py --out DIR

Writes DIR/opt_<name>.json.gz for each variant (gzip, mtime 0) and prints one line per trace.
The workload per step: a pageable and a pinned host->device copy, a 3-layer MLP forward and
backward in bf16, an SGD step and a .item() sync; batch 64, width 512.
"""
from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import shutil
import tempfile

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

CPU_CUDA = [ProfilerActivity.CPU, ProfilerActivity.CUDA]


def workload():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(),
                          nn.Linear(512, 512)).cuda().to(torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    pageable = torch.randn(64, 512)
    pinned = torch.randn(64, 512).pin_memory()

    def step():
        with record_function("data"):
            x = pageable.to("cuda").to(torch.bfloat16)
            y = pinned.to("cuda", non_blocking=True).to(torch.bfloat16)
        with record_function("forward"):
            loss = (model(x) - y).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    return model, step


def _export(prof, out: str, name: str) -> None:
    tmp = os.path.join(tempfile.mkdtemp(), "t.json")
    prof.export_chrome_trace(tmp)
    _gzip(tmp, out, name)


def _gzip(src: str, out: str, name: str) -> None:
    raw = gzip.decompress(open(src, "rb").read()) if src.endswith(".gz") else open(src, "rb").read()
    dst = os.path.join(out, f"opt_{name}.json.gz")
    with open(dst, "wb") as f:
        f.write(gzip.compress(raw, compresslevel=9, mtime=0))
    doc = json.loads(raw)
    cats: dict[str, int] = {}
    for e in doc.get("traceEvents", []):
        cats[str(e.get("cat"))] = cats.get(str(e.get("cat")), 0) + 1
    print(f"{name}: {os.path.getsize(dst):,} B gz, {len(raw):,} B JSON, categories {cats}", flush=True)


def scheduled(out: str, name: str, steps: int = 3, repeat: int = 1, **kwargs) -> None:
    """wait 1, warmup 1, active 1 (``repeat`` cycles): one recorded step per cycle, exported with
    export_chrome_trace after the last."""
    _, step = workload()
    with profile(activities=kwargs.pop("activities", CPU_CUDA),
                 schedule=schedule(wait=1, warmup=1, active=1, repeat=repeat), **kwargs) as prof:
        for _ in range(steps):
            step()
            prof.step()
    _export(prof, out, name)


def tensorboard(out: str) -> None:
    """tensorboard_trace_handler(use_gzip=True), two cycles of the schedule: the first file is kept."""
    _, step = workload()
    logdir = tempfile.mkdtemp()
    with profile(activities=CPU_CUDA, schedule=schedule(wait=1, warmup=1, active=1, repeat=2),
                 on_trace_ready=tensorboard_trace_handler(logdir, worker_name="rank0", use_gzip=True)) as prof:
        for _ in range(6):
            step()
            prof.step()
    files = sorted(glob.glob(os.path.join(logdir, "*.pt.trace.json.gz")))
    print(f"tensorboard handler wrote {[os.path.basename(f) for f in files]}")
    _gzip(files[0], out, "tensorboard")
    shutil.rmtree(logdir)


def cuda_graph(out: str) -> None:
    """A forward captured in a CUDA graph and replayed three times under the profiler."""
    model, _ = workload()
    static_x = torch.randn(64, 512, device="cuda", dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g):
        static_y = model(static_x)
    with profile(activities=CPU_CUDA, record_shapes=True) as prof:
        for i in range(3):
            with record_function(f"ProfilerStep#{i}"):
                static_x.copy_(torch.randn(64, 512, device="cuda", dtype=torch.bfloat16))
                g.replay()
                static_y.sum().item()
    _export(prof, out, "cuda_graph")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    out = ap.parse_args().out
    os.makedirs(out, exist_ok=True)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    scheduled(out, "defaults")                                     # record_shapes off (torch's default)
    scheduled(out, "shapes", record_shapes=True)
    scheduled(out, "stack", record_shapes=True, with_stack=True)
    scheduled(out, "modules", with_modules=True, with_stack=True)
    scheduled(out, "memory", record_shapes=True, profile_memory=True)
    scheduled(out, "flops", record_shapes=True, with_flops=True)
    scheduled(out, "acc_events", steps=6, repeat=2, record_shapes=True, acc_events=True)  # both cycles kept
    scheduled(out, "experimental", record_shapes=True, with_stack=True,
              experimental_config=torch._C._profiler._ExperimentalConfig(verbose=True))
    scheduled(out, "cuda_activity_only", activities=[ProfilerActivity.CUDA])
    scheduled(out, "cpu_activity_only", activities=[ProfilerActivity.CPU], record_shapes=True)
    tensorboard(out)
    cuda_graph(out)


if __name__ == "__main__":
    main()
