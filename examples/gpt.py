"""A GPT-style decoder-only transformer trained on random tokens, with a KV cache for decoding.

    python examples/gpt.py [--steps 10] [--device cpu|cuda] [--compile] [--layers N] [--d-model D] ...
    roofscope run examples/gpt.py --steps 10

A plain training script with no roofscope calls: `roofscope run` finds the step boundaries
from `torch.optim.Optimizer.step`. On CUDA it trains in bf16 autocast with fp32 master weights
and fused AdamW (defaults: 12 layers, d_model 1024, ~220M parameters); on CPU in fp32 with a
tiny model. Prints the median step time, tokens/s and the model FLOP/s.

Importable pieces (examples/decode.py and benchmarks use them): GPTConfig, GPT, KVCache,
model_flops_per_step, parse_args, build.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    vocab: int = 32768
    seq: int = 1024  # the longest context: the size of the position table
    d_model: int = 1024
    heads: int = 16
    layers: int = 12

    def __post_init__(self) -> None:
        if self.d_model % self.heads:
            raise ValueError(f"d_model {self.d_model} is not a multiple of heads {self.heads}")


# Per-device defaults. CUDA: a step of ~110 ms on an H200 (eager, 380 model TFLOP/s, 29 GiB),
# long enough to be a realistic training step (batch 8 takes ~31 ms). CPU: a step of ~10 ms, so
# the whole script takes a few seconds.
DEFAULTS: dict[str, dict[str, int]] = {
    "cuda": {"batch": 32, "seq": 1024, "layers": 12, "d_model": 1024, "heads": 16, "vocab": 32768},
    "cpu": {"batch": 4, "seq": 64, "layers": 2, "d_model": 128, "heads": 4, "vocab": 1024},
}


def _defaults(device: str | torch.device) -> dict[str, int]:
    return DEFAULTS["cuda" if torch.device(device).type == "cuda" else "cpu"]


class KVCache:
    """Keys and values of every layer, preallocated as (batch, heads, max_len, head_dim) and written
    in place, so a decode step allocates nothing and reads exactly the prefix it attends over."""

    def __init__(self, cfg: GPTConfig, batch: int, max_len: int, device: str | torch.device,
                 dtype: torch.dtype) -> None:
        if max_len > cfg.seq:
            raise ValueError(f"max_len {max_len} exceeds the model's context of {cfg.seq}")
        shape = (batch, cfg.heads, max_len, cfg.d_model // cfg.heads)
        self.max_len = max_len
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.layers)]


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int) -> None:
        super().__init__()
        self.heads, self.layer = cfg.heads, layer
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor, cache: KVCache | None, pos: int) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        mask, causal = None, t > 1
        if isinstance(pos, torch.Tensor):
            # Static shapes for CUDA-graph capture (decode.py --cuda-graph): one token at a
            # position held in a tensor, attending over the whole preallocated cache with the
            # positions not yet written masked out.
            cache.k[self.layer].index_copy_(2, pos.view(1), k)
            cache.v[self.layer].index_copy_(2, pos.view(1), v)
            k, v = cache.k[self.layer], cache.v[self.layer]
            mask = (torch.arange(cache.max_len, device=x.device) <= pos).view(1, -1)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            return self.proj(y.transpose(1, 2).reshape(b, t, d))
        if cache is not None:
            cache.k[self.layer][:, :, pos:pos + t] = k
            cache.v[self.layer][:, :, pos:pos + t] = v
            k, v = cache.k[self.layer][:, :, :pos + t], cache.v[self.layer][:, :, :pos + t]
            if t > 1 and pos > 0:
                # is_causal aligns the mask to the top-left corner, which is wrong once queries start
                # at pos > 0 (a chunked prefill): query i may see keys up to pos + i.
                mask = torch.ones(t, pos + t, dtype=torch.bool, device=x.device).tril(diagonal=pos)
                causal = False
        # A single new token attends to every cached key, so it needs no mask at all.
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: causal self-attention, then a 4x GELU MLP."""

    def __init__(self, cfg: GPTConfig, layer: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.attn = Attention(cfg, layer)
        self.fc1 = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.fc2 = nn.Linear(4 * cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor, cache: KVCache | None, pos: int) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), cache, pos)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    """Token + learned position embeddings, `layers` pre-LN blocks, final LayerNorm, untied LM head."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.seq, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        # GPT-2's init: small weights keep the first logits near uniform, so the loss on random
        # tokens starts at about ln(vocab) instead of far above it.
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None,
                cache: KVCache | None = None, pos: int | torch.Tensor = 0) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits (batch, t, vocab) for tokens `idx` (batch, t), and the cross-entropy loss when
        `targets` is given. With a `cache`, `idx` sits at positions pos..pos+t-1: its keys and values
        are written into the cache and attention covers the cached prefix as well."""
        t = idx.shape[1]
        limit = cache.max_len if cache is not None else self.cfg.seq
        if isinstance(pos, torch.Tensor):  # static decode step (see Attention.forward)
            x = self.tok_emb(idx) + self.pos_emb(pos.view(1))
        elif pos + t > limit:
            raise ValueError(f"positions up to {pos + t} exceed the context of {limit}")
        else:
            x = self.tok_emb(idx) + self.pos_emb(torch.arange(pos, pos + t, device=idx.device))
        for block in self.blocks:
            x = block(x, cache, pos)
        logits = self.head(self.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss


def matmul_params(cfg: GPTConfig) -> int:
    """Weights that take part in matmuls: 12*d^2 per block (qkv 3d^2, proj d^2, MLP 8d^2) plus the
    LM head d*vocab. Embedding lookups do no FLOPs; biases and LayerNorms are elementwise."""
    return 12 * cfg.layers * cfg.d_model ** 2 + cfg.d_model * cfg.vocab


def model_flops_per_step(cfg: GPTConfig, batch: int, seq: int) -> float:
    """Training FLOPs of one step (forward + backward) over batch*seq tokens.

    PaLM (Chowdhery et al. 2022, appendix B): 6*N + 12*L*H*Q*T FLOPs per token, with N the matmul
    parameters (matmul_params), L layers, H*Q = d_model and T the sequence length. The second term
    is attention's QK^T and AV. Causal masking is not halved out, as in PaLM, so MFU computed from
    this is comparable with published numbers.
    """
    per_token = 6 * matmul_params(cfg) + 12 * cfg.layers * cfg.d_model * seq
    return float(per_token * batch * seq)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line arguments; shape flags left out take the defaults of the chosen device."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--compile", action="store_true", help="wrap the model in torch.compile")
    for name in DEFAULTS["cpu"]:
        ap.add_argument(f"--{name.replace('_', '-')}", type=int, default=None,
                        help=f"default {DEFAULTS['cuda'][name]} on CUDA, {DEFAULTS['cpu'][name]} on CPU")
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    for name, value in _defaults(args.device).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


@dataclass
class Trainer:
    """What a benchmark needs to time training steps in-process."""

    cfg: GPTConfig
    batch: int
    model: nn.Module  # the torch.compile wrapper when compiled; its parameters are the GPT's
    optimizer: torch.optim.Optimizer
    train_step: Callable[[], torch.Tensor]  # forward, backward, optimizer step, zero_grad; returns the loss

    @property
    def tokens_per_step(self) -> int:
        return self.batch * self.cfg.seq

    @property
    def flops_per_step(self) -> float:
        return model_flops_per_step(self.cfg, self.batch, self.cfg.seq)


def build(spec: GPTConfig | argparse.Namespace, device: str | torch.device, compile: bool = False,
          batch: int | None = None) -> Trainer:
    """A model, AdamW and a `train_step` over one fixed random batch of cfg.seq tokens per row.

    `spec` is a GPTConfig or the result of parse_args. `batch` defaults to the arguments' --batch,
    else to the device default. On CUDA the step runs in bf16 autocast over fp32 weights with
    fused AdamW; on CPU in fp32.
    """
    if isinstance(spec, GPTConfig):
        cfg, batch = spec, batch or _defaults(device)["batch"]
    else:
        cfg = GPTConfig(vocab=spec.vocab, seq=spec.seq, d_model=spec.d_model, heads=spec.heads, layers=spec.layers)
        batch = batch or spec.batch
    cuda = torch.device(device).type == "cuda"
    torch.manual_seed(0)
    gpt = GPT(cfg).to(device)
    model: nn.Module = torch.compile(gpt) if compile else gpt
    optimizer = torch.optim.AdamW(gpt.parameters(), lr=3e-4, weight_decay=0.1, fused=True if cuda else None)
    # Random ids, so the loss only tells that the step ran; a fixed batch keeps steps identical.
    data = torch.randint(cfg.vocab, (batch, cfg.seq + 1), device=device)
    # Contiguous once here, or every step would copy them.
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()

    def train_step() -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.bfloat16) if cuda else contextlib.nullcontext():
            _, loss = model(x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return Trainer(cfg, batch, model, optimizer, train_step)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    trainer = build(args, args.device, compile=args.compile)
    cuda = torch.device(args.device).type == "cuda"
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = trainer.train_step()
        if cuda:  # kernels run asynchronously: wait for them, or the time is only the launch time
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    # The median leaves out the first steps' warm-up (allocator, cuBLAS heuristics, compilation).
    step = statistics.median(times)
    n_params = sum(p.numel() for p in trainer.model.parameters())
    print(f"params: {n_params / 1e6:.1f}M  batch {trainer.batch} x seq {trainer.cfg.seq}  device {args.device}")
    print(f"final loss: {loss.item():.4f}")
    print(f"median step: {step * 1e3:.2f} ms")
    print(f"tokens/s: {trainer.tokens_per_step / step:.0f}")
    print(f"model TFLOP/s: {trainer.flops_per_step / step / 1e12:.3f}")
    if cuda:
        print(f"peak memory: {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")


if __name__ == "__main__":
    main()
