"""Live traces on a CUDA GPU, analyzed end to end (run on the device machine)."""
from __future__ import annotations

import pytest

import roofscope

pytestmark = pytest.mark.gpu


def _profile(tmp_path, fn, steps: int = 3):
    import torch

    path = tmp_path / "trace.json"
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    fn()  # warm-up: cuBLAS handles, allocator
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=acts, record_shapes=True) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    prof.export_chrome_trace(str(path))
    return roofscope.analyze(path)


def test_live_bf16_gemm_is_compute_bound_near_roof(tmp_path):
    import torch

    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    an = _profile(tmp_path, lambda: torch.mm(a, b))
    k = an.kernels
    gemm = k[k["category"] == "gemm"]
    # 2 * 8192^3 = 1,099,511,627,776 FLOPs per call, three calls
    assert gemm["flops"].sum() == pytest.approx(3 * 2 * n ** 3)
    assert (gemm["cls"] == "compute").all()
    # measured 788-798 TFLOP/s on H100/H200 against the 989.5 dense datasheet roof
    assert 0.6 < gemm["efficiency"].median() < 1.0
    assert an.unattributed()["share"] == 0.0


def test_live_elementwise_is_memory_bound(tmp_path):
    import torch

    x = torch.randn(256 * 1024 * 1024, device="cuda")  # 1 GiB fp32
    an = _profile(tmp_path, lambda: torch.nn.functional.gelu(x))
    k = an.kernels[an.kernels["cat"] == "kernel"]
    # reads 1 GiB, writes 1 GiB per call
    assert k["bytes"].sum() == pytest.approx(3 * 2 * 2 ** 30)
    assert (k["cls"] == "memory").all()
    # a streaming kernel reaches 70-100% of datasheet HBM bandwidth
    assert 0.6 < k["efficiency"].median() < 1.05


def test_example_runs_on_gpu(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "demo"
    res = subprocess.run([sys.executable, str(root / "examples" / "tiny_transformer.py"), "--out", str(out),
                          "--device", "cuda"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    assert (out / "report.html").stat().st_size > 100_000
    assert "Time by class" in res.stdout


def test_regions_on_gpu_kernels(tmp_path):
    import torch

    x = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)

    def fn():
        with roofscope.region("prefill"):
            torch.mm(x, x)
        with roofscope.region("decode"):
            torch.relu(x)

    an = _profile(tmp_path, fn)
    k = an.kernels[an.kernels["cat"] == "kernel"]
    assert set(k.loc[k["category"] == "gemm", "region"]) == {"prefill"}
    assert set(k.loc[k["op_name"] == "aten::clamp_min", "region"]) | set(
        k.loc[k["op_name"] == "aten::relu", "region"]) == {"decode"}
