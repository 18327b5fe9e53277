"""Which op or kernel carries an op's cost: CPU work items chosen from structure, not timing;
within one GPU op, FLOPs on the kernels doing the math and bytes on the layout kernels."""
from __future__ import annotations

import pytest

import roofscope
from roofscope.hardware.devices import Ceilings

from .kineto import TraceBuilder

CPU = Ceilings(device="cpu: test", source="user", peaks={"fp32": 1e12}, bandwidth=50e9)
TOY = Ceilings(device="toy", source="user", peaks={"fp32": 10e12, "bf16": 100e12, "tf32": 50e12}, bandwidth=1e12)
F32 = "float"


def _cpu_addmm(copy_share: float) -> TraceBuilder:
    """aten::linear -> aten::addmm (64x128 @ 128x256 + bias[256]) -> aten::copy_ (the bias
    broadcast), where the copy takes ``copy_share`` of the addmm's 100 us."""
    b = TraceBuilder(device_name=None)
    b.annotation("ProfilerStep#1", 0, 200)
    b.op("aten::linear", 5, 110, [[64, 128], [256, 128], [256]], [F32, F32, F32])
    b.op("aten::addmm", 8, 100, [[256], [64, 128], [128, 256], [], []], [F32, F32, F32, "Scalar", "Scalar"])
    b.op("aten::copy_", 9, 100 * copy_share, [[64, 256], [64, 256], []], [F32, F32, "Scalar"],
         concrete=["", "", "False"])
    return b


@pytest.mark.parametrize("copy_share", [0.1, 0.7, 0.99])
def test_cpu_addmm_is_the_work_item_whatever_its_copy_takes(tmp_path, copy_share):
    # The GEMM is the addmm's own work: 2 * 64 * 128 * 256 = 4,194,304 FLOPs. Before the fix, a copy_ holding over half of the addmm's
    # time replaced it as the work item and the run lost the GEMM's FLOPs (4.23/3.97/4.37 GFLOP
    # over three identical runs of examples/mlp.py).
    a = roofscope.analyze(_cpu_addmm(copy_share).write(tmp_path / "t.json"), ceilings=CPU)
    k = a.kernels
    assert k["name"].astype(str).tolist() == ["aten::addmm"]
    assert k["flops"].sum() == 2 * 64 * 128 * 256


def test_cpu_wrapper_with_the_same_flops_yields_to_the_inner_op(tmp_path):
    # aten::matmul (2*32*64*16 = 65,536 FLOPs) only calls aten::mm (the same FLOPs): the inner op
    # is the work item even when the wrapper spends most of its time itself.
    b = TraceBuilder(device_name=None)
    b.op("aten::matmul", 0, 100, [[32, 64], [64, 16]], [F32, F32])
    b.op("aten::mm", 1, 5, [[32, 64], [64, 16]], [F32, F32])
    k = roofscope.analyze(b.write(tmp_path / "t.json"), ceilings=CPU).kernels
    assert k["name"].astype(str).tolist() == ["aten::mm"]
    assert k["flops"].sum() == 2 * 32 * 64 * 16
