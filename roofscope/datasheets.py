"""Datasheet ceilings of known GPUs and device-name matching.

Dense figures only (never 2:4 sparse), each row with its source; see docs/devices.md.
Plain Python, no torch: every command that reads a trace uses it.

Units: FLOP/s (ops/s for int8) and bytes/s, as SI floats.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

PRECISIONS: tuple[str, ...] = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")

def tera(x: float) -> float:
    """``x`` TFLOP/s (or TB/s) as SI units, equal to the literal ``<x>e12``.

    Parsing the decimal instead of multiplying keeps 2.039 TB/s == 2.039e12
    exactly, so tests and JSON exports show the datasheet digits, not 2.039e12+2e-4.
    """
    return float(f"{x!r}e12")


def giga(x: float) -> float:
    return float(f"{x!r}e9")


@dataclass(frozen=True)
class DeviceSpec:
    """One datasheet row. All tensor-core peaks are dense (no 2:4 sparsity).

    ``peaks["fp64"]`` is the FP64 tensor-core figure where the part has one;
    ``fp64_vector`` is the CUDA-core FP64 rate that elementwise fp64 kernels see.
    """

    key: str
    name: str
    peaks: Mapping[str, float]
    bandwidth: float
    memory_gb: float
    source: str
    model: str  # the token that identifies the family in a device name, e.g. "A100"
    form: str | None = None  # "sxm", "pcie", "nvl" or None for single-form products
    memory_type: str = ""
    fp64_vector: float | None = None
    notes: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "name": self.name,
            "peaks": dict(self.peaks),
            "bandwidth": self.bandwidth,
            "memory_gb": self.memory_gb,
            "source": self.source,
            "model": self.model,
            "form": self.form,
            "memory_type": self.memory_type,
            "fp64_vector": self.fp64_vector,
            "notes": self.notes,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DeviceSpec:
        return cls(
            key=str(d["key"]),
            name=str(d["name"]),
            peaks={str(k): float(v) for k, v in dict(d["peaks"]).items()},
            bandwidth=float(d["bandwidth"]),
            memory_gb=float(d["memory_gb"]),
            source=str(d.get("source", "")),
            model=str(d.get("model", "")),
            form=d.get("form"),
            memory_type=str(d.get("memory_type", "")),
            fp64_vector=None if d.get("fp64_vector") is None else float(d["fp64_vector"]),
            notes=str(d.get("notes", "")),
        )


def _peaks(**tflops: float) -> dict[str, float]:
    return {k: tera(v) for k, v in tflops.items()}


# NVIDIA's Hopper/Ampere/Ada datasheets quote tensor throughput *with* 2:4
# sparsity and footnote "one-half lower without sparsity"; every tensor figure
# below is that dense half.  fp16/bf16/fp8 are the FP32-accumulate rates because
# PyTorch GEMMs accumulate in fp32; on GeForce parts (and the A10G) that rate is
# half the FP16-accumulate rate the marketing pages headline.
_H100_SXM_PEAKS = _peaks(fp64=67, fp32=67, tf32=494.5, fp16=989.5, bf16=989.5, fp8=1979, int8=1979)
_H100_NVL_PEAKS = _peaks(fp64=60, fp32=60, tf32=417.5, fp16=835.5, bf16=835.5, fp8=1670.5, int8=1670.5)
_A100_PEAKS = _peaks(fp64=19.5, fp32=19.5, tf32=156, fp16=312, bf16=312, int8=624)

_V100_SRC = "NVIDIA Tesla V100 GPU datasheet (2020); Volta architecture whitepaper (2017)"
_A100_SRC = "NVIDIA A100 Tensor Core GPU datasheet (2021)"
_H100_SRC = "NVIDIA H100 Tensor Core GPU datasheet (2024; sparse figures halved)"
_H200_SRC = "NVIDIA H200 Tensor Core GPU datasheet (2024; sparse figures halved)"
_V100_NOTE = "no bf16/tf32/fp8 and no int8 tensor cores (int8 DP4A runs on CUDA cores)"
_A100_NOTE = "no fp8; fp64 is the FP64 tensor-core rate, fp64_vector the CUDA-core rate"
_GDDR_FP64_NOTE = "fp64 not on the datasheet: derived as fp32/64 (1:64 FP64 rate of this architecture)"

_TABLE: tuple[DeviceSpec, ...] = (
    # --- Volta ---------------------------------------------------------------
    DeviceSpec(
        key="v100-sxm2-16gb", name="NVIDIA V100 SXM2 16GB",
        peaks=_peaks(fp64=7.8, fp32=15.7, fp16=125), bandwidth=tera(0.9), memory_gb=16,
        source=_V100_SRC, model="V100", form="sxm", memory_type="HBM2",
        fp64_vector=tera(7.8), notes=_V100_NOTE,
    ),
    DeviceSpec(
        key="v100-sxm2-32gb", name="NVIDIA V100 SXM2 32GB",
        peaks=_peaks(fp64=7.8, fp32=15.7, fp16=125), bandwidth=tera(0.9), memory_gb=32,
        source=_V100_SRC, model="V100", form="sxm", memory_type="HBM2",
        fp64_vector=tera(7.8), notes=_V100_NOTE,
    ),
    DeviceSpec(
        key="v100-pcie-16gb", name="NVIDIA V100 PCIe 16GB",
        peaks=_peaks(fp64=7, fp32=14, fp16=112), bandwidth=tera(0.9), memory_gb=16,
        source=_V100_SRC, model="V100", form="pcie", memory_type="HBM2",
        fp64_vector=tera(7), notes=_V100_NOTE,
    ),
    DeviceSpec(
        key="v100-pcie-32gb", name="NVIDIA V100 PCIe 32GB",
        peaks=_peaks(fp64=7, fp32=14, fp16=112), bandwidth=tera(0.9), memory_gb=32,
        source=_V100_SRC, model="V100", form="pcie", memory_type="HBM2",
        fp64_vector=tera(7), notes=_V100_NOTE,
    ),
    # --- Ampere GA100: same compute on every form, bandwidth differs ---------
    DeviceSpec(
        key="a100-sxm4-40gb", name="NVIDIA A100 SXM4 40GB",
        peaks=_A100_PEAKS, bandwidth=tera(1.555), memory_gb=40,
        source=_A100_SRC, model="A100", form="sxm", memory_type="HBM2",
        fp64_vector=tera(9.7), notes=_A100_NOTE,
    ),
    DeviceSpec(
        key="a100-sxm4-80gb", name="NVIDIA A100 SXM4 80GB",
        peaks=_A100_PEAKS, bandwidth=tera(2.039), memory_gb=80,
        source=_A100_SRC, model="A100", form="sxm", memory_type="HBM2E",
        fp64_vector=tera(9.7), notes=_A100_NOTE,
    ),
    DeviceSpec(
        key="a100-pcie-40gb", name="NVIDIA A100 PCIe 40GB",
        peaks=_A100_PEAKS, bandwidth=tera(1.555), memory_gb=40,
        source=_A100_SRC, model="A100", form="pcie", memory_type="HBM2",
        fp64_vector=tera(9.7), notes=_A100_NOTE,
    ),
    DeviceSpec(
        key="a100-pcie-80gb", name="NVIDIA A100 PCIe 80GB",
        peaks=_A100_PEAKS, bandwidth=tera(1.935), memory_gb=80,
        source=_A100_SRC, model="A100", form="pcie", memory_type="HBM2E",
        fp64_vector=tera(9.7), notes=_A100_NOTE,
    ),
    # --- Hopper ---------------------------------------------------------------
    DeviceSpec(
        key="h100-sxm", name="NVIDIA H100 SXM5 80GB",
        peaks=_H100_SXM_PEAKS, bandwidth=tera(3.35), memory_gb=80,
        source=_H100_SRC, model="H100", form="sxm", memory_type="HBM3",
        fp64_vector=tera(34),
        notes="bf16/fp16 989.5 TFLOP/s dense (the 1,979 headline is 2:4 sparse)",
    ),
    DeviceSpec(
        key="h100-pcie", name="NVIDIA H100 PCIe 80GB",
        peaks=_peaks(fp64=51, fp32=51, tf32=378, fp16=756.5, bf16=756.5, fp8=1513, int8=1513),
        bandwidth=tera(2.0), memory_gb=80,
        source=_H100_SRC, model="H100", form="pcie", memory_type="HBM2E",
        fp64_vector=tera(26),
    ),
    DeviceSpec(
        key="h100-nvl", name="NVIDIA H100 NVL 94GB",
        peaks=_H100_NVL_PEAKS, bandwidth=tera(3.9), memory_gb=94,
        source=_H100_SRC, model="H100", form="nvl", memory_type="HBM3",
        fp64_vector=tera(30),
        notes="per GPU; the 2023 datasheet quoted the two-GPU NVL pair (2x these figures)",
    ),
    DeviceSpec(
        key="h200", name="NVIDIA H200 SXM 141GB",
        peaks=_H100_SXM_PEAKS, bandwidth=tera(4.8), memory_gb=141,
        source=_H200_SRC, model="H200", form="sxm", memory_type="HBM3E",
        fp64_vector=tera(34), notes="same compute as H100 SXM; 4.8 TB/s HBM3e",
    ),
    DeviceSpec(
        key="h200-nvl", name="NVIDIA H200 NVL 141GB",
        peaks=_H100_NVL_PEAKS, bandwidth=tera(4.8), memory_gb=141,
        source=_H200_SRC, model="H200", form="nvl", memory_type="HBM3E",
        fp64_vector=tera(30), notes="same compute as H100 NVL; 4.8 TB/s HBM3e",
    ),
    # --- Blackwell ------------------------------------------------------------
    DeviceSpec(
        key="b200", name="NVIDIA B200 (HGX, 1000 W)",
        peaks=_peaks(fp64=37, fp32=75, tf32=1100, fp16=2250, bf16=2250, fp8=4500, int8=4500),
        bandwidth=tera(8.0), memory_gb=180,
        source="NVIDIA HGX B200 per-GPU specifications (2025; sparse figures halved); "
        "bandwidth from NVIDIA DGX B200 datasheet (2024: 64 TB/s over 8 GPUs)",
        model="B200", form="sxm", memory_type="HBM3E",
        fp64_vector=tera(37),
        notes="FP64 vector and tensor rates are equal on Blackwell; a 2025 NVIDIA table "
        "quotes 7.7 TB/s instead of 8 TB/s; fp4/fp6 are not roofscope precisions",
    ),
    # --- Ada / Ampere GA10x (GDDR) ---------------------------------------------
    DeviceSpec(
        key="l4", name="NVIDIA L4",
        peaks=_peaks(fp64=30.3 / 64, fp32=30.3, tf32=60, fp16=121, bf16=121, fp8=242.5, int8=242.5),
        bandwidth=tera(0.3), memory_gb=24,
        source="NVIDIA L4 Tensor Core GPU datasheet (2023; sparse figures halved)",
        model="L4", memory_type="GDDR6",
        fp64_vector=tera(30.3 / 64), notes=_GDDR_FP64_NOTE,
    ),
    DeviceSpec(
        key="l40s", name="NVIDIA L40S",
        peaks=_peaks(fp64=91.6 / 64, fp32=91.6, tf32=183, fp16=362.05, bf16=362.05, fp8=733, int8=733),
        bandwidth=tera(0.864), memory_gb=48,
        source="NVIDIA L40S GPU datasheet (2023; dense column)",
        model="L40S", memory_type="GDDR6",
        fp64_vector=tera(91.6 / 64), notes=_GDDR_FP64_NOTE,
    ),
    DeviceSpec(
        key="a10g", name="NVIDIA A10G (AWS)",
        peaks=_peaks(fp64=35 / 64, fp32=35, tf32=35, fp16=70, bf16=70, int8=140),
        bandwidth=tera(0.6), memory_gb=24,
        source="no NVIDIA datasheet (AWS-only part): Baseten 'NVIDIA A10 vs A10G' spec "
        "table (2023), consistent with 80 GA102 SMs at 1.71 GHz boost",
        model="A10G", memory_type="GDDR6",
        fp64_vector=tera(35 / 64),
        notes="tensor rates are FP32-accumulate (half the A10's); " + _GDDR_FP64_NOTE,
    ),
    DeviceSpec(
        key="rtx-3090", name="NVIDIA GeForce RTX 3090",
        peaks=_peaks(fp64=35.6 / 64, fp32=35.6, tf32=35.6, fp16=71, bf16=71, int8=284),
        bandwidth=tera(0.936), memory_gb=24,
        source="NVIDIA Ampere GA102 GPU architecture whitepaper (2021)",
        model="3090", memory_type="GDDR6X",
        fp64_vector=tera(35.6 / 64),
        notes="fp16/bf16 = FP32-accumulate 71 TFLOP/s (FP16-accumulate is 142); " + _GDDR_FP64_NOTE,
    ),
    DeviceSpec(
        key="rtx-4090", name="NVIDIA GeForce RTX 4090",
        peaks=_peaks(fp64=82.6 / 64, fp32=82.6, tf32=82.6, fp16=165.2, bf16=165.2, fp8=330.3, int8=660.6),
        bandwidth=tera(1.008), memory_gb=24,
        source="NVIDIA Ada Lovelace GPU architecture whitepaper (2023)",
        model="4090", memory_type="GDDR6X",
        fp64_vector=tera(82.6 / 64),
        notes="fp16/bf16 = FP32-accumulate 165.2 (FP16-accumulate is 330.3); "
        "fp8 = FP32-accumulate 330.3 (FP16-accumulate is 660.6); " + _GDDR_FP64_NOTE,
    ),
)

_BY_KEY: dict[str, DeviceSpec] = {s.key: s for s in _TABLE}


def known_devices() -> tuple[DeviceSpec, ...]:
    """Every datasheet row, in table order (which is also the default-variant order)."""
    return _TABLE


def known_keys() -> tuple[str, ...]:
    return tuple(s.key for s in _TABLE)


# ----------------------------------------------------------------------------
# Name matching
# ----------------------------------------------------------------------------

# Tokens that carry no identity.  Anything not listed here and not understood
# below makes the name unknown: "RTX 3090 Ti", "RTX 4090 D", "... MIG 1g.10gb"
# and "L40" are different parts with different ceilings.
_FILLER = frozenset({"NVIDIA", "TESLA", "GEFORCE", "RTX", "GPU"})
_FORMS = {
    "SXM": "sxm", "SXM2": "sxm", "SXM3": "sxm", "SXM4": "sxm", "SXM5": "sxm",
    "PCIE": "pcie", "NVL": "nvl",
}
_MEMORY_TYPES = frozenset({"HBM2", "HBM2E", "HBM3", "HBM3E", "GDDR6", "GDDR6X"})
# Board part numbers some drivers report instead of the marketing name.
# PG509 is the A100 SXM4 module; SKU 200 is its 40 GB build (42505273344 B).
_BOARDS: dict[str, tuple[str, dict[str, float]]] = {
    "PG509": ("sxm", {"200": 40}),
}
_MODELS = frozenset(s.model for s in _TABLE)
_GB_TOKEN = re.compile(r"^(\d+)GB$")
_BOARD_TOKEN = re.compile(r"^PG\d{3}$")
# Nominal "80GB" is about 80 GiB and drivers report a little less (ECC,
# reserved memory); 15% separates every pair of sizes in the table.
_MEMORY_TOLERANCE = 0.15


def _tokens(name: str) -> list[str]:
    text = re.sub(r"(\d+)\s+GB\b", r"\1GB", name.upper())
    return re.findall(r"[A-Z0-9]+", text)


def match_device(name: str, memory_bytes: int | None = None) -> DeviceSpec | None:
    """Map a CUDA device name to its datasheet row, or None.

    Every token of the name must be understood (vendor words, the model, form
    factor, memory size/type, board id); an unrecognised token means a different
    part, so the result is None rather than a near miss. ``memory_bytes``
    (totalGlobalMem) only breaks ties the name leaves open.
    """
    if not isinstance(name, str) or not name.strip():
        return None
    model: str | None = None
    form: str | None = None
    size_gb: float | None = None
    mem_type: str | None = None
    board_skus: dict[str, float] | None = None
    for tok in _tokens(name):
        if tok in _FILLER:
            continue
        if tok in _MODELS:
            if model is not None and model != tok:
                return None
            model = tok
        elif tok in _FORMS:
            if form is not None and form != _FORMS[tok]:
                return None
            form = _FORMS[tok]
        elif tok in _MEMORY_TYPES:
            mem_type = tok
        elif (m := _GB_TOKEN.match(tok)) is not None:
            size_gb = float(m.group(1))
        elif _BOARD_TOKEN.match(tok):
            if tok not in _BOARDS:
                return None
            board_form, board_skus = _BOARDS[tok]
            if form is not None and form != board_form:
                return None
            form = board_form
        elif tok.isdigit() and board_skus is not None:
            # A board SKU number ("PG509-200") is only meaningful after a board id.
            if tok in board_skus and size_gb is None:
                size_gb = board_skus[tok]
        else:
            return None
    if model is None:
        return None

    candidates = [s for s in _TABLE if s.model == model]
    if form is not None:
        candidates = [s for s in candidates if s.form == form]
    if mem_type is not None:
        candidates = [s for s in candidates if s.memory_type == mem_type]
    if size_gb is not None:
        candidates = [s for s in candidates if s.memory_gb == size_gb]
    if not candidates:
        return None
    if len(candidates) > 1 and memory_bytes:
        gib = memory_bytes / 2**30
        best = min(candidates, key=lambda s: abs(math.log(s.memory_gb / gib)))
        if abs(best.memory_gb / gib - 1.0) > _MEMORY_TOLERANCE:
            return None
        candidates = [s for s in candidates if s.memory_gb == best.memory_gb]
    # Still ambiguous (e.g. a bare "A100"): table order puts the family's
    # original/SXM variant first.
    return candidates[0]


def lookup(key_or_name: str, memory_bytes: int | None = None) -> DeviceSpec | None:
    """Resolve a ``--device`` value: a table key (``h100-sxm``) or a device name."""
    if not isinstance(key_or_name, str):
        return None
    key = re.sub(r"[\s_]+", "-", key_or_name.strip().lower())
    if key in _BY_KEY:
        return _BY_KEY[key]
    return match_device(key_or_name, memory_bytes)


def spec_by_key(key: str) -> DeviceSpec | None:
    """The table row with this exact key, or None."""
    return _BY_KEY.get(key)
