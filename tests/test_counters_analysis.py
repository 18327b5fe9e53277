"""Measured counters in the analysis (analyzers/place/measured.py), and the accuracy table
(benchmarks/accuracy.py), on the H200 probe: its Kineto trace and the Nsight Compute
counters of the same two steps (tests/data/ncu), joined by launch order as the ncu
collector joins them."""
from __future__ import annotations

import importlib.util
import json
import shutil
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import roofscope
from roofscope.analyzers.place.measured import apply_counters
from roofscope.analyzers.model.kernels import RooflineParams
from roofscope.analyzers.place.roofline import place
from tests.conftest import console_field
from roofscope.hardware.devices import Ceilings

from .conftest import external
from .kineto import TraceBuilder

ROOT = Path(__file__).resolve().parents[1]
NCU = ROOT / "tests" / "data" / "ncu"
H200_L2 = 62914560  # torch's L2_cache_size of the H200 (tests/data/h200_gpt_run/run.json)
TOY = Ceilings(device="toy", source="user", peaks={"fp32": 10e12, "tf32": 50e12, "bf16": 100e12}, bandwidth=1e12)

def write_probe_run(run: Path) -> Path:
    """A Run of the probe's Kineto pass with its ncu counters stored the way `roofscope run
    --counters ncu` stores them (parse_ncu_csv, then the launch-order join)."""
    from roofscope.run import counters
    from roofscope.analyzers.ingest import read as load_trace
    from roofscope.analyzers.ingest import ncujoin as counters_join
    from roofscope.collectors.counters.ncu_csv import parse_ncu_csv

    run.mkdir()
    shutil.copy(NCU / "h200_probe_kineto.json.gz", run / "trace.json.gz")
    (run / "run.json").write_text(json.dumps({"schema_version": 1, "device": {"name": "NVIDIA H200",
                                                                            "l2_cache_size": H200_L2}}))
    ncu = parse_ncu_csv((NCU / "h200_probe_long.csv").read_text())
    table, stats = counters_join.join(ncu, load_trace(run / "trace.json.gz"))
    assert stats.matched == 14  # 7 kernels x 2 steps; the 6 memsets are not ncu's
    counters.save(run, table, {"tool": "ncu", "ncu_version": "2025.3.1", "sample": None, "join": asdict(stats)})
    return run


@pytest.fixture
def probe_run(tmp_path) -> Path:
    return write_probe_run(tmp_path / "probe-run")


def _row(k: pd.DataFrame, name: str, step: int = 2) -> pd.Series:
    return k[k["name"].astype(str).str.contains(name, regex=False) & (k["step"] == step)].iloc[0]


def test_measured_costs_replace_the_analytic_ones(probe_run):
    a = roofscope.analyze(probe_run)
    k = a.kernels
    gemm = _row(k, "nvjet_sm90")
    # bf16 4096^3: tensor FLOPs are exactly 2*M*N*K = 2 * 4096^3 = 137,438,953,472, as analytic.
    assert gemm["m_flops"] == gemm["flops"] == 2 * 4096 ** 3 and gemm["flops_ratio"] == 1.0
    assert gemm["tc_used"] == True and gemm["roof_precision"] == "bf16"  # noqa: E712 - pandas boolean
    # DRAM 148,645,120 read + 27,871,744 written = 176,516,864 B vs 3 x 32 MiB compulsory.
    assert gemm["m_dram_bytes"] == gemm["bytes"] == 176_516_864
    assert gemm["bytes_ratio"] == pytest.approx(3 * 4096 * 4096 * 2 / 176_516_864)
    # L2 intensity: 137,438,953,472 FLOP / 1,006,068,960 L2 bytes = 136.6 FLOP/B.
    assert gemm["l2_intensity"] == pytest.approx(136.6099, rel=1e-5)
    assert gemm["cost_source"] == "ncu" and gemm["flops_analytic"] == 2 * 4096 ** 3

    fp32 = _row(k, "sm80_xmma_gemm_f32f32")
    # 1,049,624,576 FFMA + 16,384 HFMA, 2 FLOPs each: 2,099,281,920 FLOPs vs 2e9 analytic (1000^3):
    # 64x128 tiles pad 1000 to 1024 columns.
    assert fp32["m_flops"] == 2 * 1_049_624_576 + 2 * 16_384
    assert fp32["flops_ratio"] == pytest.approx(2e9 / 2_099_281_920)
    # No tensor-core FLOPs: the CUDA-core fp32 roof, and "tensor cores unused".
    assert fp32["tc_used"] == False and not fp32["tensor_core"] and fp32["roof_precision"] == "fp32"  # noqa: E712

    sdpa = _row(k, "sdpa_sm90_flash")
    # Causal 4x16x2048x64: full square 4*B*H*S^2*D = 68,719,476,736; the kernel computes 128x128
    # tiles on and below the diagonal, 16*17/2 = 136 of 256, so 68,719,476,736 * 136/256.
    assert sdpa["m_tensor_flops"] == 68_719_476_736 * 136 // 256
    # roofscope counts S(S+1)/2 of S^2 (x0.5): 34,359,738,368; the softmax adds CUDA-core FLOPs.
    assert sdpa["flops_analytic"] == 68_719_476_736 / 2
    assert sdpa["m_flops"] > sdpa["m_tensor_flops"] and sdpa["tc_used"] == True  # noqa: E712

    add = _row(k, "vectorized_elementwise_kernel")
    assert pd.isna(add["tc_used"])  # not a matmul
    memset = k[k["cat"] == "gpu_memset"]
    assert (memset["cost_source"] == "activity").all() and memset["m_flops"].isna().all()
    assert (k.loc[k["cat"] == "kernel", "cls"] == k.loc[k["cat"] == "kernel", "cls_analytic"]).all()


def test_summary_counters_block(probe_run):
    a = roofscope.analyze(probe_run)
    c = a.to_dict()["counters"]
    assert c["kernels"] == c["kernels_total"] == 14 and c["time_share"] == 1.0
    # The two fp32 GEMMs (58,368 + 58,847 ns in the Kineto trace) are the unused-tensor-core time.
    assert c["tensor_cores_unused"] == {"kernels": 2, "time_s": pytest.approx(117_215e-9)}
    assert c["class_agreement"] == 1.0 and c["ncu_version"] == "2025.3.1" and c["sample"] is None
    assert c["join"]["matched"] == 14
    # Median of 14 FLOP ratios: 7 values per step sorted 0.136 0.417 0.5 0.928 0.943 0.953 1.0 -> 0.928.
    assert c["flops_ratio_median"] == pytest.approx(34_359_738_368 / a.kernels["m_flops"].dropna().iloc[6])
    # Totals and HFU use measured FLOPs.
    assert a.to_dict()["total_flops"] == pytest.approx(a.kernels["m_flops"].sum())
    plain = roofscope.analyze(probe_run / "trace.json.gz")
    assert a.summary.metrics.hfu > plain.summary.metrics.hfu


def _plain_run(tmp_path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(NCU / "h200_probe_kineto.json.gz", run / "trace.json.gz")
    (run / "run.json").write_text(json.dumps({"schema_version": 1}))
    return run


def test_run_without_counters_is_unchanged(tmp_path):
    run = _plain_run(tmp_path)
    a = roofscope.analyze(run)
    assert "counters" not in a.to_dict() and "m_flops" not in a.kernels
    plain = roofscope.analyze(run / "trace.json.gz")
    assert a.kernels["flops"].equals(plain.kernels["flops"])


def _toy(tmp_path) -> pd.DataFrame:
    """Four kernels on the TOY device: an fp32 and a bf16 GEMM (1024^3), a relu, a conv
    layout transform."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 2000)
    mm32 = b.op("aten::mm", 0, 100, [[1024, 1024], [1024, 1024]], ["float"] * 2)
    b.launch_kernel("sm90_gemm_fp32", 10, 200, 300, ext=mm32)
    mm16 = b.op("aten::mm", 200, 100, [[1024, 1024], [1024, 1024]], ["c10::BFloat16"] * 2)
    b.launch_kernel("sm90_gemm_bf16", 210, 600, 300, ext=mm16)
    relu = b.op("aten::relu", 400, 10, [[1 << 20]], ["float"])
    b.launch_kernel("relu_kernel", 405, 1000, 20, ext=relu)
    b.launch_kernel("cudnn::nchwToNhwcKernel", 420, 1100, 10)
    return roofscope.analyze(b.write(tmp_path / "toy.json"), ceilings=TOY).kernels


def _table(correlation, **cols) -> pd.DataFrame:
    n = len(correlation)
    base = {c: np.zeros(n) for c in ("time_ns", "dram_read_bytes", "dram_write_bytes", "l2_bytes", "flops_fp32",
                                     "flops_fp16", "flops_fp64", "tensor_flops_fp16", "tensor_flops_bf16",
                                     "tensor_flops_tf32", "tensor_flops_fp8", "tensor_flops_int8",
                                     "tensor_flops_fp64")}
    base.update({c: np.asarray(v, dtype=float) for c, v in cols.items()})
    return pd.DataFrame({"correlation": np.asarray(correlation, dtype=np.int64), **base})


def test_counters_pick_the_roof(tmp_path):
    k = _toy(tmp_path)
    corr = k["correlation"].to_numpy(dtype=np.int64)
    f = 2 * 1024 ** 3  # 2,147,483,648
    mb = 3 * 1024 * 1024 * 4  # what the fp32 GEMM reads and writes: 12,582,912 B
    # fp32 GEMM: FLOPs on tf32 tensor cores; bf16 GEMM: all on fp32 CUDA cores; layout kernel: no math;
    # the relu has no counters (outside the ncu sample); -1 rows (unjoined) are ignored.
    t = _table([corr[0], corr[1], corr[3], -1], tensor_flops_tf32=[f, 0, 0, 5], flops_fp32=[0, f, 0, 5],
               dram_read_bytes=[mb, mb / 2, 2e6, 0], dram_write_bytes=[0, 0, 2e6, 0], l2_bytes=[4 * mb, 2 * mb, 4e6, 0])
    m = place(apply_counters(k, t), TOY)
    assert list(m["dtype"]) == ["tf32", "fp32", "fp32", k["dtype"].iloc[3]]
    assert list(m["roof_precision"][:3]) == ["tf32", "fp32", "fp32"]
    assert list(m["tc_used"].astype(object)) == [True, False, pd.NA, pd.NA]
    assert list(m["cost_source"]) == ["ncu", "ncu", "formula", "ncu"]
    # bf16 GEMM analytically: floor = 2.147e9 / 100 TFLOP/s = 21.5 us of 300 us, efficiency 0.072 ->
    # underutilized; measured on CUDA cores: 2.147e9 / 10 TFLOP/s = 214.7 us, 0.716 -> compute.
    assert m["cls_analytic"].iloc[1] == "underutilized" and m["cls"].iloc[1] == "compute"
    assert m["efficiency"].iloc[1] == pytest.approx(f / 10e12 / 300e-9 * 1e-3, rel=1e-6)
    assert m["flops_ratio"].iloc[0] == 1.0 and m["bytes_ratio"].iloc[0] == 1.0
    assert m["l2_intensity"].iloc[1] == pytest.approx(f / (2 * mb))
    assert np.isnan(m["flops_ratio"].iloc[3])  # no FLOPs measured: no ratio
    assert m["flops"].iloc[2] == k["flops"].iloc[2] and np.isnan(m["m_flops"].iloc[2])


def test_l2_roof_only_from_measured_ceilings():
    measured = Ceilings(device="NVIDIA H200", source="measured", peaks={"bf16": 803e12}, bandwidth=4.27e12,
                        env={"results": [{"key": "l2", "value": 9.2e12}, {"key": "l2", "value": 9.68e12},
                                         {"key": "bandwidth", "value": 4.27e12}]})
    assert measured.l2_bandwidth == 9.68e12
    assert TOY.l2_bandwidth is None


# ---- benchmarks/accuracy.py ------------------------------------------------------------------

def _accuracy_module():
    spec = importlib.util.spec_from_file_location("accuracy", ROOT / "benchmarks" / "accuracy.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_accuracy_table_and_scorecard(probe_run):
    acc = _accuracy_module()
    a = roofscope.analyze(probe_run)
    assert acc.l2_size(a) == (H200_L2, "run.json")
    t = acc.accuracy_table(a, H200_L2)
    assert len(t) == 7 and (t["steps"] == 2).all()
    assert t["op"].iloc[0] == "aten::mm (4096x4096; 4096x4096) bf16"
    assert list(t["flops_ok"][t["matmul"]]) == [True, False, False]
    assert "padding / tile quantization" in t["cause"].iloc[1]
    # SDPA: causal tiles for FLOPs; q passed as q, k and v: 3 x 16.8 MB analytic, one read measured.
    assert t["cause"].iloc[6].startswith("causal masking") and "aliased" in t["cause"].iloc[6]
    assert "operand re-reads" in t["cause"].iloc[0]  # 2 x 32 MiB of operands > 60 MiB of L2
    card = acc.scorecard(t)
    # Working sets above 62.9 MB: GEMM 101 MB, add 537, sum 268, layer norm 269, softmax 268, SDPA 67.1.
    assert card["bytes"] == {"kernels": 6, "within": 4, "pass": False}
    assert card["flops"] == {"kernels": 3, "within": 1, "pass": False}
    assert card["class"] == {"agreement": 1.0, "pass": True, "no_analytic_cost_s": 0.0}


def test_accuracy_command(probe_run, tmp_path, capsys):
    acc = _accuracy_module()
    out = tmp_path / "accuracy.md"
    assert acc.main([str(probe_run), "--markdown", str(out)]) == 0
    text = capsys.readouterr().out
    assert "L2 size 62.9 MB (run.json)" in text and "1 of 3 kernels  missed" in text
    md = out.read_text()
    assert "| 0 | `aten::mm (4096x4096; 4096x4096) bf16` |" in md
    assert "| class agrees on >= 90% of kernel time (with an analytic cost) | 100.0% | met |" in md
    assert acc.main([str(probe_run), "--markdown", str(out)]) == 2  # exists, no --force
    assert "already exists" in capsys.readouterr().err


def test_accuracy_needs_counters(tmp_path, capsys):
    run = _plain_run(tmp_path)
    assert _accuracy_module().main([str(run)]) == 2
    assert "no hardware counters; record it with `roofscope run --counters ncu`" in capsys.readouterr().err


# ---- SASS counters of old CUPTI traces (attribution.py, benchmarks/accuracy_sass.py) ----------

ALEXNET = external("hta_a100_alexnet_cupti_counters.json.gz")


def test_counter_ranges_keep_the_analytic_flops(tmp_path):
    b = TraceBuilder()
    mm = b.op("aten::mm", 0, 100, [[256, 512], [512, 1024]], ["float"] * 2)
    b.launch_kernel("sgemm_128x64", 10, 200, 50, ext=mm, cat="cuda_profiler_range")
    # M*N*K = 256 * 1024 * 512 = 134,217,728 FMAs + one epilogue FMA per output (256 * 1024 = 262,144).
    b.events[-2]["args"]["smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"] = 134_217_728 + 262_144
    k = roofscope.analyze(b.write(tmp_path / "ranges.json"), ceilings=TOY).kernels
    assert k["cost_source"].iloc[0] == "counters"
    assert k["flops"].iloc[0] == 2 * (134_217_728 + 262_144)
    assert k["flops_analytic"].iloc[0] == 2 * 256 * 1024 * 512  # 268,435,456


def _sass_module():
    spec = importlib.util.spec_from_file_location("accuracy_sass", ROOT / "benchmarks" / "accuracy_sass.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_sass_flops_against_the_formulas():
    t = _sass_module().sass_table(ALEXNET).set_index("layer")
    assert len(t) == 23 and t["sass"].notna().all()
    # conv1: 2 * N * C_out * C_in * kh * kw * H_out * W_out = 2 * 128 * 64 * 3 * 11 * 11 * 55 * 55
    # = 17,990,860,800; implicit_convolve_sgemm ran 18,263,449,600 FMA-counted FLOPs (+1.5%).
    conv1 = t.loc["conv1 11x11/4 3->64"]
    assert conv1["analytic"] == 2 * 128 * 64 * 3 * 11 * 11 * 55 * 55 and conv1["sass"] == 18_263_449_600
    # fc1/fc2 (sgemm + bias epilogue): 8 extra FLOPs per output element, 128 * 4096 * 8 = 4,194,304.
    for fc in ("fc1 9216->4096", "fc2 4096->4096"):
        assert t.loc[fc, "sass"] - t.loc[fc, "analytic"] == 128 * 4096 * 8
    assert t.loc["fc3 4096->1000", "ratio"] == pytest.approx(0.9411, abs=1e-4)
    # conv2 ran as FFT (r2c, complex GEMM, c2r): 9.2x fewer FLOPs than the direct formula.
    assert t.loc["conv2 5x5 64->192", "ratio"] == pytest.approx(9.209, abs=1e-3)
    # conv3-5 ran on TF32 tensor cores (xmma implicit GEMM): SASS add/mul/fma counters do not see
    # tensor-core work, so the formula is > 1000x the SASS count.
    assert (t.loc[["conv3 3x3 192->384", "conv4 3x3 384->256", "conv5 3x3 256->256"], "ratio"] > 1000).all()
    # relu (clamp_min_) is a max: no fadd/fmul/ffma at all.
    assert (t.loc[t["op"] == "aten::clamp_min_", "sass"] == 0).all()


# ---- reports ------------------------------------------------------------------------------------

def test_console_counters_line(probe_run):
    from roofscope.reports.console import render_summary

    text = render_summary(roofscope.analyze(probe_run))
    # 58,368 + 58,847 ns of fp32 GEMMs without tensor-core FLOPs = 0.117 ms.
    assert console_field(text, "counters") == ("ncu 2025.3.1: 14 of 14 kernels (100.0% of kernel time); class as"
                                               " analytic on 100.0% of it; tensor cores unused on 0.117 ms of matmul"
                                               " time (2 kernels)")
    assert "  counters" not in render_summary(roofscope.analyze(probe_run / "trace.json.gz"))


def test_report_data_carries_l2_bytes_and_tensor_core_time(probe_run):
    from roofscope.reports.html import render_html, report_data

    a = roofscope.analyze(probe_run)
    data = report_data(a)
    assert data["counters"] is True and data["l2_bandwidth"] is None  # datasheet ceilings: no L2 figure
    kernel = data["modes"]["kernel"]
    cells, names = kernel["cells"], data["kernels"]["name"]
    # Cells are per (group, step, region, class): sum each group's over the two steps.
    frame = pd.DataFrame({"name": [names[kernel["keys"]["kernel"][g]] for g in cells["g"]],
                          **{c: pd.to_numeric(pd.Series(cells[c], dtype=object))
                             for c in ("l2_bytes", "tc_ns", "notc_ns")}})
    sums = frame.groupby("name").sum(min_count=1)
    gemm = sums.loc["nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"]
    # The two bf16 GEMM launches: 1,006,068,960 + 985,718,592 L2 bytes.
    assert gemm["l2_bytes"] == 1_006_068_960 + 985_718_592 and gemm["tc_ns"] > 0 and np.isnan(gemm["notc_ns"])
    fp32 = sums.loc[[n for n in sums.index if n.startswith("sm80_xmma_gemm_f32f32")][0]]
    assert np.isnan(fp32["tc_ns"]) and fp32["notc_ns"] == 58_368 + 58_847
    page = render_html(a)
    assert "hollow ones mark the same groups at their L2 intensity" in page and "no L2 roof is drawn" in page
    plain = report_data(roofscope.analyze(probe_run / "trace.json.gz"))
    assert plain["counters"] is False and "l2_bytes" not in plain["modes"]["kernel"]["cells"]



def test_helper_kernels_of_a_tensor_core_call_are_not_flagged(tmp_path):
    """cuDNN-style: one op launches a layout transform (a little CUDA-core math) and a tensor-core
    GEMM. The transform is not 'tensor cores unused'; a GEMM alone without tensor FLOPs is."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 2000)
    mm = b.op("aten::mm", 0, 100, [[1024, 1024], [1024, 1024]], ["c10::BFloat16"] * 2)
    b.launch_kernel("nchwToNhwcKernel", 10, 200, 20, ext=mm)
    b.launch_kernel("sm90_gemm_bf16", 20, 300, 100, ext=mm)
    lone = b.op("aten::mm", 200, 100, [[1024, 1024], [1024, 1024]], ["c10::BFloat16"] * 2)
    b.launch_kernel("sm80_gemm_f32", 210, 500, 300, ext=lone)
    k = roofscope.analyze(b.write(tmp_path / "calls.json"), ceilings=TOY).kernels
    corr = k["correlation"].to_numpy(dtype=np.int64)
    f = 2 * 1024 ** 3
    m = apply_counters(k, _table(corr, flops_fp32=[1e6, 0, f], tensor_flops_bf16=[0, f, 0]))
    assert list(m["tc_used"].astype(object)) == [pd.NA, True, False]


def test_accuracy_suite_needs_cuda(monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    spec = importlib.util.spec_from_file_location("accuracy_suite", ROOT / "benchmarks" / "accuracy_suite.py")
    suite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite)
    assert suite.main(["--steps", "1"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_measured_streaming_kernels_are_floored_by_l2_bytes_too(tmp_path):
    # TOY with levels: L2 50 MB at 4 TB/s, HBM at 1 TB/s. The relu (1 Mi fp32 in, 1 Mi out: 8,388,608
    # compulsory bytes) ran 20 us. Measured: 1 MB of DRAM traffic (its input was still in L2 and
    # its output stayed dirty there) but 10 MB through L2.
    # DRAM alone: floor 1e6 / 1e12 = 1 us, efficiency 0.05 -> under-utilized;
    # with L2: floor max(1 us, 10e6 / 4e12 = 2.5 us) = 2.5 us, efficiency 0.125, level L2.
    # The bf16 GEMM's 40 MB of L2 traffic (tiles re-read) is left out: floor stays its
    # compute floor, 2.147e9 / 100 TFLOP/s = 21.47 us of 300 us.
    levels = replace(TOY, levels=(("L2", 50e6, 4e12), ("HBM", float("inf"), 1e12)))
    k = _toy(tmp_path)
    corr = k["correlation"].to_numpy(dtype=np.int64)
    f = 2 * 1024 ** 3
    t = _table([corr[1], corr[2]], tensor_flops_bf16=[f, 0], dram_read_bytes=[6e6, 0.5e6],
               dram_write_bytes=[0, 0.5e6], l2_bytes=[40e6, 10e6])
    m = place(apply_counters(k, t), levels, RooflineParams(latency_floor_s=0.5e-6))
    relu = m.iloc[2]
    assert relu["floor_s"] == pytest.approx(2.5e-6) and relu["efficiency"] == pytest.approx(0.125)
    assert relu["roof_level"] == "L2" and relu["cls"] == "underutilized"
    gemm = m.iloc[1]
    assert gemm["floor_s"] == pytest.approx(f / 100e12) and gemm["cls"] == "underutilized"
    assert gemm["roof_level"] == "HBM" and bool(gemm["compute_bound"])
    # the same relu in 8 us: 2.5 / 8 = 0.3125 -> memory-bound on L2, where DRAM alone gave 1 / 8 = 0.125
    fast = k.assign(dur_ns=np.where(np.arange(len(k)) == 2, 8000, k["dur_ns"]))
    m2 = place(apply_counters(fast, t), levels, RooflineParams(latency_floor_s=0.5e-6))
    assert m2["efficiency"].iloc[2] == pytest.approx(0.3125) and m2["cls"].iloc[2] == "memory"
