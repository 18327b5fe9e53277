"""Training phases from the trace's structure (analyzers/views/phases.py), and the optimizer rule
that reads them: a Lightning-style closure runs forward and backward inside
``optimizer.step(closure)``; only the optimizer's own kernels are the optimizer phase."""
from __future__ import annotations

import pandas as pd
import pytest

import roofscope
from roofscope.hardware.devices import Ceilings
from roofscope.analyzers.views.phases import phase_summary, phase_table

from .kineto import TraceBuilder

TOY = Ceilings(device="toy", source="user", peaks={"fp32": 10e12, "tf32": 80e12, "bf16": 160e12},
               bandwidth=1e12)
F32 = "float"
MAIN, ENGINE = 100, 200
ELT = [[65536], [65536]]  # 65,536 fp32 elements: an add reads 2 and writes 1 x 256 KiB


def _lightning_step(per_param_optimizer: bool = False) -> TraceBuilder:
    """One step (0-10000 us): the DataLoader yields a batch copied to the GPU, then
    ``optimizer.step(closure)`` [500, 9500]: the closure's forward (30 elementwise kernels of
    10 us on the main thread), its backward (30 kernels of 20 us on the autograd engine's
    thread, each under ``autograd::engine::evaluate_function``), gradient clipping
    (``_foreach_norm``, 1 kernel of 5 us) and the update: 2 multi-tensor kernels of 50 us
    (foreach) or 60 per-parameter ``add_`` kernels of 4 us, each launched 6 us after the GPU
    went idle (per-parameter)."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 10000)
    b.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 10, 100)
    ext = b.op("aten::to", 200, 50, [[64, 1024], [], [], [], []], [F32, "", "", "", ""])
    b.launch_kernel("Memcpy HtoD (Pageable -> Device)", 210, 300, 40, ext=ext, cat="gpu_memcpy",
                    nbytes=262144, runtime="cudaMemcpyAsync")
    b.annotation("Optimizer.step#AdamW.step", 500, 9000)
    gpu = 1000.0
    for i in range(30):  # forward, inside the optimizer's span
        ext = b.op("aten::add", 600 + 10 * i, 8, ELT, [F32, F32])
        b.launch_kernel("vectorized_elementwise_kernel<add>", 601 + 10 * i, gpu, 10, ext=ext)
        gpu += 10
    for i in range(30):  # backward, on the engine's thread
        t = 2000 + 20 * i
        b.op("autograd::engine::evaluate_function: AddBackward0", t, 15, tid=ENGINE)
        ext = b.op("aten::mul", t + 1, 10, ELT, [F32, F32], tid=ENGINE)
        b.launch_kernel("vectorized_elementwise_kernel<mul>", t + 2, gpu, 20, ext=ext, tid=ENGINE)
        gpu += 20
    ext = b.op("aten::_foreach_norm", 3000, 20, [[[65536]] * 4, []], ["TensorList", "Scalar"])
    b.launch_kernel("multi_tensor_apply_kernel<LpNormFunctor>", 3005, gpu, 5, ext=ext)
    gpu += 5
    if per_param_optimizer:
        for i in range(60):
            ext = b.op("aten::add_", 4000 + 10 * i, 5, ELT, [F32, F32])
            b.launch_kernel("vectorized_elementwise_kernel<add>", gpu + 4, gpu + 6, 4, ext=ext)
            gpu += 10
    else:
        for i in range(2):
            ext = b.op("aten::_foreach_add_", 4000 + 100 * i, 50, [[[65536]] * 30, [[65536]] * 30],
                       ["TensorList", "TensorList"])
            b.launch_kernel("multi_tensor_apply_kernel<BinaryOpListAlphaFunctor>", 4001 + 100 * i, gpu, 50, ext=ext)
            gpu += 50
    return b


def _analyze(b: TraceBuilder, tmp_path):
    return roofscope.analyze(b.write(tmp_path / "t.json"), ceilings=TOY)


def test_closure_inside_optimizer_step_stays_forward_and_backward(tmp_path):
    a = _analyze(_lightning_step(), tmp_path)
    t = a.phases
    assert t.index.tolist() == ["forward", "backward", "optimizer", "data"]
    # forward 30 x 10 us, backward 30 x 20 us, optimizer 5 (clip) + 2 x 50 us, data 40 us of copy
    assert t["time_s"].tolist() == pytest.approx([300e-6, 600e-6, 105e-6, 40e-6])
    assert t["kernels"].tolist() == [30, 30, 3, 1]
    assert t.loc["optimizer", "share"] == pytest.approx(105 / 1045)
    assert a.to_dict()["phases"]["backward"]["time_s"] == pytest.approx(600e-6)
    # The region stays the user's label: all 63 kernels launched in the span are in it.
    assert (a.kernels["region"] == "Optimizer.step#AdamW.step").sum() == 63


def test_foreach_optimizer_with_a_closure_is_not_called_per_parameter(tmp_path):
    # Before phases, the rule took all 63 kernels launched inside the span (2 of them
    # multi-tensor) and proposed fused=True for the closure's forward and backward.
    a = _analyze(_lightning_step(), tmp_path)
    assert "fused_optimizer" not in {f["rule"] for f in a.to_dict()["findings"]}


def test_per_parameter_optimizer_counts_only_its_own_kernels(tmp_path):
    a = _analyze(_lightning_step(per_param_optimizer=True), tmp_path)
    f = {f["rule"]: f for f in a.to_dict()["findings"]}["fused_optimizer"]
    fig = f["evidence"]["figures"]
    # 60 add_ kernels + the clipping kernel; 60 gaps of 6 us before the add_ kernels (the first
    # follows the clipping kernel after 6 us too) = 360 us; kernels 240 + 5 us.
    assert fig["kernels_per_step"] == 61
    assert fig["idle_s"] == pytest.approx(360e-6)
    assert fig["kernel_s"] == pytest.approx(245e-6)
    assert {k["name"] for k in f["evidence"]["kernels"]} == {
        "vectorized_elementwise_kernel<add>", "multi_tensor_apply_kernel<LpNormFunctor>"}


def test_inference_steps_are_forward(tmp_path):
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1000)
    ext = b.op("aten::add", 10, 8, ELT, [F32, F32])
    b.launch_kernel("vectorized_elementwise_kernel<add>", 11, 100, 10, ext=ext)
    ext = b.op("aten::add", 2000, 8, ELT, [F32, F32])  # outside any step
    b.launch_kernel("vectorized_elementwise_kernel<add>", 2001, 2100, 10, ext=ext)
    a = _analyze(b, tmp_path)
    assert a.kernels["phase"].tolist() == ["forward", "other"]


def test_phase_table_from_frames() -> None:
    """Two steps of hand-made kernels; the one outside the steps is left out, per-step figures halve."""
    k = pd.DataFrame({"step": [0, 0, 1, 1, -1], "phase": ["forward", "backward", "forward", "optimizer", "other"],
                      "dur_s": [1.0, 2.0, 3.0, 4.0, 100.0], "flops": [10.0, 20.0, 30.0, 40.0, 0.0],
                      "bytes": [1.0, 2.0, 3.0, 4.0, 5.0], "cls": ["compute", "memory", "compute", "latency", "memory"]})
    t = phase_table(k)
    assert list(t.index) == ["forward", "backward", "optimizer"]
    assert t["time_s"].tolist() == [2.0, 1.0, 2.0] and t["share"].tolist() == pytest.approx([0.4, 0.2, 0.4])
    assert t["kernels"].tolist() == [1.0, 0.5, 0.5] and t["flops"].tolist() == [20.0, 10.0, 20.0]
    assert t.loc["forward", "compute_s"] == 2.0 and t.loc["optimizer", "latency_s"] == 2.0
    assert phase_summary(t)["backward"]["memory_s"] == 1.0
