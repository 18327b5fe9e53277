"""A CPU's theoretical compute peak: cores × clock × FLOP per cycle, from /proc/cpuinfo and sysfs.

A measured matmul rate is a roof only on a quiet machine: on a loaded 2-core CPU the fp32 rate
came out anywhere from 3 to 69 GFLOP/s within an hour, and ops ran at up to 34× such a "roof".
The compute roof of a CPU is therefore the peak the instruction set allows, counted high on
purpose so that no op can beat it; the measured rate is shown beside it as *achievable*.

**FLOP per cycle per core** (fp32): vector lanes (avx512f 16, avx/avx2 8, sse 4) × 2 FLOP per
FMA × 2 FMA units. Two units is the most any x86 core has (Zen 4 runs AVX-512 on two 256-bit units
and some Xeons have one 512-bit unit: the count is high for those, never low). fp64 is half of
fp32; bf16 and fp16 are twice fp32 where the CPU has dot-product instructions for them
(avx512_bf16, avx512_fp16) and 2048 per cycle with AMX tiles (1024 FMA per cycle), else fp32's
(they are computed in fp32); int8 is four times fp32 (VNNI's 4-way dot product), 4096 with AMX.

**Clock**: ``cpuinfo_max_freq`` (sysfs: the highest boost clock) where there is one; else the
nominal clock of /proc/cpuinfo (``model name ... @ 2.45GHz`` or ``cpu MHz``, the larger) times
:data:`BOOST_ALLOWANCE`, because virtual machines report the base clock and boost above it
(the 2-core AMD EPYC 7B13 VM of this project: 2.45 GHz nominal, 3.5 GHz boost; its fp32 matmul
reached 207 GFLOP/s, above 2 × 2.45 GHz × 32 = 157).

**Cache bandwidth** (the L2 and LLC roofs): bytes per cycle per core between the level and the
core, counted high too: a 64-byte line in and one out each cycle for the L2 (an in-place op reads
and writes back at once), half that for the LLC (32-byte paths each way on Zen 2-4 and Intel's
mesh). Measured rates sat below what the ops of a profile reached by up to 1.46× (an AdamW
``addcmul_`` at 274 GB/s where the best in-place L2 benchmark, on a busy 2-core VM, gave 230).
DRAM has no such figure in /proc: its roof stays measured.

Other architectures (ARM, POWER) and CPUs without a readable clock get no theoretical peak
(None): their compute roofs stay the measured rates, with a note saying so.
Plain Python, no torch: analyses of CPU traces use it on any machine.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

__all__ = ["BOOST_ALLOWANCE", "CACHE_BYTES_PER_CYCLE", "CpuPeak", "theoretical_peak", "read_peak"]

# A nominal clock times this is the boost clock assumed: 1.43× on the EPYC 7B13 and 9B14 parts
# of this project's machines; sysfs's cpuinfo_max_freq, where present, is used as is.
BOOST_ALLOWANCE = 1.5
_FMA_UNITS = 2
_FLOP_PER_FMA = 2
_AMX_FLOP_PER_CYCLE = 2048.0   # 16x32 bf16/fp16 tile multiply: 1024 FMA per cycle per core
CACHE_BYTES_PER_CYCLE = {"L2": 128.0, "LLC": 64.0}


@dataclass(frozen=True)
class CpuPeak:
    cores: int
    clock_hz: float
    clock_source: str                  # "cpuinfo_max_freq", or the nominal clock and the allowance
    isa: str                           # the widest vector extension found: avx512f, avx2, avx, sse
    per_cycle: Mapping[str, float]     # FLOP (int8: ops) per cycle per core, by precision

    def peaks(self) -> dict[str, float]:
        """FLOP/s per precision: cores × clock × FLOP per cycle."""
        return {k: self.cores * self.clock_hz * v for k, v in self.per_cycle.items()}

    def cache_bandwidth(self) -> dict[str, float]:
        """Bytes/s per cache level: cores × clock × :data:`CACHE_BYTES_PER_CYCLE`."""
        return {k: self.cores * self.clock_hz * v for k, v in CACHE_BYTES_PER_CYCLE.items()}

    def describe(self) -> str:
        """'2 cores × 3.89 GHz (cpu MHz 2596 × 1.5 boost allowance) × 64 fp32 FLOP/cycle (avx512f: 16 lanes × 2 FMA units)'."""
        lanes = int(self.per_cycle["fp32"] / (_FMA_UNITS * _FLOP_PER_FMA))
        return (f"{self.cores} core{'s' if self.cores != 1 else ''} × {self.clock_hz / 1e9:.2f} GHz"
                f" ({self.clock_source}) × {self.per_cycle['fp32']:g} fp32 FLOP/cycle ({self.isa}: {lanes}"
                f" lanes × {_FMA_UNITS} FMA units × {_FLOP_PER_FMA})")


def _flags(cpuinfo: str) -> set[str]:
    m = re.search(r"^flags\s*:(.*)$", cpuinfo, re.MULTILINE)
    return set(m.group(1).split()) if m else set()


def _nominal_hz(cpuinfo: str) -> tuple[float, str] | None:
    """The larger of 'model name ... @ 2.45GHz' and 'cpu MHz' (first CPU), with where it came from."""
    found: list[tuple[float, str]] = []
    m = re.search(r"^model name\s*:.*@\s*([\d.]+)\s*GHz", cpuinfo, re.MULTILINE | re.IGNORECASE)
    if m:
        found.append((float(m.group(1)) * 1e9, f"model name {m.group(1)} GHz"))
    m = re.search(r"^cpu MHz\s*:\s*([\d.]+)", cpuinfo, re.MULTILINE)
    if m and float(m.group(1)) > 0:
        found.append((float(m.group(1)) * 1e6, f"cpu MHz {float(m.group(1)):.0f}"))
    return max(found) if found else None


def theoretical_peak(cpuinfo: str, cores: int, max_freq_khz: int | None = None) -> CpuPeak | None:
    """The peak of ``cores`` cores described by ``cpuinfo`` (the text of /proc/cpuinfo), at
    ``max_freq_khz`` (sysfs cpuinfo_max_freq) or the nominal clock × :data:`BOOST_ALLOWANCE`;
    None for CPUs without x86 vector flags or without a clock."""
    flags = _flags(cpuinfo)
    isa, lanes = next(((f, n) for f, n in (("avx512f", 16), ("avx2", 8), ("avx", 8), ("sse", 4)) if f in flags),
                      ("", 0))
    if not lanes or cores < 1:
        return None
    if max_freq_khz:
        clock, source = max_freq_khz * 1e3, "cpuinfo_max_freq"
    else:
        nominal = _nominal_hz(cpuinfo)
        if nominal is None:
            return None
        clock, source = nominal[0] * BOOST_ALLOWANCE, f"{nominal[1]} × {BOOST_ALLOWANCE:g} boost allowance"
    fp32 = float(lanes * _FMA_UNITS * _FLOP_PER_FMA)

    def half(dot: str, amx: str) -> float:
        # 16-bit floats: AMX tiles, else a 2-way dot-product instruction doubles fp32, else fp32 math.
        return _AMX_FLOP_PER_CYCLE if amx in flags else 2 * fp32 if dot in flags else fp32

    per_cycle = {"fp64": fp32 / 2, "fp32": fp32, "bf16": half("avx512_bf16", "amx_bf16"),
                 "fp16": half("avx512_fp16", "amx_fp16"),
                 "int8": 2 * _AMX_FLOP_PER_CYCLE if "amx_int8" in flags else 4 * fp32}
    return CpuPeak(cores=cores, clock_hz=clock, clock_source=source, isa=isa, per_cycle=per_cycle)


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def usable_cores(threads: int | None = None) -> int:
    """Cores the process can run on, capped by ``threads`` (torch's intra-op threads): more
    threads than cores add no FLOPs."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, threads) if threads else cores)


def read_peak(threads: int | None = None, root: str = "/") -> CpuPeak | None:
    """This machine's :func:`theoretical_peak` for ``threads`` threads (None: every usable core)."""
    base = Path(root)
    try:
        cpuinfo = (base / "proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return None
    max_khz = _read_int(base / "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    return theoretical_peak(cpuinfo, usable_cores(threads), max_khz)
