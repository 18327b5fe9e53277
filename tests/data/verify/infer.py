"""A seeded CPU inference loop: each step one forward without gradients (tests/test_verify.py)."""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256, bias=False), torch.nn.ReLU(),
                            torch.nn.Linear(256, 2048, bias=False))
x = torch.randn(4, 64)
with torch.no_grad():
    for _ in range(12):
        model(x)
