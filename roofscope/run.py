"""The Run: a versioned directory holding everything one profile collected.

Layout (schema 1)::

    run.json          metadata: schema_version, versions, command, host, device, steps, exit status
    trace.json.gz     the Kineto trace
    ceilings.json     ceilings measured where the run was collected (optional)
    telemetry.json.gz NVML samples taken while profiling (optional; collectors/nvml.py)
    summary.json      the analysis summary written at collection time (optional)
    report.html       the HTML report rendered at collection time (optional)
    counters.json.gz  hardware counters joined to the trace's kernels (optional; roofscope/counters.py)
    counters.ncu-rep  Nsight Compute's own report of the counters pass (optional)

Under torchrun each rank writes such a Run to ``OUT/rank-NNNN/`` and ``roofscope merge`` adds
``job.json``, ``summary.json`` and ``report.html`` beside them (collectors/distributed.py).

A Run is written into a temporary sibling directory and renamed into place, so a
reader never sees half a Run; an existing directory is replaced only with
``force``. Analysis needs nothing but these files: a Run re-analyzes on any machine.
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
from typing import TYPE_CHECKING, Any

from .version import __version__
from .errors import OutputExistsError, RoofscopeError, TraceError

if TYPE_CHECKING:  # pragma: no cover
    from .devices import Ceilings

SCHEMA_VERSION = 1
META_FILE = "run.json"
TRACE_FILE = "trace.json.gz"
CEILINGS_FILE = "ceilings.json"
SUMMARY_FILE = "summary.json"
TELEMETRY_FILE = "telemetry.json.gz"
REPORT_FILE = "report.html"


class RunError(RoofscopeError):
    """A directory that is not a readable Run."""


@dataclass(frozen=True)
class Run:
    """A Run directory on disk; read with :func:`load`."""

    path: Path
    meta: dict[str, Any]

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
        """The summary stored at collection time, if any (``analyze`` recomputes it)."""
        p = self.path / SUMMARY_FILE
        return json.loads(p.read_text()) if p.exists() else None


def is_run_dir(path: str | os.PathLike) -> bool:
    return (Path(path) / META_FILE).is_file()


def load(path: str | os.PathLike) -> Run:
    """Open a Run directory; :class:`RunError` when it is not one this version can read."""
    p = Path(path)
    if not p.exists():
        raise RunError(f"{p}: no such directory")
    if not p.is_dir() or not is_run_dir(p):
        raise RunError(f"{p}: not a roofscope Run directory (no {META_FILE})")
    try:
        meta = json.loads((p / META_FILE).read_text())
    except (OSError, ValueError) as e:
        raise RunError(f"{p / META_FILE}: unreadable ({e})") from None
    version = meta.get("schema_version") if isinstance(meta, dict) else None
    if not isinstance(version, int):
        raise RunError(f"{p / META_FILE}: no schema_version; not a roofscope Run")
    if version > SCHEMA_VERSION:
        raise RunError(f"{p}: Run schema {version} is newer than this roofscope reads ({SCHEMA_VERSION});"
                       " upgrade roofscope")
    if not (p / TRACE_FILE).is_file():
        raise TraceError(f"{p}: Run has no {TRACE_FILE}")
    return Run(path=p, meta=meta)


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
    ``files`` maps further plain file names (telemetry, report) to their contents."""
    import gzip

    from .devices import save_ceilings_file

    target = Path(out)
    if target.exists() and not force:
        raise OutputExistsError(f"{target} already exists; pass --force to overwrite it")
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
            if Path(name).name != name or name in (META_FILE, TRACE_FILE):
                raise ValueError(f"invalid Run file name {name!r}")
            (tmp / name).write_bytes(content.encode() if isinstance(content, str) else content)
        if summary is not None:
            from .jsonsafe import json_safe

            (tmp / SUMMARY_FILE).write_text(json.dumps(json_safe(summary), indent=1, allow_nan=False))
        (tmp / META_FILE).write_text(json.dumps({**meta, "schema_version": SCHEMA_VERSION}, indent=1,
                                                default=str))
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
    return Run(path=target, meta=json.loads((target / META_FILE).read_text()))
