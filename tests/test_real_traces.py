"""Every file of HolisticTraceAnalysis's test data (34 files from V100/A100/MI250/MTIA/CPU-only set-ups)
analyzed, or refused in one line when it is not a trace, with the outcome per file asserted: the files
vendored in tests/data/external, and the whole corpus when it is at hand (tests/conftest.py)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import roofscope
from roofscope.errors import TraceError
from roofscope.reports.console import render_summary

from .conftest import ROOT, available_traces, console_field, corpus_present, external

# path -> (cpu_only, ceilings source, datasheet key, GPU activities; for CPU-only traces the number of
# CPU work items, None where that is the cost model's choice rather than a fact of the trace)
ANALYZED = {
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz": (False, "datasheet", "mi210", 16),
    "hta/call_stack/backward_thread.json": (False, "none", None, 1),
    "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz": (True, "none", None, 0),
    "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz":
        (False, "datasheet", "a100-sxm4-40gb", 98),
    "hta/critical_path/cuda_event_sync/event_sync_trace.json.gz": (False, "datasheet", "a100-sxm4-40gb", 5),
    "hta/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz":
        (False, "datasheet", "a100-sxm4-40gb", 6),
    "hta/critical_path/end_to_end/simple_add/input/trace.json.gz": (False, "datasheet", "a100-sxm4-40gb", 98),
    "hta/critical_path/end_to_end/simple_add/output/overlaid_critical_path_trace.json.gz":
        (False, "datasheet", "a100-sxm4-40gb", 98),
    "hta/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz":
        (False, "datasheet", "a100-sxm4-40gb", 98),
    "hta/cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz": (False, "datasheet", "a100-sxm4-40gb", 77),
    "hta/df_index_resolver/df_index_resolver.json.gz": (False, "datasheet", "v100-sxm2-32gb", 22290),
    "hta/distributed_info_unavailable/distributed_info_not_found.json.gz": (True, "none", None, None),
    "hta/execution_trace/benchmark_simple_add_trace.json.gz": (False, "datasheet", "a100-sxm4-40gb", 4),
    "hta/mixed_files/rank_non_gpu.json.gz": (True, "none", None, None),
    "hta/mtia_inference_trace/mtia_inference_rank_0.json.gz": (True, "none", None, None),
    "hta/mtia_trace_single_rank/mtia_rank_0.json.gz": (True, "none", None, None),
    "hta/nccl_parser_config/nccl_data.json.gz": (False, "datasheet", "a100-sxm4-40gb", 3774),
    "hta/negative_queue_length_values_check/rank0.json.gz": (False, "datasheet", "a100-sxm4-80gb", 7747),
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": (False, "datasheet", "v100-sxm2-32gb", 6095),
    "hta/rank_non_gpu/rank_non_gpu.json.gz": (True, "none", None, None),
    "hta/rank_unavailable/rank_not_found.json.gz": (True, "none", None, None),
    "hta/timeline_analysis/sampled_rank-0.json.gz": (False, "none", None, 1204),
    "hta/trace_compare/base/base.json.gz": (False, "none", None, 18),
    "hta/trace_compare/test/test.json.gz": (False, "none", None, 17),
    "hta/trace_diff/control/control.json.gz": (False, "datasheet", "a100-sxm4-40gb", 9450),
    "hta/trace_diff/test/test.json.gz": (False, "datasheet", "v100-sxm2-16gb", 15632),
    "hta/trace_file_list/inference_rank_1.json.gz": (False, "none", None, 4),
    "hta/trace_filter/sampled_rank-0.json.gz": (False, "none", None, 1204),
    "hta/trace_filter/sampled_rank-1.json.gz": (False, "none", None, 1154),
    "hta/triton_example/triton_example.json.gz": (False, "datasheet", "a100-sxm4-40gb", 1),
    "hta_a100_alexnet_cupti_counters.json.gz": (False, "datasheet", "a100-sxm4-40gb", 77),
    "hta_a100_rank0.json.gz": (False, "datasheet", "a100-sxm4-80gb", 7747),
}
# CPU-only traces of GPU (or MTIA) jobs: their device activity was not recorded (ingest/gpujob.py).
GPU_JOBS = {"hta/distributed_info_unavailable/distributed_info_not_found.json.gz", "hta/mixed_files/rank_non_gpu.json.gz",
            "hta/mtia_inference_trace/mtia_inference_rank_0.json.gz", "hta/mtia_trace_single_rank/mtia_rank_0.json.gz",
            "hta/rank_non_gpu/rank_non_gpu.json.gz", "hta/rank_unavailable/rank_not_found.json.gz"}
REFUSED = {
    "hta/execution_trace/benchmark_simple_add_et.json.gz": "not a Kineto trace: a PyTorch execution trace",
    "hta/memory_analysis/memory_timeline.raw.gz": "not a Kineto trace: a memory timeline",
}


# HTA's corpus only: the shared data's other folders (tracelens/) are not swept here.
AT_HAND = [rel for rel in available_traces() if rel.startswith("hta")]


def test_the_table_covers_every_trace_at_hand():
    # Every vendored trace has its outcome here; with the corpus at hand, the table is the whole corpus.
    assert AT_HAND and set(AT_HAND) <= set(ANALYZED) | set(REFUSED)
    if corpus_present():
        assert set(AT_HAND) == set(ANALYZED) | set(REFUSED)


@pytest.mark.parametrize("rel", [rel for rel in AT_HAND if rel in ANALYZED])
def test_every_trace_is_analyzed(rel):
    cpu_only, source, key, n = ANALYZED[rel]
    a = roofscope.analyze(external(rel))
    s = a.to_dict()
    text = render_summary(a)
    assert (a.cpu_only, a.ceilings.source, a.ceilings.datasheet.key if a.ceilings.datasheet else None,
            len(a.kernels) if n is not None else None) == (cpu_only, source, key, n)
    assert n is not None or len(a.kernels) > 0
    assert s["skipped_events"] == {}
    if source == "none":
        # one line says what needs ceilings and how to give them, or that the trace is the CPU side of a GPU
        # job, whose host ops no ceilings judge (ingest/gpujob.py); the rest is still computed
        line = console_field(text, "ceilings")
        if s["gpu_job_host_only"]:
            assert "CPU-only trace of a GPU job" in line and rel in GPU_JOBS
        else:
            assert "no ceilings" in line and "--datasheet" in line and "--peak-tflops" in line
        assert set(a.kernels["cls"]) <= {"unknown", "communication"}
        if not a.cpu_only:
            reasons = {r["rule"]: r["reason"] for r in s["diagnosis"]["skipped"]}
            assert reasons["fusion"].startswith("needs ceilings") and reasons["tf32"].startswith("needs ceilings")


def test_gpu_jobs_cpu_sides_are_named_and_only_they() -> None:
    cpu_only = [rel for rel in AT_HAND if ANALYZED.get(rel, (False,))[0]]
    named = {rel for rel in cpu_only if roofscope.analyze(external(rel)).to_dict()["gpu_job_host_only"]}
    assert named == GPU_JOBS & set(AT_HAND)


@pytest.mark.parametrize("rel", [rel for rel in AT_HAND if rel in REFUSED])
def test_non_traces_are_refused_in_one_line(rel):
    with pytest.raises(TraceError, match=REFUSED[rel]):
        roofscope.analyze(external(rel))


@pytest.mark.parametrize("rel,rc,expect", [
    ("hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz", 0, "identified from its properties"),
    ("hta/trace_file_list/inference_rank_1.json.gz", 0, "no ceilings: the trace names no GPU device"),
    ("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", 0, "CPU-only trace"),
    ("hta/execution_trace/benchmark_simple_add_et.json.gz", 2, "a PyTorch execution trace"),
    ("hta/memory_analysis/memory_timeline.raw.gz", 2, "a memory timeline"),
])
def test_analyze_command(rel, rc, expect, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), ROOFSCOPE_CACHE_DIR=str(tmp_path))
    res = subprocess.run([sys.executable, "-m", "roofscope", "analyze", str(external(rel))],
                         capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == rc, res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    assert expect in (res.stdout if rc == 0 else res.stderr)
    if rc:
        assert res.stderr.count("\n") == 1 and res.stdout == ""


def test_mi250_rocm_trace():
    """ROCm 6.2: hipLaunchKernel / hipExtModuleLaunchKernel launches, "stream": "0x0" on runtime
    calls, kernels on device 2 while deviceProperties lists ids 0-3 named 'AMD Radeon Graphics'."""
    a = roofscope.analyze(external("hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"))
    k = a.kernels
    assert (k["op"] >= 0).all()  # every kernel and copy linked to its launching op
    gemm = k[k["name"].astype(str).str.startswith("Cijk_")]
    assert len(gemm) and set(gemm["category"]) == {"gemm"}
    copies = k[k["cat"] == "gpu_memcpy"]
    # 5 x 128 fp32 = 2560 bytes per copy, from hipMemcpyWithStream's "size": "2560"
    assert copies["bytes"].tolist() == [2560.0, 2560.0]


def test_report_and_diff_without_ceilings(tmp_path):
    base, test = external("hta/trace_compare/base/base.json.gz"), external("hta/trace_compare/test/test.json.gz")
    env = dict(os.environ, PYTHONPATH=str(ROOT), ROOFSCOPE_CACHE_DIR=str(tmp_path))
    for args in (["report", str(base), "-o", str(tmp_path / "r.html")], ["diff", str(base), str(test)]):
        res = subprocess.run([sys.executable, "-m", "roofscope", *args], capture_output=True, text=True,
                             env=env, timeout=600)
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert (tmp_path / "r.html").stat().st_size > 10_000
