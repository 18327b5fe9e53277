"""CPU ceilings: matmul FLOP/s per dtype and streaming bandwidth per memory level, measured with torch.

Short on purpose (a few seconds, less with ``quick``): CPU-only runs measure it (quick) when the
cache has no plausible entry (:func:`ceilings_for_run`), and CI runs it. Reports like the GPU path (roofscope.microbench.gpu):
median/min/max over repetitions and one result dict per benchmark in ``env["results"]``.

**Levels.** A CPU op's operands are often still in cache from the op before (an optimizer's
8 MB state tensors fit a 32 MB LLC), so one DRAM bandwidth is a roof such ops beat by 2-5x.
Bandwidth is measured at working sets sized from the cache hierarchy (/sys): half the L2 of the
cores torch uses, half the LLC, and well beyond the LLC (DRAM). At each, the best streaming rate
of three kernels (copy, in-place scale, triad ``c = a + s*b``) is the level's roof: a kernel's
roof lets each level serve as much of its working set as it holds (ceilings.Ceilings.level_of).

**Theoretical roofs.** The compute, L2 and LLC roofs are the CPU's theoretical rates
(microbench/cpupeak.py), not the measured ones: on a loaded machine a measured rate is whatever
the CPU had to spare, and ops ran above it by up to 34×. DRAM's stays measured. The measured rates
are kept as ``env["achievable"]`` / ``env["achievable_levels"]`` and named in notes beside the
roofs (:func:`with_theoretical`, applied again to every cached CPU set, older ones included).

**Noise.** Each benchmark runs ``repeats`` times; when the median repetition is more than
:data:`NOISY_SPREAD` (25 %) below the best, other work shared the CPU while it ran: the result is
marked noisy and named in the ceilings' notes. A noisy memory roof is cached only where no quiet
measurement is (microbench/cache.py); an implausible set (``ceilings.implausible``: an L2 slower
than DRAM) never is.
"""
from __future__ import annotations

import platform
import statistics
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from roofscope.errors import DeviceError, RoofscopeError
from roofscope.hardware.ceilings import Ceilings, implausible, levels_payload, parse_levels
from roofscope.microbench import cache
from roofscope.microbench.cpupeak import CACHE_BYTES_PER_CYCLE, CpuPeak, read_peak
from roofscope.text import si

Progress = Callable[[str, int, int], None]

# 1 - median/best above this: the repetitions disagree. ROOFSCOPE_NOISY_SPREAD moves it (a shared
# CI runner that only needs some roof: 1 accepts any spread).
NOISY_SPREAD = 0.25
_BYTES_PER_TIMING = 32 << 20   # a timed block moves at least this much (small working sets loop)
# A matmul's best of 5 repetitions sat 3.5% under its best of 50 on a shared 2-thread EPYC
# (200 vs 207 GFLOP/s at 512^3), and the README's MLP, timing hundreds of such matmuls, ran up to
# 4.3% above that roof: matmuls repeat for this long, to find the rate the CPU really reaches.
_MATMUL_TARGET_S = {True: 0.15, False: 0.4}
_MAX_REPEATS = 2000


def cpu_name() -> str:
    """The CPU model, e.g. 'cpu: AMD EPYC 7B13' (falls back to the architecture)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return "cpu: " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu: " + (platform.processor() or platform.machine() or "unknown")


def _size(text: str) -> int | None:
    """'1024K' -> 1048576 (sysfs cache sizes)."""
    text = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    try:
        return int(text.rstrip("KMG")) * mult
    except ValueError:
        return None


def cache_levels(threads: int, root: str = "/sys/devices/system/cpu/cpu0/cache") -> list[tuple[str, int]]:
    """(name, capacity in bytes) of the L2 of ``threads`` cores and of the last-level cache, from
    sysfs; 1 MiB of L2 per core and a 32 MiB LLC where sysfs says nothing."""
    sizes: dict[int, int] = {}
    for d in sorted(Path(root).glob("index*")):
        try:
            kind = (d / "type").read_text().strip()
            level = int((d / "level").read_text())
            size = _size((d / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Unified", "Data") and size and level >= 2:
            sizes[level] = size
    l2 = sizes.get(2, 1 << 20) * max(1, threads)
    llc = sizes[max(sizes)] if sizes and max(sizes) > 2 else 32 << 20
    return [("L2", l2), ("LLC", llc)] if llc > l2 else [("L2", l2)]


def _times(fn: Callable[[], Any], repeats: int, inner: int = 1, target_s: float = 0.0) -> list[float]:
    """Seconds per call over ``repeats`` timings of ``inner`` back-to-back calls each, and more
    until ``target_s`` has passed (at most :data:`_MAX_REPEATS`)."""
    fn()  # warm-up: first calls pay for allocation, page faults and thread start-up
    out: list[float] = []
    start = time.perf_counter()
    while len(out) < repeats or (time.perf_counter() - start < target_s and len(out) < _MAX_REPEATS):
        t = time.perf_counter()
        for _ in range(inner):
            fn()
        out.append((time.perf_counter() - t) / inner)
    return out


def noisy_spread() -> float:
    """:data:`NOISY_SPREAD`, or ``$ROOFSCOPE_NOISY_SPREAD`` when set."""
    import os

    try:
        return float(os.environ.get("ROOFSCOPE_NOISY_SPREAD") or NOISY_SPREAD)
    except ValueError:
        return NOISY_SPREAD


def _result(name: str, kind: str, key: str, unit: str, config: dict[str, Any],
            work: float, run: Callable[[], list[float]]) -> dict[str, Any]:
    """Run one benchmark; ``work`` (FLOP or bytes) over each repetition's time is its rate.

    ``value`` is the best rate: a ceiling is what the hardware can reach, and slower
    repetitions are interference (other processes, frequency ramp), not the roof. ``spread``
    (1 - median/best) says how much they disagree; ``noisy`` when above :data:`NOISY_SPREAD`.
    """
    t0 = time.perf_counter()
    res: dict[str, Any] = {"name": name, "kind": kind, "key": key, "value": None, "unit": unit,
                           "median": None, "min": None, "max": None, "spread": None, "noisy": False,
                           "config": config, "datasheet": None, "seconds": None, "error": None}
    try:
        rates = [work / t for t in run() if t > 0]
        if not rates:
            raise RuntimeError("timer resolution too coarse")
        median = statistics.median(rates)
        res.update(value=max(rates), median=median, min=min(rates), max=max(rates),
                   spread=1.0 - median / max(rates), noisy=1.0 - median / max(rates) > noisy_spread())
    except Exception as e:  # e.g. a dtype this CPU build cannot multiply: skip that roof, keep the rest
        res["error"] = f"{type(e).__name__}: {e}"
    res["seconds"] = time.perf_counter() - t0
    return res


def _stream_benches(levels: list[tuple[str, int, int]], repeats: int, threads: int) -> list[tuple]:
    """Copy, in-place scale and triad at each level's working set (bytes touched per call)."""
    import torch

    out = []
    for level, capacity, ws in levels:
        inner = max(1, _BYTES_PER_TIMING // ws)
        # Bytes each kernel moves per element of one operand, and how many operands it touches.
        for kernel, operands, moved in (("copy", 2, 2), ("scale", 1, 2), ("triad", 3, 3)):
            numel = max(1024, ws // (4 * operands))

            def run(kernel=kernel, numel=numel, inner=inner) -> list[float]:
                a, b = torch.rand(numel), torch.rand(numel)
                c = torch.empty_like(a)
                fn = {"copy": lambda: c.copy_(a), "scale": lambda: a.mul_(1.0),
                      "triad": lambda: torch.add(a, b, alpha=0.5, out=c)}[kernel]
                return _times(fn, repeats, inner)

            out.append((f"{level} {kernel}", "memory", f"bandwidth:{level}", "B/s",
                        {"level": level, "capacity": capacity, "working_set": numel * 4 * operands,
                         "kernel": kernel, "repeats": repeats, "inner": inner, "threads": threads},
                        float(moved * 4 * numel), run))
    return out


def measure_cpu(n: int | None = None, copy_mib: int | None = None, repeats: int | None = None, *,
                quick: bool = False, progress: Progress | None = None) -> Ceilings:
    """fp32/bf16 n x n x n matmul rate and streaming bandwidth per memory level (L2, LLC, DRAM
    with a working set of at least ``copy_mib`` MiB), best and median/min/max over ``repeats``.

    ``progress(name, i, total)`` is called before benchmark ``i`` (0-based, as in the GPU path) of ``total``.
    """
    import torch

    n = n or (512 if quick else 1024)
    copy_mib = copy_mib or (64 if quick else 256)
    repeats = repeats or (5 if quick else 7)
    started = time.perf_counter()
    threads = torch.get_num_threads()
    benches: list[tuple[str, str, str, str, dict[str, Any], float, Callable[[], list[float]]]] = []
    for key, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        def run(dtype=dtype) -> list[float]:
            a = torch.randn(n, n).to(dtype)
            b = torch.randn(n, n).to(dtype)
            return _times(lambda: torch.mm(a, b), repeats, target_s=_MATMUL_TARGET_S[quick])

        benches.append((f"{key} matmul", "compute", key, "FLOP/s",
                        {"n": n, "dtype": str(dtype).replace("torch.", ""), "repeats": repeats,
                         "target_s": _MATMUL_TARGET_S[quick],
                         "threads": threads}, 2.0 * n ** 3, run))
    caches = cache_levels(threads)
    # 4 x the LLC: a VM's two vCPUs on two Zen 4 CCDs hold 2 x 32 MiB of L3, and a 64 MiB "DRAM" set
    # streamed at 85 GB/s there (2026-11-25) where DRAM gave 4-17.
    dram_ws = max(copy_mib << 20, 4 * caches[-1][1])
    levels = [(name, cap, cap // 2) for name, cap in caches] + [("DRAM", 0, dram_ws)]
    benches += _stream_benches(levels, repeats, threads)

    results = []
    for i, (name, kind, key, unit, config, work, run) in enumerate(benches):
        if progress is not None:
            progress(name, i, len(benches))
        results.append(_result(name, kind, key, unit, config, work, run))
    peaks = {r["key"]: r["value"] for r in results if r["kind"] == "compute" and r["value"]}
    best: dict[str, float] = {}
    for r in results:
        if r["kind"] == "memory" and r["value"]:
            level = r["config"]["level"]
            best[level] = max(best.get(level, 0.0), r["value"])
    if not peaks or "DRAM" not in best:
        failed = "; ".join(f"{r['name']}: {r['error']}" for r in results if r["error"])
        raise DeviceError(f"CPU microbenchmark failed: {failed}")
    measured = [(name, float(cap), best[name]) for name, cap, _ in levels[:-1] if name in best]
    measured.append(("DRAM", float("inf"), best["DRAM"]))
    peak = read_peak(threads)
    theory = {} if peak is None else {**peak.peaks(),
                                      **{f"bandwidth:{k}": v for k, v in peak.cache_bandwidth().items()}}
    for r in results:
        r["datasheet"] = theory.get(r["key"])
    # Noise moves only the achievable figure of a benchmark whose roof is theoretical.
    noisy = [r for r in results if r["noisy"] and r["key"] not in theory]
    notes = [f"{r['name']} skipped: {r['error']}" for r in results if r["error"]]
    if noisy:
        notes.append("noisy: " + ", ".join(f"{r['name']} (best {si(r['value'], r['unit'])}, median"
                                           f" {si(r['median'], r['unit'])})" for r in noisy)
                     + ": other work shared the CPU while measuring; these roofs may be low"
                       " (`roofscope microbench --device cpu` on a quiet machine replaces them)")
    raw = Ceilings(device=cpu_name(), source="measured", peaks=peaks, bandwidth=best["DRAM"],
                   measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), notes=tuple(notes),
                   levels=_monotone(measured),
                   env={"torch": torch.__version__, "threads": threads, "runtime_s": time.perf_counter() - started,
                        "method": (f"best of {repeats} (after a warm-up; matmuls for at least"
                                   f" {_MATMUL_TARGET_S[quick]} s): {n}^3 matmul; copy, in-place scale and"
                                   f" triad at {', '.join(f'{name} {ws >> 10} KiB' for name, _, ws in levels)}"),
                        "quick": quick, "noisy": [r["name"] for r in noisy], "results": results,
                        "achievable_levels": levels_payload(tuple(measured))})
    return with_theoretical(raw, peak)


def _monotone(levels: Any) -> tuple[tuple[str, float, float], ...]:
    """Innermost first; a level no faster than the one outside it adds no roof."""
    kept: list[tuple[str, float, float]] = []
    for level in reversed(list(levels)):
        if not kept or level[2] > kept[0][2]:
            kept.insert(0, level)
    return tuple(kept)


_ROOF_NOTES = ("compute roofs: ", "memory roofs: ")


def with_theoretical(c: Ceilings, peak: CpuPeak | None) -> Ceilings:
    """CPU ceilings whose compute, L2 and LLC roofs are ``peak``'s theoretical rates (a measured
    rate above one is the roof instead: a clock above the one assumed), DRAM's the measured rate.
    The measured rates are kept as ``env["achievable"]`` and ``env["achievable_levels"]`` and shown
    in two notes; applying it again (to a cached set) replaces them. Without a peak (not x86, no
    clock) the measured rates stay the roofs, and a note says so."""
    achievable = {str(k): float(v) for k, v in dict(c.env.get("achievable") or c.peaks).items()}
    measured = parse_levels(c.env.get("achievable_levels")) or c.levels
    notes = [n for n in c.notes if not n.startswith(_ROOF_NOTES)]
    env = {**c.env, "achievable": achievable, "achievable_levels": levels_payload(measured)}
    if peak is None:
        notes.append(f"{_ROOF_NOTES[0]}the measured matmul rates (no theoretical peak for this CPU: not x86, or no"
                     " clock in /proc/cpuinfo or sysfs); ops beat them where the CPU was busy while measuring")
        return replace(c, notes=tuple(notes), env=env)
    theory = peak.peaks()
    roofs = {k: max(v, achievable.get(k, 0.0)) for k, v in theory.items()}
    beaten = [k for k, v in theory.items() if achievable.get(k, 0.0) > v]
    bounds = peak.cache_bandwidth()
    levels = _monotone((name, cap, max(bw, bounds.get(name, 0.0))) for name, cap, bw in measured)
    beaten += [name for name, _, bw in measured if bw > bounds.get(name, float("inf"))]
    notes.append(f"{_ROOF_NOTES[0]}theoretical peak, {peak.describe()}; achievable (measured): "
                 + (", ".join(f"{k} {si(v, 'FLOP/s')} ({v / roofs[k]:.0%})" for k, v in achievable.items()
                              if k in roofs) or "not measured"))
    notes.append(f"{_ROOF_NOTES[1]}" + ", ".join(f"{k} {si(v, 'B/s')}" for k, v in bounds.items())
                 + f" theoretical ({', '.join(f'{b:g}' for b in CACHE_BYTES_PER_CYCLE.values())} B/cycle per core),"
                 " DRAM measured; achievable (measured): "
                 + ", ".join(f"{name} {si(bw, 'B/s')}" for name, _, bw in measured))
    if beaten:
        notes.append(f"measured {', '.join(beaten)} beat the theoretical peak (a clock above the one assumed):"
                     " the roof is the measured rate")
    return replace(c, peaks=roofs, levels=levels, notes=tuple(notes), env={**env, "theoretical": theory})


def theoretical_only(peak: CpuPeak, threads: int, why: str) -> Ceilings:
    """Ceilings with no measurement: compute, L2 and LLC roofs from ``peak``, and the LLC's rate
    beyond it (no DRAM figure: an upper bound, so memory-bound ops read low, never above it)."""
    caches = cache_levels(threads)
    bounds = peak.cache_bandwidth()
    levels = tuple((name, float(cap), bounds[name]) for name, cap in caches[:-1]) + (
        (caches[-1][0], float("inf"), bounds[caches[-1][0]]),)
    notes = (f"{_ROOF_NOTES[0]}theoretical peak, {peak.describe()}; achievable: not measured",
             f"{_ROOF_NOTES[1]}" + ", ".join(f"{name} {si(bw, 'B/s')}" for name, _, bw in levels)
             + f" theoretical, beyond the LLC too: {why}")
    return Ceilings(device=cpu_name(), source="measured", peaks=peak.peaks(), bandwidth=levels[-1][2],
                    levels=_monotone(levels), notes=notes,
                    env={"threads": threads, "theoretical": peak.peaks(), "method": "theoretical only"})


# After an implausible measurement, `roofscope run` measures again only this much later (seconds):
# a busy machine stays busy for a while, and every run re-measuring is what issue 27 reported.
RETRY_AFTER_S = 3600.0


def ceilings_for_run(threads: int, torch_version: str, *, progress: Progress | None = None,
                     warnings: list[str] | None = None) -> Ceilings:
    """A CPU-only profile's ceilings: this CPU's cached measurement (same torch and thread count,
    else the newest one, its differences noted), else a quick measurement now, cached when
    plausible. Either way the compute, L2 and LLC roofs are theoretical (:func:`with_theoretical`).

    Only a CPU that has no plausible cached set is measured: a noisy one is cached too (with its
    note), so a busy machine measures once, not on every run. An implausible measurement is not
    cached: that run and the runs of the next :data:`RETRY_AFTER_S` get :func:`theoretical_only`
    roofs with a note (without a theoretical peak, the measurement itself, for that run)."""
    peak = read_peak(threads)
    if cache.enabled():
        c = cache.lookup(cpu_name(), torch_version=torch_version, threads=threads)
        if c is not None:
            return with_theoretical(c, peak)
        busy = cache.implausible_attempt(cpu_name(), RETRY_AFTER_S)
        if busy is not None and peak is not None:
            return theoretical_only(peak, threads, f"{busy}; measured again from {RETRY_AFTER_S / 3600:g} h after it"
                                    " (`roofscope microbench --device cpu` on a quiet machine now)")
    c = measure_cpu(quick=True, progress=progress)
    problems = implausible(c)
    if cache.enabled():
        try:
            cache.save(c)  # refuses an implausible set, and remembers when
        except (RoofscopeError, OSError) as e:  # that, or a read-only home: the Run goes on
            if warnings is not None and not problems:
                warnings.append(f"could not cache the CPU ceilings: {e}")
    if not problems:
        return c
    why = cache.implausible_text(c, problems)
    if peak is not None:
        return theoretical_only(peak, threads, why + " (`roofscope microbench --device cpu` on a quiet machine)")
    return replace(c, notes=(*c.notes, f"{_ROOF_NOTES[1]}measured, for this run only: {why}"))
