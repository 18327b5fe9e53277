"""Hugging Face GPT-2 (124M, random init) sampling with generate(), batch 16, eager fp16: rounds of
generate() timed by the script itself, as a user would time them.

    python benchmarks/real_clients/gpt2_generate.py                # eager, dynamic cache
    python benchmarks/real_clients/gpt2_generate.py --static       # static cache: generate() compiles the decode step
    roofscope run benchmarks/real_clients/gpt2_generate.py

The script's own timer: a streamer records the host time at which each token reaches it (sampling
reads the next token back, so each step is already synchronized); a round's time per output token
(TPOT) is the median gap between consecutive tokens after the first. "own steady TPOT" is the
median over rounds 2.. (the first round is cold: cuBLAS handles, allocator, compilation).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from own_clock import gpt2_fp16, token_clock

p = argparse.ArgumentParser()
p.add_argument("--static", action="store_true", help="cache_implementation='static' (compiled decode step)")
p.add_argument("--rounds", type=int, default=6)
p.add_argument("--batch", type=int, default=16)
p.add_argument("--prompt-len", type=int, default=64)
p.add_argument("--new-tokens", type=int, default=48)
args = p.parse_args()


model = gpt2_fp16()
if args.static:
    model.generation_config.cache_implementation = "static"
ids = torch.randint(0, 50257, (args.batch, args.prompt_len), device="cuda")
tpots = []
for r in range(args.rounds):
    clock = token_clock()
    t0 = time.perf_counter()
    with torch.no_grad():
        model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, max_new_tokens=args.new_tokens,
                       min_new_tokens=args.new_tokens, pad_token_id=0, streamer=clock)
    torch.cuda.synchronize()
    total = time.perf_counter() - t0
    gaps = [b - a for a, b in zip(clock.t[1:], clock.t[2:])]   # t[0]: the prompt, t[1]: the first new token
    tpot = statistics.median(gaps)
    tpots.append(tpot)
    print(f"round {r}: {total * 1e3:.1f} ms, TTFT {(clock.t[1] - t0) * 1e3:.2f} ms, TPOT median {tpot * 1e3:.3f} ms"
          f" (min {min(gaps) * 1e3:.3f}, max {max(gaps) * 1e3:.3f})"
          + (f" first gaps {[round(g * 1e3, 2) for g in gaps[:8]]}" if r == 0 else ""), flush=True)
print(f"own steady TPOT {statistics.median(tpots[1:]) * 1e3:.3f} ms/token (median of rounds 1..{args.rounds - 1})")
# Under `roofscope run` the profile lands in round 1 (round 0 is cold): rounds 2.. show what stays of it.
print(f"own later TPOT {statistics.median(tpots[2:]) * 1e3:.3f} ms/token (median of rounds 2..{args.rounds - 1})")
