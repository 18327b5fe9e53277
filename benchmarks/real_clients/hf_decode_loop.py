"""A hand-written decode loop over a Hugging Face Llama's forward (issue 38): random init from a config
(no download), bf16 on the GPU, a static KV cache; the prefill through ``model(...)``, then one
``model.forward(...)`` per token, which module hooks do not see, reading each token back as a stopping
test would. Rounds of a prompt each: round 0 is cold. The script's own timer: the host time between
consecutive tokens (each already synchronized by the read-back), its median per round, and the steady
median over rounds 1.. .

    python benchmarks/real_clients/hf_decode_loop.py                 # eager
    python benchmarks/real_clients/hf_decode_loop.py --compile       # model.forward = torch.compile(..., "reduce-overhead")
    roofscope run benchmarks/real_clients/hf_decode_loop.py [--compile]
"""
from __future__ import annotations

import argparse
import inspect
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM, StaticCache

p = argparse.ArgumentParser()
p.add_argument("--compile", action="store_true", help='model.forward = torch.compile(model.forward, mode="reduce-overhead")')
p.add_argument("--rounds", type=int, default=3)
p.add_argument("--batch", type=int, default=1)
p.add_argument("--prompt-len", type=int, default=128)
p.add_argument("--new-tokens", type=int, default=96)
p.add_argument("--layers", type=int, default=16)
args = p.parse_args()

cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=args.layers,
                  num_attention_heads=16, num_key_value_heads=4,
                  max_position_embeddings=args.prompt_len + args.new_tokens + 8)
torch.manual_seed(0)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
if args.compile:
    model.forward = torch.compile(model.forward, mode="reduce-overhead")


def static_cache() -> StaticCache:
    """A StaticCache, whichever of its signatures this transformers has."""
    params = inspect.signature(StaticCache.__init__).parameters
    kw = {"config": cfg, "max_cache_len": args.prompt_len + args.new_tokens}
    for name, value in (("max_batch_size", args.batch), ("batch_size", args.batch), ("device", "cuda"),
                        ("dtype", torch.bfloat16)):
        if name in params:
            kw[name] = value
    return StaticCache(**kw)


cache = static_cache()
medians = []
with torch.no_grad():
    for r in range(args.rounds):
        cache.reset()
        ids = torch.randint(0, cfg.vocab_size, (args.batch, args.prompt_len), device="cuda")
        logits = model(ids, past_key_values=cache, cache_position=torch.arange(args.prompt_len, device="cuda"),
                       use_cache=True).logits
        tok = logits[:, -1:].argmax(-1)
        tok[0, 0].item()
        gaps, last = [], time.perf_counter()
        for t in range(args.new_tokens):
            pos = torch.tensor([args.prompt_len + t], device="cuda")
            out = model.forward(tok, past_key_values=cache, cache_position=pos, position_ids=pos.unsqueeze(0),
                                use_cache=True)
            tok = out.logits[:, -1:].argmax(-1)
            if tok[0, 0].item() < 0:   # a stopping test: reads the token back, as a decode loop does
                break
            now = time.perf_counter()
            gaps.append(now - last)
            last = now
        medians.append(statistics.median(gaps))
        print(f"round {r}: median {medians[-1] * 1e3:.3f} ms/token (min {min(gaps) * 1e3:.3f}, max"
              f" {max(gaps) * 1e3:.3f})", flush=True)
print(f"own steady token {statistics.median(medians[1:] or medians) * 1e3:.3f} ms (median of rounds 1..{args.rounds - 1})")
