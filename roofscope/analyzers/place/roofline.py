"""Roofline placement and bound classification of kernels; aggregation by key.

For a kernel with FLOPs F, bytes B and duration t on a roof P (FLOP/s) and
bandwidth W (bytes/s; for a copy between host and device, the host link's: HtoD/DtoH
copies are bound by PCIe, not HBM; Ceilings.copy_roof):

* intensity I = F / B, achieved = F / t and B / t,
* attainable = min(P, I * W), ridge = P / W,
* floor time = max(F / P, B / W) (the roofline's lower bound on t),
* efficiency = floor time / t.

When the ceilings carry memory levels (CPU: L2, LLC, DRAM; GPU: L2, HBM), W is the outermost
level's rate, unless the kernel moved its bytes faster than that: then its operands were partly in
cache, and W is the rate at which its working set moves with each level serving as much of it as
the level holds (Ceilings.level_of; ``_memory_roof``). Without levels, the one bandwidth.
A kernel with efficiency above 1 ran faster than its roof allows: ``above_roof`` flags it
(the ceilings are stale, or its operands sat in a faster level than its size suggests).

Classes, first match wins (docs/roofline.md):

* ``communication``: NCCL and other collectives (outside the roofline),
* ``unknown``: no cost could be attributed,
* ``latency``: floor time below ``latency_floor_s`` (``--latency-floor-us``, roofscope/config.py):
  too little work for the kernel's time to be anything but launch and latency,
* ``underutilized``: efficiency below ``underutilized_below`` (``--underutilized-below``),
* ``compute``: intensity at or above the ridge, else ``memory``.

A kernel with no cost is not left without an answer: its class comes from what is known
(``cls_source``; ``formula`` for costed kernels, ``counters`` for Nsight Compute's, ``""`` where
nothing is): one block in its grid runs on one SM whatever the GPU, ``latency`` by ``launch
geometry``; a run shorter than the latency floor is ``latency`` by ``duration``; fewer blocks than
the device has SMs (CUs) leave SMs idle, ``underutilized`` by ``launch geometry``; a kernel whose
launching op's tensor inputs (``io_bytes``: Kineto records no outputs, so a lower bound on what it
moves) take at least ``underutilized_below`` of its time at the memory roof is ``memory`` by ``io bytes``.

Bytes measured by Nsight Compute (``--counters ncu``) carry L2 bytes beside the DRAM bytes: for
streaming kernels (not GEMM, convolution or attention) the memory floor is then the larger of
DRAM bytes / HBM rate and L2 bytes / L2 rate, and a kernel
is compute-bound when its compute floor is the larger one (with one level, the same test as
intensity against the ridge).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from roofscope.analyzers.cost.formulas.dtypes import parse_dtype
from roofscope.analyzers.ingest.runtime_names import copy_direction
from roofscope.analyzers.model.kernels import ABOVE_ROOF_TOLERANCE, NO_CACHE_ROOF, RooflineParams
from roofscope.analyzers.place.tensorcore import (CUDA_CORES, MATRIX_CORES, TENSOR_CORES, TF32, UNSAID, tf32_from_names,
                                                  units)
from roofscope.hardware.datasheets import sm_count
from roofscope.hardware.devices import Ceilings

# An fp32 GEMM running this much above the fp32 CUDA-core roof can only have used TF32.
_TF32_EVIDENCE = 1.10
# Kernel categories whose L2 traffic is tile reuse, not the data they stream (_measured_l2).
_TILED = ("gemm", "conv", "attention")


def _roofs(ceilings: Ceilings, dtype: np.ndarray, tensor_core: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Peak FLOP/s and the precision key that provides it, per row (NaN when none)."""
    roof = np.full(len(dtype), np.nan)
    key = np.full(len(dtype), "", dtype=object)
    pairs = pd.DataFrame({"d": dtype, "t": tensor_core}).drop_duplicates()
    for d, t in pairs.itertuples(index=False):
        sel = (dtype == d) & (tensor_core == t)
        peak = ceilings.roof(d, bool(t))
        roof[sel] = np.nan if peak is None else peak
        key[sel] = ceilings.roof_key(d, bool(t))
    return roof, key


def _host_link(k: pd.DataFrame, ceilings: Ceilings, bw: np.ndarray, level: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Copies between host and device run at the host link's rate (Ceilings.copy_roof), not at
    any device memory level's: their roof and level ("host link") replace the ones given."""
    if "cat" not in k or not ceilings.known:
        return bw, level
    rows = np.flatnonzero((k["cat"].astype(str) == "gpu_memcpy").to_numpy())
    if not len(rows):
        return bw, level
    codes, uniques = pd.factorize(k["name"].iloc[rows].astype(str))
    link = np.array([ceilings.copy_roof(copy_direction(u)) or np.nan for u in uniques], dtype=float)[codes]
    rows, link = rows[~np.isnan(link)], link[~np.isnan(link)]
    bw, level = np.array(bw, dtype=float), np.array(level, dtype=object)
    bw[rows] = link
    level[rows] = "host link"
    return bw, level


def _memory_roof(k: pd.DataFrame, ceilings: Ceilings, nbytes: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bandwidth roof and memory level per kernel. With levels, the roof is the outermost level's
    (HBM, DRAM): the rate a kernel's compulsory bytes move at when no cache holds them, and the
    one that keeps classes in line with Nsight Compute's DRAM bytes. A kernel that moved its
    bytes faster than that was served in part by the caches: it is placed against the levels'
    roof (Ceilings.level_of), the lowest roof it does not beat. Bytes measured by Nsight Compute
    are DRAM bytes of a replay that began with flushed caches (ncu's default --cache-control all):
    they too sit on the outermost level unless the traced kernel moved them faster than it allows,
    as a split-K reduction of partials its GEMM had just left in L2 does."""
    bw, level = ceilings.level_of(nbytes)
    if not ceilings.levels:
        return bw, level
    outer, _, rate = ceilings.levels[-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        cached = nbytes / dur > rate
    return np.where(cached, bw, rate), np.where(cached, level, outer)


def _measured_l2(k: pd.DataFrame, ceilings: Ceilings) -> tuple[np.ndarray, float] | None:
    """L2 bytes Nsight Compute counted per streaming kernel (NaN elsewhere) and the L2 level's
    rate, when both exist. DRAM bytes alone miss what L2 served: reads of a tensor the previous
    kernel just wrote, and writes still dirty in L2 when the kernel ends (a 16 MB output on a
    50 MB L2). GEMM, convolution and attention kernels are left out: their L2 bytes are mostly
    tiles re-read by design, which the model's compulsory bytes leave out, and they
    are judged on DRAM bytes, as roofline models of matmuls are."""
    if "m_l2_bytes" not in k or len(ceilings.levels) < 2:
        return None
    inner = [rate for name, _, rate in ceilings.levels[:-1] if name.upper() == "L2"]
    if not inner:
        return None
    tiled = np.isin(k["category"].astype(str).to_numpy(), _TILED) if "category" in k else np.zeros(len(k), bool)
    return np.where(tiled, np.nan, k["m_l2_bytes"].to_numpy(dtype=np.float64)), inner[0]


def device_sms(props: dict | None, ceilings: Ceilings) -> int | None:
    """SMs (CUs) of the traced GPU: its deviceProperties, else its datasheet row's."""
    n = (props or {}).get("numSms")
    if isinstance(n, (int, float)) and not isinstance(n, bool) and n > 0:
        return int(n)
    return sm_count(ceilings.datasheet.key) if ceilings.datasheet is not None else None


def _blocks(grid: pd.Series) -> np.ndarray:
    """Blocks in each launch's grid (NaN where the trace has no grid)."""
    return np.array([float(math.prod(g)) if isinstance(g, (list, tuple)) and len(g) else np.nan for g in grid],
                    dtype=np.float64)


def input_bytes(signatures: pd.DataFrame, sig: np.ndarray) -> np.ndarray:
    """Bytes of the tensor inputs of signature rows ``sig`` (-1, or no tensor with a known dtype: NaN)."""
    per = np.full(len(signatures), np.nan)
    for i, (dims, types) in enumerate(zip(signatures["input_dims"], signatures["input_types"])):
        # A hand-made or hostile trace may give a number where a list belongs: no bytes then.
        dims, types = (x if isinstance(x, (list, tuple)) else () for x in (dims, types))
        sizes = [math.prod(d) * dt.itemsize for d, t in zip(dims, types)
                 if isinstance(t, str) and (dt := parse_dtype(t)) is not None
                 and isinstance(d, list) and all(isinstance(x, int) for x in d)]
        per[i] = sum(sizes) if sizes else np.nan
    sig = np.asarray(sig, dtype=np.int64)
    return np.where(sig >= 0, per[np.maximum(sig, 0)] if len(per) else np.nan, np.nan)


def class_sources(k: pd.DataFrame, params: RooflineParams, sms: int | None,
                  bandwidth: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``cls`` with uncosted GPU kernels classed from their launch geometry and duration, and
    ``cls_source`` (see the module docstring)."""
    cls = k["cls"].to_numpy(dtype=object).copy()
    costed = k["floor_s"].notna().to_numpy()
    src = np.where(costed, "formula", "").astype(object)
    if "cost_source" in k:
        src[costed & (k["cost_source"].astype(str).to_numpy() == "ncu")] = "counters"
    src[cls == "communication"] = ""
    gpu = (k["cat"].astype(str).to_numpy() == "kernel") if "cat" in k else np.zeros(len(k), dtype=bool)
    rows = np.flatnonzero((cls == "unknown") & gpu & k["dur_s"].notna().to_numpy())
    if not len(rows):
        return cls, src
    blocks = _blocks(k["grid"].iloc[rows]) if "grid" in k else np.full(len(rows), np.nan)
    dur = k["dur_s"].to_numpy()[rows]
    serial = blocks <= 1
    short = ~serial & (dur < params.latency_floor_s)
    small = ~serial & ~short & (blocks < sms) if sms else np.zeros(len(rows), dtype=bool)
    io = k["io_bytes"].to_numpy(dtype=np.float64)[rows] if "io_bytes" in k else np.full(len(rows), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        streams = ~serial & ~short & ~small & (io / (bandwidth or np.nan) >= params.underutilized_below * dur)
    for mask, c, why in ((serial, "latency", "launch geometry"), (short, "latency", "duration"),
                         (small, "underutilized", "launch geometry"), (streams, "memory", "io bytes")):
        cls[rows[mask]] = c
        src[rows[mask]] = why
    return cls, src


def place(kernels: pd.DataFrame, ceilings: Ceilings, params: RooflineParams = RooflineParams(),
          sms: int | None = None) -> pd.DataFrame:
    """Add roofline columns, ``cls`` and ``cls_source`` to a frame with ``dur_ns``, ``flops``, ``bytes``,
    ``dtype``, ``tensor_core`` and ``category`` columns (returns a new frame); ``sms``: the GPU's SMs
    (:func:`device_sms`), which class uncosted kernels by their grid."""
    k = kernels.copy()
    dur = k["dur_ns"].to_numpy(dtype=np.float64) * 1e-9
    if "timed" in k:  # counter-replay ranges have no real duration
        dur = np.where(k["timed"].to_numpy(dtype=bool), dur, np.nan)
    flops = k["flops"].to_numpy(dtype=np.float64)
    nbytes = k["bytes"].to_numpy(dtype=np.float64)
    dtype = k["dtype"].astype(str).to_numpy(dtype=object)
    # A kernel whose name says which unit it ran on did, whatever its op's formula guessed (cuDNN runs
    # a 3-channel first convolution as sm90_xmma_fprop_..._tf32f32: 105% of the fp32 roof); fp32 data
    # on tensor cores are TF32 (place/tensorcore.py: an fp32 conv's cutlass_80_tensorop_s1688gemm ran
    # at 104-108% of the fp32 roof).
    unit = units(k["name"]) if "name" in k else np.full(len(k), UNSAID, dtype=object)
    formula_tc = k["tensor_core"].to_numpy(dtype=bool)
    tc = (formula_tc | np.isin(unit, (TENSOR_CORES, TF32, MATRIX_CORES))) & (unit != CUDA_CORES)
    bw, level = _memory_roof(k, ceilings, nbytes, dur)  # no ceilings: NaN, so no floor, efficiency or class
    bw, level = _host_link(k, ceilings, bw, level)
    with np.errstate(divide="ignore", invalid="ignore"):
        achieved = flops / dur
        roof, roof_key = _roofs(ceilings, dtype, tc)
        if "tf32" in ceilings.peaks:
            # speed is evidence too, even against a name (the roof is then the op's: fp32)
            tf32 = tf32_from_names(unit, dtype) | ((tc | formula_tc) & (dtype == "fp32")
                                                   & (achieved > roof * _TF32_EVIDENCE))
            roof = np.where(tf32, ceilings.peaks["tf32"], roof)
            roof_key = np.where(tf32, "tf32", roof_key)
        intensity = flops / nbytes
        f = np.nan_to_num(flops)
        b = np.nan_to_num(nbytes)
        compute_floor = np.where(roof > 0, f / roof, 0.0)
        memory_floor = b / bw
        l2 = _measured_l2(k, ceilings)
        if l2 is not None:
            # Measured traffic passes every level: the slowest level to move its share binds
            # (Nsight Compute's hierarchical roofline).
            l2_floor = np.nan_to_num(l2[0]) / l2[1]
            level = np.where(l2_floor > memory_floor, "L2", level)
            memory_floor = np.maximum(memory_floor, l2_floor)
        floor = np.maximum(compute_floor, memory_floor)
        efficiency = floor / dur
        ridge = roof / bw
        attainable = np.minimum(roof, intensity * bw)
    k["dur_s"] = dur
    k["intensity"] = intensity
    k["achieved_flops"] = achieved
    k["achieved_bw"] = nbytes / np.where(dur > 0, dur, np.nan)
    k["roof"] = roof
    k["roof_precision"] = roof_key
    k["ridge"] = ridge
    k["attainable"] = attainable
    k["roof_bw"] = bw
    k["roof_level"] = level
    k["floor_s"] = np.where(np.isnan(flops) & np.isnan(nbytes), np.nan, floor)
    k["efficiency"] = np.where(np.isnan(flops) & np.isnan(nbytes), np.nan, efficiency)
    k["above_roof"] = k["efficiency"].to_numpy() > 1.0 + ABOVE_ROOF_TOLERANCE
    k["compute_bound"] = (compute_floor >= memory_floor) & (compute_floor > 0)
    k["cls"] = classify(k, params)
    if ceilings.known:  # without ceilings every class is unknown (Ceilings.none), these too
        k["cls"], k["cls_source"] = class_sources(k, params, sms, ceilings.bandwidth)
    else:
        k["cls_source"] = ""
    return k


def classify(k: pd.DataFrame, params: RooflineParams) -> np.ndarray:
    costed = k["floor_s"].notna().to_numpy() & k["dur_s"].notna().to_numpy()
    comm = (k["category"] == "communication").to_numpy()
    bound = np.where(k["compute_bound"].to_numpy(dtype=bool), "compute", "memory")
    conds = [comm, ~costed, k["floor_s"].to_numpy() < params.latency_floor_s,
             k["efficiency"].to_numpy() < params.underutilized_below]
    return np.select(conds, ["communication", "unknown", "latency", "underutilized"], bound).astype(object)


def above_roof(k: pd.DataFrame, top: int = 5) -> dict:
    """Kernels that ran above their roof (efficiency > 1): how many names, their time, the worst."""
    if "above_roof" not in k or not k["above_roof"].any():
        return {"kernels": 0, "calls": 0, "time_s": 0.0, "top": []}
    hot = k[k["above_roof"]]
    # Each kernel's worst call, and the roof that call beat: its compute peak's precision when its
    # FLOPs set the floor (an fp32 GEMM above the fp32 peak), else its memory level.
    worst = hot.sort_values("efficiency", ascending=False).drop_duplicates("name")
    with np.errstate(divide="ignore", invalid="ignore"):
        compute = (np.nan_to_num(worst["flops"] / worst["roof"]) >= np.nan_to_num(worst["bytes"] / worst["roof_bw"]))
    level = np.where(compute & (worst["roof_precision"].astype(str) != ""), worst["roof_precision"].astype(str),
                     np.where(worst["roof_level"].astype(str) != "", worst["roof_level"].astype(str), NO_CACHE_ROOF))
    return {"kernels": int(len(worst)), "calls": int(len(hot)), "time_s": float(hot["dur_s"].sum()),
            "top": [{"name": str(r.name), "efficiency": float(r.efficiency), "level": str(lv)}
                    for r, lv in zip(worst.head(top).itertuples(), level[:top])]}
