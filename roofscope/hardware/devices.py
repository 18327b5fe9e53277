"""How the ceilings of a run are resolved: from a file, a --datasheet override, the ceilings
`roofscope microbench` cached, the trace's device name (via roofscope.hardware.datasheets) and --peak-*
flags. Ceilings themselves and their file format are in roofscope.hardware.ceilings.

Everything here is plain Python (no torch) because it runs on every command,
including ones that only read a trace on a laptop.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from roofscope.config import CeilingOverrides
from roofscope.errors import DeviceError
from roofscope.hardware.ceilings import (SCHEMA_VERSION, Ceilings, ceilings_payload, load_ceilings_file,
                                         normalize_dtype, positive_number, save_ceilings_file)
from roofscope.hardware.datasheets import (PRECISIONS, DeviceSpec, describe_props, giga, identify, known_devices,
                                           known_keys, lookup, match_device, tera)

# The cache reader and the CPU's name and theoretical peak: plain Python (the benchmarks that
# import torch, triton or pynvml are never imported from here).
from roofscope.microbench import cache
from roofscope.microbench.cpu import cpu_name, with_theoretical
from roofscope.microbench.cpupeak import read_peak

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
    "ceilings_payload",
    "resolve_ceilings",
]


# ----------------------------------------------------------------------------
# Resolution: file > --datasheet > cached measurement > trace name > properties; --peak-* flags on top
# ----------------------------------------------------------------------------

_EXAMPLE_KEYS = ("h100-sxm", "h200", "a100-sxm4-80gb", "l40s", "l4", "rtx-4090")
_FLAGS_HINT = (
    "pass --datasheet KEY (known: " + ", ".join(_EXAMPLE_KEYS) + ", ...), "
    "--peak-tflops X --peak-bandwidth Y, or --ceilings FILE"
)


def _check_flag(value: float | None, flag: str, unit: str) -> float | None:
    if value is None:
        return None
    if not positive_number(value):
        raise DeviceError(f"{flag} must be a positive number of {unit}, got {value!r}")
    return float(value)


def _is_cpu(name: str | None) -> bool:
    return name is not None and name.strip().lower() == "cpu"


def _spec_key(name: str | None, memory_bytes: int | None = None) -> str | None:
    spec = match_device(name, memory_bytes) if name else None
    return spec.key if spec is not None else None


def _torch_version() -> str | None:
    # Without importing torch (slow, and absent on a laptop that only reads traces).
    torch = sys.modules.get("torch")
    if torch is not None:
        return str(torch.__version__)
    try:
        from importlib.metadata import version

        return version("torch")
    except Exception:
        return None


def _cached(label: str, memory_bytes: int | None) -> Ceilings | None:
    """Ceilings `roofscope microbench` cached for the trace's device, or None.

    GPU traces match by device name (the name torch reports, as in the trace). A CPU
    trace does not name its CPU, so it gets this machine's CPU measurement: right for
    the usual case of analyzing where the run happened, and noted in the ceilings.
    """
    if not cache.enabled():
        return None
    try:
        if _is_cpu(label):
            c = cache.lookup(cpu_name(), torch_version=_torch_version())
            if c is not None:
                # Compute roofs: the theoretical peak of the cores measured with (older sets included).
                threads = c.env.get("threads")
                c = with_theoretical(c, read_peak(threads if isinstance(threads, int) else None))
                c = replace(c, notes=(*c.notes, f"CPU-only trace: the trace does not name its CPU; "
                                                f"using this machine's ({c.device})"))
            return c
        c = cache.lookup(label, torch_version=_torch_version())
    except (OSError, RuntimeError):  # no home directory, unreadable cache folder: datasheet as before
        return None
    if c is not None:
        # The trace's memory size picks the right datasheet row (A100 40 vs 80 GB) for reference.
        c = replace(c, datasheet=match_device(label, memory_bytes) or c.datasheet)
    return c


NO_CEILINGS_NEED = ("bound classes (compute/memory/latency/underutilized), efficiency, HFU/MFU/MBU and "
                    "the rules that compare with peaks need ceilings")


@dataclass
class _Query:
    """What the sources of ceilings read, and the notes they leave for the result."""

    label: str | None                    # the trace's device name, None when it names none
    overrides: CeilingOverrides
    memory_bytes: int | None
    props: Mapping[str, Any] | None
    run_ceilings: str | os.PathLike[str] | None
    use_cache: bool
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _NoBase:
    """A source's word that there are no ceilings, and why (the start of the note or error)."""

    what: str
    label: str | None
    fatal: bool = False  # an unknown --datasheet: an error unless both --peak-* flags make ceilings


_Source = Callable[[_Query], Ceilings | _NoBase | None]


def _from_file(q: _Query) -> Ceilings | None:
    """--ceilings FILE, else the Run's own measured file: it beats the datasheet, not the user's --datasheet."""
    o = q.overrides
    path = o.ceilings if o.ceilings is not None else q.run_ceilings if o.device is None else None
    if path is None:
        return None
    base = load_ceilings_file(path)
    q.notes.extend(base.notes)
    q.notes.append(f"ceilings measured on {base.device!r} read from {os.fspath(path)}")
    if o.device is not None:
        q.notes.append(f"--datasheet {o.device!r} ignored: --ceilings takes precedence")
    if q.label and not _is_cpu(q.label):
        trace_key = _spec_key(q.label, q.memory_bytes)
        file_key = base.datasheet.key if base.datasheet is not None else None
        differs = (trace_key != file_key if (trace_key or file_key)
                   else q.label.lower() != base.device.strip().lower())
        if differs:
            q.notes.append(f"trace device {q.label!r} differs from ceilings file device {base.device!r}")
    return base


def _from_datasheet_override(q: _Query) -> Ceilings | _NoBase | None:
    """--datasheet KEY|NAME. The trace's memory size describes the traced GPU, not necessarily
    the one named here, so it must not steer the lookup."""
    device = q.overrides.device
    if device is None:
        return None
    spec = lookup(device)
    if spec is None:
        return _NoBase(f"unknown --datasheet {device!r}", device, fatal=True)
    trace_key = _spec_key(q.label, q.memory_bytes) if q.label and not _is_cpu(q.label) else None
    if q.label and trace_key != spec.key:
        q.notes.append(f"trace device {q.label!r} overridden by --datasheet {device!r}")
    return Ceilings.from_spec(spec)


def _from_cache(q: _Query) -> Ceilings | None:
    base = _cached(q.label, q.memory_bytes) if q.label and q.use_cache else None
    if base is not None:
        q.notes.extend(base.notes)
    return base


def _from_trace_name(q: _Query) -> Ceilings | None:
    spec = match_device(q.label, q.memory_bytes) if q.label and not _is_cpu(q.label) else None
    return Ceilings.from_spec(spec) if spec is not None else None


def _from_properties(q: _Query) -> Ceilings | None:
    """The row the trace's deviceProperties entry describes (compute capability, SMs, memory):
    traces with an empty or generic device name."""
    spec = identify(q.props) if q.props and not _is_cpu(q.label) else None
    if spec is None:
        return None
    found = f"identified from its properties ({describe_props(q.props)}) as {spec.name}"
    q.notes.append(f"device {q.label!r} {found}" if q.label else f"the trace names no device; {found}")
    return Ceilings.from_spec(spec)


def _nothing(q: _Query) -> _NoBase:
    if _is_cpu(q.label):
        return _NoBase("CPU-only trace: roofscope has no CPU datasheet and no cached measurement of this CPU "
                       "(`roofscope microbench --device cpu` makes one)", q.label)
    if not q.label:
        return _NoBase("the trace names no GPU device", None)
    what = f"unknown device {q.label!r}: no datasheet ceilings"
    if q.props and describe_props(q.props):
        what += f" and its properties ({describe_props(q.props)}) match no datasheet row"
    return _NoBase(what, q.label)


# First hit wins (see resolve_ceilings); _nothing always answers.
SOURCES: tuple[_Source, ...] = (_from_file, _from_datasheet_override, _from_cache, _from_trace_name,
                                _from_properties, _nothing)


def resolve_ceilings(device_name: str | None, overrides: CeilingOverrides | None = None, *,
                     memory_bytes: int | None = None, props: Mapping[str, Any] | None = None,
                     run_ceilings: str | os.PathLike[str] | None = None, use_cache: bool = True) -> Ceilings:
    """Pick the ceilings for a run from the trace's ``device_name`` and the user's ``overrides``.

    The base is the first source that answers, in this order: the measured-ceilings file
    (``overrides.ceilings``, else the Run's own ``run_ceilings`` unless ``overrides.device`` is
    given) > the ``--datasheet`` row ``overrides.device`` > ceilings cached by ``roofscope
    microbench`` for ``device_name`` (``use_cache``, and ``ROOFSCOPE_NO_CACHE`` unset; see
    :func:`_cached`) > the datasheet of ``device_name`` (disambiguated by ``memory_bytes``) > the
    row its deviceProperties entry ``props`` describes. The --peak-* flags then apply on top
    (:func:`_apply_flags`). Without any ceilings the result is :meth:`Ceilings.none` (its first
    note says why and how to give them), never an error, except for an unknown ``--datasheet``
    or a lone peak flag (:func:`_without_base`).
    """
    o = overrides if overrides is not None else CeilingOverrides()
    tflops = _check_flag(o.peak_tflops, "--peak-tflops", "TFLOP/s")
    gbs = _check_flag(o.peak_bandwidth_gbs, "--peak-bandwidth", "GB/s")
    label = device_name.strip() if device_name and device_name.strip() else None
    q = _Query(label, o, memory_bytes, props, run_ceilings, use_cache)
    base = next(found for source in SOURCES if (found := source(q)) is not None)
    if isinstance(base, _NoBase):
        return _without_base(base, tflops, gbs, q.notes)
    return _apply_flags(base, tflops, gbs, q.notes)


def _apply_flags(base: Ceilings, tflops: float | None, gbs: float | None, notes: list[str]) -> Ceilings:
    """``tflops`` (the roof for *every* precision and for CUDA-core work alike) and ``gbs``
    replace the base's numbers and mark the result ``source="user"``."""
    if tflops is None and gbs is None:
        return replace(base, notes=tuple(notes)) if notes != list(base.notes) else base
    changes: dict[str, Any] = {"source": "user"}
    if tflops is not None:
        changes["peaks"] = {p: tera(tflops) for p in PRECISIONS}
        # The flag means one roof for everything, CUDA-core fp64 included.
        changes["fp64_vector"] = None
        notes.append(f"--peak-tflops {tflops:g} used as the roof for every precision")
    if gbs is not None:
        changes["bandwidth"] = giga(gbs)
        changes["levels"] = ()  # the flag means one bandwidth roof for every kernel
        notes.append(f"--peak-bandwidth {gbs:g} GB/s")
    changes["notes"] = tuple(notes)
    return replace(base, **changes)


def _without_base(missing: _NoBase, tflops: float | None, gbs: float | None, notes: list[str]) -> Ceilings:
    """Both flags make the ceilings; one alone, or an unknown --datasheet, is an error; none
    gives :meth:`Ceilings.none`, whose first note says how to give ceilings."""
    if tflops is not None and gbs is not None:
        notes.append(f"user ceilings: {tflops:g} TFLOP/s for every precision, {gbs:g} GB/s")
        return Ceilings(device=missing.label or "unknown", source="user", peaks={p: tera(tflops) for p in PRECISIONS},
                        bandwidth=giga(gbs), notes=tuple(notes))
    if tflops is not None or gbs is not None:
        have, need = (("--peak-tflops", "--peak-bandwidth GB/s") if tflops is not None
                      else ("--peak-bandwidth", "--peak-tflops TFLOP/s"))
        raise DeviceError(f"{missing.what}; {have} alone is not enough without a datasheet: also pass {need} "
                          f"(or --datasheet KEY / --ceilings FILE)")
    if missing.fatal:
        raise DeviceError(f"{missing.what}; {_FLAGS_HINT}")
    return Ceilings.none(missing.label or "unknown", f"no ceilings: {missing.what}; {NO_CEILINGS_NEED}: {_FLAGS_HINT}",
                         tuple(notes))
