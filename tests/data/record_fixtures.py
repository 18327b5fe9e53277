#!/usr/bin/env python3
"""Record small, real torch.profiler (Kineto) traces used as roofscope test fixtures.

For each fixture this writes
  PREFIX_NAME.json.gz        (cpu_block.json.gz for the CPU eager block) the Chrome trace of ONE active profiler step
                             (schedule wait=1, warmup=1, active=1, repeat=1)
  PREFIX_NAME.expected.json  ground truth measured in the same process:
                             FlopCounterMode FLOPs per aten op (one un-profiled step),
                             FLOPs per (op, input shapes), the config, torch version,
                             device name and the median wall time of one step.

Fixtures
  eager_block     pre-LN transformer block, bf16 parameters (no autocast), eager,
                  forward + backward + AdamW(foreach=True) step
  compiled_block  the same block under torch.compile (default mode), forward + backward
                  + the same eager AdamW step; TORCHINDUCTOR_BENCHMARK_KERNEL=1 so the
                  Triton kernels' cpu_ops carry kernel_num_gb / kernel_flop
  conv_block      small conv net (Conv2d + BatchNorm2d + ReLU x3, channels_last),
                  fp16 autocast (bf16 on CPU), forward + backward + SGD(momentum) step

Usage
  python tests/data/record_fixtures.py --out DIR                 # CUDA, all fixtures
  python tests/data/record_fixtures.py --out DIR --device cpu    # CPU, small shapes, eager only
  python tests/data/record_fixtures.py --inspect FILE.json.gz    # print a trace summary
"""

import os

# Must be set before torch (and Inductor's config) is imported.
os.environ.setdefault("TORCHINDUCTOR_BENCHMARK_KERNEL", "1")

import argparse  # noqa: E402
import collections  # noqa: E402
import datetime  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function, schedule  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode, flop_registry  # noqa: E402

# --------------------------------------------------------------------------- models


class Block(nn.Module):
    """Pre-LN transformer block: LN -> QKV -> causal SDPA -> proj -> +res -> LN -> MLP -> +res."""

    def __init__(self, d_model, n_heads, mlp_ratio=4):
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, mlp_ratio * d_model)
        self.fc2 = nn.Linear(mlp_ratio * d_model, d_model)

    def forward(self, x):
        b, t, c = x.shape
        h = self.n_heads
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, h, c // h).permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = a.transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(a)
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x


class ConvNet(nn.Module):
    def __init__(self, c_in=3, width=64, n_classes=10):
        super().__init__()

        def cbr(ci, co, stride):
            return [nn.Conv2d(ci, co, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(co), nn.ReLU(inplace=True)]

        self.features = nn.Sequential(*cbr(c_in, width, 1), *cbr(width, 2 * width, 2), *cbr(2 * width, 2 * width, 1))
        self.head = nn.Linear(2 * width, n_classes)

    def forward(self, x):
        x = self.features(x)
        x = x.mean(dim=(2, 3))
        return self.head(x)


# --------------------------------------------------------------------------- helpers


class FlopCallRecorder(TorchDispatchMode):
    """Records FLOPs per (aten overload, input shapes) with torch's own flop_registry formulas."""

    def __init__(self):
        super().__init__()
        self.calls = collections.OrderedDict()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        if packet in flop_registry:
            flops = int(flop_registry[packet](*args, **kwargs, out_val=out))
            shapes = [list(a.shape) if isinstance(a, torch.Tensor) else None for a in args]
            key = (str(func), json.dumps(shapes))
            rec = self.calls.setdefault(key, {"op": str(func), "input_shapes": shapes, "flops_per_call": flops, "count": 0})
            rec["count"] += 1
        return out


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_steps(step_fn, device, n=7):
    """Median wall time of one step in ms (CUDA events on GPU, perf_counter on CPU)."""
    times = []
    for _ in range(n):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step_fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            step_fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return {"median_ms": statistics.median(times), "all_ms": times, "method": "cuda_events" if device.type == "cuda" else "perf_counter"}


def count_flops(step_fn):
    with FlopCounterMode(display=False) as fc, FlopCallRecorder() as rec:
        step_fn()
    counts = fc.get_flop_counts()
    by_op = {str(k): int(v) for k, v in counts.get("Global", {}).items()}
    by_module = {m: {str(k): int(v) for k, v in d.items()} for m, d in counts.items() if m != "Global"}
    return {
        "total_flops": int(fc.get_total_flops()),
        "flops_by_op": by_op,
        "flops_by_module": by_module,
        "flops_by_call": list(rec.calls.values()),
    }


def profile_steps(step_fn, device, json_path):
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    sched = schedule(wait=1, warmup=1, active=1, repeat=1)
    with profile(activities=activities, record_shapes=True, schedule=sched,
                 on_trace_ready=lambda p: p.export_chrome_trace(json_path)) as prof:
        for _ in range(3):
            step_fn()
            prof.step()
    sync(device)


def gzip_file(src, dst):
    with open(src, "rb") as f_in, open(dst, "wb") as raw:
        # mtime=0 and no file name -> reproducible bytes for identical traces
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as f_out:
            shutil.copyfileobj(f_in, f_out)
    os.remove(src)


def env_info(device):
    info = {
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "device_type": device.type,
        "gpu_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "cuda_version": torch.version.cuda,
        "cudnn_version": torch.backends.cudnn.version() if device.type == "cuda" else None,
        "triton_version": None,
        "TORCHINDUCTOR_BENCHMARK_KERNEL": os.environ.get("TORCHINDUCTOR_BENCHMARK_KERNEL"),
        "recorded_at_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
    }
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        info["gpu_sm_count"] = p.multi_processor_count
        info["gpu_capability"] = f"{p.major}.{p.minor}"
        try:
            import triton

            info["triton_version"] = triton.__version__
        except Exception:
            pass
    return info


# --------------------------------------------------------------------------- fixtures


def make_block_step(cfg, device, compiled):
    torch.manual_seed(0)
    model = Block(cfg["d_model"], cfg["n_heads"]).to(device=device, dtype=torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    x = torch.randn(cfg["batch"], cfg["seq"], cfg["d_model"], device=device, dtype=torch.bfloat16)
    fwd = torch.compile(model) if compiled else model

    def make(mod):
        def step():
            with record_function("forward"):
                y = mod(x)
                loss = y.float().square().mean()
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
        return step

    # FLOPs are counted on the eager module (same weights/shapes): compiled code
    # does not dispatch through aten in a way FlopCounterMode can see.
    return make(fwd), make(model)


def make_conv_step(cfg, device):
    torch.manual_seed(0)
    model = ConvNet(cfg["c_in"], cfg["width"], cfg["n_classes"]).to(device=device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)
    x = torch.randn(cfg["batch"], cfg["c_in"], cfg["hw"], cfg["hw"], device=device).to(memory_format=torch.channels_last)
    target = torch.randint(0, cfg["n_classes"], (cfg["batch"],), device=device)
    amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16

    def step():
        with record_function("forward"):
            with torch.autocast(device_type=device.type, dtype=amp_dtype):
                loss = F.cross_entropy(model(x), target)
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)

    return step, step, str(amp_dtype).replace("torch.", "")


def record(name, prefix, out_dir, device, cfg, extra, step, flop_step, n_warmup):
    # The CPU eager block is the CPU-only ingestion fixture: cpu_block.json.gz.
    stem = "cpu_block" if (prefix == "cpu" and name == "eager_block") else f"{prefix}_{name}"
    print(f"== {stem}: warm-up ({n_warmup} steps)", flush=True)
    t0 = time.time()
    for _ in range(n_warmup):
        step()
    sync(device)
    print(f"   warm-up took {time.time() - t0:.1f} s", flush=True)
    timing = time_steps(step, device)
    sync(device)
    flops = count_flops(flop_step)
    sync(device)
    json_path = os.path.join(out_dir, f"{stem}.json")
    gz_path = json_path + ".gz"
    profile_steps(step, device, json_path)
    gzip_file(json_path, gz_path)
    expected = {
        "fixture": stem,
        "trace_file": os.path.basename(gz_path),
        "profiled": "one active profiler step (schedule wait=1, warmup=1, active=1, repeat=1; 3 steps, prof.step() after each)",
        "config": cfg,
        **extra,
        **env_info(device),
        "step_time": timing,
        "flop_counter": "torch.utils.flop_counter.FlopCounterMode over one un-profiled step (same shapes)",
        **flops,
    }
    with open(os.path.join(out_dir, f"{stem}.expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=False)
        f.write("\n")
    print(f"   wrote {gz_path} ({os.path.getsize(gz_path)} bytes); step median {timing['median_ms']:.3f} ms; "
          f"total FLOPs {flops['total_flops']:.4g}", flush=True)
    inspect(gz_path)


# --------------------------------------------------------------------------- inspection


def inspect(path):
    """Print what the ingestion code needs to know about a trace."""
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        tr = json.load(f)
    ev = tr.get("traceEvents", [])
    print(f"--- {os.path.basename(path)}")
    print("   top-level keys:", sorted(k for k in tr if k != "traceEvents"))
    if "deviceProperties" in tr:
        print("   deviceProperties[0]:", json.dumps(tr["deviceProperties"][0])[:400] if tr["deviceProperties"] else None)
    cats = collections.Counter(e.get("cat", f"<ph={e.get('ph')}>") for e in ev)
    print("   events by cat:", dict(cats.most_common()))
    ts_types = collections.Counter(type(e.get("ts")).__name__ for e in ev if "ts" in e)
    print("   ts types:", dict(ts_types))
    ops = [e for e in ev if e.get("cat") == "cpu_op"]
    kernels = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    ops_by_ext = collections.defaultdict(list)
    for e in ops:
        ext = e.get("args", {}).get("External id")
        if ext is not None:
            ops_by_ext[ext].append(e)
    runtime_by_corr = {e["args"]["correlation"]: e for e in ev
                       if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    matched = unmatched = 0
    launchers = collections.Counter()
    for k in kernels:
        ext = k.get("args", {}).get("External id")
        if ext in ops_by_ext:
            matched += 1
            launchers[ops_by_ext[ext][0]["name"]] += 1
        else:
            unmatched += 1
    corr_ok = sum(1 for k in kernels if k.get("args", {}).get("correlation") in runtime_by_corr)
    print(f"   kernels (kernel/memcpy/memset): {len(kernels)}; External id -> cpu_op matched {matched}, unmatched {unmatched}; "
          f"correlation -> runtime matched {corr_ok}")
    print("   kernel launchers (cpu_op name: kernels):", dict(launchers.most_common(40)))
    interesting = [n for n in launchers if any(s in n for s in ("attention", "flash", "cudnn", "conv", "efficient"))]
    print("   attention/conv launchers:", interesting)
    trit = [e for e in ops if e.get("args", {}).get("kernel_backend") == "triton"]
    if trit:
        with_gb = sum(1 for e in trit if "kernel_num_gb" in e["args"])
        with_fl = sum(1 for e in trit if "kernel_flop" in e["args"])
        nz_fl = sum(1 for e in trit if e["args"].get("kernel_flop"))
        print(f"   triton cpu_ops: {len(trit)}; with kernel_num_gb {with_gb}; with kernel_flop {with_fl} (nonzero {nz_fl})")
        print("   example triton cpu_op args:", json.dumps(trit[0]["args"])[:800])
    sample_k = next((k for k in kernels if k.get("cat") == "kernel"), None)
    if sample_k:
        print("   example kernel args:", json.dumps(sample_k["args"])[:600])
    return tr


# --------------------------------------------------------------------------- main


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/data")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--prefix", default=None, help="file name prefix (default: h100/h200/... from the GPU name, cpu on CPU)")
    ap.add_argument("--fixtures", default=None, help="comma list of eager_block,compiled_block,conv_block "
                    "(default: all on CUDA, eager_block on CPU)")
    ap.add_argument("--inspect", nargs="*", default=None, help="only print summaries of these trace files")
    args = ap.parse_args(argv)

    if args.inspect is not None:
        for p in args.inspect:
            inspect(p)
        return 0

    device = torch.device(args.device)
    if device.type == "cuda":
        gpu = torch.cuda.get_device_name(device)
        prefix = args.prefix or next((k for k in ("h100", "h200", "a100", "b200") if k in gpu.lower()), "gpu")
        block_cfg = {"batch": 4, "seq": 512, "d_model": 1024, "n_heads": 16, "mlp_ratio": 4}
        conv_cfg = {"batch": 32, "c_in": 3, "hw": 64, "width": 64, "n_classes": 10}
        fixtures = ["eager_block", "conv_block", "compiled_block"]
    else:
        prefix = args.prefix or "cpu"
        block_cfg = {"batch": 2, "seq": 64, "d_model": 128, "n_heads": 4, "mlp_ratio": 4}
        conv_cfg = {"batch": 4, "c_in": 3, "hw": 16, "width": 8, "n_classes": 10}
        fixtures = ["eager_block"]
    if args.fixtures:
        fixtures = args.fixtures.split(",")
    os.makedirs(args.out, exist_ok=True)
    print(f"torch {torch.__version__}; device {device}; "
          f"{torch.cuda.get_device_name(device) if device.type == 'cuda' else platform.processor() or 'cpu'}; "
          f"fixtures {fixtures}", flush=True)

    block_extra = {"model": "pre-LN transformer block (LayerNorm, QKV Linear, causal SDPA, out proj, residual, "
                            "LayerNorm, Linear-GELU-Linear, residual)",
                   "precision": "bf16 parameters and activations (model.to(bfloat16)), no autocast; loss in fp32",
                   "optimizer": "AdamW(lr=1e-4, foreach=True), eager",
                   "loss": "y.float().square().mean()"}
    failed = []
    for name in fixtures:
        try:
            if name == "eager_block":
                step, fstep = make_block_step(block_cfg, device, compiled=False)
                record(name, prefix, args.out, device, block_cfg, {**block_extra, "mode": "eager"}, step, fstep, 2)
            elif name == "compiled_block":
                step, fstep = make_block_step(block_cfg, device, compiled=True)
                extra = {**block_extra, "mode": "torch.compile(model) default mode; optimizer step not compiled",
                         "flop_counter_note": "FLOPs counted on the eager module (model._orig_mod equivalent), same shapes"}
                record(name, prefix, args.out, device, block_cfg, extra, step, fstep, 3)
            elif name == "conv_block":
                step, fstep, amp = make_conv_step(conv_cfg, device)
                extra = {"model": "Conv2d(3x3,no bias)+BatchNorm2d+ReLU x3 (second stride 2), global mean pool, Linear",
                         "precision": f"fp32 parameters, {amp} autocast", "memory_format": "channels_last",
                         "optimizer": "SGD(lr=0.01, momentum=0.9, foreach=True)", "loss": "cross_entropy", "mode": "eager"}
                record(name, prefix, args.out, device, conv_cfg, extra, step, fstep, 2)
            else:
                raise ValueError(f"unknown fixture {name}")
        except Exception:
            traceback.print_exc()
            failed.append(name)
    if failed:
        print("FAILED:", failed, flush=True)
        return 1
    print("all fixtures recorded", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
