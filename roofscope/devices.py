"""Device ceilings: datasheet peaks, device-name matching, and the ceilings file.

Everything here is plain Python (no torch) because it runs on every command,
including ones that only read a trace on a laptop.

Units everywhere: FLOP/s (ops/s for int8) and bytes/s, as SI floats.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from .errors import DeviceError
from .fileio import atomic_write

__all__ = [
    "PRECISIONS",
    "SCHEMA_VERSION",
    "DeviceSpec",
    "Ceilings",
    "known_devices",
    "known_keys",
    "match_device",
    "lookup",
    "normalize_dtype",
    "load_ceilings_file",
    "save_ceilings_file",
    "resolve_ceilings",
]

PRECISIONS: tuple[str, ...] = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")
SCHEMA_VERSION = 1
SOURCES: tuple[str, ...] = ("datasheet", "measured", "user")


def _tera(x: float) -> float:
    """``x`` TFLOP/s (or TB/s) as SI units, equal to the literal ``<x>e12``.

    Parsing the decimal instead of multiplying keeps 2.039 TB/s == 2.039e12
    exactly, so tests and JSON exports show the datasheet digits, not 2.039e12+2e-4.
    """
    return float(f"{x!r}e12")


def _giga(x: float) -> float:
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
    return {k: _tera(v) for k, v in tflops.items()}


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
        peaks=_peaks(fp64=7.8, fp32=15.7, fp16=125), bandwidth=_tera(0.9), memory_gb=16,
        source=_V100_SRC, model="V100", form="sxm", memory_type="HBM2",
        fp64_vector=_tera(7.8), notes=_V100_NOTE,
    ),
    DeviceSpec(
        key="v100-sxm2-32gb", name="NVIDIA V100 SXM2 32GB",
        peaks=_peaks(fp64=7.8, fp32=15.7, fp16=125), bandwidth=_tera(0.9), memory_gb=32,
        source=_V100_SRC, model="V100", form="sxm", memory_type="HBM2",
        fp64_vector=_tera(7.8), notes=_V100_NOTE,
    ),
    DeviceSpec(
        key="v100-pcie-16gb", name="NVIDIA V100 PCIe 16GB",
        peaks=_peaks(fp64=7, fp32=14, fp16=112), bandwidth=_tera(0.9), memory_gb=16,
        source=_V100_SRC, model="V100", form="pcie", memory_type="HBM2",
        fp64_vector=_tera(7), notes=_V100_NOTE,
    ),
    DeviceSpec(
        key="v100-pcie-32gb", name="NVIDIA V100 PCIe 32GB",
        peaks=_peaks(fp64=7, fp32=14, fp16=112), bandwidth=_tera(0.9), memory_gb=32,
        source=_V100_SRC, model="V100", form="pcie", memory_type="HBM2",
        fp64_vector=_tera(7), notes=_V100_NOTE,
    ),
    # --- Ampere GA100: same compute on every form, bandwidth differs ---------
    DeviceSpec(
        key="a100-sxm4-40gb", name="NVIDIA A100 SXM4 40GB",
        peaks=_A100_PEAKS, bandwidth=_tera(1.555), memory_gb=40,
        source=_A100_SRC, model="A100", form="sxm", memory_type="HBM2",
        fp64_vector=_tera(9.7), notes=_A100_NOTE,
    ),
    DeviceSpec(
        key="a100-sxm4-80gb", name="NVIDIA A100 SXM4 80GB",
        peaks=_A100_PEAKS, bandwidth=_tera(2.039), memory_gb=80,
        source=_A100_SRC, model="A100", form="sxm", memory_type="HBM2E",
        fp64_vector=_tera(9.7), notes=_A100_NOTE,
    ),
    DeviceSpec(
        key="a100-pcie-40gb", name="NVIDIA A100 PCIe 40GB",
        peaks=_A100_PEAKS, bandwidth=_tera(1.555), memory_gb=40,
        source=_A100_SRC, model="A100", form="pcie", memory_type="HBM2",
        fp64_vector=_tera(9.7), notes=_A100_NOTE,
    ),
    DeviceSpec(
        key="a100-pcie-80gb", name="NVIDIA A100 PCIe 80GB",
        peaks=_A100_PEAKS, bandwidth=_tera(1.935), memory_gb=80,
        source=_A100_SRC, model="A100", form="pcie", memory_type="HBM2E",
        fp64_vector=_tera(9.7), notes=_A100_NOTE,
    ),
    # --- Hopper ---------------------------------------------------------------
    DeviceSpec(
        key="h100-sxm", name="NVIDIA H100 SXM5 80GB",
        peaks=_H100_SXM_PEAKS, bandwidth=_tera(3.35), memory_gb=80,
        source=_H100_SRC, model="H100", form="sxm", memory_type="HBM3",
        fp64_vector=_tera(34),
        notes="bf16/fp16 989.5 TFLOP/s dense (the 1,979 headline is 2:4 sparse)",
    ),
    DeviceSpec(
        key="h100-pcie", name="NVIDIA H100 PCIe 80GB",
        peaks=_peaks(fp64=51, fp32=51, tf32=378, fp16=756.5, bf16=756.5, fp8=1513, int8=1513),
        bandwidth=_tera(2.0), memory_gb=80,
        source=_H100_SRC, model="H100", form="pcie", memory_type="HBM2E",
        fp64_vector=_tera(26),
    ),
    DeviceSpec(
        key="h100-nvl", name="NVIDIA H100 NVL 94GB",
        peaks=_H100_NVL_PEAKS, bandwidth=_tera(3.9), memory_gb=94,
        source=_H100_SRC, model="H100", form="nvl", memory_type="HBM3",
        fp64_vector=_tera(30),
        notes="per GPU; the 2023 datasheet quoted the two-GPU NVL pair (2x these figures)",
    ),
    DeviceSpec(
        key="h200", name="NVIDIA H200 SXM 141GB",
        peaks=_H100_SXM_PEAKS, bandwidth=_tera(4.8), memory_gb=141,
        source=_H200_SRC, model="H200", form="sxm", memory_type="HBM3E",
        fp64_vector=_tera(34), notes="same compute as H100 SXM; 4.8 TB/s HBM3e",
    ),
    DeviceSpec(
        key="h200-nvl", name="NVIDIA H200 NVL 141GB",
        peaks=_H100_NVL_PEAKS, bandwidth=_tera(4.8), memory_gb=141,
        source=_H200_SRC, model="H200", form="nvl", memory_type="HBM3E",
        fp64_vector=_tera(30), notes="same compute as H100 NVL; 4.8 TB/s HBM3e",
    ),
    # --- Blackwell ------------------------------------------------------------
    DeviceSpec(
        key="b200", name="NVIDIA B200 (HGX, 1000 W)",
        peaks=_peaks(fp64=37, fp32=75, tf32=1100, fp16=2250, bf16=2250, fp8=4500, int8=4500),
        bandwidth=_tera(8.0), memory_gb=180,
        source="NVIDIA HGX B200 per-GPU specifications (2025; sparse figures halved); "
        "bandwidth from NVIDIA DGX B200 datasheet (2024: 64 TB/s over 8 GPUs)",
        model="B200", form="sxm", memory_type="HBM3E",
        fp64_vector=_tera(37),
        notes="FP64 vector and tensor rates are equal on Blackwell; a 2025 NVIDIA table "
        "quotes 7.7 TB/s instead of 8 TB/s; fp4/fp6 are not roofscope precisions",
    ),
    # --- Ada / Ampere GA10x (GDDR) ---------------------------------------------
    DeviceSpec(
        key="l4", name="NVIDIA L4",
        peaks=_peaks(fp64=30.3 / 64, fp32=30.3, tf32=60, fp16=121, bf16=121, fp8=242.5, int8=242.5),
        bandwidth=_tera(0.3), memory_gb=24,
        source="NVIDIA L4 Tensor Core GPU datasheet (2023; sparse figures halved)",
        model="L4", memory_type="GDDR6",
        fp64_vector=_tera(30.3 / 64), notes=_GDDR_FP64_NOTE,
    ),
    DeviceSpec(
        key="l40s", name="NVIDIA L40S",
        peaks=_peaks(fp64=91.6 / 64, fp32=91.6, tf32=183, fp16=362.05, bf16=362.05, fp8=733, int8=733),
        bandwidth=_tera(0.864), memory_gb=48,
        source="NVIDIA L40S GPU datasheet (2023; dense column)",
        model="L40S", memory_type="GDDR6",
        fp64_vector=_tera(91.6 / 64), notes=_GDDR_FP64_NOTE,
    ),
    DeviceSpec(
        key="a10g", name="NVIDIA A10G (AWS)",
        peaks=_peaks(fp64=35 / 64, fp32=35, tf32=35, fp16=70, bf16=70, int8=140),
        bandwidth=_tera(0.6), memory_gb=24,
        source="no NVIDIA datasheet (AWS-only part): Baseten 'NVIDIA A10 vs A10G' spec "
        "table (2023), consistent with 80 GA102 SMs at 1.71 GHz boost",
        model="A10G", memory_type="GDDR6",
        fp64_vector=_tera(35 / 64),
        notes="tensor rates are FP32-accumulate (half the A10's); " + _GDDR_FP64_NOTE,
    ),
    DeviceSpec(
        key="rtx-3090", name="NVIDIA GeForce RTX 3090",
        peaks=_peaks(fp64=35.6 / 64, fp32=35.6, tf32=35.6, fp16=71, bf16=71, int8=284),
        bandwidth=_tera(0.936), memory_gb=24,
        source="NVIDIA Ampere GA102 GPU architecture whitepaper (2021)",
        model="3090", memory_type="GDDR6X",
        fp64_vector=_tera(35.6 / 64),
        notes="fp16/bf16 = FP32-accumulate 71 TFLOP/s (FP16-accumulate is 142); " + _GDDR_FP64_NOTE,
    ),
    DeviceSpec(
        key="rtx-4090", name="NVIDIA GeForce RTX 4090",
        peaks=_peaks(fp64=82.6 / 64, fp32=82.6, tf32=82.6, fp16=165.2, bf16=165.2, fp8=330.3, int8=660.6),
        bandwidth=_tera(1.008), memory_gb=24,
        source="NVIDIA Ada Lovelace GPU architecture whitepaper (2023)",
        model="4090", memory_type="GDDR6X",
        fp64_vector=_tera(82.6 / 64),
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


# ----------------------------------------------------------------------------
# Ceilings
# ----------------------------------------------------------------------------

_DTYPE_ALIASES = {
    "fp64": "fp64", "float64": "fp64", "double": "fp64", "f64": "fp64",
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "f32": "fp32",
    "tf32": "tf32", "tensorfloat32": "tf32",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "f16": "fp16",
    "bf16": "bf16", "bfloat16": "bf16",
    "fp8": "fp8",
    "int8": "int8", "signed char": "int8", "uint8": "int8", "unsigned char": "int8",
    "char": "int8",
}


def normalize_dtype(dtype: str | None) -> str:
    """Precision key for a dtype spelling (``c10::BFloat16``, ``torch.float16``...).

    Anything unrecognised is ``fp32``: the CUDA-core rate is the conservative
    roof for work whose precision the cost model could not pin down.
    """
    if not dtype:
        return "fp32"
    d = str(dtype).strip().lower()
    for prefix in ("torch.", "c10::", "at::"):
        if d.startswith(prefix):
            d = d[len(prefix):]
    if d.startswith("float8") or d.startswith("fp8"):
        return "fp8"
    return _DTYPE_ALIASES.get(d, "fp32")


@dataclass(frozen=True)
class Ceilings:
    """What the roofline is drawn with.

    ``source`` says where ``peaks``/``bandwidth`` came from: ``datasheet``,
    ``measured`` (a ceilings file) or ``user`` (``--peak-*`` flags applied).
    ``datasheet`` is kept even when the numbers are measured, for reference.
    """

    device: str
    source: str
    peaks: Mapping[str, float]
    bandwidth: float
    datasheet: DeviceSpec | None = None
    launch_latency_s: float | None = None
    fp64_vector: float | None = None
    notes: tuple[str, ...] = ()
    measured_at: str | None = None
    env: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"Ceilings.source must be one of {SOURCES}, got {self.source!r}")

    @classmethod
    def from_spec(cls, spec: DeviceSpec) -> Ceilings:
        return cls(
            device=spec.name,
            source="datasheet",
            peaks=dict(spec.peaks),
            bandwidth=spec.bandwidth,
            datasheet=spec,
            fp64_vector=spec.fp64_vector,
        )

    def peak(self, precision: str) -> float | None:
        return self.peaks.get(precision)

    def roof(self, dtype: str, tensor_core: bool) -> float | None:
        """Compute roof (FLOP/s) for an op of ``dtype`` on tensor or CUDA cores.

        fp32 tensor-core ops get the fp32 roof, not tf32: TF32 is opt-in in
        PyTorch, so claiming it would hide fp32 GEMMs that could be 8x faster.
        See :meth:`tf32_roof` for what enabling it would buy.
        """
        return self._roof(dtype, tensor_core)[1]

    def roof_key(self, dtype: str, tensor_core: bool) -> str:
        """Which ceiling :meth:`roof` used: a precision key, ``"fp64_vector"``, or ``""`` for none."""
        return self._roof(dtype, tensor_core)[0]

    def _roof(self, dtype: str, tensor_core: bool) -> tuple[str, float | None]:
        p = normalize_dtype(dtype)
        if not tensor_core:
            if p == "fp64":
                if self.fp64_vector is not None:
                    return "fp64_vector", self.fp64_vector
                return self._peak_entry("fp64")
            return self._peak_entry("fp32")
        if p in self.peaks:
            return p, self.peaks[p]
        # A datasheet that lacks the precision means the part has no tensor
        # cores for it (bf16 on V100, fp8 on A100): such ops run on CUDA cores.
        # Without that knowledge (e.g. a measured file that skipped it) there
        # is no honest roof to offer.
        if self.datasheet is not None and p not in self.datasheet.peaks:
            return self._peak_entry("fp32")
        return "", None

    def _peak_entry(self, key: str) -> tuple[str, float | None]:
        v = self.peaks.get(key)
        return (key, v) if v is not None else ("", None)

    def tf32_roof(self) -> float | None:
        """The roof fp32 GEMMs would have with ``allow_tf32`` on (None if no TF32)."""
        return self.peaks.get("tf32")

    def ridge(self, dtype: str, tensor_core: bool) -> float | None:
        """Arithmetic intensity (FLOP/byte) where the roof meets the bandwidth slope."""
        roof = self.roof(dtype, tensor_core)
        if roof is None or not self.bandwidth or self.bandwidth <= 0:
            return None
        return roof / self.bandwidth

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "source": self.source,
            "peaks": dict(self.peaks),
            "bandwidth": self.bandwidth,
            "fp64_vector": self.fp64_vector,
            "launch_latency_s": self.launch_latency_s,
            "notes": list(self.notes),
            "measured_at": self.measured_at,
            "env": dict(self.env),
            "datasheet": self.datasheet.to_dict() if self.datasheet is not None else None,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Ceilings:
        ds = d.get("datasheet")
        spec: DeviceSpec | None = None
        if isinstance(ds, Mapping):
            # Prefer this version's row so fixes to the table propagate.
            spec = _BY_KEY.get(str(ds.get("key"))) or DeviceSpec.from_dict(ds)
        elif isinstance(ds, str):
            spec = _BY_KEY.get(ds)
        return cls(
            device=str(d["device"]),
            source=str(d["source"]),
            peaks={str(k): float(v) for k, v in dict(d["peaks"]).items()},
            bandwidth=float(d["bandwidth"]),
            datasheet=spec,
            launch_latency_s=_opt_float(d.get("launch_latency_s")),
            fp64_vector=_opt_float(d.get("fp64_vector")),
            notes=tuple(str(n) for n in d.get("notes") or ()),
            measured_at=d.get("measured_at"),
            env=dict(d.get("env") or {}),
        )


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


# ----------------------------------------------------------------------------
# Ceilings file
# ----------------------------------------------------------------------------


def _positive_number(v: Any) -> bool:
    # bool is an int subclass; `true` in a ceilings file is a typo, not 1 FLOP/s.
    return (
        isinstance(v, (int, float))
        and not isinstance(v, bool)
        and math.isfinite(v)
        and v > 0
    )


def load_ceilings_file(path: str | os.PathLike[str]) -> Ceilings:
    """Read a measured-ceilings JSON file; any problem is a one-line DeviceError."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DeviceError(f"ceilings file not found: {p}") from None
    except IsADirectoryError:
        raise DeviceError(f"ceilings file is a directory: {p}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DeviceError(f"cannot read ceilings file {p}: {e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DeviceError(
            f"ceilings file {p} is not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})"
        ) from None
    if not isinstance(data, dict):
        raise DeviceError(f"ceilings file {p}: expected a JSON object, got {type(data).__name__}")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise DeviceError(
            f"ceilings file {p}: unsupported schema_version {version!r} (expected {SCHEMA_VERSION})"
        )
    missing = [k for k in ("device", "peaks", "bandwidth") if k not in data]
    if missing:
        raise DeviceError(f"ceilings file {p}: missing key(s): {', '.join(missing)}")
    device = data["device"]
    if not isinstance(device, str) or not device.strip():
        raise DeviceError(f"ceilings file {p}: 'device' must be a non-empty string")
    peaks = data["peaks"]
    if not isinstance(peaks, dict) or not peaks:
        raise DeviceError(f"ceilings file {p}: 'peaks' must be a non-empty object of precision -> FLOP/s")
    unknown = sorted(k for k in peaks if k not in PRECISIONS)
    if unknown:
        raise DeviceError(
            f"ceilings file {p}: unknown precision(s) {', '.join(unknown)} in 'peaks' "
            f"(expected some of {', '.join(PRECISIONS)})"
        )
    bad = sorted(k for k, v in peaks.items() if not _positive_number(v))
    if bad:
        raise DeviceError(f"ceilings file {p}: peaks for {', '.join(bad)} must be positive numbers (FLOP/s)")
    if not _positive_number(data["bandwidth"]):
        raise DeviceError(f"ceilings file {p}: 'bandwidth' must be a positive number (bytes/s)")
    for opt in ("launch_latency_s", "fp64_vector"):
        v = data.get(opt)
        if v is not None and not _positive_number(v):
            raise DeviceError(f"ceilings file {p}: '{opt}' must be a positive number or null")
    env = data.get("env")
    if env is not None and not isinstance(env, dict):
        raise DeviceError(f"ceilings file {p}: 'env' must be an object")
    measured_at = data.get("measured_at")
    notes = data.get("notes") or []
    if not isinstance(notes, list):
        raise DeviceError(f"ceilings file {p}: 'notes' must be a list of strings")
    return Ceilings(
        device=device,
        source="measured",
        peaks={k: float(v) for k, v in peaks.items()},
        bandwidth=float(data["bandwidth"]),
        datasheet=lookup(device),
        launch_latency_s=_opt_float(data.get("launch_latency_s")),
        fp64_vector=_opt_float(data.get("fp64_vector")),
        notes=tuple(str(n) for n in notes),
        measured_at=None if measured_at is None else str(measured_at),
        env=dict(env or {}),
    )


def save_ceilings_file(ceilings: Ceilings, path: str | os.PathLike[str], force: bool = True) -> Path:
    """Write ``ceilings`` in the schema-1 format, atomically (temp file + os.replace).

    Atomic because a crashed or interrupted microbenchmark must never leave a
    half-written file that a later run would trust.
    """
    p = Path(path)
    payload: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "device": ceilings.device,
        "peaks": {k: float(v) for k, v in ceilings.peaks.items()},
        "bandwidth": float(ceilings.bandwidth),
        "launch_latency_s": ceilings.launch_latency_s,
        "measured_at": ceilings.measured_at
        or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "env": dict(ceilings.env),
    }
    if ceilings.fp64_vector is not None:
        payload["fp64_vector"] = float(ceilings.fp64_vector)
    if ceilings.notes:
        payload["notes"] = list(ceilings.notes)
    try:
        text = json.dumps(payload, indent=2, sort_keys=False, allow_nan=False) + "\n"
    except (TypeError, ValueError) as e:
        raise DeviceError(f"cannot serialise ceilings for {ceilings.device!r}: {e}") from None
    return atomic_write(p, text, force=force)


# ----------------------------------------------------------------------------
# Resolution: file > --device > trace name; --peak-* flags on top
# ----------------------------------------------------------------------------

_EXAMPLE_KEYS = ("h100-sxm", "h200", "a100-sxm4-80gb", "l40s", "l4", "rtx-4090")
_FLAGS_HINT = (
    "pass --device KEY (known: " + ", ".join(_EXAMPLE_KEYS) + ", ...), "
    "--peak-tflops X --peak-bandwidth Y, or --ceilings FILE"
)


def _check_flag(value: float | None, flag: str, unit: str) -> float | None:
    if value is None:
        return None
    if not _positive_number(value):
        raise DeviceError(f"{flag} must be a positive number of {unit}, got {value!r}")
    return float(value)


def _is_cpu(name: str | None) -> bool:
    return name is not None and name.strip().lower() == "cpu"


def _spec_key(name: str | None, memory_bytes: int | None = None) -> str | None:
    spec = match_device(name, memory_bytes) if name else None
    return spec.key if spec is not None else None


def resolve_ceilings(
    device_name: str | None,
    *,
    memory_bytes: int | None = None,
    device: str | None = None,
    peak_tflops: float | None = None,
    peak_bandwidth_gbs: float | None = None,
    ceilings_file: str | os.PathLike[str] | None = None,
) -> Ceilings:
    """Pick the ceilings for a run.

    Precedence for the base: ``ceilings_file`` > ``device`` (``--device``) >
    ``device_name`` (from the trace, disambiguated by ``memory_bytes``).
    ``peak_tflops`` (TFLOP/s, used as the roof for *every* precision and for
    CUDA-core work alike) and ``peak_bandwidth_gbs`` (GB/s) then replace the
    corresponding numbers and mark the result ``source="user"``. Without a base,
    both flags are required.
    """
    tflops = _check_flag(peak_tflops, "--peak-tflops", "TFLOP/s")
    gbs = _check_flag(peak_bandwidth_gbs, "--peak-bandwidth", "GB/s")
    notes: list[str] = []
    base: Ceilings | None = None
    label = device_name.strip() if device_name and device_name.strip() else None
    unknown_override = False

    if ceilings_file is not None:
        base = load_ceilings_file(ceilings_file)
        notes.extend(base.notes)
        notes.append(f"ceilings measured on {base.device!r} read from {os.fspath(ceilings_file)}")
        if device is not None:
            notes.append(f"--device {device!r} ignored: --ceilings takes precedence")
        if label and not _is_cpu(label):
            trace_key = _spec_key(label, memory_bytes)
            file_key = base.datasheet.key if base.datasheet is not None else None
            differs = (
                trace_key != file_key
                if (trace_key or file_key)
                else label.lower() != base.device.strip().lower()
            )
            if differs:
                notes.append(f"trace device {label!r} differs from ceilings file device {base.device!r}")
    elif device is not None:
        # The trace's memory size describes the traced GPU, not necessarily the
        # one named here, so it must not steer the lookup.
        spec = lookup(device)
        if spec is None:
            unknown_override = True
            label = device
        else:
            base = Ceilings.from_spec(spec)
            trace_key = _spec_key(label, memory_bytes) if label and not _is_cpu(label) else None
            if label and trace_key != spec.key:
                notes.append(f"trace device {label!r} overridden by --device {device!r}")
    elif label and not _is_cpu(label):
        spec = match_device(label, memory_bytes)
        if spec is not None:
            base = Ceilings.from_spec(spec)

    if base is None:
        if tflops is not None and gbs is not None:
            notes.append(f"user ceilings: {tflops:g} TFLOP/s for every precision, {gbs:g} GB/s")
            return Ceilings(
                device=label or "unknown",
                source="user",
                peaks={p: _tera(tflops) for p in PRECISIONS},
                bandwidth=_giga(gbs),
                notes=tuple(notes),
            )
        if unknown_override:
            what = f"unknown --device {device!r}"
        elif _is_cpu(label):
            what = "CPU-only trace: roofscope has no CPU datasheet"
        elif label:
            what = f"unknown device {label!r}: no datasheet ceilings"
        else:
            what = "the trace names no GPU device"
        if tflops is not None or gbs is not None:
            have, need = (
                ("--peak-tflops", "--peak-bandwidth GB/s")
                if tflops is not None
                else ("--peak-bandwidth", "--peak-tflops TFLOP/s")
            )
            raise DeviceError(
                f"{what}; {have} alone is not enough without a datasheet: also pass {need} "
                f"(or --device KEY / --ceilings FILE)"
            )
        raise DeviceError(f"{what}; {_FLAGS_HINT}")

    if tflops is None and gbs is None:
        return replace(base, notes=tuple(notes)) if notes != list(base.notes) else base
    changes: dict[str, Any] = {"source": "user"}
    if tflops is not None:
        changes["peaks"] = {p: _tera(tflops) for p in PRECISIONS}
        # The flag means one roof for everything, CUDA-core fp64 included.
        changes["fp64_vector"] = None
        notes.append(f"--peak-tflops {tflops:g} used as the roof for every precision")
    if gbs is not None:
        changes["bandwidth"] = _giga(gbs)
        notes.append(f"--peak-bandwidth {gbs:g} GB/s")
    changes["notes"] = tuple(notes)
    return replace(base, **changes)
