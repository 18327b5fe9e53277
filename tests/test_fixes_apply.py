"""Fixes that apply (analyzers/diagnose/blockers.py and the rules that read it) and classes for kernels
with no cost (roofline.class_sources), on synthetic traces with hand-checkable numbers and real ones.

Ceilings are test_rules' TOY (1 TB/s); times in the builder are microseconds.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import roofscope
from roofscope.analyzers.diagnose.communication import MOE_SNIPPET, comm_snippet, exposed_comm_finding

from .conftest import external
from .kineto import PID, TID, TraceBuilder
from .test_rules import F32, TOY

AMD = external("hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz")


def _sync(b: TraceBuilder, ts: float, dur: float, name: str = "cudaStreamSynchronize") -> None:
    b._corr += 1
    b.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": PID, "tid": TID, "ts": ts, "dur": dur,
                     "args": {"correlation": b._corr}})


def _launch_bound(tmp_path: Path, steps: int = 2, sizes=(256, 256), library: str | None = None,
                  sync_ops: tuple[str, ...] = (), modules: bool = False,
                  run_meta: dict | None = None) -> roofscope.Result:
    """``steps`` steps of 20 elementwise kernels of 2 us, each launched 20 us after the GPU went idle
    (the host-bound idle a CUDA graph removes). Step s adds tensors of ``sizes[s]`` elements. After the
    tenth kernel, each op of ``sync_ops`` runs (inside ``library``'s op when given), reading a size back
    with a 10 us stream sync. ``modules``: the first ten kernels run in ``FasterRCNN.backbone``, the
    rest (and the sync ops) in ``FasterRCNN.roi_heads``."""
    b = TraceBuilder()
    cpu, gpu = 0.0, 10.0
    for s in range(steps):
        start = cpu
        for i in range(20):
            if modules and i == 10:
                b.annotation("nn.Module: FasterRCNN.backbone", start, cpu - 1 - start)
                roi = cpu - 0.5
            ext = b.op("aten::add", cpu, 5, [[sizes[s]], [sizes[s]]], [F32, F32])
            b.launch_kernel("vectorized_elementwise_kernel<add>", gpu + 18, gpu + 20, 2, ext=ext)
            cpu, gpu = gpu + 21, gpu + 22
            if i == 10 and sync_ops:
                t = cpu
                for op in sync_ops:
                    if library:
                        b.op(library, t, 30)
                    b.op(op, t + 1, 28, [[sizes[s]]], ["bool"])
                    _sync(b, t + 5, 10)
                    t += 31
                cpu = t
                gpu = max(gpu, cpu)
        if modules:
            b.annotation("nn.Module: FasterRCNN.roi_heads", roi, cpu - roi)
        b.annotation(f"ProfilerStep#{s + 1}", start, cpu - start + 2)
        cpu += 5
    path = b.write(tmp_path / "t.json")
    return roofscope.analyze(path, ceilings=TOY, run_meta=run_meta)


def _finding(a, rule: str) -> dict:
    return next(f for f in a.to_dict()["findings"] if f["rule"] == rule)


def test_syncs_from_a_library_block_the_cuda_graph_and_name_it(tmp_path: Path) -> None:
    a = _launch_bound(tmp_path, library="torchvision::nms", sync_ops=("aten::nonzero",))
    f = _finding(a, "cuda_graphs")
    assert f["status"] == "blocked" and f["saving_s"] == 0.0 and f["confidence"] == "low"
    # What the graph would have saved is kept apart, not counted: 19 in-phase gaps of 20 us a step
    # (its first gap is the step's edge) less the 2 that follow the sync (its bubble: within 50 us of
    # its end), 340 us, less the 10 us a graph launch costs.
    assert f["evidence"]["figures"]["unblocked_saving_s"] == pytest.approx(340e-6 - 10e-6)
    kinds = {(b["kind"], b["op"], b["library"], b["per_step"]) for b in f["blockers"]}
    # One nms a step, whose nonzero syncs: a sync, and nms's data-dependent output size.
    assert kinds == {("host_sync", "aten::nonzero", "torchvision::nms", 1.0),
                     ("data_dependent_shape", "torchvision::nms", "torchvision::nms", 1.0)}
    assert "aten::nonzero 1x/step inside torchvision::nms" in f["summary"]
    assert "torchvision" in f["fix"]["text"] and "loss.item" not in f["fix"]["snippet"]
    # A blocked fix is no change to make: the changes leave it out.
    changes = a.to_dict()["diagnosis"]["changes"]
    assert all("cuda_graphs" not in c["rules"] for c in changes)
    # The syncs' own finding speaks of the library's ops, not of a loss.item() in the loop.
    s = _finding(a, "host_syncs")
    assert "torchvision" in s["fix"]["text"] and "loss" not in s["fix"]["snippet"]


def test_with_module_labels_the_fix_captures_the_clean_module_alone(tmp_path: Path) -> None:
    a = _launch_bound(tmp_path, library="torchvision::nms", sync_ops=("aten::nonzero",), modules=True)
    f = _finding(a, "cuda_graphs")
    assert {b["module"] for b in f["blockers"]} == {"FasterRCNN.roi_heads"}
    assert "Capture the part without them alone (FasterRCNN.backbone)" in f["fix"]["text"]
    assert f["fix"]["snippet"].startswith('model.backbone = torch.compile(model.backbone, mode="reduce-overhead")')


def test_dynamic_shapes_across_steps_block_the_cuda_graph(tmp_path: Path) -> None:
    a = _launch_bound(tmp_path, sizes=(256, 512))
    f = _finding(a, "cuda_graphs")
    assert f["status"] == "blocked"
    assert [(b["kind"], b["op"], b["per_step"]) for b in f["blockers"]] == [("dynamic_shape", "aten::add", 20.0)]
    assert "aten::add 20x/step (2 input shapes across 2 steps)" in f["summary"]


def test_same_shapes_and_no_syncs_leave_the_cuda_graph_fix_as_it_was(tmp_path: Path) -> None:
    a = _launch_bound(tmp_path)
    f = _finding(a, "cuda_graphs")
    assert f["status"] == "ok" and f["blockers"] == [] and f["saving_s"] > 0
    assert any("cuda_graphs" in c["rules"] for c in a.to_dict()["diagnosis"]["changes"])


def test_a_user_item_blocks_with_advice_to_move_it(tmp_path: Path) -> None:
    a = _launch_bound(tmp_path, sync_ops=("aten::item",))
    f = _finding(a, "cuda_graphs")
    assert f["status"] == "blocked" and {b["op"] for b in f["blockers"]} == {"aten::item"}
    assert "Move the host reads and blocking copies out of the step" in f["fix"]["text"]


def test_sync_saving_is_bounded_by_the_time_the_syncs_held_the_host(tmp_path: Path) -> None:
    # A 1000 us kernel; the host syncs on it from 100 to 1010 us (910 us held), then works 5000 us
    # on its own before the next launch: 5005 us of GPU idle follow the sync. Without the sync the
    # host would have started that work 910 us earlier: the saving is 910 us, not 5005.
    b = TraceBuilder()
    ext = b.op("aten::mm", 0, 5, [[1024, 1024], [1024, 1024]], [F32, F32])
    b.launch_kernel("gemm_kernel", 1, 10, 1000, ext=ext)
    _sync(b, 100, 910)
    ext = b.op("aten::mm", 6000, 5, [[1024, 1024], [1024, 1024]], [F32, F32])
    b.launch_kernel("gemm_kernel", 6010, 6015, 1000, ext=ext)
    b.annotation("ProfilerStep#1", 0, 7100)
    a = roofscope.analyze(b.write(tmp_path / "t.json"), ceilings=TOY)
    f = _finding(a, "host_syncs")
    fig = f["evidence"]["figures"]
    assert fig["sync_bubble_s"] == pytest.approx(5005e-6)
    assert fig["sync_blocked_s"] == pytest.approx(910e-6)
    assert f["saving_s"] == pytest.approx(910e-6)


def test_already_fused_optimizer_is_skipped_with_the_reason(tmp_path: Path) -> None:
    # The Run's facts reach the rules typed (diagnose/inputs.RunFacts): the optimizer it recorded.
    a = _launch_bound(tmp_path, run_meta={"optimizer": {"class": "AdamW", "tensors": 10, "fused": True}})
    skipped = {s["rule"]: s["reason"] for s in a.diagnosis.skipped}
    assert skipped["fused_optimizer"] == "already fused: AdamW"


# -- kernels with no cost ------------------------------------------------------------------------

def test_uncosted_kernels_are_classed_by_launch_geometry_and_duration(tmp_path: Path) -> None:
    b = TraceBuilder()   # an H100: 132 SMs from its datasheet row (the trace lists none)
    for i, (grid, dur) in enumerate((([1, 1, 1], 500), ([64, 1, 1], 500), ([264, 1, 1], 2), ([264, 1, 1], 500))):
        # no formula, and two vectors of different lengths: no signature cost either (cost/formulas/families)
        ext = b.op("mylib::scan", 1000 * i, 5, [[4096], [8192]], [F32, F32])
        b.launch_kernel(f"scan_kernel_{i}", 1000 * i + 1, 1000 * i + 10, dur, ext=ext)
        b.events[-2]["args"]["grid"] = grid
    ext = b.op("aten::add", 5000, 5, [[1 << 20], [1 << 20]], [F32, F32])
    b.launch_kernel("add_kernel", 5001, 5010, 5, ext=ext)
    ext = b.op("mylib::scan", 6000, 5, [[1 << 22], [1 << 21]], [F32, F32])
    b.launch_kernel("scan_kernel_4", 6001, 6010, 10, ext=ext)
    b.events[-2]["args"]["grid"] = [264, 1, 1]
    a = roofscope.analyze(b.write(tmp_path / "t.json"))
    k = a.kernels.set_index("name")
    got = {n: (k.at[n, "cls"], k.at[n, "cls_source"]) for n in k.index}
    assert got == {
        "scan_kernel_0": ("latency", "launch geometry"),        # one block: one SM, serial on its face
        "scan_kernel_1": ("underutilized", "launch geometry"),  # 64 blocks on 132 SMs
        "scan_kernel_2": ("latency", "duration"),               # 2 us: under the 3 us latency floor
        "scan_kernel_3": ("unknown", ""),                        # fills the GPU for 500 us: its 48 kB say nothing
        # Its op reads (4,194,304 + 2,097,152) x 4 B = 25.2 MB: 7.5 us at 3.35 TB/s, 75% of its 10 us (>= 25%).
        "scan_kernel_4": ("memory", "io bytes"),
        "add_kernel": ("memory", "formula"),                     # 12.6 MB in 5 us: 75% of 3.35 TB/s
    }
    assert k.loc[k.index.str.startswith("scan"), "floor_s"].isna().all()   # still uncosted


def test_without_ceilings_uncosted_kernels_stay_unknown(tmp_path: Path) -> None:
    b = TraceBuilder(device_name=None)
    ext = b.op("mylib::scan", 0, 5, [[4096], [8192]], [F32, F32])
    b.launch_kernel("scan_kernel", 1, 10, 500, ext=ext)
    b.events[-2]["args"]["grid"] = [1, 1, 1]
    a = roofscope.analyze(b.write(tmp_path / "t.json"))
    assert not a.ceilings.known
    assert a.kernels["cls"].tolist() == ["unknown"] and a.kernels["cls_source"].tolist() == [""]


# -- vendor-aware tools -------------------------------------------------------------------------

def test_amd_trace_gets_rocprof_compute_not_ncu() -> None:
    from roofscope.analyzers.diagnose.hardware import counters_command, is_amd

    a = roofscope.analyze(AMD)
    assert is_amd(a.trace, a.ceilings)
    tool, command = counters_command(a.trace, a.ceilings, "Cijk_Alik_Bljk")
    assert tool.startswith("rocprof-compute") and command.startswith("rocprof-compute profile")
    assert "ncu" not in command


def test_underutilized_finding_names_the_vendor_tool(tmp_path: Path) -> None:
    # 10 elementwise kernels moving 12.6 MB in 500 us each (2.5% of the 1 TB/s floor of 12.6 us):
    # under-utilized, launched through HIP.
    def trace(runtime: str) -> Path:
        b = TraceBuilder(device_name="AMD Instinct MI300X" if runtime.startswith("hip") else "toy")
        for i in range(10):
            ext = b.op("aten::add", 600 * i, 5, [[1 << 20], [1 << 20]], [F32, F32])
            b.launch_kernel("elementwise_kernel", 600 * i + 1, 600 * i + 10, 500, ext=ext, runtime=runtime)
        b.annotation("ProfilerStep#1", 0, 6100)
        return b.write(tmp_path / f"{runtime}.json")

    amd = _finding(roofscope.analyze(trace("hipLaunchKernel"), ceilings=TOY), "underutilized")
    assert amd["fix"]["snippet"].startswith('rocprof-compute profile -n roofscope -k "elementwise_kernel"')
    assert "rocprof-compute" in amd["title"]
    nv = _finding(roofscope.analyze(trace("cudaLaunchKernel"), ceilings=TOY), "underutilized")
    assert nv["fix"]["snippet"].startswith("ncu --kernel-name")


# -- communication advice by collective ------------------------------------------------------------

def test_all_to_all_job_gets_expert_parallel_advice_not_ddp() -> None:
    # Per step: all-to-all 40 ms, all-reduce 2 ms (5% of the collective time): MoE advice only.
    colls = pd.DataFrame({"collective": ["alltoall", "allreduce"], "time_s": [0.040, 0.002],
                          "bytes": [64e6, 8e6], "count": [16, 2], "busbw": [50e9, 40e9]})
    f = exposed_comm_finding(0.030, 0.042, 0.100, colls)
    assert f is not None and f.figures["dominant_collective"] == "alltoall"
    assert "capacity factor" in f.fix and "bucket_cap_mb" not in f.fix
    assert f.snippet.startswith(MOE_SNIPPET) and "DDP" not in f.snippet
    # The same with all-reduce dominating: DDP's advice, as before.
    ddp = exposed_comm_finding(0.030, 0.042, 0.100, colls.assign(time_s=[0.002, 0.040]).iloc[::-1])
    assert "bucket_cap_mb" in ddp.fix and "DDP(model" in ddp.snippet


def test_all_gather_job_gets_fsdp_advice() -> None:
    kc = pd.DataFrame({"collective": ["allgather"] * 4 + ["reduce_scatter"] * 4, "bytes": [1e6] * 8,
                       "dur_s": [1e-3] * 8})
    assert comm_snippet(kc, steps=1).startswith("model = FSDP(model, forward_prefetch=True")
    colls = pd.DataFrame({"collective": ["allgather"], "time_s": [0.02], "bytes": [4e6], "count": [4],
                          "busbw": [100e9]})
    f = exposed_comm_finding(0.01, 0.02, 0.1, colls)
    assert f.fix.startswith("Overlap the parameter all-gathers") and "DDP" not in f.fix


def test_blocked_finding_round_trips_through_the_typed_summary(tmp_path: Path) -> None:
    a = _launch_bound(tmp_path, sizes=(256, 512))
    s = a.to_dict()
    typed = a.summary
    assert json.dumps(typed.to_dict(), sort_keys=True, default=str) == json.dumps(s, sort_keys=True, default=str)


# -- traces without deviceProperties ------------------------------------------------------------

def _no_props(tmp_path: Path, info: dict) -> Path:
    b = TraceBuilder(device_name=None, extra={"distributedInfo": info})
    ext = b.op("aten::add", 0, 5, [[1 << 20], [1 << 20]], [F32, F32])
    b.launch_kernel("add_kernel", 1, 10, 5, ext=ext)
    ext = b.op("mylib::scan", 100, 5, [[4096], [8192]], [F32, F32])
    b.launch_kernel("scan_kernel", 101, 110, 500, ext=ext)
    b.events[-2]["args"]["grid"] = [64, 1, 1]
    return b.write(tmp_path / "t.json")


def test_a_trace_without_device_properties_uses_the_device_it_names(tmp_path: Path) -> None:
    a = roofscope.analyze(_no_props(tmp_path, {"rank": 0, "device_name": "NVIDIA H100 80GB HBM3"}))
    assert a.ceilings.known and a.ceilings.datasheet.key == "h100-sxm"
    k = a.kernels.set_index("name")
    # 12.6 MB in 5 us: 75% of 3.35 TB/s; the scan's 64 blocks leave most of the 132 SMs idle.
    assert (k.at["add_kernel", "cls"], k.at["scan_kernel", "cls"]) == ("memory", "underutilized")


def test_a_trace_naming_no_device_uses_datasheet_else_unknown(tmp_path: Path) -> None:
    path = _no_props(tmp_path, {"rank": 0})
    a = roofscope.analyze(path)
    assert not a.ceilings.known and set(a.kernels["cls"]) == {"unknown"}
    a = roofscope.analyze(path, device="h100-sxm")   # --datasheet
    assert a.ceilings.known and a.kernels.set_index("name").at["scan_kernel", "cls"] == "underutilized"


def test_analyze_prints_the_blocked_fix_and_its_blocker(tmp_path: Path, capsys) -> None:
    from roofscope.cli import main

    _launch_bound(tmp_path, library="torchvision::nms", sync_ops=("aten::nonzero",))
    assert main(["analyze", str(tmp_path / "t.json"), "--peak-tflops", "10", "--peak-bandwidth", "1000"]) == 0
    out = capsys.readouterr().out
    assert "cannot be captured in a CUDA graph as it is: blocked" in out
    assert "aten::nonzero 1x/step inside torchvision::nms" in out


def test_collective_advice_on_real_traces() -> None:
    # HTA's A100 rank: all-reduce 126.6 ms of the 190.3 ms of NCCL kernels; all-to-all 30.3 ms (16%)
    # and all-gather + reduce-scatter 8.6 ms (4.5%) are under the 20% that earns their own lines.
    f = _finding(roofscope.analyze(external("hta_a100_rank0.json.gz")), "exposed_communication")
    assert f["evidence"]["figures"]["dominant_collective"] == "allreduce"
    assert f["fix"]["snippet"].startswith("model = DDP(model") and "moe" not in f["fix"]["snippet"]
    assert "FSDP" not in f["fix"]["snippet"]
    # HTA's sampled rank 0: all-to-all 182.4 ms, all-reduce 107.7, all-gather 106.1: MoE first.
    f = _finding(roofscope.analyze(external("hta/timeline_analysis/sampled_rank-0.json.gz")), "exposed_communication")
    assert f["evidence"]["figures"]["dominant_collective"] == "alltoall"
    assert f["fix"]["text"].startswith("The all-to-alls are expert parallelism")
    lines = f["fix"]["snippet"].splitlines()
    assert lines[0].startswith("# expert parallel") and lines[3].startswith("model = DDP(model")
    assert lines[-1].startswith("# the all-gathers/reduce-scatters, if FSDP")


def test_measured_counters_are_the_class_source() -> None:
    from roofscope.analyzers.place.roofline import place

    # The same 1 GB / 2 ms copy-like kernel, costed by a formula and by Nsight Compute's counters
    # (attribution's cost_source "ncu" after analyzers/counters.apply_counters): 1 ms floor at 1 TB/s.
    k = pd.DataFrame({"name": ["a", "b"], "dur_ns": [2e6, 2e6], "flops": [0.0, 0.0], "bytes": [1e9, 1e9],
                      "dtype": ["fp32", "fp32"], "tensor_core": [False, False], "category": ["copy", "copy"],
                      "cat": ["kernel", "kernel"], "cost_source": ["formula", "ncu"]})
    p = place(k, TOY)
    assert p["cls"].tolist() == ["memory", "memory"] and p["cls_source"].tolist() == ["formula", "counters"]
