"""The Run directory: opening one (typed metadata, one version policy) and writing one whole.

A Run is written into a temporary sibling directory and renamed into place, so a reader
never sees half a Run; an existing directory is replaced only with ``force``. Files added
to a Run later (counters, a re-rendered summary) and run.json updates are each written
atomically. Analysis needs nothing but the Run's files: a Run re-analyzes on any machine.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import sys
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import msgspec

from ..errors import OutputExistsError, RoofscopeError, TraceError
from ..fileio import atomic_write
from ..version import __version__
from . import derived
from .layout import CEILINGS_FILE, META_FILE, SUMMARY_FILE, TELEMETRY_FILE, TRACE_FILE
from .schema import RUN_SCHEMA_VERSION, RunMeta, read_versioned

if TYPE_CHECKING:  # pragma: no cover
    from ..ceilings import Ceilings

SCHEMA_VERSION = RUN_SCHEMA_VERSION


class RunError(RoofscopeError):
    """A directory that is not a readable Run."""


@dataclass(frozen=True)
class Run:
    """A Run directory on disk; read with :func:`load`.

    ``info`` is run.json typed; ``meta`` the same document as written, every field
    included, for the analyzers that read collector-specific ones.
    """

    path: Path
    meta: dict[str, Any]
    info: RunMeta
    # path -> a fresh summary, for a stored one an older analysis wrote (see summary())
    recompute: Callable[[Path], dict[str, Any]] | None = None

    @property
    def trace_path(self) -> Path:
        return self.path / TRACE_FILE

    @property
    def ceilings_path(self) -> Path | None:
        p = self.path / CEILINGS_FILE
        return p if p.exists() else None

    @property
    def telemetry_path(self) -> Path | None:
        p = self.path / TELEMETRY_FILE
        return p if p.exists() else None

    def summary(self) -> dict[str, Any] | None:
        """The Run's analysis summary: the stored one when this roofscope's analysis wrote it,
        else computed afresh from the trace by ``recompute`` (never an outdated file; the Run
        package sits below the analyzers, so :func:`roofscope.load` supplies it); None when
        the Run has none, or a stale one and nothing to recompute it with."""
        stored = derived.read_summary(self.path)
        if stored is None or derived.is_current(stored):
            return derived.unstamped(stored)
        return self.recompute(self.path) if self.recompute is not None else None


def is_run_dir(path: str | os.PathLike) -> bool:
    return (Path(path) / META_FILE).is_file()


def read_meta(path: str | os.PathLike) -> tuple[dict[str, Any], RunMeta]:
    """A Run directory's run.json, as written and typed; :class:`RunError` when unreadable,
    of a newer version, or malformed."""
    p = Path(path) / META_FILE
    try:
        data = p.read_bytes()
    except OSError as e:
        raise RunError(f"{p}: unreadable ({e})") from None
    try:
        raw = msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError) as e:  # RecursionError: JSON nested 10^4 deep
        raise RunError(f"{p}: unreadable ({e})") from None
    info = read_versioned(raw, RunMeta, key="schema_version", current=RUN_SCHEMA_VERSION, what="Run",
                          where=str(p), error=RunError)
    return raw, info


def load(path: str | os.PathLike, recompute: Callable[[Path], dict[str, Any]] | None = None) -> Run:
    """Open a Run directory; :class:`RunError` when it is not one this version can read.
    ``recompute`` gives :meth:`Run.summary` a fresh summary when the stored one is stale."""
    p = Path(path)
    if not p.exists():
        raise RunError(f"{p}: no such directory")
    if not p.is_dir() or not is_run_dir(p):
        raise RunError(f"{p}: not a roofscope Run directory (no {META_FILE})")
    meta, info = read_meta(p)
    if not (p / TRACE_FILE).is_file():
        raise TraceError(f"{p}: Run has no {TRACE_FILE}")
    return Run(path=p, meta=meta, info=info, recompute=recompute)


def update_meta(run: Run, **fields: Any) -> Run:
    """Set top-level fields of the Run's run.json (Structs as their JSON), replacing the file
    atomically so that a reader sees the old or the new document, never half of one."""
    meta = {**run.meta, **{k: msgspec.to_builtins(v) for k, v in fields.items()}}
    info = msgspec.convert(meta, RunMeta)   # never write a run.json that load() would refuse
    atomic_write(run.path / META_FILE, json.dumps(meta, indent=1, default=str), force=True)
    return Run(path=run.path, meta=meta, info=info)


def environment() -> dict[str, Any]:
    """Software and host facts worth keeping with a Run (no environment variables: they leak)."""
    env: dict[str, Any] = {
        "roofscope": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        env["torch"] = torch.__version__
        env["cuda"] = getattr(torch.version, "cuda", None)
    return env


def new_meta(command: list[str], **fields: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": list(command),
        "cwd": os.getcwd(),
        "environment": environment(),
    }
    meta.update(fields)
    return meta


def write_run(out: str | os.PathLike, *, meta: dict[str, Any], trace: str | os.PathLike | bytes,
              ceilings: "Ceilings | None" = None, summary: dict[str, Any] | None = None,
              files: dict[str, bytes | str] | None = None, force: bool = False) -> Run:
    """Write a Run to ``out`` atomically. ``trace`` is a file (gzipped here if it is not) or bytes;
    ``files`` maps further plain file names (telemetry, report) to their contents; ``summary``
    is stored stamped with the analysis version that computed it."""
    import gzip

    from ..ceilings import save_ceilings_file

    target = Path(out)
    if target.exists() and not force:
        raise OutputExistsError(f"{target} already exists; pass --force to overwrite it")
    meta = {**meta, "schema_version": SCHEMA_VERSION}
    text = json.dumps(meta, indent=1, default=str)
    info = read_versioned(json.loads(text), RunMeta, key="schema_version", current=SCHEMA_VERSION, what="Run",
                          where=str(target / META_FILE), error=RunError)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        data = trace if isinstance(trace, bytes) else Path(trace).read_bytes()
        if data[:2] != b"\x1f\x8b":
            data = gzip.compress(data, compresslevel=6)
        (tmp / TRACE_FILE).write_bytes(data)
        if ceilings is not None:
            save_ceilings_file(ceilings, tmp / CEILINGS_FILE)
        for name, content in (files or {}).items():
            if Path(name).name != name or name in (META_FILE, TRACE_FILE, SUMMARY_FILE):
                raise ValueError(f"invalid Run file name {name!r}")
            (tmp / name).write_bytes(content.encode() if isinstance(content, str) else content)
        if summary is not None:
            (tmp / SUMMARY_FILE).write_text(derived.summary_text(summary))
        (tmp / META_FILE).write_text(text)
        os.chmod(tmp, 0o755)
        if target.exists():
            # Move the old Run aside first so a failure never leaves neither.
            old = target.with_name(f".{target.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Run(path=target, meta=json.loads(text), info=info)
