"""`roofscope verify` on a CUDA GPU (run on the device machine): a switch measured inside each of its runs."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]

# A seeded fp32 GEMM loop: per step one 4096^3 GEMM forward and one for the weight's gradient, 2 x 2 x 4096^3
# = 275 GFLOP. In fp32 the H200 runs it at about 50 TFLOP/s (5.5 ms); TF32 tensor cores take a fraction.
GEMM_LOOP = """\
import sys
import torch

torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = False
w = torch.randn(4096, 4096, device="cuda", requires_grad=True)
x = torch.randn(4096, 4096, device="cuda") / 64
opt = torch.optim.SGD([w], lr=1e-9)
for _ in range(int(sys.argv[1])):
    loss = (x @ w).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
"""


def _cli(*args: str) -> subprocess.CompletedProcess:
    res = subprocess.run([sys.executable, "-m", "roofscope", *args], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def test_tf32_is_turned_off_and_on_inside_each_run(tmp_path: Path) -> None:
    script = tmp_path / "gemm_loop.py"
    script.write_text(GEMM_LOOP)
    run = tmp_path / "run"
    _cli("run", "-q", "--no-report", "--settle", "0", "--nvml-hz", "0", "-o", str(run), str(script), "60")
    out = _cli("verify", str(run), "--fix", "tf32", "--pairs", "2", "--min-pairs", "2", "--steps", "6",
               "--warmup-steps", "3", "--yes").stdout
    assert out.count("; turned off in the same run: ") == 2
    (fix,) = json.loads((run / "verify.json").read_text())["fixes"]
    assert fix["within_run"] is True and fix["pairs"] == 2
    assert "torch.backends.cuda.matmul.allow_tf32 = True" in fix["applied"]
    # The steps with TF32 on take well under half of those with it off, in the same processes.
    assert fix["fixed_s"] < 0.5 * fix["baseline_s"] and fix["ci_s"][0] > 0
