"""The measured-ceilings cache: one schema-1 ceilings file per device, driver and torch version.

`roofscope microbench` saves here; analyses without explicit ceilings look here before
falling back to the datasheet, so a machine measured once gets measured roofs from then on.

Layout: ``$ROOFSCOPE_CACHE_DIR/ceilings/`` (else ``$XDG_CACHE_HOME/roofscope/ceilings/``,
else ``~/.cache/roofscope/ceilings/``), one ``<slug>-<hash>.json`` per key. Each file is a
ceilings file (``roofscope analyze --ceilings`` reads it as is) plus a ``"cache"`` object with
the key fields. Plain Python, no torch: every analysis may consult it.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from roofscope.errors import RoofscopeError
from roofscope.fileio import atomic_write
from roofscope.hardware.ceilings import Ceilings, ceilings_payload, implausible, load_ceilings_file
from roofscope.microbench.names import DATA, TENSOR_CORE, matmul_name

__all__ = ["CacheEntry", "cache_dir", "enabled", "cache_key", "save", "entries", "lookup", "random_operands_only",
           "implausible_text", "note_implausible", "implausible_attempt"]

_KEY_FIELDS = ("device", "driver", "torch", "threads")


def cache_dir() -> Path:
    """Where cached ceilings live (the folder need not exist yet)."""
    root = os.environ.get("ROOFSCOPE_CACHE_DIR")
    if root:
        return Path(root).expanduser() / "ceilings"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "roofscope" / "ceilings"


def enabled() -> bool:
    """False when ``ROOFSCOPE_NO_CACHE`` is set to anything but ''/0 (tests, reproducible CI)."""
    return os.environ.get("ROOFSCOPE_NO_CACHE", "").strip().lower() in ("", "0", "false", "no")


def key_fields(c: Ceilings | Mapping[str, Any]) -> dict[str, Any]:
    """device, driver, torch and (CPU only: thread count changes the CPU roofs) threads."""
    if isinstance(c, Ceilings):
        env = c.env
        fields = {"device": c.device, "driver": env.get("driver"), "torch": env.get("torch"),
                  "threads": env.get("threads")}
    else:
        fields = {k: c.get(k) for k in _KEY_FIELDS}
    return {k: (None if v is None else (int(v) if k == "threads" else str(v))) for k, v in fields.items()}


def cache_key(c: Ceilings | Mapping[str, Any]) -> str:
    f = key_fields(c)
    return "|".join(f"{k}={'' if f[k] is None else f[k]}" for k in _KEY_FIELDS)


def _filename(key: str, device: str) -> str:
    # A readable slug for `ls`, plus a hash so slugs that collapse to the same text stay apart.
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")[:60] or "device"
    return f"{slug}-{hashlib.sha1(key.encode()).hexdigest()[:10]}.json"


def save(ceilings: Ceilings) -> Path:
    """Store ``ceilings`` under its key (replacing an older measurement of the same key).

    Refused with a RoofscopeError: an implausible set (``ceilings.implausible``: an L2 slower than
    DRAM, a matmul below 1% of the peak), which would be every later analysis's roof (when and why are
    remembered: :func:`implausible_attempt`); and a noisy one
    (``env["noisy"]``: repetitions that disagree, see microbench/cpu.py) where a quiet measurement
    of the same key is cached. A plausible noisy set is kept otherwise, with its "noisy:" note,
    so that `roofscope run` on a busy machine measures once instead of on every run."""
    problems = implausible(ceilings)
    if problems:
        note_implausible(ceilings.device, implausible_text(ceilings, problems))
        raise RoofscopeError(f"not cached: implausible ceilings ({'; '.join(problems)}): other work held the"
                             " device while measuring; measure again on a quiet machine")
    fields = key_fields(ceilings)
    key = cache_key(fields)
    path = cache_dir() / _filename(key, ceilings.device)
    noisy = list((ceilings.env or {}).get("noisy") or [])
    if noisy and path.is_file():
        try:
            old: CacheEntry | None = _read(path)
        except (RoofscopeError, OSError, ValueError, TypeError, KeyError):  # unreadable: replace it
            old = None
        if old is not None and not old.ceilings.env.get("noisy"):
            raise RoofscopeError(f"not cached: noisy measurement of {', '.join(noisy)} (other work shared the"
                                 f" device); the quiet measurement of {old.measured_at or 'an unknown date'}"
                                 f" in {path} is kept")
    payload = ceilings_payload(ceilings)
    payload["cache"] = {"key": key, **fields}
    try:
        text = json.dumps(payload, indent=2, allow_nan=False) + "\n"
    except (TypeError, ValueError) as e:
        raise RoofscopeError(f"cannot cache ceilings for {ceilings.device!r}: {e}") from None
    written = atomic_write(path, text, force=True)
    try:
        _attempt_path(ceilings.device).unlink(missing_ok=True)  # a plausible set ends the wait
    except OSError:
        pass
    return written


def _attempt_path(device: str) -> Path:
    return cache_dir() / "implausible" / _filename(device, device)


def implausible_text(c: Ceilings, problems: list[str]) -> str:
    """The one sentence that says a measurement was implausible, and why (notes, the remembered attempt)."""
    return (f"the measurement of {c.measured_at or 'an unknown date'} was implausible ({'; '.join(problems)}):"
            " other work held the device, not cached")


def note_implausible(device: str, why: str) -> None:
    """Remember that a measurement of ``device`` was implausible (no ceilings kept: only when and why),
    so that `roofscope run` does not measure again on every run of a busy machine."""
    try:
        atomic_write(_attempt_path(device), json.dumps({"device": device, "why": why}) + "\n", force=True)
    except (RoofscopeError, OSError):  # a read-only cache: the next run measures again
        pass


def implausible_attempt(device: str, within_s: float) -> str | None:
    """Why the last measurement of ``device`` was implausible, if that was less than ``within_s`` ago."""
    import time

    path = _attempt_path(device)
    try:
        if time.time() - path.stat().st_mtime >= within_s:
            return None
        return str(json.loads(path.read_text(encoding="utf-8"))["why"])
    except (OSError, ValueError, TypeError, KeyError):
        return None


@dataclass(frozen=True)
class CacheEntry:
    path: Path
    key: str
    device: str
    driver: str | None
    torch: str | None
    threads: int | None
    measured_at: str
    ceilings: Ceilings


def _read(path: Path) -> CacheEntry:
    c = load_ceilings_file(path)  # validates; raises DeviceError on any problem
    raw = json.loads(path.read_text(encoding="utf-8"))
    meta = raw.get("cache")
    fields = key_fields(meta if isinstance(meta, dict) else c)
    return CacheEntry(path=path, key=cache_key(fields), device=c.device, driver=fields["driver"],
                      torch=fields["torch"], threads=fields["threads"],
                      measured_at=c.measured_at or "", ceilings=c)


def entries(skipped: list[str] | None = None) -> list[CacheEntry]:
    """Every readable cache entry, newest first; unreadable files are reported in ``skipped``."""
    d = cache_dir()
    if not d.is_dir():
        return []
    out: list[CacheEntry] = []
    for p in sorted(d.glob("*.json")):
        try:
            out.append(_read(p))
        except (RoofscopeError, OSError, ValueError, TypeError, KeyError) as e:
            # A corrupt or foreign file must not break every analysis on this machine.
            if skipped is not None:
                skipped.append(f"skipped unreadable cache file {p}: {e}")
    out.sort(key=lambda e: e.measured_at, reverse=True)
    return out


def _same(a: str, b: str) -> bool:
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


def lookup(device_name: str, driver: str | None = None, torch_version: str | None = None, *,
           threads: int | None = None, exact: bool = False) -> Ceilings | None:
    """Cached ceilings measured on ``device_name`` (case/space-insensitive), or None.

    Among the entries for that name, the newest one whose driver, torch version and thread
    count equal the given ones (None: not compared) wins; failing that, the newest entry for
    the name, with the mismatches noted (``exact=True`` returns None instead).
    Implausible entries (``ceilings.implausible``) are skipped, with a note.
    The returned ceilings carry a note saying when and where they were measured.
    """
    skipped: list[str] = []
    found = [e for e in entries(skipped) if _same(e.device, device_name)]
    # Sets cached before the physics check (an L2 copy 200x slower than DRAM) are never a roof.
    for e in list(found):
        problems = implausible(e.ceilings)
        if problems:
            skipped.append(f"skipped implausible cached ceilings {e.path} ({'; '.join(problems)})")
            found.remove(e)
    if not found:
        return None
    wanted = {"driver": driver, "torch": torch_version, "threads": threads}

    def mismatches(e: CacheEntry) -> list[str]:
        return [f"cached {k} {getattr(e, k)!s} differs from the current {v!s}"
                for k, v in wanted.items() if v is not None and getattr(e, k) != v]

    matching = [e for e in found if not mismatches(e)]
    if not matching and exact:
        return None
    pick = (matching or found)[0]
    when = pick.measured_at or "an unknown date"
    notes = [*pick.ceilings.notes, f"using ceilings measured on {when} from {pick.path}",
             *mismatches(pick), *random_operands_only(pick.ceilings), *skipped]
    return replace(pick.ceilings, notes=tuple(notes))


def random_operands_only(c: Ceilings) -> list[str]:
    """A note when GPU ceilings come from a microbenchmark that timed tensor-core matmuls on random
    operands only (roofscope before the zero-operand matmuls): GEMMs on real, low-entropy data
    beat those peaks by up to 4% (docs/microbench.md)."""
    names = {str(r.get("name", "")) for r in c.env.get("results") or () if isinstance(r, Mapping)}
    tensor_core = names & {matmul_name(p, data) for p in TENSOR_CORE for data in DATA}
    if not tensor_core or tensor_core & {matmul_name(p, "zeros") for p in TENSOR_CORE}:
        return []
    return ["compute peaks timed on random operands only: GEMMs on real data can beat them;"
            " re-run `roofscope microbench` for zero-operand peaks"]
