"""Step windows and step metrics (HFU, MFU and its sources, MBU, regions) with hand-worked numbers."""
from __future__ import annotations

import pytest

import roofscope
from roofscope.analysis import analyze
from roofscope.hardware.devices import Ceilings

from .kineto import TraceBuilder

TOY = Ceilings(device="toy", source="user", peaks={"bf16": 100e12}, bandwidth=1e12)
BF16 = "c10::BFloat16"


def _gpu_bound(tmp_path, steps: int = 3):
    """CPU steps of 50 us each launch one bf16 4096^3 GEMM that runs 2 ms on the GPU: the CPU
    runs ahead, so its spans say 50 us while the GPU needs 2 ms per step."""
    b = TraceBuilder()
    for s in range(steps):
        t0 = s * 50
        b.annotation(f"ProfilerStep#{s}", t0, 50)
        b.annotation("forward", t0 + 1, 20)
        ext = b.op("aten::mm", t0 + 2, 10, [[4096, 4096], [4096, 4096]], [BF16, BF16])
        b.launch_kernel("gemm", t0 + 3, 10 + s * 2000, 2000, ext=ext)
    return b.write(tmp_path / "gpu_bound.json")


def test_steps_are_measured_on_the_gpu(tmp_path) -> None:
    a = analyze(_gpu_bound(tmp_path), ceilings=TOY)
    st = a.steps()
    # GPU windows: kernel starts 10, 2010, 4010 us; the last ends at 6010 us.
    assert st["dur_s"].tolist() == pytest.approx([2e-3, 2e-3, 2e-3])
    assert st["cpu_dur_s"].tolist() == pytest.approx([50e-6] * 3)
    m = a.metrics()
    # 2 x 4096^3 = 137.4 GFLOP per 2 ms step: 68.7 TFLOP/s, HFU 68.7% of 100 TFLOP/s.
    assert m["hfu"] == pytest.approx(2 * 4096 ** 3 / 2e-3 / 100e12)
    # No backward: inference, whose model FLOPs are the forward GEMM's (MFU = HFU here).
    assert m["mfu_source"] == "forward" and m["mfu"] == pytest.approx(m["hfu"])
    assert m["hfu_source"] == "counted"
    # 3 x 4096^2 x 2 B = 100.7 MB per step over 2 ms at 1 TB/s: MBU 5.0%.
    assert m["mbu"] == pytest.approx(3 * 4096 ** 2 * 2 / 2e-3 / 1e12)
    assert m["busy_fraction"] == pytest.approx(1.0)
    # The forward region's CPU time is 20 us, but its kernel ran 2 ms on the GPU.
    assert m["regions"]["forward"] == pytest.approx(2e-3)
    samples = a.step_samples()
    assert list(samples.index) == [0, 1, 2] and samples["region:forward"].tolist() == pytest.approx([2e-3] * 3)


def test_mfu_sources(tmp_path) -> None:
    path = _gpu_bound(tmp_path)
    a = analyze(path, ceilings=TOY, run_meta={"model_flops_per_step": 100e9})
    assert a.metrics()["mfu_source"] == "model_flops"
    assert a.metrics()["mfu"] == pytest.approx(100e9 / 2e-3 / 100e12)  # 50%
    # An optimizer stepped: training, whose model FLOPs are estimated as 3 x the forward GEMM's
    # (3 x 137.4 GFLOP per 2 ms step = 206% of the roof). The trace holds no backward (a
    # synthetic trace): the estimate exceeds the count, so MFU is capped at the counted 68.7%.
    meta = {"tokens_per_step": 8192, "optimizer": {"class": "AdamW", "params": 1_000_000, "tensors": 4}}
    m = analyze(path, ceilings=TOY, run_meta=meta).metrics()
    assert m["mfu_source"] == "forward_x3" and m["model_flops_per_step"] == 3 * 2 * 4096 ** 3
    assert m["mfu"] == m["hfu"] == pytest.approx(2 * 4096 ** 3 / 2e-3 / 100e12)
    assert m["hfu_source"] == "counted" and m["mfu_formula"].endswith(", capped at the counted FLOPs")
    assert m["tokens_per_s"] == pytest.approx(8192 / 2e-3)


def test_cpu_steps_without_kernels_keep_their_cpu_span(tmp_path) -> None:
    b = TraceBuilder(device_name=None)
    for s in range(2):
        b.annotation(f"ProfilerStep#{s}", s * 100, 100)
        b.op("aten::mm", s * 100 + 1, 90, [[64, 64], [64, 64]], ["float", "float"])
    cpu = Ceilings(device="cpu", source="user", peaks={"fp32": 1e12}, bandwidth=1e11)
    a = roofscope.analyze(b.write(tmp_path / "cpu.json"), ceilings=cpu)
    assert a.steps()["dur_s"].tolist() == pytest.approx([100e-6, 100e-6])
    # 2 x 64^3 = 524 kFLOP per 100 us step on a 1 TFLOP/s roof: HFU 0.52%.
    assert a.metrics()["hfu"] == pytest.approx(2 * 64 ** 3 / 100e-6 / 1e12)
