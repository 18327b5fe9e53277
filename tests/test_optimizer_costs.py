"""Optimizer and training-library ops without TensorList shapes: sized from run.json's parameter
groups (collectors/session.py param_group_facts, analyzers/cost/hidden_args.py), and multi_tensor_apply
kernels no op costs, streamed from their launch grid (attribution.py)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import roofscope
from roofscope.collectors.session import optimizer_facts, param_group_facts
from tests.conftest import external
from tests.kineto import TraceBuilder

APEX_ADAM = ("void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>, float, float, float, float, "
             "float, float, float, float, adamMode_t, float, int, int, int>(int, int volatile*, "
             "TensorListMetadata<4>, AdamFunctor<float>, float, float, float, float, float, float, float, float, "
             "adamMode_t, float, int, int, int)")
TORCH_ADD = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
             "TensorListMetadata<2>, at::native::(anonymous namespace)::"
             "BinaryOpListAlphaFunctor<c10::BFloat16, 2, 2, 0>, "
             "std::plus<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<2>, ...)")
GROUPS = [{"tensors": 2, "numel": 1000, "itemsize": 4}, {"tensors": 1, "numel": 500, "itemsize": 4}]


def test_param_group_facts_of_a_real_optimizer() -> None:
    torch = pytest.importorskip("torch")
    lin = torch.nn.Linear(4, 3)  # weight 12 + bias 3, fp32
    extra = torch.nn.Parameter(torch.zeros(10, dtype=torch.bfloat16))
    opt = torch.optim.AdamW([{"params": lin.parameters()}, {"params": [extra], "weight_decay": 0.0}])
    assert param_group_facts(opt) == [{"tensors": 2, "numel": 15, "itemsize": 4},
                                      {"tensors": 1, "numel": 10, "itemsize": 2}]
    assert optimizer_facts(opt)["groups"] == param_group_facts(opt)


def _optimizer_trace(tmp_path: Path) -> Path:
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1000)
    lists = [[]] * 6 + [[], [], [], [], [], [], [], [], []]
    types = ["TensorList"] * 6 + ["Scalar"] * 7 + ["", ""]
    for i, ts in enumerate((100, 300)):
        ext = b.op("aten::_fused_adamw_", ts, 100, dims=lists[:15], types=types)
        b.launch_kernel(APEX_ADAM.replace("AdamFunctor", "FusedAdamMathFunctor"), ts + 10, ts + 20, 50, ext=ext)
    ext = b.op("aten::_amp_foreach_non_finite_check_and_unscale_", 500, 100, dims=[[], [], []],
               types=["TensorList", "float", "float"])
    b.launch_kernel(TORCH_ADD, 510, 520, 40, ext=ext)
    p = tmp_path / "opt.json.gz"
    with gzip.open(p, "wt") as f:
        json.dump(b.doc(), f)
    return p


def test_fused_adamw_without_shapes_is_sized_by_parameter_group(tmp_path: Path) -> None:
    p = _optimizer_trace(tmp_path)
    a = roofscope.analyze(str(p), run_meta={"optimizer": {"groups": GROUPS}})
    k = a.kernels.sort_values("ts_ns")
    # call 1 covers group 1 (1,000 fp32 elements): p, g, m, v read + p, m, v written = 7 * 4,000 B;
    # 14 FLOPs per element; call 2 the 500 of group 2
    assert k["bytes"].tolist()[:2] == [28_000, 14_000] and k["flops"].tolist()[:2] == [14_000, 7_000]
    # GradScaler's unscale runs once over all 1,500 gradients: read + written 2 * 6,000 B, 2 FLOPs each
    assert k["bytes"].iat[2] == 12_000 and k["flops"].iat[2] == 3_000
    assert (k["unattributed"] == "").all() and set(k["category"]) == {"optimizer"}


def test_a_foreach_op_whose_kernels_cannot_cover_the_parameters_is_not_sized_by_them(tmp_path: Path) -> None:
    # HF Trainer's fused AdamW first runs _foreach_add_(state_steps, 1): no shapes either, but over
    # 1-element step counters. Each multi_tensor_apply block takes one 65,536-element chunk, so 4
    # blocks reach at most 262,144 elements, not the 10M parameters: not sized by them (BERT's had
    # been costed at 875 MB in 1.4 us, 125x the memory roof), but streamed from its grid as a kernel
    # no op costs. 200 blocks (13.1M) can hold them: sized from the group.
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1000)
    for ts, blocks in ((100, 4), (300, 200)):
        ext = b.op("aten::_foreach_add_", ts, 100, dims=[[], []], types=["TensorList", "Scalar"])
        b.launch_kernel(TORCH_ADD, ts + 10, ts + 20, 50, ext=ext, grid=[blocks, 1, 1])
    p = tmp_path / "steps.json.gz"
    with gzip.open(p, "wt") as f:
        json.dump(b.doc(), f)
    a = roofscope.analyze(str(p), run_meta={"optimizer": {"groups": [{"tensors": 4, "numel": 10_000_000,
                                                                      "itemsize": 4}]}})
    k = a.kernels.sort_values("ts_ns")
    assert k["cost_source"].tolist() == ["launch", "run"]
    # the grid's bound: 4 chunks of 65,536 bf16 elements (the functor's type), 2 lists read, 1 written
    assert k["bytes"].iat[0] == 4 * 65_536 * 2 * 3
    # two calls split the one group: 5M elements each, read and written once (2 * 20 MB), 1 FLOP each
    assert k["bytes"].iat[1] == 40_000_000 and k["flops"].iat[1] == 5_000_000


def test_without_run_facts_they_stay_uncosted_for_want_of_shapes(tmp_path: Path) -> None:
    a = roofscope.analyze(str(_optimizer_trace(tmp_path)))
    assert set(a.kernels["unattributed"]) == {"no_shapes"}


def _unlaunched(tmp_path: Path) -> Path:
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1000)
    for i, (name, grid) in enumerate(((APEX_ADAM, 10), (TORCH_ADD, 4))):
        b.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 100 + 200 * i,
                         "dur": 100, "args": {"device": 0, "stream": 7, "correlation": 9000 + i,
                                              "grid": [grid, 1, 1], "block": [512, 1, 1]}})
    p = tmp_path / "noop.json.gz"
    with gzip.open(p, "wt") as f:
        json.dump(b.doc(), f)
    return p


def test_multi_tensor_apply_kernels_with_no_op_stream_their_grid(tmp_path: Path) -> None:
    k = roofscope.analyze(str(_unlaunched(tmp_path))).kernels.sort_values("ts_ns")
    # apex Adam, 10 chunks of 65,536 fp32: g, p, m, v read, p, m, v written: 655,360 * 7 * 4 = 18,350,080 B
    # and 14 FLOPs per element = 9,175,040
    assert k["bytes"].iat[0] == 18_350_080 and k["flops"].iat[0] == 9_175_040
    # torch's foreach add of bf16 lists: 4 chunks, 2 lists read + 1 written: 262,144 * 3 * 2 = 1,572,864 B
    assert k["bytes"].iat[1] == 1_572_864 and k["dtype"].iat[1] == "bf16"
    assert list(k["cost_source"]) == ["launch", "launch"] and (k["unattributed"] == "").all()


A100 = external("hta_a100_rank0.json.gz")


@pytest.mark.skipif(not A100.exists(), reason="no ../shared HTA trace")
def test_hta_a100_apex_adam_kernels_are_costed_below_the_roof() -> None:
    a = roofscope.analyze(str(A100))
    k = a.kernels[a.kernels["name"].str.contains("AdamFunctor")]
    # 108 launches of 320 chunks: 587 MB each in about 0.4 ms, 1.43-1.68 TB/s of the A100's 2.04
    assert len(k) == 108 and (k["cost_source"] == "launch").all()
    assert ((k["bytes"] / (k["dur_ns"] * 1e-9)) < a.ceilings.bandwidth).all()
    assert (k["cls"] == "memory").all()


def test_cli_in_process(tmp_path: Path) -> None:
    from roofscope.cli import main

    out = tmp_path / "a.json"
    assert main(["analyze", str(_unlaunched(tmp_path)), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["summary"]["unattributed"]["share"] == 0.0


def test_a_replayed_optimizer_kernel_without_its_capture_keeps_its_grid_cost(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1000)
    c = b.launch_kernel(APEX_ADAM, 10, 100, 100, runtime="cudaGraphLaunch")
    next(e for e in b.events if e.get("cat") == "kernel" and e["args"]["correlation"] == c)["args"]["grid"] = [10, 1, 1]
    p = tmp_path / "graph.json.gz"
    with gzip.open(p, "wt") as f:
        json.dump(b.doc(), f)
    k = roofscope.analyze(str(p)).kernels
    # no capture: the replay has time only, except for what its own launch geometry says (10 chunks)
    assert k["bytes"].iat[0] == 18_350_080 and k["unattributed"].iat[0] == "" and k["graph"].iat[0] >= 0
