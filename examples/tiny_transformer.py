"""A small transformer training loop, profiled with torch.profiler and analyzed by roofscope.

    python examples/tiny_transformer.py --out roofscope-out/demo [--device cpu|cuda] [--force]

Writes a Run directory OUT (run.json, trace.json.gz, summary.json, and ceilings.json measured
here on CPU) plus OUT/report.html and OUT/analysis.json, and prints the terminal summary.
`roofscope analyze OUT` re-analyzes it later. Runs on CPU-only machines.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import roofscope
from roofscope.errors import RoofscopeError
from roofscope.fileio import atomic_write
from roofscope.reports.console import render_summary
from roofscope.reports.export import to_json
from roofscope.reports.html import render_html
from roofscope.run import new_meta, write_run


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(att)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("roofscope-out/demo"))
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--force", action="store_true", help="overwrite an existing output folder")
    args = ap.parse_args()
    if args.out.exists() and not args.force:  # fail before spending time profiling
        print(f"roofscope: error: {args.out} already exists; pass --force to overwrite it", file=sys.stderr)
        return 2

    gpu = args.device == "cuda"
    d, heads, batch, seq = (1024, 16, 8, 512) if gpu else (256, 4, 8, 128)
    dtype = torch.bfloat16 if gpu else torch.float32
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(d, heads) for _ in range(args.layers)]).to(args.device, dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, seq, d, device=args.device, dtype=dtype)

    def step() -> None:
        loss = model(x).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if gpu else [])
    sched = torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            raw = Path(tmp) / "trace.json"
            with torch.profiler.profile(activities=acts, schedule=sched, record_shapes=True,
                                        on_trace_ready=lambda p: p.export_chrome_trace(str(raw))) as prof:
                for _ in range(4):
                    step()
                    prof.step()
            if gpu:
                torch.cuda.synchronize()
            ceilings = None
            if not gpu:
                from roofscope.microbench.cpu import measure_cpu
                ceilings = measure_cpu()
            analysis = roofscope.analyze(raw, ceilings=ceilings)
            meta = new_meta([sys.executable] + sys.argv, steps=analysis.summary()["steps"], exit_status=0,
                            device={"name": analysis.summary()["device"]})
            run = write_run(args.out, meta=meta, trace=raw, ceilings=ceilings, summary=analysis.summary(),
                            force=args.force)
        sys.stdout.write(render_summary(analysis))
        atomic_write(run.path / "analysis.json", to_json(analysis), force=True)
        report = atomic_write(run.path / "report.html", render_html(analysis), force=True)
    except RoofscopeError as e:
        print(f"roofscope: error: {e}", file=sys.stderr)
        return e.exit_code
    print(f"\nreport: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
