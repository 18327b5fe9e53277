"""Tests for roofscope.hardware.devices: datasheet table, name matching, ceilings, ceilings file."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from roofscope.config import CeilingOverrides
from roofscope.hardware.devices import (
    PRECISIONS,
    Ceilings,
    DeviceSpec,
    known_devices,
    known_keys,
    load_ceilings_file,
    lookup,
    match_device,
    normalize_dtype,
    resolve_ceilings,
    save_ceilings_file,
)
from roofscope.errors import DeviceError, RoofscopeError
from roofscope.hardware.datasheets import identify

# --------------------------------------------------------------------------
# Table sanity
# --------------------------------------------------------------------------

REQUIRED_KEYS = {
    "v100-sxm2-16gb", "v100-sxm2-32gb", "v100-pcie-16gb",
    "a100-sxm4-40gb", "a100-sxm4-80gb", "a100-pcie-40gb", "a100-pcie-80gb",
    "h100-sxm", "h100-pcie", "h100-nvl", "h200", "h200-nvl", "b200",
    "l4", "l40s", "a10g", "rtx-3090", "rtx-4090",
}


def test_table_has_required_devices_and_unique_keys():
    keys = known_keys()
    assert len(keys) == len(set(keys))
    assert REQUIRED_KEYS <= set(keys)
    assert [s.key for s in known_devices()] == list(keys)


@pytest.mark.parametrize("spec", known_devices(), ids=lambda s: s.key)
def test_every_row_is_well_formed(spec: DeviceSpec):
    assert set(spec.peaks) <= set(PRECISIONS)
    assert "fp32" in spec.peaks and "fp64" in spec.peaks
    assert all(isinstance(v, float) and v > 0 for v in spec.peaks.values())
    # Peaks are stored in FLOP/s, not TFLOP/s: anything below 1e11 is a unit slip.
    assert all(v > 1e11 for v in spec.peaks.values())
    assert 1e11 < spec.bandwidth < 2e13  # bytes/s
    assert spec.memory_gb > 0
    assert spec.source and any(str(y) in spec.source for y in range(2017, 2027))
    if "fp16" in spec.peaks:
        # Tensor fp16 always beats CUDA-core fp32 on these parts.
        assert spec.peaks["fp16"] > spec.peaks["fp32"]


def test_h100_sxm_dense_not_sparse():
    h100 = lookup("h100-sxm")
    assert h100.peaks["bf16"] == 989.5e12  # 1,979 TFLOP/s is the 2:4-sparse headline
    assert h100.peaks["fp16"] == 989.5e12
    assert h100.peaks["tf32"] == 494.5e12
    assert h100.peaks["fp8"] == 1979e12
    assert h100.peaks["int8"] == 1979e12
    assert h100.peaks["fp32"] == 67e12
    assert h100.peaks["fp64"] == 67e12  # FP64 tensor core
    assert h100.fp64_vector == 34e12
    assert h100.bandwidth == 3.35e12
    assert h100.memory_gb == 80


def test_h200_is_h100_sxm_compute_with_more_bandwidth():
    h100, h200 = lookup("h100-sxm"), lookup("h200")
    assert dict(h200.peaks) == dict(h100.peaks)
    assert h200.bandwidth == 4.8e12
    assert h200.memory_gb == 141
    h200_nvl, h100_nvl = lookup("h200-nvl"), lookup("h100-nvl")
    assert dict(h200_nvl.peaks) == dict(h100_nvl.peaks)
    assert h200_nvl.bandwidth == 4.8e12
    assert h100_nvl.bandwidth == 3.9e12
    assert h100_nvl.peaks["bf16"] == 835.5e12


def test_missing_precisions_are_absent():
    for key in ("v100-sxm2-16gb", "v100-sxm2-32gb", "v100-pcie-16gb"):
        peaks = lookup(key).peaks
        assert "bf16" not in peaks and "tf32" not in peaks and "fp8" not in peaks
    for key in ("a100-sxm4-40gb", "a100-sxm4-80gb", "a100-pcie-40gb", "a100-pcie-80gb"):
        assert "fp8" not in lookup(key).peaks
    assert "fp8" not in lookup("rtx-3090").peaks
    assert "fp8" in lookup("rtx-4090").peaks


def test_selected_datasheet_numbers():
    v100 = lookup("v100-sxm2-16gb")
    assert (v100.peaks["fp16"], v100.peaks["fp32"], v100.peaks["fp64"]) == (125e12, 15.7e12, 7.8e12)
    assert v100.bandwidth == 0.9e12
    v100p = lookup("v100-pcie-16gb")
    assert (v100p.peaks["fp16"], v100p.peaks["fp32"]) == (112e12, 14e12)

    a100 = lookup("a100-sxm4-80gb")
    assert (a100.peaks["bf16"], a100.peaks["tf32"], a100.peaks["int8"]) == (312e12, 156e12, 624e12)
    assert (a100.peaks["fp64"], a100.fp64_vector) == (19.5e12, 9.7e12)
    assert a100.bandwidth == 2.039e12
    assert lookup("a100-sxm4-40gb").bandwidth == 1.555e12
    assert lookup("a100-pcie-40gb").bandwidth == 1.555e12
    assert lookup("a100-pcie-80gb").bandwidth == 1.935e12

    h100p = lookup("h100-pcie")
    assert (h100p.peaks["bf16"], h100p.peaks["fp32"], h100p.bandwidth) == (756.5e12, 51e12, 2.0e12)

    b200 = lookup("b200")
    assert (b200.peaks["bf16"], b200.peaks["fp8"], b200.peaks["fp32"]) == (2250e12, 4500e12, 75e12)
    assert b200.bandwidth == 8.0e12

    l4, l40s = lookup("l4"), lookup("l40s")
    assert (l4.peaks["bf16"], l4.peaks["fp8"], l4.bandwidth) == (121e12, 242.5e12, 0.3e12)
    assert (l40s.peaks["bf16"], l40s.peaks["fp8"], l40s.bandwidth) == (362.05e12, 733e12, 0.864e12)
    assert lookup("a10g").peaks["bf16"] == 70e12


def test_geforce_uses_fp32_accumulate_rates():
    # GeForce tensor cores run fp16 with fp32 accumulate at half the
    # fp16-accumulate rate; PyTorch accumulates in fp32, so the table uses it.
    assert lookup("rtx-3090").peaks["fp16"] == 71e12  # fp16-acc would be 142
    assert lookup("rtx-3090").peaks["bf16"] == 71e12
    assert lookup("rtx-4090").peaks["fp16"] == 165.2e12  # fp16-acc would be 330.3
    assert lookup("rtx-4090").peaks["fp8"] == 330.3e12
    assert lookup("rtx-4090").bandwidth == 1.008e12
    assert lookup("rtx-3090").bandwidth == 0.936e12


# --------------------------------------------------------------------------
# Name matching
# --------------------------------------------------------------------------

REAL_NAMES = [
    ("NVIDIA H200", "h200"),
    ("NVIDIA H200 NVL", "h200-nvl"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA H100 NVL", "h100-nvl"),
    ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
    ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb"),
    ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"),
    ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
    ("NVIDIA A100-PG509-200", "a100-sxm4-40gb"),
    ("Tesla V100-SXM2-16GB", "v100-sxm2-16gb"),
    ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"),
    ("Tesla V100-PCIE-16GB", "v100-pcie-16gb"),
    ("Tesla V100-PCIE-32GB", "v100-pcie-32gb"),
    ("NVIDIA L40S", "l40s"),
    ("NVIDIA L4", "l4"),
    ("NVIDIA A10G", "a10g"),
    ("NVIDIA GeForce RTX 3090", "rtx-3090"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("NVIDIA B200", "b200"),
]


@pytest.mark.parametrize("name,key", REAL_NAMES)
def test_match_real_device_names(name: str, key: str):
    spec = match_device(name)
    assert spec is not None and spec.key == key


@pytest.mark.parametrize("name,key", REAL_NAMES)
def test_match_is_case_and_separator_insensitive(name: str, key: str):
    assert match_device(name.lower().replace("-", " ")).key == key


def test_pg509_with_kineto_total_global_mem():
    # The PG509-200 board's Kineto trace reports totalGlobalMem = 42505273344 B (39.6 GiB).
    assert match_device("NVIDIA A100-PG509-200", 42505273344).key == "a100-sxm4-40gb"


def test_l40s_is_not_l4():
    assert match_device("NVIDIA L40S").key == "l40s"
    assert match_device("NVIDIA L4").key == "l4"
    assert match_device("NVIDIA L40") is None  # a different card (181 TFLOP/s fp16)


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA GeForce GTX 1080",
        "AMD Instinct MI100",
        "",
        "   ",
        "cpu",
        "NVIDIA GeForce RTX 3090 Ti",  # different clocks and bandwidth than the 3090
        "NVIDIA GeForce RTX 4090 D",
        "NVIDIA GeForce RTX 4090 Laptop GPU",
        "NVIDIA GH200 480GB",  # GH200 token must not be read as H200
        "NVIDIA A10",  # not the A10G
        "NVIDIA A100-SXM4-40GB MIG 3g.20gb",  # a slice, not the whole GPU
        "NVIDIA H100 64GB HBM2e",  # a size no H100 row has
        "NVIDIA H800",
        "NVIDIA A100-PG999-200",  # unknown board
        "Tesla V100 NVL",  # a form V100 never had
    ],
)
def test_unknown_names_return_none(name: str):
    assert match_device(name) is None


def test_non_string_name_returns_none():
    assert match_device(None) is None  # type: ignore[arg-type]


def test_memory_disambiguates_bare_family_names():
    gib = 2**30
    assert match_device("NVIDIA A100", 85198045184).key == "a100-sxm4-80gb"  # 79.3 GiB
    assert match_device("NVIDIA A100", 42505273344).key == "a100-sxm4-40gb"
    assert match_device("NVIDIA A100 PCIe", 80 * gib).key == "a100-pcie-80gb"
    assert match_device("Tesla V100-SXM2", 34089730048).key == "v100-sxm2-32gb"  # 31.7 GiB
    assert match_device("Tesla V100-SXM2", 16945512448).key == "v100-sxm2-16gb"  # 15.8 GiB
    assert match_device("NVIDIA H100", 94 * 10**9).key == "h100-nvl"  # 87.5 GiB
    # A size that fits no variant is not forced onto the nearest one.
    assert match_device("NVIDIA A100", 24 * gib) is None


def test_name_beats_memory_and_bare_names_default_to_first_variant():
    # An explicit size in the name wins over a conflicting memory figure.
    assert match_device("NVIDIA A100-SXM4-40GB", 80 * 2**30).key == "a100-sxm4-40gb"
    assert match_device("NVIDIA A100").key == "a100-sxm4-40gb"
    assert match_device("NVIDIA H100").key == "h100-sxm"
    assert match_device("NVIDIA H100 HBM3").key == "h100-sxm"


def test_lookup_accepts_keys_and_names():
    assert lookup("h100-sxm").key == "h100-sxm"
    assert lookup("H100_SXM").key == "h100-sxm"
    assert lookup("  L40S ").key == "l40s"
    assert lookup("NVIDIA H100 80GB HBM3").key == "h100-sxm"
    assert lookup("rtx-4090").key == "rtx-4090"
    assert lookup("4090").key == "rtx-4090"
    assert lookup("a100 80gb").key == "a100-sxm4-80gb"
    assert lookup("mi100") is None
    assert lookup("") is None


# --------------------------------------------------------------------------
# Ceilings.roof / ridge
# --------------------------------------------------------------------------


def test_normalize_dtype():
    assert normalize_dtype("bf16") == "bf16"
    assert normalize_dtype("c10::BFloat16") == "bf16"
    assert normalize_dtype("torch.float16") == "fp16"
    assert normalize_dtype("c10::Half") == "fp16"
    assert normalize_dtype("float") == "fp32"
    assert normalize_dtype("double") == "fp64"
    assert normalize_dtype("c10::Float8_e4m3fn") == "fp8"
    assert normalize_dtype("float8_e5m2") == "fp8"
    assert normalize_dtype("signed char") == "int8"
    assert normalize_dtype("") == "fp32"
    assert normalize_dtype("complex128") == "fp32"


def test_roof_tensor_core_and_cuda_core():
    c = Ceilings.from_spec(lookup("h100-sxm"))
    assert c.source == "datasheet" and c.device == "NVIDIA H100 SXM5 80GB"
    assert c.roof("bf16", True) == 989.5e12
    assert c.roof("fp8", True) == 1979e12
    assert c.roof("int8", True) == 1979e12
    # TF32 is opt-in in PyTorch, so fp32 GEMMs sit under the fp32 roof.
    assert c.roof("fp32", True) == 67e12
    assert c.tf32_roof() == 494.5e12
    assert c.roof("tf32", True) == 494.5e12
    # Non-tensor-core work runs on CUDA cores whatever its dtype.
    assert c.roof("bf16", False) == 67e12
    assert c.roof("fp32", False) == 67e12
    assert c.roof("fp64", False) == 34e12  # vector FP64
    assert c.roof("fp64", True) == 67e12  # FP64 tensor core (DGEMM)
    assert c.roof("", True) == 67e12
    assert c.roof("who-knows", False) == 67e12


def test_roof_key_names_the_ceiling_used():
    c = Ceilings.from_spec(lookup("h100-sxm"))
    assert c.roof_key("bf16", True) == "bf16"
    assert c.roof_key("c10::BFloat16", True) == "bf16"
    assert c.roof_key("fp32", True) == "fp32"
    assert c.roof_key("bf16", False) == "fp32"
    assert c.roof_key("fp64", False) == "fp64_vector"
    assert c.roof_key("fp64", True) == "fp64"
    v100 = Ceilings.from_spec(lookup("v100-sxm2-16gb"))
    assert v100.roof_key("bf16", True) == "fp32"
    user = resolve_ceilings("NVIDIA L4", CeilingOverrides(peak_tflops=100))
    assert user.roof_key("fp64", False) == "fp64"  # fp64_vector dropped by --peak-tflops


def test_roof_for_precision_the_device_lacks_falls_back_to_cuda_cores():
    v100 = Ceilings.from_spec(lookup("v100-sxm2-16gb"))
    assert v100.roof("bf16", True) == 15.7e12
    assert v100.tf32_roof() is None
    a100 = Ceilings.from_spec(lookup("a100-sxm4-40gb"))
    assert a100.roof("fp8", True) == 19.5e12


def test_roof_is_none_when_a_measured_file_skipped_a_precision():
    c = Ceilings(
        device="NVIDIA H100 80GB HBM3", source="measured",
        peaks={"bf16": 700e12, "fp32": 50e12}, bandwidth=3.0e12,
        datasheet=lookup("h100-sxm"),
    )
    assert c.roof("bf16", True) == 700e12
    assert c.roof("fp8", True) is None  # exists on H100 but was not measured
    assert c.roof_key("fp8", True) == ""
    assert c.roof("fp64", False) is None
    assert c.roof_key("fp64", False) == ""
    assert c.roof("fp16", False) == 50e12


def test_ridge_arithmetic():
    c = Ceilings.from_spec(lookup("h100-sxm"))
    # H100 SXM bf16: 989.5e12 FLOP/s / 3.35e12 B/s = 295.37 FLOP/B
    assert c.ridge("bf16", True) == pytest.approx(295.373, abs=1e-3)
    # CUDA-core fp32: 67e12 / 3.35e12 = 20.0 FLOP/B
    assert c.ridge("fp32", False) == pytest.approx(20.0)
    a100 = Ceilings.from_spec(lookup("a100-sxm4-80gb"))
    # A100 80GB SXM bf16: 312e12 / 2.039e12 = 153.02 FLOP/B
    assert a100.ridge("bf16", True) == pytest.approx(153.016, abs=1e-3)
    l4 = Ceilings.from_spec(lookup("l4"))
    # L4 fp16: 121e12 / 0.3e12 = 403.3 FLOP/B
    assert l4.ridge("fp16", True) == pytest.approx(403.333, abs=1e-3)
    no_bw = Ceilings(device="x", source="user", peaks={"fp32": 1e12}, bandwidth=0.0)
    assert no_bw.ridge("fp32", False) is None


def test_ceilings_dict_round_trip():
    c = resolve_ceilings("NVIDIA A100-SXM4-80GB", CeilingOverrides(peak_bandwidth_gbs=1800))
    d = c.to_dict()
    json.dumps(d)  # must be JSON-serialisable for exports
    back = Ceilings.from_dict(d)
    assert back == c
    assert back.datasheet is lookup("a100-sxm4-80gb")


def test_ceilings_rejects_bad_source():
    with pytest.raises(ValueError):
        Ceilings(device="x", source="guess", peaks={}, bandwidth=1.0)


# --------------------------------------------------------------------------
# Ceilings file
# --------------------------------------------------------------------------


def _measured() -> Ceilings:
    return Ceilings(
        device="NVIDIA H100 80GB HBM3",
        source="measured",
        peaks={"bf16": 731.2e12, "fp16": 740.0e12, "fp32": 51.0e12, "fp8": 1.35e15},
        bandwidth=2.91e12,
        launch_latency_s=4.2e-6,
        measured_at="2025-01-02T03:04:05+00:00",
        env={"torch": "2.5.1", "cuda": "12.4", "driver": "550.54"},
    )


def test_file_round_trip(tmp_path):
    path = tmp_path / "ceilings.json"
    save_ceilings_file(_measured(), path)
    raw = json.loads(path.read_text())
    assert raw["schema_version"] == 1
    assert raw["peaks"]["bf16"] == 731.2e12
    assert raw["bandwidth"] == 2.91e12
    assert raw["env"]["torch"] == "2.5.1"
    loaded = load_ceilings_file(path)
    assert loaded.source == "measured"
    assert loaded.device == "NVIDIA H100 80GB HBM3"
    assert dict(loaded.peaks) == dict(_measured().peaks)
    assert loaded.bandwidth == 2.91e12
    assert loaded.launch_latency_s == 4.2e-6
    assert loaded.measured_at == "2025-01-02T03:04:05+00:00"
    assert dict(loaded.env) == {"torch": "2.5.1", "cuda": "12.4", "driver": "550.54"}
    # The datasheet row is attached for reference when the name matches.
    assert loaded.datasheet is lookup("h100-sxm")
    assert loaded.roof("bf16", True) == 731.2e12


def test_save_is_atomic_and_leaves_no_temp_files(tmp_path):
    path = tmp_path / "sub" / "ceilings.json"
    save_ceilings_file(_measured(), path)
    save_ceilings_file(_measured(), path)  # overwrite in place
    assert sorted(os.listdir(path.parent)) == ["ceilings.json"]


def test_save_fills_measured_at(tmp_path):
    c = Ceilings(device="My GPU", source="measured", peaks={"fp32": 1e13}, bandwidth=5e11)
    path = save_ceilings_file(c, tmp_path / "c.json")
    raw = json.loads(path.read_text())
    assert raw["measured_at"]
    assert raw["launch_latency_s"] is None
    loaded = load_ceilings_file(path)
    assert loaded.datasheet is None  # unknown device: no reference row


def test_save_rejects_nan(tmp_path):
    c = Ceilings(device="x", source="measured", peaks={"fp32": float("nan")}, bandwidth=1.0)
    with pytest.raises(DeviceError):
        save_ceilings_file(c, tmp_path / "c.json")


def _write(tmp_path, content) -> str:
    p = tmp_path / "c.json"
    p.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(p)


GOOD = {"schema_version": 1, "device": "NVIDIA L4", "peaks": {"bf16": 1e14}, "bandwidth": 2.5e11}


@pytest.mark.parametrize(
    "content,fragment",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ({**GOOD, "schema_version": 2}, "schema_version 2"),
        ({k: v for k, v in GOOD.items() if k != "schema_version"}, "schema_version None"),
        ({k: v for k, v in GOOD.items() if k != "peaks"}, "missing key(s): peaks"),
        ({k: v for k, v in GOOD.items() if k not in ("device", "bandwidth")}, "device, bandwidth"),
        ({**GOOD, "peaks": {}}, "'peaks' must be"),
        ({**GOOD, "peaks": {"bf61": 1e14}}, "unknown precision(s) bf61"),
        ({**GOOD, "peaks": {"bf16": -1}}, "positive numbers"),
        ({**GOOD, "peaks": {"bf16": "fast"}}, "positive numbers"),
        ({**GOOD, "peaks": {"bf16": True}}, "positive numbers"),
        ({**GOOD, "bandwidth": 0}, "'bandwidth' must be"),
        ({**GOOD, "device": ""}, "'device' must be"),
        ({**GOOD, "launch_latency_s": "soon"}, "launch_latency_s"),
        ({**GOOD, "env": [1]}, "'env' must be"),
    ],
)
def test_bad_files_raise_device_error(tmp_path, content, fragment):
    path = _write(tmp_path, content)
    with pytest.raises(DeviceError) as ei:
        load_ceilings_file(path)
    msg = str(ei.value)
    assert fragment in msg
    assert "\n" not in msg
    assert ei.value.exit_code == 2
    assert isinstance(ei.value, RoofscopeError)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(DeviceError, match="not found"):
        load_ceilings_file(tmp_path / "nope.json")
    with pytest.raises(DeviceError, match="directory"):
        load_ceilings_file(tmp_path)


# --------------------------------------------------------------------------
# resolve_ceilings
# --------------------------------------------------------------------------


def test_resolve_from_trace_name():
    c = resolve_ceilings("NVIDIA H100 80GB HBM3")
    assert c.source == "datasheet"
    assert c.datasheet.key == "h100-sxm"
    assert c.roof("bf16", True) == 989.5e12
    assert c.bandwidth == 3.35e12


def test_resolve_uses_memory_bytes():
    c = resolve_ceilings("NVIDIA A100", memory_bytes=85198045184)
    assert c.datasheet.key == "a100-sxm4-80gb"


def test_resolve_device_override_beats_trace_name():
    c = resolve_ceilings("NVIDIA H100 80GB HBM3", CeilingOverrides(device="a100-sxm4-80gb"), memory_bytes=85 * 10**9)
    assert c.datasheet.key == "a100-sxm4-80gb"
    assert c.source == "datasheet"
    assert any("overridden by --datasheet" in n for n in c.notes)
    # The trace's memory size must not steer the override's lookup.
    assert resolve_ceilings("NVIDIA L4", CeilingOverrides(device="A100"), memory_bytes=24 * 2**30).datasheet.key == (
        "a100-sxm4-40gb"
    )


def test_resolve_file_beats_device_and_trace(tmp_path):
    path = save_ceilings_file(_measured(), tmp_path / "c.json")
    c = resolve_ceilings("NVIDIA A100-SXM4-40GB", CeilingOverrides(device="l4", ceilings=path))
    assert c.source == "measured"
    assert c.roof("bf16", True) == 731.2e12
    assert c.bandwidth == 2.91e12
    assert c.datasheet.key == "h100-sxm"
    assert any("--datasheet 'l4' ignored" in n for n in c.notes)
    assert any("differs from ceilings file device" in n for n in c.notes)
    same = resolve_ceilings("NVIDIA H100 80GB HBM3", CeilingOverrides(ceilings=path))
    assert not any("differs" in n for n in same.notes)


def test_run_file_beats_cache_and_trace_but_not_the_users_choice(tmp_path):
    run_file = save_ceilings_file(_measured(), tmp_path / "run.json")
    c = resolve_ceilings("NVIDIA A100-SXM4-40GB", run_ceilings=run_file)
    assert (c.source, c.bandwidth) == ("measured", 2.91e12)
    assert f"ceilings measured on 'NVIDIA H100 80GB HBM3' read from {run_file}" in c.notes
    # --datasheet is the user's choice: the Run's file is left out, without a note.
    c = resolve_ceilings("NVIDIA A100-SXM4-40GB", CeilingOverrides(device="l4"), run_ceilings=run_file)
    assert (c.source, c.datasheet.key) == ("datasheet", "l4") and not any("ignored" in n for n in c.notes)
    user_file = save_ceilings_file(Ceilings(device="NVIDIA L4", source="measured", peaks={"bf16": 1e14},
                                            bandwidth=2.5e11), tmp_path / "user.json")
    c = resolve_ceilings("NVIDIA A100-SXM4-40GB", CeilingOverrides(ceilings=user_file), run_ceilings=run_file)
    assert (c.bandwidth, c.device) == (2.5e11, "NVIDIA L4")
    # The peak flags still apply on top of the Run's file.
    c = resolve_ceilings(None, CeilingOverrides(peak_bandwidth_gbs=2500), run_ceilings=run_file)
    assert (c.source, c.bandwidth, c.roof("bf16", True)) == ("user", 2500e9, 731.2e12)


def test_user_flags_override_any_base(tmp_path):
    c = resolve_ceilings("NVIDIA H100 80GB HBM3", CeilingOverrides(peak_bandwidth_gbs=3000))
    assert c.source == "user"
    assert c.bandwidth == 3000e9
    assert c.roof("bf16", True) == 989.5e12  # datasheet compute kept
    assert c.datasheet.key == "h100-sxm"

    c = resolve_ceilings("NVIDIA H100 80GB HBM3", CeilingOverrides(peak_tflops=800))
    assert c.source == "user"
    assert c.bandwidth == 3.35e12
    # One roof for every precision and for CUDA-core work alike.
    for p in PRECISIONS:
        assert c.roof(p, True) == 800e12
        assert c.roof(p, False) == 800e12

    path = save_ceilings_file(_measured(), tmp_path / "c.json")
    c = resolve_ceilings(None, CeilingOverrides(ceilings=path, peak_bandwidth_gbs=2500))
    assert (c.source, c.bandwidth, c.roof("bf16", True)) == ("user", 2500e9, 731.2e12)
    assert c.launch_latency_s == 4.2e-6


def test_user_flags_complete_unknown_device():
    c = resolve_ceilings("AMD Instinct MI100", CeilingOverrides(peak_tflops=1307.4, peak_bandwidth_gbs=5300))
    assert c.source == "user"
    assert c.device == "AMD Instinct MI100"
    assert c.datasheet is None
    assert c.roof("bf16", True) == 1307.4e12
    assert c.bandwidth == 5300e9
    # 1307.4e12 / 5.3e12 = 246.7 FLOP/B
    assert c.ridge("bf16", True) == pytest.approx(246.679, abs=1e-3)


def test_unknown_device_without_flags_has_no_ceilings_and_says_how_to_give_them():
    c = resolve_ceilings("NVIDIA GeForce GTX 1080")
    assert (c.source, c.known, c.device, dict(c.peaks), c.bandwidth) == ("none", False, "NVIDIA GeForce GTX 1080",
                                                                         {}, 0.0)
    msg = c.notes[0]
    assert msg.startswith("no ceilings: unknown device 'NVIDIA GeForce GTX 1080'")
    for flag in ("--datasheet", "--peak-tflops", "--peak-bandwidth", "--ceilings"):
        assert flag in msg
    assert "h100-sxm" in msg and "bound classes" in msg
    assert "\n" not in msg
    assert c.roof("bf16", True) is None and c.ridge("bf16", True) is None


@pytest.mark.parametrize(
    "kwargs,missing",
    [({"peak_tflops": 100}, "--peak-bandwidth"), ({"peak_bandwidth_gbs": 500}, "--peak-tflops")],
)
def test_unknown_device_with_one_flag_says_what_is_missing(kwargs, missing):
    with pytest.raises(DeviceError) as ei:
        resolve_ceilings("AMD Instinct MI100", CeilingOverrides(**kwargs))
    assert f"also pass {missing}" in str(ei.value)


def test_unknown_device_override_is_an_error():
    with pytest.raises(DeviceError, match="unknown --datasheet 'tpu-v5'"):
        resolve_ceilings("NVIDIA H100 80GB HBM3", CeilingOverrides(device="tpu-v5"))
    c = resolve_ceilings(None, CeilingOverrides(device="tpu-v5", peak_tflops=197, peak_bandwidth_gbs=819))
    assert (c.device, c.source, c.bandwidth) == ("tpu-v5", "user", 819e9)


def test_cpu_trace_without_measurement_has_no_ceilings(tmp_path):
    c = resolve_ceilings("cpu")
    assert c.source == "none" and "CPU-only trace" in c.notes[0] and "--ceilings" in c.notes[0]
    with pytest.raises(DeviceError, match="also pass --peak-bandwidth"):
        resolve_ceilings("cpu", CeilingOverrides(peak_tflops=2.0))
    c = resolve_ceilings("cpu", CeilingOverrides(peak_tflops=2.0, peak_bandwidth_gbs=100))
    assert (c.device, c.source, c.roof("fp32", False), c.bandwidth) == ("cpu", "user", 2e12, 100e9)
    cpu_file = Ceilings(device="cpu", source="measured", peaks={"fp32": 1.5e12}, bandwidth=8e10)
    path = save_ceilings_file(cpu_file, tmp_path / "cpu.json")
    c = resolve_ceilings("cpu", CeilingOverrides(ceilings=path))
    assert (c.source, c.roof("fp32", False), c.datasheet) == ("measured", 1.5e12, None)


def test_no_device_name_at_all():
    c = resolve_ceilings(None)
    assert c.source == "none" and c.notes[0].startswith("no ceilings: the trace names no GPU device")


_MI300X_PROPS = {"id": 0, "name": "", "totalGlobalMem": 205822885888, "computeMajor": 9, "computeMinor": 4,
                 "warpSize": 64, "numSms": 304}


def test_device_identified_from_properties():
    """An MI300X serving trace with an empty name: gfx942 (9.4), 304 CUs, 192 GiB."""
    c = resolve_ceilings("", props=_MI300X_PROPS)
    assert (c.source, c.datasheet.key, c.device) == ("datasheet", "mi300x", "AMD Instinct MI300X")
    assert c.notes == ("the trace names no device; identified from its properties (compute 9.4, "
                       "304 SMs/CUs, 192 GiB) as AMD Instinct MI300X",)
    # A generic name goes the same way; 256 GiB on the same die is an MI325X.
    c = resolve_ceilings("AMD Radeon Graphics", props={**_MI300X_PROPS, "totalGlobalMem": 256 * 2**30})
    assert c.datasheet.key == "mi325x" and "'AMD Radeon Graphics' identified from its properties" in c.notes[0]
    # Hopper shares compute capability 9.0 with gfx90a: the warp size tells them apart.
    hopper = {"computeMajor": 9, "computeMinor": 0, "numSms": 132, "warpSize": 32, "totalGlobalMem": 85e9}
    assert identify(hopper).key == "h100-sxm"
    assert identify({**hopper, "numSms": 104, "warpSize": 64, "totalGlobalMem": 68702699520}).key == "mi210"
    # Properties that match no row leave the device unknown, and say so.
    c = resolve_ceilings("AMD Radeon Graphics", props={**_MI300X_PROPS, "numSms": 80})
    assert c.source == "none" and "match no datasheet row" in c.notes[0]


@pytest.mark.parametrize("name,key", [("AMD Instinct MI300X", "mi300x"), ("AMD Instinct MI300X VF", "mi300x"),
                                      ("AMD Instinct MI210", "mi210"), ("AMD Instinct MI250X", "mi250x"),
                                      ("AMD Instinct MI325X", "mi325x"), ("AMD Instinct MI355X", "mi355x"),
                                      ("AMD Instinct MI300A", "mi300a")])
def test_amd_names(name, key):
    spec = match_device(name)
    assert spec.key == key and spec.source and spec.peaks["bf16"] > 0 and spec.bandwidth > 1e12
    # dense peaks: bf16 MI300X 1307.4 TFLOP/s (2614.9 is fp8), HBM3 5.3 TB/s
    if key == "mi300x":
        assert (spec.peaks["bf16"], spec.peaks["fp8"], spec.bandwidth) == (1307.4e12, 2614.9e12, 5.3e12)


@pytest.mark.parametrize("bad", [0, -5, float("nan"), float("inf")])
def test_bad_flag_values(bad):
    # CeilingOverrides refuses 0 and -5 when built; what reaches resolve_ceilings anyway is refused there.
    for name, flag in (("peak_tflops", "--peak-tflops"), ("peak_bandwidth_gbs", "--peak-bandwidth")):
        overrides = CeilingOverrides()
        setattr(overrides, name, bad)
        with pytest.raises(DeviceError, match=flag):
            resolve_ceilings("NVIDIA L4", overrides)


def test_devices_does_not_import_torch():
    code = "import sys, roofscope.hardware.devices; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
