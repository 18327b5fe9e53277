"""Hugging Face generate() on a randomly initialised Llama with grouped-query attention.

    python examples/generate.py [--batch 1] [--prompt-len 128] [--new-tokens 32] [--size 1b|tiny] [--static-compile]
    roofscope run examples/generate.py --batch 32

No roofscope call and no optimizer: under ``roofscope run`` every outermost forward (the prompt's
prefill, then one per new token) is a step. A warm-up generate() of 3 tokens comes first: its 3
forwards are what roofscope's default schedule skips (wait 1, warm-up 2), so the profiled steps
are the measured generate()'s prefill and its first decode tokens. ``--size 1b``: 16 layers,
hidden 2048, 32 query heads and 8 key/value heads (1.2 B parameters, bf16 on CUDA); ``tiny``:
2 layers, hidden 256, 8 query and 2 key/value heads. Needs transformers (``pip install transformers``,
not a roofscope dependency); without it the script says so in one line and exits 1.
"""
from __future__ import annotations

import argparse
import time

import torch

SIZES = {
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=32000),
    "tiny": dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
                 num_key_value_heads=2, vocab_size=1024),
}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--size", choices=sorted(SIZES), default="1b")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--static-compile", action="store_true",
                    help="static KV cache: generate() then compiles the decode step itself "
                         '(torch.compile mode="reduce-overhead"), so decode steps replay CUDA graphs')
    args = ap.parse_args(argv)
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError:
        # roofscope does not depend on transformers; this example alone needs it.
        raise SystemExit("examples/generate.py needs Hugging Face transformers, which roofscope does not install:"
                         " pip install transformers (examples/decode.py decodes in plain PyTorch)") from None
    cfg = LlamaConfig(**SIZES[args.size], max_position_embeddings=args.prompt_len + args.new_tokens + 8,
                      pad_token_id=0, bos_token_id=None, eos_token_id=None)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    with torch.device(args.device):  # random init on the GPU: seconds instead of minutes on the CPU
        model = LlamaForCausalLM(cfg).to(dtype).eval()
    if args.static_compile:
        # transformers compiles the decode step when the cache is static (GenerationConfig.compile_config);
        # compiling model.forward by hand as well shares one graph between prefill and decode, and 5.17's
        # generate() then reads a CUDA-graph output a later replay overwrote.
        model.generation_config.cache_implementation = "static"
    ids = torch.randint(1, cfg.vocab_size, (args.batch, args.prompt_len), device=args.device)
    kw = dict(do_sample=False, attention_mask=torch.ones_like(ids))
    model.generate(ids, max_new_tokens=3, min_new_tokens=3, **kw)  # warm-up: 3 forwards
    t0 = time.perf_counter()
    out = model.generate(ids, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, **kw)
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    n = out.shape[1] - ids.shape[1]
    print(f"batch {args.batch}  prompt {args.prompt_len}  new tokens {n}  {dt * 1e3:.1f} ms  "
          f"{args.batch * n / dt:,.0f} tokens/s")


if __name__ == "__main__":
    main()
