"""Is CUPTI detached after roofscope's profile? (CUDA machine only.)

In one process: the launch cost of a one-element add (median of 7 rounds of 2,000), before any
profiling and after a `roofscope.profile()` of 6 steps (wait 1, warmup 1, active 2, also a rearm-free
plain schedule). CUPTI left attached makes every later launch dearer (docs/overhead.md: 1.28x on a
GPT-2 decode). Modes, each in its own process:
  roofscope   collectors/cupti.py decides (detach at the final stop)
  attached    TEARDOWN_CUPTI=0 set by the user (roofscope leaves it): CUPTI stays attached

    python benchmarks/real_clients/detach_probe.py
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from session_switch_probe import _launch_us  # noqa: E402  (the same measure in both probes)


def child(mode: str, out: str) -> None:
    sys.path.insert(0, str(ROOT))
    if mode == "attached":
        os.environ["TEARDOWN_CUPTI"] = "0"
    import torch

    import roofscope

    a = torch.randn(512, 512, device="cuda")
    before = _launch_us(torch)
    with roofscope.profile(steps=2, wait=1, warmup=1, out=out, settle=0, report=False) as p:
        for _ in range(6):
            for _ in range(20):
                a = torch.tanh(a @ a)
            p.step()
    time.sleep(0.2)
    torch.cuda.synchronize()
    after = _launch_us(torch)
    print(f"RESULT {mode} {before:.2f} {after:.2f}")


def main() -> None:
    import tempfile

    print("| mode | launch us before | after the profile | after/before |")
    print("|---|---:|---:|---:|")
    for mode in ("roofscope", "attached", "roofscope", "attached"):
        with tempfile.TemporaryDirectory() as d:
            res = subprocess.run([sys.executable, __file__, mode, str(Path(d) / "run")], capture_output=True, text=True)
        line = next((ln for ln in res.stdout.splitlines() if ln.startswith("RESULT")), None)
        if line is None:
            print(f"| {mode} | failed: {(res.stderr.strip().splitlines() or ['?'])[-1]} | | |")
            continue
        _, m, b, a = line.split()
        print(f"| {m} | {b} | {a} | {float(a) / float(b):.2f} |")


if __name__ == "__main__":
    if len(sys.argv) > 2:
        child(sys.argv[1], sys.argv[2])
    else:
        main()
