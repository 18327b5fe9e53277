"""Ceilings (what the roofline is drawn with) and the measured-ceilings file.

Everything here is plain Python (no torch) because it runs on every command,
including ones that only read a trace on a laptop. The microbenchmarks build Ceilings and
:mod:`roofscope.hardware.devices` resolves which ones a run gets; both import this module, which
imports neither.

Units everywhere: FLOP/s (ops/s for int8) and bytes/s, as SI floats.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from roofscope.errors import DeviceError
from roofscope.fileio import atomic_write
from roofscope.hardware.datasheets import PRECISIONS, DeviceSpec, lookup, spec_by_key
from roofscope.run.schema import CEILINGS_VERSION as SCHEMA_VERSION
from roofscope.run.schema import check_version
from roofscope.text import si

# "none": no ceilings are known (no device name, an unknown device, a CPU never measured);
# everything that needs no ceilings is still analyzed (see Ceilings.none).
SOURCES: tuple[str, ...] = ("datasheet", "measured", "user", "none")


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
    # Host link (bytes/s) measured by `roofscope microbench`: h2d, d2h (pinned host memory) and
    # h2d_pageable, d2h_pageable; see copy_roof.
    host_link: Mapping[str, float] = field(default_factory=dict)
    # Bandwidth per memory level, innermost first: (name, capacity in bytes, bytes/s); the last
    # level (DRAM, capacity inf) is ``bandwidth``. Empty: one bandwidth roof for every kernel.
    levels: tuple[tuple[str, float, float], ...] = ()

    def level_of(self, working_set: Any) -> tuple[Any, Any]:
        """Per working set (bytes; array-like): the bandwidth roof for moving it, and the
        outermost memory level it reaches. Without levels: ``bandwidth`` and "" everywhere.

        The roof is a lower bound on the time, so it assumes the fastest levels serve as much
        of the working set as they hold (a producer kernel can leave up to a cache's capacity
        of its output there): each level moves its capacity beyond the level inside it at its
        own rate, and the outermost level the rest. A working set that fits a level gets that
        level's rate; one just over it a blend (on an H100, 77 MB with 50 MB in L2 moves at
        77 / (27/3.27 + 50/7.45) = 5.1 TB/s, not the HBM 3.27 that residual adds beat)."""
        import numpy as np

        ws = np.asarray(working_set, dtype=np.float64)
        if not self.levels:
            bw = np.full(ws.shape, float(self.bandwidth) if self.bandwidth else np.nan)
            return bw, np.full(ws.shape, "", dtype=object)
        seconds = np.zeros(ws.shape)
        name = np.full(ws.shape, self.levels[0][0], dtype=object)
        inside = 0.0
        for level, capacity, rate in self.levels:
            with np.errstate(invalid="ignore"):
                seconds += np.clip(ws - inside, 0.0, capacity - inside) / rate
                name = np.where(ws > inside, level, name)
            inside = capacity
        with np.errstate(divide="ignore", invalid="ignore"):
            bw = np.where(ws > 0, ws / seconds, self.levels[0][2])
        # Unknown size (NaN): the outermost level's rate, the roof of any size.
        unknown = np.isnan(ws)
        bw = np.where(unknown, self.levels[-1][2], bw)
        name = np.where(unknown, self.levels[-1][0], name)
        return bw, name

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

    @classmethod
    def none(cls, device: str, why: str, notes: tuple[str, ...] = ()) -> Ceilings:
        """No ceilings: no peaks and no bandwidth (0, so ``if c.bandwidth`` guards hold). Times,
        FLOPs, bytes and achieved rates are still computed; bound classes, efficiency and
        utilization are not. ``why`` (one line, with the flags that give ceilings) is the first note."""
        return cls(device=device, source="none", peaks={}, bandwidth=0.0, notes=(why, *notes))

    @property
    def known(self) -> bool:
        """False for :meth:`none` ceilings."""
        return self.source != "none"

    @property
    def l2_bandwidth(self) -> float | None:
        """L2 read bandwidth (bytes/s) measured by ``roofscope microbench`` for these ceilings.

        Datasheets publish no L2 figure, so only measured ceilings (whose ``env`` keeps the
        benchmark results) have an L2 roof.
        """
        results = (self.env or {}).get("results") or []
        values = [r.get("value") for r in results if isinstance(r, dict) and r.get("key") == "l2"]
        values = [float(v) for v in values if isinstance(v, (int, float)) and v > 0]
        return max(values) if values else None

    def peak(self, precision: str) -> float | None:
        return self.peaks.get(precision)

    def copy_roof(self, direction: str) -> float | None:
        """Bytes/s a host<->device copy (``HtoD`` or ``DtoH``) can reach: the measured pinned-memory
        rate, else the datasheet's PCIe link, else None. Pageable copies get the same roof: the
        gap to it is what pinning the memory would win."""
        key = {"HtoD": "h2d", "DtoH": "d2h"}.get(direction)
        if key is None:
            return None
        return self.host_link.get(key) or (self.datasheet.host_link if self.datasheet is not None else None)

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
            "host_link": dict(self.host_link),
            "datasheet": self.datasheet.to_dict() if self.datasheet is not None else None,
            "levels": levels_payload(self.levels),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Ceilings:
        ds = d.get("datasheet")
        spec: DeviceSpec | None = None
        if isinstance(ds, Mapping):
            # Prefer this version's row so fixes to the table propagate.
            spec = spec_by_key(str(ds.get("key"))) or DeviceSpec.from_dict(ds)
        elif isinstance(ds, str):
            spec = spec_by_key(ds)
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
            host_link={str(k): float(v) for k, v in dict(d.get("host_link") or {}).items()},
            levels=parse_levels(d.get("levels")),
        )


def levels_payload(levels: tuple[tuple[str, float, float], ...]) -> list[dict[str, Any]]:
    """Levels as JSON: the outermost level's capacity (infinite) is null."""
    return [{"name": n, "bytes": None if cap == float("inf") else float(cap), "bandwidth": float(bw)}
            for n, cap, bw in levels]


def parse_levels(raw: Any, where: str = "ceilings") -> tuple[tuple[str, float, float], ...]:
    """The inverse of :func:`levels_payload`; a malformed entry is a DeviceError."""
    if not raw:
        return ()
    try:
        out = tuple((str(e["name"]), float("inf") if e.get("bytes") is None else float(e["bytes"]),
                     float(e["bandwidth"])) for e in raw)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise DeviceError(f"{where}: 'levels' must be a list of {{name, bytes, bandwidth}} ({e})") from None
    if any(bw <= 0 or cap <= 0 for _, cap, bw in out):
        raise DeviceError(f"{where}: 'levels' need positive bytes and bandwidth")
    return out


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


# ----------------------------------------------------------------------------
# Physics check of measured ceilings
# ----------------------------------------------------------------------------

# A cache serves what it holds at least as fast as the memory behind it: an inner level measured
# below this share of an outer one was slowed by other work (a loaded 2-core CPU measured L2 copy
# at 34 MB/s and DRAM at 7 GB/s). Nearer than that, the inner level is only dropped as a roof: on
# a cloud VM whose LLC other tenants share, an "LLC" working set streams from DRAM, whose rate
# varied 4x within a second (4.2 and 17.1 GB/s, 2026-11-25), so a 0.25 ratio is weather, not noise.
LEVEL_SLACK = 0.2
# No CPU or GPU that runs PyTorch streams memory slower than this (bytes/s) or multiplies matrices
# below this share of its theoretical or datasheet peak.
MIN_BANDWIDTH = 1e9
MIN_COMPUTE_SHARE = 0.01


def implausible(c: Ceilings) -> list[str]:
    """Why physics rules out the measured ``c`` (empty: plausible): an inner memory level far slower
    than an outer one (L2 >= LLC >= DRAM must hold), memory slower than :data:`MIN_BANDWIDTH`, a
    matmul below :data:`MIN_COMPUTE_SHARE` of the theoretical (CPU) or datasheet peak. Such a set
    was measured while other work held the device and must never be cached.

    Memory levels are each level's best rate among the results (``config["level"]``, innermost
    first: the CPU benchmarks'; they are read before slower inner levels are dropped as roofs),
    else ``levels``; the measured compute rates are ``env["achievable"]`` (CPU: the roofs are
    theoretical, ``env["theoretical"]``), else ``peaks``."""
    problems: list[str] = []
    best: dict[str, float] = {}
    for r in c.env.get("results") or ():
        config = r.get("config") if isinstance(r, Mapping) else None
        level = config.get("level") if isinstance(config, Mapping) else None
        if level and r.get("kind") == "memory" and positive_number(r.get("value")):
            best[str(level)] = max(best.get(str(level), 0.0), float(r["value"]))
    rates = list(best.items()) or [(name, bw) for name, _, bw in c.levels]
    for i, (inner, bw) in enumerate(rates):
        outer = [(name, obw) for name, obw in rates[i + 1:] if bw < LEVEL_SLACK * obw]
        if outer:
            name, obw = max(outer, key=lambda o: o[1])
            problems.append(f"{inner} {si(bw, 'B/s')} is slower than {name} {si(obw, 'B/s')}")
    slowest = min([bw for _, bw in rates] + [float(c.bandwidth)])
    if slowest < MIN_BANDWIDTH:
        problems.append(f"memory at {si(slowest, 'B/s')} is below {si(MIN_BANDWIDTH, 'B/s')}")
    reference = dict(c.env.get("theoretical") or (c.datasheet.peaks if c.datasheet is not None else {}))
    for key, rate in dict(c.env.get("achievable") or c.peaks).items():
        ref = reference.get(key)
        if ref and float(rate) < MIN_COMPUTE_SHARE * float(ref):
            problems.append(f"{key} matmul {si(float(rate), 'FLOP/s')} is below {MIN_COMPUTE_SHARE:.0%} of the"
                            f" peak {si(float(ref), 'FLOP/s')}")
    return problems


# ----------------------------------------------------------------------------
# Ceilings file
# ----------------------------------------------------------------------------


def positive_number(v: Any) -> bool:
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
    check_version(data.get("schema_version"), SCHEMA_VERSION, "ceilings", f"ceilings file {p}", error=DeviceError)
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
    bad = sorted(k for k, v in peaks.items() if not positive_number(v))
    if bad:
        raise DeviceError(f"ceilings file {p}: peaks for {', '.join(bad)} must be positive numbers (FLOP/s)")
    if not positive_number(data["bandwidth"]):
        raise DeviceError(f"ceilings file {p}: 'bandwidth' must be a positive number (bytes/s)")
    for opt in ("launch_latency_s", "fp64_vector"):
        v = data.get(opt)
        if v is not None and not positive_number(v):
            raise DeviceError(f"ceilings file {p}: '{opt}' must be a positive number or null")
    env = data.get("env")
    if env is not None and not isinstance(env, dict):
        raise DeviceError(f"ceilings file {p}: 'env' must be an object")
    measured_at = data.get("measured_at")
    notes = data.get("notes") or []
    if not isinstance(notes, list):
        raise DeviceError(f"ceilings file {p}: 'notes' must be a list of strings")
    host_link = data.get("host_link") or {}
    if not isinstance(host_link, dict) or not all(positive_number(v) for v in host_link.values()):
        raise DeviceError(f"ceilings file {p}: 'host_link' must be an object of direction -> bytes/s")
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
        host_link={str(k): float(v) for k, v in host_link.items()},
        levels=parse_levels(data.get("levels"), f"ceilings file {p}"),
    )


def save_ceilings_file(ceilings: Ceilings, path: str | os.PathLike[str], force: bool = True) -> Path:
    """Write ``ceilings`` in the schema-1 format, atomically (temp file + os.replace).

    Atomic because a crashed or interrupted microbenchmark must never leave a
    half-written file that a later run would trust.
    """
    return atomic_write(Path(path), ceilings_text(ceilings), force=force)


def ceilings_text(ceilings: Ceilings) -> str:
    """The ceilings file's content (schema 1)."""
    try:
        return json.dumps(ceilings_payload(ceilings), indent=2, sort_keys=False, allow_nan=False) + "\n"
    except (TypeError, ValueError) as e:
        raise DeviceError(f"cannot serialise ceilings for {ceilings.device!r}: {e}") from None


def ceilings_payload(ceilings: Ceilings) -> dict[str, Any]:
    """The schema-1 JSON object for ``ceilings`` (the measurement cache adds its key fields to it)."""
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
    if ceilings.host_link:
        payload["host_link"] = {k: float(v) for k, v in ceilings.host_link.items()}
    if ceilings.notes:
        payload["notes"] = list(ceilings.notes)
    if ceilings.levels:
        payload["levels"] = levels_payload(ceilings.levels)
    return payload
