"""Step windows and step metrics (HFU, MFU and its sources, MBU, regions) with hand-worked numbers."""
from __future__ import annotations

import pandas as pd
import pytest

import roofscope
from roofscope.analysis import analyze
from roofscope.analyzers.cost.modelflops import ModelFlops
from roofscope.hardware.devices import Ceilings
from roofscope.analyzers.views.metrics import CAPPED, Roof, metrics, step_samples

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
    st = a.steps
    # GPU windows: kernel starts 10, 2010, 4010 us; the last ends at 6010 us.
    assert st["dur_s"].tolist() == pytest.approx([2e-3, 2e-3, 2e-3])
    assert st["cpu_dur_s"].tolist() == pytest.approx([50e-6] * 3)
    m = a.to_dict()["metrics"]
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
    samples = a.step_samples
    assert list(samples.index) == [0, 1, 2] and samples["region:forward"].tolist() == pytest.approx([2e-3] * 3)


def test_mfu_sources(tmp_path) -> None:
    path = _gpu_bound(tmp_path)
    a = analyze(path, ceilings=TOY, run_meta={"model_flops_per_step": 100e9})
    assert a.summary.metrics.mfu_source == "model_flops"
    assert a.summary.metrics.mfu == pytest.approx(100e9 / 2e-3 / 100e12)  # 50%
    # An optimizer stepped: training, whose model FLOPs are estimated as 3 x the forward GEMM's
    # (3 x 137.4 GFLOP per 2 ms step = 206% of the roof). The trace holds no backward (a
    # synthetic trace): the estimate exceeds the count, so MFU is capped at the counted 68.7%.
    meta = {"tokens_per_step": 8192, "optimizer": {"class": "AdamW", "params": 1_000_000, "tensors": 4}}
    m = analyze(path, ceilings=TOY, run_meta=meta).to_dict()["metrics"]
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
    assert a.steps["dur_s"].tolist() == pytest.approx([100e-6, 100e-6])
    # 2 x 64^3 = 524 kFLOP per 100 us step on a 1 TFLOP/s roof: HFU 0.52%.
    assert a.summary.metrics.hfu == pytest.approx(2 * 64 ** 3 / 100e-6 / 1e12)


# The views take frames, not a Result: two steps of hand-made kernels on a 1 TFLOP/s, 1 GB/s roof.
ROOF = Roof("bf16", 1e12, 1e9)


def _frames() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    kernels = pd.DataFrame({"step": [0, 0, 1, -1], "flops": [1e9, 1e9, 2e9, 9e9], "bytes": [1e6, 0.0, 2e6, 5e6]})
    steps = pd.DataFrame({"step": [0, 1], "dur_s": [2e-3, 4e-3]})
    busy = pd.DataFrame({"busy_s": [1.5e-3, 1e-3], "wall_s": [2e-3, 4e-3]}, index=pd.Index([0, 1], name="step"))
    regions = pd.DataFrame({"forward": [1e-3, 0.0]}, index=pd.Index([0, 1], name="step"))
    return kernels, steps, busy, regions


def test_step_samples_from_frames() -> None:
    kernels, steps, busy, regions = _frames()
    s = step_samples(kernels, steps, ROOF, ModelFlops(1e9, "forward"), busy, regions)
    # Step 0: 2 GFLOP and 1 MB in 2 ms; step 1: 2 GFLOP and 2 MB in 4 ms (the kernel outside steps counts nowhere).
    assert s["flops"].tolist() == [2e9, 2e9] and s["bytes"].tolist() == [1e6, 2e6]
    assert s["hfu"].tolist() == pytest.approx([2e9 / 2e-3 / 1e12, 2e9 / 4e-3 / 1e12])   # 100%, 50%
    # A trace estimate of 1 GFLOP is below the count: MFU uses it as is.
    assert s["mfu"].tolist() == pytest.approx([1e9 / 2e-3 / 1e12, 1e9 / 4e-3 / 1e12])   # 50%, 25%
    assert s["mbu"].tolist() == pytest.approx([1e6 / 2e-3 / 1e9, 2e6 / 4e-3 / 1e9])     # 50%, 50%
    assert s["idle_fraction"].tolist() == pytest.approx([0.25, 0.75])
    assert s["region:forward"].tolist() == [1e-3, 0.0]
    # The user's 3 GFLOP is taken as right: HFU is raised to it (3 GFLOP / 2 ms = 150% of the roof).
    user = step_samples(kernels, steps, ROOF, ModelFlops(3e9, "model_flops"), None, regions)
    assert user["hfu"].tolist() == pytest.approx([1.5, 0.75]) and user["mfu"].tolist() == pytest.approx([1.5, 0.75])
    assert user["busy_s"].isna().all()
    # No roof: no utilization.
    assert step_samples(kernels, steps, Roof(), ModelFlops(), busy, regions)[["hfu", "mfu", "mbu"]].isna().all().all()


def test_metrics_from_samples() -> None:
    kernels, steps, busy, regions = _frames()
    model = ModelFlops(3e9, "forward_x3")
    s = step_samples(kernels, steps, ROOF, model, busy, regions)
    m = metrics(s, ROOF, model, tokens_per_step=1000, step_time=None, telemetry=None)
    # Median step 3 ms, 2 GFLOP per step: HFU 66.7%; the 3 GFLOP estimate exceeds the count: capped.
    assert m["step_time_s"] == pytest.approx(3e-3) and m["step_time_source"] == "profiled"
    assert m["hfu"] == pytest.approx(2e9 / 3e-3 / 1e12) and m["mfu"] == pytest.approx(m["hfu"])
    assert m["mfu_formula"] == "3 * forward matmul/conv/attention FLOPs (trace)" + CAPPED
    assert m["mbu"] == pytest.approx(1.5e6 / 3e-3 / 1e9) and m["tokens_per_s"] == pytest.approx(1000 / 3e-3)
    assert m["idle_fraction"] == pytest.approx(0.5) and m["regions"] == {"forward": pytest.approx(1e-3)}
    # The program's own step time, where the Run measured it, is the headline.
    own = metrics(s, ROOF, model, None, {"unprofiled_median_s": 2.5e-3}, None)
    assert own["step_time_s"] == 2.5e-3 and own["profiled_step_time_s"] == pytest.approx(3e-3)
    assert own["hfu"] == pytest.approx(2e9 / 2.5e-3 / 1e12) and own["tokens_per_s"] is None
