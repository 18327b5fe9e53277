"""Greedy decoding of a randomly initialised Hugging Face Llama in a loop of the user's own over the
model's forward (no generate()), with the DynamicCache the forward returns. The issue-37 client that was
told `model.generation_config.cache_implementation = "static"  # generate() then compiles...`: it never
calls generate(). `--static` applies the fix that worked (5.94 -> 1.29 ms/token): a StaticCache and the
forward compiled with mode="reduce-overhead".

    python benchmarks/real_clients/llama_decode_loop.py [--static]
    roofscope run benchmarks/real_clients/llama_decode_loop.py
"""
from __future__ import annotations

import argparse

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from own_clock import StepClock

p = argparse.ArgumentParser()
p.add_argument("--rounds", type=int, default=4)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--prompt-len", type=int, default=64)
p.add_argument("--new-tokens", type=int, default=64)
p.add_argument("--static", action="store_true", help="StaticCache + torch.compile(model.forward, reduce-overhead)")
args = p.parse_args()
cfg = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
                  num_key_value_heads=4, vocab_size=32000)
model = LlamaForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
if args.static:
    from transformers import StaticCache
    model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
clock = StepClock()
with torch.no_grad():
    for _ in range(args.rounds):
        ids = torch.randint(0, cfg.vocab_size, (args.batch, args.prompt_len), device="cuda")
        total = args.prompt_len + args.new_tokens
        cache = StaticCache(config=cfg, max_cache_len=total) if args.static else None
        pos = torch.arange(args.prompt_len, device="cuda")
        out = model(input_ids=ids, past_key_values=cache, cache_position=pos, use_cache=True)
        cache = out.past_key_values
        tok = out.logits[:, -1:].argmax(-1)
        for i in range(args.new_tokens - 1):
            pos = torch.tensor([args.prompt_len + i], device="cuda")
            out = model(input_ids=tok, past_key_values=cache, cache_position=pos, use_cache=True)
            tok = out.logits[:, -1:].argmax(-1)
            clock.tick()
torch.cuda.synchronize()
clock.report(unit="token")
