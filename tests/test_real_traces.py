"""Every file of the shared corpus of real traces (../shared/traces/external: HolisticTraceAnalysis's
test data, 34 files from V100/A100/MI250/MTIA/CPU-only set-ups) analyzed, or refused in one line when
it is not a trace, with the outcome per file asserted."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import roofscope
from roofscope.errors import TraceError
from roofscope.reports.console import render_summary

ROOT = Path(__file__).resolve().parents[1]
# Worktrees sit one level deeper than the main checkout; ROOFSCOPE_SHARED_TRACES points at the corpus.
EXTERNAL = Path(os.environ.get("ROOFSCOPE_SHARED_TRACES", ROOT.parent / "shared" / "traces" / "external"))
needs_corpus = pytest.mark.skipif(not (EXTERNAL / "hta").is_dir(),
                                  reason=f"shared trace corpus absent: {EXTERNAL / 'hta'} "
                                         "(set ROOFSCOPE_SHARED_TRACES to its external/ folder)")

# path -> (cpu_only, ceilings source, datasheet key, GPU activities or CPU work items)
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
    "hta/distributed_info_unavailable/distributed_info_not_found.json.gz": (True, "none", None, 741),
    "hta/execution_trace/benchmark_simple_add_trace.json.gz": (False, "datasheet", "a100-sxm4-40gb", 4),
    "hta/mixed_files/rank_non_gpu.json.gz": (True, "none", None, 741),
    "hta/mtia_inference_trace/mtia_inference_rank_0.json.gz": (True, "none", None, 1010),
    "hta/mtia_trace_single_rank/mtia_rank_0.json.gz": (True, "none", None, 6365),
    "hta/nccl_parser_config/nccl_data.json.gz": (False, "datasheet", "a100-sxm4-40gb", 3774),
    "hta/negative_queue_length_values_check/rank0.json.gz": (False, "datasheet", "a100-sxm4-80gb", 7747),
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": (False, "datasheet", "v100-sxm2-32gb", 6095),
    "hta/rank_non_gpu/rank_non_gpu.json.gz": (True, "none", None, 741),
    "hta/rank_unavailable/rank_not_found.json.gz": (True, "none", None, 741),
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
REFUSED = {
    "hta/execution_trace/benchmark_simple_add_et.json.gz": "not a Kineto trace: a PyTorch execution trace",
    "hta/memory_analysis/memory_timeline.raw.gz": "not a Kineto trace: a memory timeline",
}


@needs_corpus
def test_the_table_covers_the_whole_corpus():
    files = {str(p.relative_to(EXTERNAL)) for p in EXTERNAL.rglob("*") if p.is_file() and p.name != "README.md"}
    assert files == set(ANALYZED) | set(REFUSED)


@needs_corpus
@pytest.mark.parametrize("rel", sorted(ANALYZED))
def test_every_trace_is_analyzed(rel):
    cpu_only, source, key, n = ANALYZED[rel]
    a = roofscope.analyze(EXTERNAL / rel)
    s = a.summary()
    text = render_summary(a)
    assert (a.cpu_only, a.ceilings.source, a.ceilings.datasheet.key if a.ceilings.datasheet else None,
            len(a.kernels)) == (cpu_only, source, key, n)
    assert s["skipped_events"] == {}
    if source == "none":
        # one line says what needs ceilings and how to give them; the rest is still computed
        line = next(ln for ln in text.splitlines() if ln.startswith("  ceilings"))
        assert "no ceilings" in line and "--device" in line and "--peak-tflops" in line
        assert set(a.kernels["cls"]) <= {"unknown", "communication"}
        if not a.cpu_only:
            reasons = {r["rule"]: r["reason"] for r in s["diagnosis"]["skipped"]}
            assert reasons["fusion"].startswith("needs ceilings") and reasons["tf32"].startswith("needs ceilings")


@needs_corpus
@pytest.mark.parametrize("rel", sorted(REFUSED))
def test_non_traces_are_refused_in_one_line(rel):
    with pytest.raises(TraceError, match=REFUSED[rel]):
        roofscope.analyze(EXTERNAL / rel)


@needs_corpus
@pytest.mark.parametrize("rel,rc,expect", [
    ("hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz", 0, "identified from its properties"),
    ("hta/trace_filter/sampled_rank-1.json.gz", 0, "no ceilings: the trace names no GPU device"),
    ("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", 0, "CPU-only trace"),
    ("hta/execution_trace/benchmark_simple_add_et.json.gz", 2, "a PyTorch execution trace"),
    ("hta/memory_analysis/memory_timeline.raw.gz", 2, "a memory timeline"),
])
def test_analyze_command(rel, rc, expect, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), ROOFSCOPE_CACHE_DIR=str(tmp_path))
    res = subprocess.run([sys.executable, "-m", "roofscope", "analyze", str(EXTERNAL / rel)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == rc, res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    assert expect in (res.stdout if rc == 0 else res.stderr)
    if rc:
        assert res.stderr.count("\n") == 1 and res.stdout == ""


@needs_corpus
def test_mi250_rocm_trace():
    """ROCm 6.2: hipLaunchKernel / hipExtModuleLaunchKernel launches, "stream": "0x0" on runtime
    calls, kernels on device 2 while deviceProperties lists ids 0-3 named 'AMD Radeon Graphics'."""
    a = roofscope.analyze(EXTERNAL / "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    k = a.kernels
    assert (k["op"] >= 0).all()  # every kernel and copy linked to its launching op
    gemm = k[k["name"].astype(str).str.startswith("Cijk_")]
    assert len(gemm) and set(gemm["category"]) == {"gemm"}
    copies = k[k["cat"] == "gpu_memcpy"]
    # 5 x 128 fp32 = 2560 bytes per copy, from hipMemcpyWithStream's "size": "2560"
    assert copies["bytes"].tolist() == [2560.0, 2560.0]


@needs_corpus
def test_report_and_diff_without_ceilings(tmp_path):
    base, test = EXTERNAL / "hta/trace_compare/base/base.json.gz", EXTERNAL / "hta/trace_compare/test/test.json.gz"
    env = dict(os.environ, PYTHONPATH=str(ROOT), ROOFSCOPE_CACHE_DIR=str(tmp_path))
    for args in (["report", str(base), "-o", str(tmp_path / "r.html")], ["diff", str(base), str(test)]):
        res = subprocess.run([sys.executable, "-m", "roofscope", *args], capture_output=True, text=True,
                             env=env, timeout=300)
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert (tmp_path / "r.html").stat().st_size > 10_000
