"""A new user's CPU generation: HF generate() on a small random-init GPT-2, greedy, a few rounds.

Own timer: wall clock per generate() call divided by the new tokens; the median over rounds after the first is
printed as `median token X ms (own timer)`.

    python gpt2_cpu_generate.py [--rounds 5] [--batch 4] [--prompt-len 32] [--new-tokens 32]
"""
import argparse
import statistics
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

p = argparse.ArgumentParser()
p.add_argument("--rounds", type=int, default=5)
p.add_argument("--batch", type=int, default=4)
p.add_argument("--prompt-len", type=int, default=32)
p.add_argument("--new-tokens", type=int, default=32)
args = p.parse_args()
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=8000)).eval()
ids = torch.randint(0, 8000, (args.batch, args.prompt_len))
times = []
with torch.no_grad():
    for _ in range(args.rounds):
        t = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.new_tokens,
                             min_new_tokens=args.new_tokens, do_sample=False, pad_token_id=0)
        times.append((time.perf_counter() - t) / args.new_tokens)
print("tokens", out[0, -4:].tolist())
print(f"median token {1e3 * statistics.median(times[1:]):.2f} ms (own timer, {len(times) - 1} rounds)")
