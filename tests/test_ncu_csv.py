"""Nsight Compute CSV parsing, on real ncu output recorded on an H200 (tests/data/ncu/README.md)."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from roofscope.collectors.counters.ncu_csv import COLUMNS, METRICS, NcuCsvError, parse_ncu_csv
from roofscope.errors import RoofscopeError

DATA = Path(__file__).parent / "data" / "ncu"


def _fixture(name: str) -> str:
    return (DATA / f"h200_probe_{name}.csv").read_text()


def test_long_format_worked_numbers():
    df = parse_ncu_csv(_fixture("long"))
    assert list(df.columns) == list(COLUMNS)
    # 7 kernels per step x 2 recorded steps, in ID order.
    assert df["launch"].tolist() == list(range(14))
    assert df.attrs["na_metrics"] == []
    # Launch 7 is the bf16 4096^3 GEMM: tensor bf16 137,438,953,472 = 2 * 4096^3; no other tensor path.
    g = df.iloc[7]
    assert g["name"] == "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
    assert g["tensor_flops_bf16"] == 2 * 4096**3 == 137_438_953_472
    assert g["tensor_flops_fp16"] == g["tensor_flops_tf32"] == g["tensor_flops_fp8"] == 0
    assert g["flops_fp32"] == 0
    # Thousands separators: "176,832" ns, "148,366,080" / "27,961,856" DRAM bytes, "985,718,592" L2 bytes.
    assert (g["time_ns"], g["dram_read_bytes"], g["dram_write_bytes"], g["l2_bytes"]) == (
        176_832, 148_366_080, 27_961_856, 985_718_592)
    assert g["block"] == [384, 1, 1] and g["grid"] == [2, 66, 1]
    # Launch 8 is the fp32 1000^3 GEMM on CUDA cores: ffma 1,049,624,576, fadd = fmul = 0
    # -> flops_fp32 = 0 + 0 + 2 * 1,049,624,576 = 2,099,249,152 (2e9 analytic; the count is
    # 1024 * 1024 * 1001: the tiles cover 1024 x 1024 outputs). hfma 16,384 -> flops_fp16 = 2 * 16,384.
    f = df.iloc[8]
    assert f["flops_fp32"] == 2_099_249_152
    assert f["flops_fp16"] == 2 * 16_384
    assert f["flops_fp64"] == 0
    assert f["tensor_flops_bf16"] == 0


def test_raw_format_matches_long_layout():
    df = parse_ncu_csv(_fixture("raw"))
    assert list(df.columns) == list(COLUMNS)
    assert len(df) == 14
    # The raw page carries .avg/.min/.max too; only .sum is taken: launch 0 time "177,408" ns,
    # DRAM read "148,715,008" (its .avg is 3,098,229.33).
    assert df.loc[0, "time_ns"] == 177_408
    assert df.loc[0, "dram_read_bytes"] == 148_715_008
    assert df.loc[7, "tensor_flops_bf16"] == 2 * 4096**3
    assert df.loc[0, "name"] == "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
    # Only ffma was exported: FLOPs need fadd and fmul too, so they stay NaN (absent, not zero).
    assert math.isnan(df.loc[8, "flops_fp32"])
    assert math.isnan(df.loc[7, "tensor_flops_fp16"])
    assert df.loc[4, "block"] == [32, 4, 1]


def test_kernel_base_function_names_and_launch_count():
    base = parse_ncu_csv(_fixture("base"))
    assert base.loc[2, "name"] == "vectorized_elementwise_kernel"
    assert base.loc[4, "name"] == "vectorized_layer_norm_kernel"
    count3 = parse_ncu_csv(_fixture("count3"))
    assert count3["launch"].tolist() == [0, 1, 2]
    assert count3.loc[1, "flops_fp32"] == 2 * 1_049_624_576


def test_na_metric_is_listed_and_values_stay():
    df = parse_ncu_csv(_fixture("badmetric"))
    assert df.attrs["na_metrics"] == ["not__a_metric.sum"]
    # No range: all 34 launches of the script, first the 6 randn kernels; "42,592" ns.
    assert len(df) == 34
    assert df.loc[0, "time_ns"] == 42_592
    assert df["dram_read_bytes"].isna().all()


def test_log_lines_and_application_output_inside_the_csv_are_ignored():
    lines = _fixture("long").splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    noisy = lines[: header + 5] + ["==PROF== Profiling \"kernel\" - 5: 0%....50%....100% - 9 passes",
                                   "step 3 loss 0.25, lr 1e-3", "==WARNING== something"] + lines[header + 5:]
    assert parse_ncu_csv("\n".join(noisy)).equals(parse_ncu_csv("\n".join(lines)))


_HEAD = '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",' \
        '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'


def _long_row(i: int, name: str, metric: str, unit: str, value: str) -> str:
    return (f'"{i}","1","python","host","{name}","1","7","(128, 1, 1)","(4, 1, 1)","0","9.0",'
            f'"Command line profiler metrics","{metric}","{unit}","{value}"')


def test_scaled_units_are_converted_to_bytes_and_ns():
    # Exported without --print-units base. Quoted names with commas survive.
    name = "void k<float, 4>(int, float*)"
    text = "\n".join([
        "==PROF== Connected to process 1", _HEAD,
        _long_row(0, name, "gpu__time_duration.sum", "usecond", "12.5"),        # 12,500 ns
        _long_row(0, name, "dram__bytes_read.sum", "Mbyte", "1.5"),             # 1,500,000 bytes
        _long_row(0, name, "dram__bytes_write.sum", "Kbyte", "2,048"),          # 2,048,000 bytes
        _long_row(0, name, "lts__t_bytes.sum", "Gbyte", "0.25"),                # 250,000,000 bytes
        _long_row(1, "other, kernel", "gpu__time_duration.sum", "msecond", "1.25"),  # 1,250,000 ns
        _long_row(1, "other, kernel", "dram__bytes_read.sum", "byte", "n/a"),
        _long_row(1, "other, kernel", "dram__bytes_write.sum", "byte", "1,024"),
        _long_row(1, "other, kernel", "lts__t_bytes.sum", "byte", "4,096"),
    ])
    df = parse_ncu_csv(text)
    assert df["name"].tolist() == [name, "other, kernel"]
    assert df["time_ns"].tolist() == [12_500, 1_250_000]
    assert df.loc[0, "dram_read_bytes"] == 1_500_000
    assert df.loc[0, "dram_write_bytes"] == 2_048_000
    assert df.loc[0, "l2_bytes"] == 250_000_000
    assert math.isnan(df.loc[1, "dram_read_bytes"])
    assert (df.loc[1, "dram_write_bytes"], df.loc[1, "l2_bytes"]) == (1_024, 4_096)
    assert df.attrs["na_metrics"] == ["dram__bytes_read.sum"]


def test_raw_units_row_is_applied():
    text = "\n".join([
        '"ID","Kernel Name","Block Size","Grid Size","gpu__time_duration.sum","dram__bytes_read.sum"',
        '"","","","","usecond","Kbyte"',
        '"1","b","(1, 1, 1)","(1, 1, 1)","2","3"',
        '"0","a","(1, 1, 1)","(2, 1, 1)","1.5","1,000"',
    ])
    df = parse_ncu_csv(text)
    assert df["name"].tolist() == ["a", "b"]          # ID order, not file order
    assert df["time_ns"].tolist() == [1_500, 2_000]
    assert df["dram_read_bytes"].tolist() == [1_000_000, 3_000]
    assert df.loc[0, "grid"] == [2, 1, 1]


def test_unknown_unit_and_no_header_are_clear_errors():
    with pytest.raises(NcuCsvError, match="unknown ncu unit.*'furlong'"):
        parse_ncu_csv("\n".join([_HEAD, _long_row(0, "k", "gpu__time_duration.sum", "furlong", "3")]))
    text = (DATA / "ncu_messages.txt").read_text()
    with pytest.raises(NcuCsvError, match="no Nsight Compute CSV header") as e:
        parse_ncu_csv(text)
    assert isinstance(e.value, RoofscopeError)


def test_metric_set():
    # 4 time/bytes + 9 CUDA-core instruction counts + 6 tensor paths, each once.
    assert len(METRICS) == len(set(METRICS)) == 19
    assert "sm__inst_executed_pipe_tensor.sum" not in METRICS   # 128x off on Hopper (GPU_NOTES.md)
