"""How the ceilings of a run are resolved: from a file, a --datasheet override, the ceilings
`roofscope microbench` cached, the trace's device name (via roofscope.hardware.datasheets) and --peak-*
flags. Ceilings themselves and their file format are in roofscope.hardware.ceilings.

Everything here is plain Python (no torch) because it runs on every command,
including ones that only read a trace on a laptop.
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace
from typing import Any, Mapping

from roofscope.errors import DeviceError
from roofscope.hardware.ceilings import (SCHEMA_VERSION, Ceilings, positive_number, ceilings_payload, load_ceilings_file,
                       normalize_dtype, save_ceilings_file)
from roofscope.hardware.datasheets import (PRECISIONS, DeviceSpec, describe_props, giga, identify, known_devices, known_keys,
                         lookup, match_device, tera)
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
# Resolution: file > --device > cached measurement > trace name; --peak-* flags on top
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


def resolve_ceilings(
    device_name: str | None,
    *,
    memory_bytes: int | None = None,
    props: Mapping[str, Any] | None = None,
    device: str | None = None,
    peak_tflops: float | None = None,
    peak_bandwidth_gbs: float | None = None,
    ceilings_file: str | os.PathLike[str] | None = None,
    use_cache: bool = True,
) -> Ceilings:
    """Pick the ceilings for a run.

    Precedence for the base: ``ceilings_file`` > ``device`` (``--device``) >
    ceilings cached by ``roofscope microbench`` for ``device_name`` (``use_cache``, and
    ``ROOFSCOPE_NO_CACHE`` unset; see :func:`_cached`) > the datasheet of ``device_name``
    (from the trace, disambiguated by ``memory_bytes``), else the row its deviceProperties entry
    ``props`` describes (compute capability, SMs, memory: traces with an empty or generic name).
    ``peak_tflops`` (TFLOP/s, used as the roof for *every* precision and for
    CUDA-core work alike) and ``peak_bandwidth_gbs`` (GB/s) then replace the
    corresponding numbers and mark the result ``source="user"``. Without a base,
    both flags are required; without any, the result is :meth:`Ceilings.none` (its first note
    says why and how to give ceilings), never an error, except for an unknown ``--device``.
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
            notes.append(f"--datasheet {device!r} ignored: --ceilings takes precedence")
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
                notes.append(f"trace device {label!r} overridden by --datasheet {device!r}")
    elif label:
        cached = _cached(label, memory_bytes) if use_cache else None
        if cached is not None:
            base = cached
            notes.extend(base.notes)
        elif not _is_cpu(label):
            spec = match_device(label, memory_bytes)
            if spec is None and props:
                spec = identify(props)
                if spec is not None:
                    notes.append(f"device {label!r} identified from its properties ({describe_props(props)})"
                                 f" as {spec.name}")
            if spec is not None:
                base = Ceilings.from_spec(spec)
    elif props:
        spec = identify(props)
        if spec is not None:
            base = Ceilings.from_spec(spec)
            label = spec.name
            notes.append(f"the trace names no device; identified from its properties ({describe_props(props)})"
                         f" as {spec.name}")

    if base is None:
        if tflops is not None and gbs is not None:
            notes.append(f"user ceilings: {tflops:g} TFLOP/s for every precision, {gbs:g} GB/s")
            return Ceilings(
                device=label or "unknown",
                source="user",
                peaks={p: tera(tflops) for p in PRECISIONS},
                bandwidth=giga(gbs),
                notes=tuple(notes),
            )
        if unknown_override:
            what = f"unknown --datasheet {device!r}"
        elif _is_cpu(label):
            what = ("CPU-only trace: roofscope has no CPU datasheet and no cached measurement of this CPU "
                    "(`roofscope microbench --device cpu` makes one)")
        elif label:
            what = f"unknown device {label!r}: no datasheet ceilings"
            if props and describe_props(props):
                what += f" and its properties ({describe_props(props)}) match no datasheet row"
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
                f"(or --datasheet KEY / --ceilings FILE)"
            )
        if unknown_override:
            raise DeviceError(f"{what}; {_FLAGS_HINT}")
        return Ceilings.none(label or "unknown", f"no ceilings: {what}; {NO_CEILINGS_NEED}: {_FLAGS_HINT}",
                             tuple(notes))

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
