"""Greedy autoregressive decoding with a KV cache, its phases marked for roofscope.

    python examples/decode.py [--batch 1] [--prompt-len 128] [--new-tokens 64] [--device cpu|cuda] [--compile] [--cuda-graph]
    roofscope run examples/decode.py --batch 64

Decodes with the GPT of examples/gpt.py at that script's default size for the device, randomly
initialised: bf16 weights on CUDA, fp32 on CPU. The prompt's forward runs in region "prefill" and
yields the first new token; every later token is one forward of one token in region "decode".
roofscope.step() follows each, so every step is one token (a no-op outside roofscope). A warm-up
generation of 3 tokens comes first; its 3 steps are what roofscope's default schedule skips
(wait 1, warm-up 2), so the profiled steps are the measured prefill and the decode steps after it.
Prints the prefill time, the median decode step and the decode tokens/s.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import roofscope

# Runners that execute this file without putting its folder on sys.path still find gpt.py.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt import DEFAULTS, GPT, GPTConfig, KVCache  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1, help="sequences decoded together")
    ap.add_argument("--prompt-len", type=int, default=None, help="default 128 on CUDA, 16 on CPU")
    ap.add_argument("--new-tokens", type=int, default=None,
                    help="tokens generated, the first by the prefill; default 64 on CUDA, 16 on CPU")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--compile", action="store_true", help="wrap the model in torch.compile")
    ap.add_argument("--cuda-graph", action="store_true",
                    help="replay each decode step as one captured CUDA graph (CUDA only)")
    args = ap.parse_args(argv)
    cuda = torch.device(args.device).type == "cuda"
    if args.prompt_len is None:
        args.prompt_len = 128 if cuda else 16
    if args.new_tokens is None:
        args.new_tokens = 64 if cuda else 16
    if args.cuda_graph and not cuda:
        ap.error("--cuda-graph needs --device cuda")
    if args.new_tokens < 2 or args.prompt_len < 1 or args.batch < 1:
        ap.error("--new-tokens must be at least 2 (one decode step), --prompt-len and --batch at least 1")
    return args


class GraphedDecode:
    """One decode step captured as a CUDA graph: the CPU launches one graph per token instead
    of every kernel of every layer. Shapes are static: the token and its position live in
    tensors, and attention covers the whole cache with unwritten positions masked."""

    def __init__(self, model: torch.nn.Module, cache: KVCache, batch: int, device: str) -> None:
        self.model, self.cache = model, cache
        self.tok = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.pos = torch.zeros((), dtype=torch.long, device=device)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # allocate cuBLAS workspaces before capture
            self._step()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.next = self._step()

    def _step(self) -> torch.Tensor:
        logits, _ = self.model(self.tok, cache=self.cache, pos=self.pos)
        return logits[:, -1].argmax(-1, keepdim=True)

    def __call__(self, tok: torch.Tensor, pos: int) -> torch.Tensor:
        self.tok.copy_(tok)
        self.pos.fill_(pos)
        self.graph.replay()
        return self.next


def generate(model: torch.nn.Module, prompt: torch.Tensor, cache: KVCache, new_tokens: int,
             graphed: GraphedDecode | None = None) -> tuple[float, list[float]]:
    """Greedy decoding of `new_tokens` tokens after `prompt`, one roofscope step per token.

    Returns the prefill's time and each decode step's, in seconds."""
    cuda = prompt.device.type == "cuda"
    t0 = time.perf_counter()
    with roofscope.region("prefill"):
        logits, _ = model(prompt, cache=cache, pos=0)
        tok = logits[:, -1].argmax(-1, keepdim=True)
    if cuda:  # kernels run asynchronously: wait for them, or the time is only the launch time
        torch.cuda.synchronize()
    prefill = time.perf_counter() - t0
    roofscope.step()
    times = []
    for pos in range(prompt.shape[1], prompt.shape[1] + new_tokens - 1):
        t0 = time.perf_counter()
        with roofscope.region("decode"):
            if graphed is not None:
                tok = graphed(tok, pos)
            else:
                logits, _ = model(tok, cache=cache, pos=pos)
                tok = logits[:, -1].argmax(-1, keepdim=True)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        roofscope.step()
    return prefill, times


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    cuda = torch.device(args.device).type == "cuda"
    shape = DEFAULTS["cuda" if cuda else "cpu"]
    cfg = GPTConfig(vocab=shape["vocab"], seq=shape["seq"], d_model=shape["d_model"], heads=shape["heads"],
                    layers=shape["layers"])
    if args.prompt_len + args.new_tokens > cfg.seq:
        sys.exit(f"decode.py: error: --prompt-len + --new-tokens must be at most the context, {cfg.seq}")
    dtype = torch.bfloat16 if cuda else torch.float32
    torch.manual_seed(0)
    gpt = GPT(cfg).to(args.device, dtype).eval()
    model = torch.compile(gpt) if args.compile else gpt
    cache = KVCache(cfg, args.batch, args.prompt_len + args.new_tokens, args.device, dtype)
    prompt = torch.randint(cfg.vocab, (args.batch, args.prompt_len), device=args.device)
    # cuDNN attention builds a new plan for every key length it meets (about 2 ms of CPU each on
    # torch 2.11, H200): decoding, whose key length grows by one a step, would spend ten times
    # its GPU time there. Flash and memory-efficient attention have no such cost.
    backends = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    with torch.inference_mode(), sdpa_kernel(backends):
        # Warm-up: the first prefill and decode steps pay for CUDA and cuBLAS set-up (and, with
        # --compile, compilation); two decode steps, as the second compiles for a varying position.
        graphed = GraphedDecode(model, cache, args.batch, args.device) if args.cuda_graph else None
        generate(model, prompt, cache, 3, graphed)
        prefill, times = generate(model, prompt, cache, args.new_tokens, graphed)
    step = statistics.median(times)
    print(f"batch {args.batch}  prompt {args.prompt_len}  new tokens {args.new_tokens}  device {args.device}")
    print(f"prefill: {prefill * 1e3:.2f} ms")
    print(f"median decode step: {step * 1e3:.2f} ms")
    print(f"decode tokens/s: {args.batch / step:.0f}")


if __name__ == "__main__":
    main()
