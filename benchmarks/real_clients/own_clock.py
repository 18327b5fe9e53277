"""The clients' own step timer, as a user would write it: the host time between consecutive step
ends (no extra synchronization, so the program runs as it would without it). Printed at the end:
every step's time and the steady median after the first ``skip`` steps, the figure roofscope's
unprofiled step time is checked against (docs/validation.md)."""
from __future__ import annotations

import statistics
import time


class StepClock:
    def __init__(self) -> None:
        self.t: list[float] = []

    def tick(self) -> None:
        self.t.append(time.perf_counter())

    def report(self, skip: int = 10, unit: str = "step") -> float:
        gaps = [b - a for a, b in zip(self.t, self.t[1:])]
        steady = statistics.median(gaps[skip:] or gaps)
        print(f"{unit} times ms:", [round(g * 1e3, 2) for g in gaps])
        print(f"own steady {unit} {steady * 1e3:.3f} ms (median of {unit}s {skip + 1}..{len(gaps)})", flush=True)
        return steady


def token_clock():
    """A Hugging Face streamer that keeps the host time at which each token reaches it (sampling
    reads every next token back, so each decode step is already synchronized): ``.t``."""
    from transformers.generation.streamers import BaseStreamer

    class TokenClock(BaseStreamer):
        def __init__(self) -> None:
            self.t: list[float] = []

        def put(self, value) -> None:
            self.t.append(time.perf_counter())

        def end(self) -> None:
            pass

    return TokenClock()


def gpt2_fp16():
    """GPT-2 124M, random init, fp16 on the GPU, in eval mode."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    with torch.device("cuda"):
        return GPT2LMHeadModel(GPT2Config()).half().eval()
