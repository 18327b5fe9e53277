"""A seeded CPU training loop whose every step sleeps 50 ms, a stand-in for host work that a fix removes
(tests/test_verify.py: `roofscope verify` end to end). Argument: the number of steps [40]."""
import sys
import time

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                            torch.nn.Linear(8 * 14 * 14, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 3, 16, 16), torch.randint(0, 10, (16,))
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 40):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    time.sleep(0.05)
