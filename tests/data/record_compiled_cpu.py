"""A small MLP under torch.compile on the CPU: Inductor fuses its LayerNorm, GELU and residual
adds into C++ kernels, which run inside `## Call CompiledFxGraph` and no op of their own.

    roofscope run -o tests/data/cpu_compiled_mlp_run --settle 0 --no-report tests/data/record_compiled_cpu.py
"""
from __future__ import annotations

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.compile(nn.Sequential(*[Block(256) for _ in range(2)]))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(512, 256)
    for _ in range(10):
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()
