"""LoRA fine-tuning with gradient accumulation, written as PEFT users write it (without needing peft):
a small transformer whose attention and MLP Linears are frozen and wrapped with low-rank adapters, bf16
autocast, AdamW over the adapters, 4 micro-batches per optimizer step. The issue-37 client whose
`torch.compile(mode="reduce-overhead")` crashed ("accessing tensor output of CUDAGraphs that has been
overwritten by a subsequent run"): roofscope must block that fix (several forwards per step).

    python benchmarks/real_clients/lora_accum.py                       # eager
    python benchmarks/real_clients/lora_accum.py --compile             # fusion only
    python benchmarks/real_clients/lora_accum.py --compile reduce-overhead --mark-step   # graphs, marked per forward
    roofscope run benchmarks/real_clients/lora_accum.py
    roofscope run benchmarks/real_clients/lora_accum.py --device cpu --steps 6 --batch 1 --seq 32 \
        --layers 1 --d-model 64      # the CPU Run in tests/data/cpu_lora_accum_run
"""
from __future__ import annotations

import argparse

import torch
from torch import nn

from own_clock import StepClock

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=30, help="optimizer steps")
p.add_argument("--accum", type=int, default=4, help="micro-batches per optimizer step")
p.add_argument("--batch", type=int, default=4)
p.add_argument("--seq", type=int, default=256)
p.add_argument("--layers", type=int, default=6)
p.add_argument("--d-model", type=int, default=512)
p.add_argument("--compile", nargs="?", const="default", metavar="MODE", help="model = torch.compile(model, mode=MODE)")
p.add_argument("--mark-step", action="store_true",
               help="torch.compiler.cudagraph_mark_step_begin() before each forward")
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
args = p.parse_args()
dev = args.device


class LoraLinear(nn.Module):
    def __init__(self, base: nn.Linear, r: int = 8) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        self.a = nn.Parameter(torch.randn(r, base.in_features) * 0.01)
        self.b = nn.Parameter(torch.zeros(base.out_features, r))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.a.t()) @ self.b.t() * 2.0


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = LoraLinear(nn.Linear(d, 3 * d)), LoraLinear(nn.Linear(d, d))
        self.up, self.down = LoraLinear(nn.Linear(d, 4 * d)), LoraLinear(nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d)
        x = x + self.out(a)
        return x + self.down(nn.functional.gelu(self.up(self.n2(x))))


class LoraLM(nn.Module):
    def __init__(self, vocab: int = 8192, d: int = 512, layers: int = 6, heads: int = 8) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d).requires_grad_(False)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.head = nn.Linear(d, vocab).requires_grad_(False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        for blk in self.blocks:
            x = blk(x)
        return self.head(x)


model = LoraLM(d=args.d_model, layers=args.layers).to(dev)
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
if args.compile:
    model = torch.compile(model, mode=None if args.compile == "default" else args.compile)
clock = StepClock()
for step in range(args.steps):
    for _ in range(args.accum):
        ids = torch.randint(0, 8192, (args.batch, args.seq), device=dev)
        if args.mark_step:
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(dev, dtype=torch.bfloat16):
            logits = model(ids)
        loss = nn.functional.cross_entropy(logits.float().view(-1, logits.shape[-1]), ids.view(-1)) / args.accum
        loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    clock.tick()
if dev == "cuda":
    torch.cuda.synchronize()
clock.report()
