"""Datasheet ceilings of known GPUs and device-name matching.

Dense figures only (never 2:4 sparse), each row with its source; see docs/devices.md.
Plain Python, no torch: every command that reads a trace uses it.

Units: FLOP/s (ops/s for int8) and bytes/s, as SI floats.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
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
    # Host link (PCIe) per direction, bytes/s: the roof of host<->device copies when the link
    # was not measured (`roofscope microbench` measures it). From the part's PCIe generation x16.
    host_link: float | None = None

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
            "host_link": self.host_link,
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
            host_link=None if d.get("host_link") is None else float(d["host_link"]),
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

_MI200_SRC = "AMD Instinct MI200 series data sheets (MI210, MI250, MI250X; 2021-2022)"
_CDNA2_NOTE = "CDNA 2: no TF32 or fp8; fp32 and fp64 are the matrix (MFMA) rates, fp64_vector the vector rate"
_CDNA3_NOTE = "CDNA 3: fp32 is the FP32 matrix rate (equal to the vector rate); fp64 the FP64 matrix rate"
_MI300X_PEAKS = _peaks(fp64=163.4, fp32=163.4, tf32=653.7, fp16=1307.4, bf16=1307.4, fp8=2614.9, int8=2614.9)

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
    # --- AMD Instinct (CDNA) ----------------------------------------------------
    # torch sees one device per GCD: MI250/MI250X rows are one GCD (half the package).
    # fp32 is the FP32 matrix (MFMA) rate, which fp32 GEMMs reach; CDNA 2 has no TF32.
    DeviceSpec(
        key="mi210", name="AMD Instinct MI210",
        peaks=_peaks(fp64=45.3, fp32=45.3, fp16=181.0, bf16=181.0, int8=181.0),
        bandwidth=tera(1.6384), memory_gb=64,
        source=_MI200_SRC, model="MI210", form="pcie", memory_type="HBM2E",
        fp64_vector=tera(22.6), notes=_CDNA2_NOTE + "; one MI250 GCD has the same CUs, clocks and HBM",
    ),
    DeviceSpec(
        key="mi250", name="AMD Instinct MI250 (one GCD)",
        peaks=_peaks(fp64=45.25, fp32=45.25, fp16=181.05, bf16=181.05, int8=181.05),
        bandwidth=tera(1.6384), memory_gb=64,
        source=_MI200_SRC, model="MI250", memory_type="HBM2E",
        fp64_vector=tera(22.65), notes=_CDNA2_NOTE + "; per GCD: half the package's 362.1 TFLOP/s fp16, 3.2768 TB/s",
    ),
    DeviceSpec(
        key="mi250x", name="AMD Instinct MI250X (one GCD)",
        peaks=_peaks(fp64=47.85, fp32=47.85, fp16=191.5, bf16=191.5, int8=191.5),
        bandwidth=tera(1.6384), memory_gb=64,
        source=_MI200_SRC, model="MI250X", memory_type="HBM2E",
        fp64_vector=tera(23.95), notes=_CDNA2_NOTE + "; per GCD: half the package's 383 TFLOP/s fp16, 3.2768 TB/s",
    ),
    DeviceSpec(
        key="mi300x", name="AMD Instinct MI300X",
        peaks=_MI300X_PEAKS, bandwidth=tera(5.3), memory_gb=192,
        source="AMD Instinct MI300X data sheet (2023); AMD CDNA 3 white paper (dense figures)",
        model="MI300X", memory_type="HBM3", fp64_vector=tera(81.7), notes=_CDNA3_NOTE,
    ),
    DeviceSpec(
        key="mi300a", name="AMD Instinct MI300A",
        peaks=_peaks(fp64=122.6, fp32=122.6, tf32=490.3, fp16=980.6, bf16=980.6, fp8=1961.2, int8=1961.2),
        bandwidth=tera(5.3), memory_gb=128,
        source="AMD Instinct MI300A data sheet (2023; dense figures)",
        model="MI300A", memory_type="HBM3", fp64_vector=tera(61.3),
        notes=_CDNA3_NOTE + "; APU: the 128 GB HBM3 is shared with the CPU cores",
    ),
    DeviceSpec(
        key="mi325x", name="AMD Instinct MI325X",
        peaks=_MI300X_PEAKS, bandwidth=tera(6.0), memory_gb=256,
        source="AMD Instinct MI325X data sheet (2024; dense figures)",
        model="MI325X", memory_type="HBM3E", fp64_vector=tera(81.7),
        notes=_CDNA3_NOTE + "; same compute as MI300X, 256 GB HBM3E at 6 TB/s",
    ),
    DeviceSpec(
        key="mi355x", name="AMD Instinct MI355X",
        peaks=_peaks(fp64=78.6, fp32=157.3, fp16=2516.6, bf16=2516.6, fp8=5033.2, int8=5033.2),
        bandwidth=tera(8.0), memory_gb=288,
        source="AMD Instinct MI355X product page and CDNA 4 white paper (2025; dense figures)",
        model="MI355X", memory_type="HBM3E", fp64_vector=tera(78.6),
        notes="CDNA 4 has no TF32 matrix path (fp32 GEMMs run at the fp32 rate); fp4/fp6 are not "
        "roofscope precisions; the 1,000 W MI350X has the same memory with lower clocks",
    ),
)

# PCIe x16 per direction (GB/s, 128b/130b encoding): Gen3 15.75, Gen4 31.5, Gen5 63. Every row's
# host interface: V100 Gen3; A100, A10G, L4, L40S, RTX 3090/4090, MI210/MI250(X) Gen4; Hopper,
# Blackwell and MI300-series Gen5 (MI300A is an APU: its CPU shares the HBM; Gen5 is its I/O link).
_PCIE_GEN = {"v100": 3, "a100": 4, "a10g": 4, "l4": 4, "l40s": 4, "rtx-3090": 4, "rtx-4090": 4, "mi210": 4,
             "mi250": 4, "h100": 5, "h200": 5, "b200": 5, "mi300": 5, "mi325": 5, "mi355": 5}
_PCIE_X16 = {3: giga(15.75), 4: giga(31.5), 5: giga(63.0)}


def _with_host_link(spec: DeviceSpec) -> DeviceSpec:
    gen = next(g for prefix, g in sorted(_PCIE_GEN.items(), key=lambda kv: -len(kv[0]))
               if spec.key.startswith(prefix))
    return replace(spec, host_link=_PCIE_X16[gen])


_TABLE = tuple(_with_host_link(s) for s in _TABLE)
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
_FILLER = frozenset({"NVIDIA", "TESLA", "GEFORCE", "RTX", "GPU", "AMD", "INSTINCT", "OAM",
                     "VF"})  # VF: a virtual function of the same GPU (cloud VMs)
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


# ----------------------------------------------------------------------------
# Identification from device properties (traces with an empty or generic name)
# ----------------------------------------------------------------------------

# (computeMajor, computeMinor, numSms, warpSize) -> candidate rows; memory picks among them.
# ROCm reports the gfx version as the compute capability (gfx90a: 9.0, gfx942: 9.4, gfx950: 9.5)
# and CUs as SMs; its 64-wide wavefronts tell it apart from NVIDIA's 9.0 (Hopper).
_FINGERPRINTS: dict[tuple[int, int, int, int], tuple[str, ...]] = {
    (9, 0, 104, 64): ("mi210",),  # also one MI250 GCD: same CUs, clocks and HBM, same ceilings
    (9, 0, 110, 64): ("mi250x",),
    (9, 4, 304, 64): ("mi300x", "mi325x"),
    (9, 4, 228, 64): ("mi300a",),
    (9, 5, 256, 64): ("mi355x",),
    (7, 0, 80, 32): ("v100-sxm2-16gb", "v100-sxm2-32gb"),
    (8, 0, 108, 32): ("a100-sxm4-40gb", "a100-sxm4-80gb"),
    (8, 6, 80, 32): ("a10g",),
    (8, 6, 82, 32): ("rtx-3090",),
    (8, 9, 58, 32): ("l4",),
    (8, 9, 128, 32): ("rtx-4090",),
    (8, 9, 142, 32): ("l40s",),
    (9, 0, 114, 32): ("h100-pcie",),
    (9, 0, 132, 32): ("h100-sxm", "h100-nvl", "h200"),
    (10, 0, 148, 32): ("b200",),
}


def sm_count(key: str) -> int | None:
    """SMs (CUs on AMD) of the datasheet row ``key``, from the fingerprints above; None if not listed."""
    return next((sms for (_, _, sms, _), keys in _FINGERPRINTS.items() if key in keys), None)


def _int_prop(props: Mapping[str, Any], key: str) -> int | None:
    v = props.get(key)
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def identify(props: Mapping[str, Any]) -> DeviceSpec | None:
    """The datasheet row a deviceProperties entry describes, from its compute capability, SM
    (CU) count, warp size and memory, for traces whose device name is empty or generic
    ("AMD Radeon Graphics"). None when the properties match no row or leave it open."""
    major, minor, sms = (_int_prop(props, k) for k in ("computeMajor", "computeMinor", "numSms"))
    warp, mem = _int_prop(props, "warpSize"), _int_prop(props, "totalGlobalMem")
    if major is None or minor is None or sms is None:
        return None
    keys = [k for w in ((warp,) if warp else (32, 64)) for k in _FINGERPRINTS.get((major, minor, sms, w), ())]
    candidates = [_BY_KEY[k] for k in keys]
    if len(candidates) > 1:
        if not mem or mem <= 0:
            return None
        gib = mem / 2**30
        best = min(candidates, key=lambda s: abs(math.log(s.memory_gb / gib)))
        return best if abs(best.memory_gb / gib - 1.0) <= _MEMORY_TOLERANCE else None
    return candidates[0] if candidates else None


def describe_props(props: Mapping[str, Any]) -> str:
    """The identifying properties in words: ``compute 9.4, 304 SMs/CUs, 192 GiB``."""
    parts = []
    major, minor = _int_prop(props, "computeMajor"), _int_prop(props, "computeMinor")
    if major is not None and minor is not None:
        parts.append(f"compute {major}.{minor}")
    if (sms := _int_prop(props, "numSms")) is not None:
        parts.append(f"{sms} SMs/CUs")
    if (mem := _int_prop(props, "totalGlobalMem")) is not None:
        parts.append(f"{mem / 2**30:.0f} GiB")
    return ", ".join(parts)
