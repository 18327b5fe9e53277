"""What each instrument costs the program: a host-bound GPU decode and a host-bound CPU loop.

    python benchmarks/bench_instrument_overhead.py                  # decode on CUDA (needs transformers) + CPU loop
    python benchmarks/bench_instrument_overhead.py --only cpu --reps 3

Every configuration runs in a fresh process (nothing lingers from one to the next), in
interleaved order, ``--reps`` times; the figure is the program's own time per unit (a decode
token: the median gap between tokens reaching a streamer, over generate() rounds 1..; a CPU
step: the median host time between steps), and the ratio is over the median of the plain
runs. Prints a markdown table (docs/overhead.md).

Configurations: ``plain``; ``hooks`` (global no-op module forward hooks, what a module labeller
costs); ``nvml`` (roofscope's NVML sampler at 50 Hz); ``steptimer`` (roofscope's per-step host
timestamp and CUDA event, what stays after the profiled window); ``prof_cuda``, ``prof_cpu``,
``prof_cpu_cuda``, ``prof_shapes``, ``prof_stack`` (torch.profiler recording, more and more
detail: what the profiled steps pay); ``after_teardown0`` / ``after_teardown1``: one round
profiled (CPU+CUDA, shapes), then the rounds after it, with Kineto's CUPTI teardown off / on
(the profiler's lingering cost, and roofscope's cure for it).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DECODE = ("plain", "hooks", "nvml", "steptimer", "prof_cuda", "prof_cpu_cuda", "prof_shapes", "prof_stack",
          "after_teardown0", "after_teardown1")
CPU = ("plain", "hooks", "steptimer", "prof_cpu", "prof_shapes", "prof_stack")


def _profiler(config: str, cuda: bool):
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = {"prof_cuda": [ProfilerActivity.CUDA], "prof_cpu": [ProfilerActivity.CPU]}.get(
        config, [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else []))
    return profile(activities=acts, record_shapes=config in ("prof_shapes", "prof_stack") or config.startswith("after"),
                   with_stack=config == "prof_stack")


def _instrument(config: str, model, cuda: bool):
    """Install what ``config`` measures; returns a per-step callback (or None)."""
    import torch

    if config == "hooks":
        from torch.nn.modules import module as nn_module

        nn_module.register_module_forward_pre_hook(lambda m, a: None)
        nn_module.register_module_forward_hook(lambda m, a, o: None)
    elif config == "nvml":
        sys.path.insert(0, str(ROOT))
        from roofscope.collectors.nvml import NvmlSampler

        NvmlSampler(hz=50).start()
    elif config == "steptimer":
        sys.path.insert(0, str(ROOT))
        from roofscope.collectors.steptimes import StepTimer

        timer = StepTimer(cuda=cuda)
        model.register_forward_pre_hook(lambda m, a: timer.mark("unprofiled"))
    return None


def decode(config: str, rounds: int) -> float:
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks" / "real_clients"))
    from own_clock import gpt2_fp16, token_clock

    if config == "after_teardown1":
        os.environ["TEARDOWN_CUPTI"] = "1"
    elif config == "after_teardown0":
        os.environ["TEARDOWN_CUPTI"] = "0"

    model = gpt2_fp16()
    ids = torch.randint(0, 50257, (16, 64), device="cuda")
    _instrument(config, model, True)
    prof = _profiler(config, True) if config.startswith(("prof", "after")) else None
    tpots = []
    for r in range(rounds):
        if prof is not None and r == 1:
            prof.start()
        clock = token_clock()
        with torch.no_grad():
            model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, max_new_tokens=48,
                           min_new_tokens=48, pad_token_id=0, streamer=clock)
        torch.cuda.synchronize()
        if prof is not None and config.startswith("after") and r == 1:
            prof.stop()
            continue          # the profiled round: only the rounds after it count
        if r >= 1:
            tpots.append(statistics.median(b - a for a, b in zip(clock.t[1:], clock.t[2:])))
    if prof is not None and not config.startswith("after"):
        prof.stop()
    return statistics.median(tpots)


def cpu_loop(config: str, steps: int) -> float:
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU()) for _ in range(8)])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(8, 32)
    _instrument(config, model, False)
    prof = _profiler(config, False) if config.startswith("prof") else None
    t = []
    for i in range(steps):
        if prof is not None and i == steps // 5:
            prof.start()
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
        t.append(time.perf_counter())
    if prof is not None:
        prof.stop()
    gaps = [b - a for a, b in zip(t, t[1:])][steps // 5:]
    return statistics.median(gaps)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("decode", "cpu"))
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--config")
    ap.add_argument("--workload", choices=("decode", "cpu"))
    args = ap.parse_args()
    if args.config:   # one measurement, in this fresh process
        v = decode(args.config, 5) if args.workload == "decode" else cpu_loop(args.config, 600)
        print(json.dumps({"value": v}))
        return 0
    import torch

    plans = []
    if args.only != "cpu" and torch.cuda.is_available():
        plans.append(("decode", DECODE, "ms/token"))
    if args.only != "decode":
        plans.append(("cpu", CPU, "ms/step"))
    for workload, configs, unit in plans:
        got: dict[str, list[float]] = {c: [] for c in configs}
        for _ in range(args.reps):
            for c in configs:
                res = subprocess.run([sys.executable, __file__, "--workload", workload, "--config", c],
                                     capture_output=True, text=True, timeout=600)
                line = [x for x in res.stdout.splitlines() if x.startswith("{")]
                if res.returncode or not line:
                    print(f"{workload} {c} failed: {res.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
                    continue
                got[c].append(json.loads(line[-1])["value"])
        base = statistics.median(got["plain"]) if got["plain"] else float("nan")
        print(f"\n| {workload} configuration | {unit} (each run) | ratio to plain |\n|---|---|---:|")
        for c in configs:
            vals = got[c]
            if not vals:
                print(f"| {c} | failed | - |")
                continue
            print(f"| {c} | {', '.join(f'{v * 1e3:.3f}' for v in vals)} | {statistics.median(vals) / base:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
