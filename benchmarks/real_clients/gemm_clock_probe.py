"""Why can a GEMM beat the measured bf16 peak? Times bf16 GEMMs of the microbenchmark's shapes and
of an LM head (tokens x vocab x hidden) two ways: back to back (the microbenchmark's way: the card
heats and its clock falls to the power cap) and one at a time after an idle pause (clock at boost),
with the SM clock NVML reports after each; then the LM head's backward GEMM (dlogits @ W) on random
operands against operands like the real ones (softmax minus one-hot over 8192 tokens, W ~ 0.02
randn): Hopper tensor cores draw less power on low-entropy data. Prints one line per case.

    python benchmarks/real_clients/gemm_clock_probe.py
"""
from __future__ import annotations

import time

import pynvml
import torch

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 32000, 1024), (16384, 8192, 1024)]


def tflops(m: int, n: int, k: int, s: float) -> float:
    return 2 * m * n * k / s / 1e12


def main() -> None:
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    clock = lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)  # noqa: E731
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            a @ b
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(40)]
        for s, e in ev:
            s.record(); a @ b; e.record()
        torch.cuda.synchronize()
        hot = min(s.elapsed_time(e) for s, e in ev) / 1e3
        hot_clock = clock()
        cold, clocks = [], []
        for _ in range(8):
            time.sleep(0.4)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); a @ b; e.record(); torch.cuda.synchronize()
            cold.append(s.elapsed_time(e) / 1e3)
            clocks.append(clock())
        print(f"{m}x{n}x{k} back-to-back {tflops(m, n, k, hot):.0f} TFLOP/s (SM {hot_clock} MHz after);"
              f" after idle {tflops(m, n, k, min(cold)):.0f} TFLOP/s (SM {max(clocks)} MHz)", flush=True)


def best_rate(a, b, reps: int = 40) -> float:
    import torch

    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for s, e in ev:
        s.record(); a @ b; e.record()
    torch.cuda.synchronize()
    return tflops(a.shape[0], b.shape[1], a.shape[1], min(s.elapsed_time(e) for s, e in ev) / 1e3)


def lm_head_data() -> None:
    tokens, vocab, hidden = 8192, 32000, 1024
    w = (0.02 * torch.randn(vocab, hidden, device="cuda")).to(torch.bfloat16)
    p = torch.softmax(torch.randn(tokens, vocab, device="cuda"), dim=-1)
    p[torch.arange(tokens), torch.randint(0, vocab, (tokens,))] -= 1
    grad = (p / tokens).to(torch.bfloat16)
    rand = torch.randn(tokens, vocab, device="cuda", dtype=torch.bfloat16)
    zeros = torch.zeros(tokens, vocab, device="cuda", dtype=torch.bfloat16)
    for name, a in (("random", rand), ("softmax-gradient", grad), ("zero", zeros)):
        time.sleep(0.4)
        print(f"dlogits @ W {tokens}x{hidden}x{vocab} {name} operands: {best_rate(a, w):.0f} TFLOP/s", flush=True)
        time.sleep(0.4)
        print(f"dlogits^T @ X {vocab}x{hidden}x{tokens} {name} operands: "
              f"{best_rate(a.t(), torch.randn(tokens, hidden, device='cuda', dtype=torch.bfloat16)):.0f} TFLOP/s",
              flush=True)


if __name__ == "__main__":
    main()
    lm_head_data()
