"""Diagnosis rules on synthetic traces with hand-worked savings, and on real traces.

Ceilings: fp32 10, tf32 80, bf16 160 TFLOP/s, 1 TB/s, so a floor is easy to work out:
t = max(FLOPs / peak, bytes / 1e12). Times in the builder are microseconds.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import roofscope
from roofscope.analyzers.diagnose import CPU_RULES, RULES, DiagnosisInput, OptimizerFacts, RunFacts, diagnose
from roofscope.analyzers.diagnose.fusion import UnfusedOptimizer
from roofscope.hardware.devices import Ceilings
from roofscope.analyzers.model.trace import Trace
from roofscope.analyzers.place.roofline import RooflineParams
from roofscope.analyzers.views.timeline import Timeline

from .conftest import external
from .kineto import TraceBuilder

TOY = Ceilings(device="toy", source="user", peaks={"fp32": 10e12, "tf32": 80e12, "bf16": 160e12},
               bandwidth=1e12)
F32, BF16 = "float", "c10::BFloat16"
N = 1 << 24  # elements of the elementwise tensors: 64 MiB in fp32
HTA = external("hta_a100_rank0.json.gz")
RUN = Path(__file__).parent / "data" / "h200_gpt_run"


def _findings(a) -> dict[str, dict]:
    return {f["rule"]: f for f in a.to_dict()["findings"]}


def _skipped(a) -> dict[str, str]:
    return {s["rule"]: s["reason"] for s in a.to_dict()["diagnosis"]["skipped"]}


class Step:
    """One ProfilerStep of ops each launching one kernel; ``gap`` us of GPU idle before each
    kernel whose launch comes late (host-bound) or none (queued behind the previous one)."""

    def __init__(self) -> None:
        self.b = TraceBuilder()
        self.cpu = 0.0     # host clock: next op starts here
        self.gpu = 10.0    # GPU clock: end of the last kernel

    def kernel(self, op: str, dims: list, types: list, name: str, dur: float, host_gap: float = 0.0,
               tid: int = 100) -> None:
        ext = self.b.op(op, self.cpu, 5, dims, types, tid=tid)
        if host_gap:
            # The launch ends host_gap us after the GPU went idle: the GPU waited for the CPU.
            launch = self.gpu + host_gap - 2
            start = self.gpu + host_gap
        else:
            launch = self.cpu + 1
            start = max(self.gpu, launch + 3)
        self.b.launch_kernel(name, launch, start, dur, ext=ext, tid=tid)
        self.cpu = max(self.cpu + 6, launch + 3)
        self.gpu = start + dur

    def write(self, tmp_path: Path, name: str = "t.json") -> Path:
        self.b.annotation("ProfilerStep#1", 0, max(self.cpu, self.gpu) + 1)
        return self.b.write(tmp_path / name)


def _gemm(s: Step, dtype: str, m: int, n: int, k: int, dur: float, name: str = "gemm_kernel", **kw) -> None:
    s.kernel("aten::mm", [[m, k], [k, n]], [dtype, dtype], name, dur, **kw)


def _eltwise_chain(s: Step, **kw) -> None:
    # add: 3 x 64 MiB = 201.3 MB, floor 201.3 us; mul the same; gelu 2 x 64 MiB = 134.2 MB.
    s.kernel("aten::add", [[N], [N]], [F32, F32], "vectorized_elementwise_kernel<add>", 250, **kw)
    s.kernel("aten::mul", [[N], [N]], [F32, F32], "vectorized_elementwise_kernel<mul>", 250, **kw)
    s.kernel("aten::gelu", [[N]], [F32], "vectorized_elementwise_kernel<gelu>", 170, **kw)


def test_fusion_saving_from_intermediate_bytes(tmp_path) -> None:
    s = Step()
    _gemm(s, BF16, 4096, 4096, 4096, 1000)
    _eltwise_chain(s)
    _gemm(s, BF16, 4096, 4096, 4096, 1000)
    a = roofscope.analyze(s.write(tmp_path), ceilings=TOY)
    f = _findings(a)["fusion"]
    # One chain of 3 kernels, 670 us. Fused, it moves its largest member's 201.3 MB once:
    # 201.3 us at 1 TB/s. Saving = 670 - 201.33 = 468.7 us (queued kernels: gpu_bound = 1).
    assert f["saving_s"] == pytest.approx(670e-6 - 3 * 4 * N / 1e12, rel=1e-3)
    assert f["evidence"]["figures"]["chains_per_step"] == 1
    assert "aten::add -> aten::mul -> aten::gelu" in f["summary"]
    assert f["binding"] == "memory" and f["fix"]["snippet"] == "model = torch.compile(model)"


def test_no_fusion_for_a_compute_bound_step(tmp_path) -> None:
    s = Step()
    for _ in range(10):  # 10 x 1 ms of bf16 GEMMs at 86% of the roof: compute-bound
        _gemm(s, BF16, 4096, 4096, 4096, 1000)
    # A chain of two small elementwise kernels: 2 x 30 us = 0.6% of the 10.1 ms step.
    s.kernel("aten::add", [[N // 8], [N // 8]], [F32, F32], "vectorized_elementwise_kernel<add>", 30)
    s.kernel("aten::mul", [[N // 8], [N // 8]], [F32, F32], "vectorized_elementwise_kernel<mul>", 30)
    a = roofscope.analyze(s.write(tmp_path), ceilings=TOY)
    assert "fusion" not in _findings(a)
    assert _skipped(a)["fusion"].startswith("not binding: memory is 0.")
    assert a.to_dict()["diagnosis"]["binding"]["compute"] > 0.9


def test_tf32_saving_from_the_ratio_of_roofs(tmp_path) -> None:
    s = Step()
    # fp32 4096^3: 137.4 GFLOP, floor 13.74 ms at 10 TFLOP/s; 15 ms is 91.6% efficient
    # (compute-bound, below the 1.1x TF32 evidence). With TF32 at 80 TFLOP/s the floor is
    # 1.718 ms; at the same efficiency 15 ms x 1.718 / 13.74 = 1.875 ms: saving 13.125 ms.
    _gemm(s, F32, 4096, 4096, 4096, 15000)
    a = roofscope.analyze(s.write(tmp_path), ceilings=TOY)
    f = _findings(a)["tf32"]
    assert f["saving_s"] == pytest.approx(15e-3 * (1 - 10 / 80), rel=1e-3)
    assert f["rank"] == 1 and f["confidence"] == "high"
    # bf16: floor 0.859 ms (bytes halve to 100.7 MB, still below): saving 15 x (1 - 1/16) = 14.06 ms.
    assert f["evidence"]["figures"]["bf16_saving_s"] == pytest.approx(15e-3 * (1 - 10 / 160), rel=1e-3)
    assert "set_float32_matmul_precision" in f["fix"]["snippet"]


def test_launch_bound_step_gets_cuda_graphs_not_precision(tmp_path) -> None:
    s = Step()
    # 200 tiny kernels of 3 us, each launched 20 us after the GPU went idle: host-bound.
    for _ in range(200):
        s.kernel("aten::relu", [[1024]], [F32], "vectorized_elementwise_kernel<relu>", 3, host_gap=20)
    # An fp32 GEMM that TF32 would speed up 8x, but it is 1.4% of the step.
    _gemm(s, F32, 1024, 1024, 1024, 65, host_gap=20)
    a = roofscope.analyze(s.write(tmp_path), ceilings=TOY)
    f = _findings(a)
    assert list(f)[0] == "cuda_graphs"
    g = f["cuda_graphs"]
    # 201 gaps of 20 us = 4.02 ms/step of host-bound idle; minus one graph launch (10 us).
    assert g["saving_s"] == pytest.approx(201 * 20e-6 - 10e-6, rel=0.01)
    assert g["confidence"] == "high" and g["evidence"]["figures"]["kernels_per_step"] == 201
    assert "tf32" not in f and _skipped(a)["tf32"].startswith("not binding: compute")


def test_alignment_penalty_measured_against_aligned_gemms(tmp_path) -> None:
    s = Step()
    # Aligned bf16 1024x4096x4096: 34.36 GFLOP, floor 214.7 us; 268.4 us = 80% efficient.
    _gemm(s, BF16, 4096, 1024, 4096, 268.4)
    # N = 1002 misses the multiple of 8: 33.62 GFLOP, floor 210.1 us, run at 30%: 700 us.
    _gemm(s, BF16, 4096, 1002, 4096, 700.0, name="gemm_unaligned")
    a = roofscope.analyze(s.write(tmp_path), ceilings=TOY)
    f = _findings(a)["alignment"]
    floor = 2 * 4096 * 1002 * 4096 / 160e12
    eff_ref = (2 * 4096 * 1024 * 4096 / 160e12) / 268.4e-6
    assert f["saving_s"] == pytest.approx(700e-6 - floor / eff_ref, rel=1e-3)  # 437 us
    assert "4096x1002x4096" in f["summary"] and f["confidence"] == "medium"


def test_weight_bound_gemm_int8_saving(tmp_path) -> None:
    s = Step()
    # Decode-like bf16 GEMM, M = 4: 134 MFLOP over 33.6 MB, 4 FLOP/B: memory-bound. Weights
    # 4096 x 4096 x 2 B = 33.55 MB of the 33.62 MB; INT8 halves them: saving 40 us x 0.998 / 2.
    for _ in range(20):
        _gemm(s, BF16, 4, 4096, 4096, 40.0)
    a = roofscope.analyze(s.write(tmp_path), ceilings=TOY)
    f = _findings(a)["weight_bound_gemm"]
    weight, total = 4096 * 4096 * 2, 2 * (4 * 4096 + 4096 * 4096 + 4 * 4096)
    assert f["saving_s"] == pytest.approx(20 * 40e-6 * weight / total / 2, rel=1e-3)
    assert f["evidence"]["figures"]["int4_saving_s"] == pytest.approx(20 * 40e-6 * weight / total * 0.75, rel=1e-3)


def test_unfused_attention_points_at_sdpa(tmp_path) -> None:
    s = Step()
    b, t, d = 32, 1024, 64
    s.kernel("aten::bmm", [[b, t, d], [b, d, t]], [BF16, BF16], "gemm_qk", 60)
    # Scores are 32 x 1024 x 1024 = 33.5 M elements; scale, softmax on them (memory-bound).
    s.kernel("aten::div", [[b, t, t], []], [BF16, "Scalar"], "vectorized_elementwise_kernel<div>", 90)
    s.kernel("aten::_softmax", [[b, t, t], [], []], [BF16, "Scalar", "Scalar"], "softmax_warp_forward", 100)
    s.kernel("aten::bmm", [[b, t, t], [b, t, d]], [BF16, BF16], "gemm_pv", 60)
    a = roofscope.analyze(s.write(tmp_path), ceilings=TOY)
    f = _findings(a)["sdpa"]
    assert f["saving_s"] == pytest.approx(190e-6, rel=1e-3)  # the div and softmax kernels
    assert f["evidence"]["figures"]["score_elements"] == b * t * t


def test_per_parameter_optimizer(tmp_path) -> None:
    s = Step()
    _gemm(s, BF16, 4096, 4096, 4096, 1000)
    start = s.cpu
    for _ in range(60):  # 60 per-parameter kernels of 4 us, each 6 us after the previous ended
        s.kernel("aten::add_", [[65536], [65536]], [F32, F32], "vectorized_elementwise_kernel<add>", 4,
                 host_gap=6)
    s.b.annotation("Optimizer.step#SGD.step", start, s.cpu - start)
    a = roofscope.analyze(s.write(tmp_path), ceilings=TOY)
    f = _findings(a)["fused_optimizer"]
    # Idle inside the span: 60 gaps of 6 us = 360 us; kernels 240 us vs their 47.2 MB at 1 TB/s.
    assert f["saving_s"] == pytest.approx(360e-6 + 240e-6 - 60 * 3 * 65536 * 4 / 1e12, rel=0.02)
    assert f["evidence"]["figures"]["kernels_per_step"] == 60


def _optimizer_steps(run: RunFacts) -> DiagnosisInput:
    """What the rules read, written by hand (no trace file, no analysis): two steps, each an 800-us
    GEMM then 60 per-parameter optimizer kernels of 4 us moving 786,432 B each, every one launched
    6 us after the GPU went idle."""
    kernel = {"op_name": "aten::add_", "name": "add_kernel", "category": "elementwise", "cls": "memory",
              "phase": "optimizer", "dur_s": 4e-6, "bytes": 786432.0, "region": ""}
    gemm = {**kernel, "op_name": "aten::mm", "name": "gemm_kernel", "category": "gemm", "cls": "compute",
            "phase": "forward", "dur_s": 800e-6, "bytes": 0.0}
    kernels = pd.DataFrame([{**k, "step": step} for step in (1, 2) for k in [gemm] + [kernel] * 60])
    opt = kernels.index[kernels["phase"] == "optimizer"]
    gaps = pd.DataFrame({"step": kernels.loc[opt, "step"].to_numpy(), "kind": "host", "after_sync": False,
                         "dur_s": 6e-6, "next_kernel": opt})
    busy, idle = 800e-6 + 60 * 4e-6, 60 * 6e-6
    steps = pd.DataFrame({"wall_s": busy + idle, "busy_s": busy, "idle_host_s": idle, "idle_queued_s": 0.0,
                          "idle_other_s": 0.0, "idle_edge_s": 0.0}, index=pd.Index([1, 2], name="step"))
    names = pd.DataFrame({"name": pd.Series([], dtype=str)})
    trace = Trace(path="", ops=names, signatures=pd.DataFrame(), kernels=pd.DataFrame(), runtime=pd.DataFrame(),
                  annotations=names)
    return DiagnosisInput(trace=trace, kernels=kernels, steps=steps.reset_index(), ceilings=TOY,
                          timeline=Timeline(steps, gaps, syncs=pd.DataFrame()), params=RooflineParams(), run=run)


def test_a_rule_reads_its_declared_input_only() -> None:
    plain = _optimizer_steps(RunFacts(frameworks=(), optimizer=OptimizerFacts(cls="SGD", tensors=60)))
    d = diagnose(plain, rules=[UnfusedOptimizer()])
    (f,) = d.findings
    # Per step: 360 us idle before the launches + 240 us of kernels - 47.2 MB at 1 TB/s, of a 1.4 ms step.
    assert f.saving_s == pytest.approx(360e-6 + 240e-6 - 60 * 786432 / 1e12)
    assert f.saving_pct == pytest.approx(f.saving_s / 1.4e-3)
    assert f.summary.startswith("SGD over 60 tensors: 60 kernels/step of its own")
    assert d.terms["host"] == pytest.approx(360e-6) and d.step_s == pytest.approx(1.4e-3)
    # The Run's typed facts decide: an optimizer already fused is skipped with the reason.
    fused = _optimizer_steps(RunFacts(frameworks=(), optimizer=OptimizerFacts(cls="AdamW", fused=True)))
    d = diagnose(fused, rules=[UnfusedOptimizer()])
    assert d.findings == [] and d.skipped == [{"rule": "fused_optimizer", "reason": "already fused: AdamW"}]


def test_rules_rank_by_saving_and_savings_are_capped_by_the_step(tmp_path) -> None:
    s = Step()
    # fp32 2048^3 (floor 1.718 ms) in 1.9 ms: TF32 saves 1.9 x 7/8 = 1.66 ms; the chain's
    # fusion 0.469 ms (test above). Memory-bound time is 0.67 / 2.57 = 26% of the step.
    _gemm(s, F32, 2048, 2048, 2048, 1900)
    _eltwise_chain(s)
    a = roofscope.analyze(s.write(tmp_path), ceilings=TOY)
    found = a.to_dict()["findings"]
    assert [f["rule"] for f in found][:2] == ["tf32", "fusion"]
    assert found[0]["saving_s"] == pytest.approx(1.9e-3 * 7 / 8, rel=1e-3)
    assert [f["rank"] for f in found] == list(range(1, len(found) + 1))
    step = a.to_dict()["metrics"]["step_time_s"]
    assert all(0 < f["saving_s"] <= step and f["saving_pct"] == pytest.approx(f["saving_s"] / step)
               for f in found)


def test_cpu_only_traces_get_the_cpu_rules_not_the_gpu_ones(tmp_path) -> None:
    b = TraceBuilder(device_name=None)
    b.op("aten::mm", 0, 100, [[64, 64], [64, 64]], [F32, F32])
    cpu = Ceilings(device="cpu", source="user", peaks={"fp32": 1e12}, bandwidth=1e11)
    a = roofscope.analyze(b.write(tmp_path / "cpu.json"), ceilings=cpu)
    assert a.to_dict()["findings"] == []
    # One matmul, no Run: nothing for the CPU rules to say (no thread count, no conv, no chain, no DataLoader).
    assert [s["rule"] for s in a.to_dict()["diagnosis"]["skipped"]] == [r.name for r in CPU_RULES]


def test_real_h200_gpt_run_is_launch_bound() -> None:
    a = roofscope.analyze(RUN)
    found = a.to_dict()["findings"]
    # The tiny GPT (2 layers, d 256, 512 tokens) runs 1.6 ms of kernels in a 6.3 ms step.
    assert found[0]["rule"] == "cuda_graphs" and found[0]["saving_pct"] > 0.7
    assert not {"fusion", "tf32", "alignment"} & {f["rule"] for f in found}


def test_hta_a100_trace_diagnosis() -> None:
    d = roofscope.analyze(HTA).diagnosis
    # A100, 5 steps of ~216 ms, GPU busy 35%: the idle is mostly gaps with work queued (idle_other),
    # during which the host blocks in copies (rules/idle.py); then communication, H2D copies, syncs and
    # fusion: the job is compiled (CompiledFunction ops, Triton kernels) and replays CUDA graphs (70
    # cudaGraphLaunch), so the chains left are those outside its graphs, in the forward and backward
    # only (the optimizer's are not the model's), and compiling again is not the fix.
    assert d.terms["idle_other"] / d.step_s > 0.5
    rules = [f.rule for f in d.findings]
    assert rules == ["idle_other", "exposed_communication", "h2d_copies", "host_syncs", "fusion"]
    assert "cuda_graphs" not in rules
    assert d.program["compiled"] == "inductor+graphs" and d.program["optimizer"] == "FusedAdam"
    fusion = next(f for f in d.findings if f.rule == "fusion")
    assert "already compiled" in fusion.fix and fusion.apply == "" and "torch.compile(" not in fusion.snippet
    # 6.988 ms/step of GPU idle follows the 15.2 syncs/step, but they held the host 0.844 ms/step:
    # removing them saves at most that (the rest of the idle is the host's own work after them).
    syncs = next(f for f in d.findings if f.rule == "host_syncs")
    assert syncs.figures["sync_bubble_s"] == pytest.approx(6.988e-3, abs=1e-6)
    assert syncs.saving_s == pytest.approx(syncs.figures["sync_blocked_s"]) == pytest.approx(0.8444e-3, abs=1e-6)


def test_activation_bound_gemm_is_not_weight_bound(tmp_path) -> None:
    s = Step()
    # M = 65536, K = 64, N = 256 bf16: 2.1 GFLOP over 2 x (4.2M + 16k + 16.8M) = 42 MB, 51 FLOP/B:
    # memory-bound, but the weights are 32 kB of it: quantizing them saves nothing.
    for _ in range(10):
        _gemm(s, BF16, 65536, 256, 64, 50.0)
    a = roofscope.analyze(s.write(tmp_path), ceilings=TOY)
    assert set(a.kernels["cls"]) == {"memory"}
    assert "weight_bound_gemm" not in _findings(a)


def test_ncu_filter_names_the_kernel_function() -> None:
    from roofscope.analyzers.diagnose.hardware import kernel_function

    name = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float)"
    assert kernel_function(name) == "vectorized_layer_norm_kernel"
    assert kernel_function("triton_poi_fused_add_0") == "triton_poi_fused_add_0"


def test_sum_by_name_matches_a_groupby_on_names():
    """Host activity per name: b 1 + 3 = 4, a 2; sorted by name as a groupby gives it, for string
    and categorical name columns alike (the trace's op names are categorical)."""
    import numpy as np
    import pandas as pd

    from roofscope.analyzers.diagnose.idle import _sum_by_name

    values = np.array([1.0, 2.0, 3.0])
    for names in (pd.Series(["b", "a", "b"], dtype=object),
                  pd.Series(["b", "a", "b"], dtype=pd.CategoricalDtype(["z", "b", "a"]))):
        got = _sum_by_name(values, names)
        assert got.index.tolist() == ["a", "b"] and got.tolist() == [2.0, 4.0]


def test_a_step_that_captured_a_cuda_graph_is_left_out_of_the_terms(tmp_path) -> None:
    # Three steps of two 50-us relu kernels; the second is launched H us after the first ended
    # (host-bound idle): H = 2,000 us in step 1, which also captured a CUDA graph (Inductor's
    # cudagraph trees record in the first steps that run a new shape), 100 us in steps 2 and 3.
    # Host term over all steps: (2000 + 100 + 100) / 3 = 733 us; over the steady steps: 100 us.
    b = TraceBuilder()
    t = 0.0
    for step, host in ((1, 2000.0), (2, 100.0), (3, 100.0)):
        b.annotation(f"ProfilerStep#{step}", t, host + 200)
        if step == 1:
            b.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamBeginCapture", "pid": 100,
                             "tid": 100, "ts": t + 20, "dur": 2, "args": {"correlation": 1}})
        for i, (launch, start) in enumerate(((t + 1, t + 5), (t + 55 + host - 2, t + 55 + host))):
            ext = b.op("aten::relu", launch - 1, 3, [[1 << 20]], [F32])
            b.launch_kernel("relu_kernel", launch, start, 50, ext=ext)
        t += host + 200
    a = roofscope.analyze(b.write(tmp_path / "t.json"), ceilings=TOY)
    d = a.to_dict()["diagnosis"]
    assert d["capture_steps"] == [1]
    assert d["terms_s"]["host"] == pytest.approx(100e-6, rel=0.05)
    # the steady steps' wall: 100 us of host idle + 2 x 50 us of kernels + the annotation's edges
    assert d["step_s"] == pytest.approx(300e-6, rel=0.05)
