"""The Run directory: opening one (typed metadata, one version policy) and writing one whole.

A Run's files are staged in a hidden directory inside it and moved into place with run.json last, so
a reader never sees half a Run; an existing Run is replaced only with ``force``, and then only the files
roofscope wrote (manifest.py), never the user's kept beside them. Files added to a Run later (counters, a
re-rendered summary) and run.json updates are each written atomically. Analysis needs nothing but the
Run's files: a Run re-analyzes on any machine.
"""
from __future__ import annotations

import errno
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
from typing import TYPE_CHECKING, Any, Callable, Mapping

import msgspec

from roofscope.errors import OutputExistsError, RoofscopeError, TraceError
from roofscope.fileio import atomic_write
from roofscope.run import derived, manifest
from roofscope.run.layout import (CEILINGS_FILE, HOUSEKEEPING_PREFIX, META_FILE, RECORDING_PREFIX, SUMMARY_FILE,
                                  TELEMETRY_FILE, TRACE_FILE)
from roofscope.run.schema import RUN_SCHEMA_VERSION, RunMeta, read_versioned
from roofscope.version import __version__

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.hardware.ceilings import Ceilings

SCHEMA_VERSION = RUN_SCHEMA_VERSION


class RunError(RoofscopeError):
    """A directory that is not a readable Run."""


class OutputBusyError(OutputExistsError):
    """Another live roofscope process has claimed the output directory."""


# Marks a Run directory as being written, from before the script starts until its Run is complete.
CLAIM_FILE = HOUSEKEEPING_PREFIX + "claim"
STAGING_PREFIX = HOUSEKEEPING_PREFIX + "staging-"


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


def typed_meta(meta: Mapping[str, Any], where: str = "run_meta") -> RunMeta:
    """run.json fields given by a caller (``roofscope.analyze(trace, run_meta={...})``), typed as
    :func:`read_meta` types a Run's: the current version when they name none; :class:`RunError`
    when a field has the wrong type."""
    if not isinstance(meta, Mapping):
        raise RunError(f"{where}: expected run.json's fields as a dict, got {type(meta).__name__}")
    return read_versioned({"schema_version": RUN_SCHEMA_VERSION, **meta}, RunMeta, key="schema_version",
                          current=RUN_SCHEMA_VERSION, what="Run", where=where, error=RunError)


def load(path: str | os.PathLike, recompute: Callable[[Path], dict[str, Any]] | None = None) -> Run:
    """Open a Run directory; :class:`RunError` when it is not one this version can read.
    ``recompute`` gives :meth:`Run.summary` a fresh summary when the stored one is stale."""
    p = Path(path)
    if not p.exists():
        raise RunError(f"{p}: no such directory")
    if p.is_dir() and not is_run_dir(p) and orphaned_traces(p):
        raise RunError(f"{p}: no Run was written here: {_orphans_text(p)}")
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


# -- claiming an output directory before the profile starts ----------------------------------------

@dataclass(frozen=True)
class Claim:
    """An output directory reserved by this process (its ``CLAIM_FILE`` holds ``token``): a second
    roofscope refuses it before running its script, and a write failure shows before the script runs."""

    path: Path
    token: str
    pid: int
    created: bool          # the directory did not exist before: released empty, it is removed

    def held(self) -> bool:
        """Whether the directory still carries this claim (nothing replaced it while the program ran)."""
        try:
            return (self.path / CLAIM_FILE).read_text() == self.token
        except OSError:
            return False

    def release(self) -> None:
        """Drop the claim marker (the Run, if written, stays). A forked child never drops its parent's."""
        if os.getpid() != self.pid:
            return
        try:
            if self.held():
                (self.path / CLAIM_FILE).unlink()
            if self.created:
                self.path.rmdir()  # only when nothing was written into it
        except OSError:
            pass


def _holder(path: Path) -> dict[str, Any] | None:
    """Who claims ``path`` (pid, host), or None when no claim or an unreadable one."""
    try:
        holder = json.loads((path / CLAIM_FILE).read_text())
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None


def _alive(holder: dict[str, Any]) -> bool:
    pid = holder.get("pid")
    if holder.get("host") != socket.gethostname() or not isinstance(pid, int):
        return True  # another machine's process (a shared filesystem) cannot be checked: assume it runs
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _is_our_run(path: Path) -> bool:
    """A directory holding a run.json that roofscope wrote (not any file of that name)."""
    try:
        meta = json.loads((path / META_FILE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and "schema_version" in meta and isinstance(meta.get("environment"), dict)


def orphaned_traces(path: Path) -> list[Path]:
    """Traces a profile recorded in ``path`` that no Run was written from: its process died (killed, crashed)
    before it could write one, or could write it nowhere."""
    # A recording holds Kineto's exports (*.json), a Run being staged its trace.json.gz beside run.json.
    found = [f for d in sorted(path.glob(RECORDING_PREFIX + "*")) for f in sorted(d.glob("*.json")) if f.is_file()]
    return found + [f for f in sorted(path.glob(f"{STAGING_PREFIX}*/{TRACE_FILE}")) if f.is_file()]


def _orphans_text(path: Path) -> str:
    traces = orphaned_traces(path)
    return (f"a profile recorded {traces[0]}{f' (and {len(traces) - 1} more)' if len(traces) > 1 else ''} but its"
            f" process ended before writing a Run from it; `roofscope analyze {traces[0]}` reads it")


def _drop_empty_leftovers(path: Path) -> None:
    """A dead profile's recording or staging directory holding no trace: nothing of value, removed."""
    kept = {f.parent for f in orphaned_traces(path)}
    for d in list(path.glob(RECORDING_PREFIX + "*")) + list(path.glob(STAGING_PREFIX + "*")):
        if d.is_dir() and d not in kept:
            shutil.rmtree(d, ignore_errors=True)


def _users(path: Path) -> list[str]:
    """What ``path`` holds besides roofscope's bookkeeping (the claim, the manifest, recordings)."""
    return [e for e in os.listdir(path) if not e.startswith(HOUSEKEEPING_PREFIX)]


def check_replaceable(target: Path, force: bool) -> None:
    """Refuse an existing ``target`` unless ``force`` and it is a Run (or holds roofscope's files) or an empty
    directory: ``--force`` must never write over a folder of the user's own files. A trace a dead profile left
    there is named, and kept."""
    if os.path.realpath(target) in _cwd_and_parents():
        raise OutputExistsError(f"{target} is the current directory or one above it; choose a new directory for"
                                " the Run, e.g. -o runs/NAME")
    if not target.exists():
        return
    if not target.is_dir():
        raise OutputExistsError(f"{target} exists and is not a directory; choose another output directory")
    if not force:
        orphans = f" and {_orphans_text(target)}" if orphaned_traces(target) else ""
        raise OutputExistsError(f"{target} already exists{orphans}; pass --force to overwrite it")
    if _users(target) and not (_is_our_run(target) or manifest.listed(target) is not None):
        raise OutputExistsError(f"{target} is not a roofscope Run (no {META_FILE} of ours) and not empty: --force"
                                " replaces only a Run or an empty directory; choose another output directory")


def _cwd_and_parents() -> set[str]:
    cwd = Path(os.path.realpath(os.getcwd()))
    return {str(cwd), *map(str, cwd.parents)}


def claim_output(out: str | os.PathLike, force: bool) -> Claim:
    """Reserve ``out`` for this process's Run before the script runs: created with a claim marker
    (``os.mkdir`` and ``O_EXCL`` are atomic, so of two runs into one directory one wins), or, when it
    exists, replaceable under ``force`` (see :func:`check_replaceable`). A claim whose process is gone
    is taken over; a live one is refused. Unwritable places fail here, before any work, in one line."""
    target = Path(out)
    token = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                        "since": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    try:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except FileExistsError:   # a file where one of the path's folders should be
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(target.parent)) from None
        try:
            os.mkdir(target)
            created = True
        except FileExistsError:
            created = False
            holder = _holder(target)
            if holder is not None:
                if _alive(holder):
                    raise OutputBusyError(f"{target} is being written by another roofscope (pid {holder.get('pid')}"
                                          f" on {holder.get('host')}); choose another output directory") from None
                # A dead run's claim: taken over, and with it an empty directory that run left.
                (target / CLAIM_FILE).unlink(missing_ok=True)
                _drop_empty_leftovers(target)
                force = force or not (_users(target) or orphaned_traces(target))
            check_replaceable(target, force)
        try:
            fd = os.open(target / CLAIM_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            raise OutputBusyError(f"{target} is being claimed by another roofscope at this moment;"
                                  " choose another output directory") from None
        with os.fdopen(fd, "w") as f:
            f.write(token)
    except OSError as e:
        raise RoofscopeError(f"cannot write the Run to {target}: {e.strerror or e}"
                             f"{f' ({e.filename})' if e.filename and str(e.filename) != str(target) else ''};"
                             " choose a writable output directory (-o)") from None
    return Claim(path=target, token=token, pid=os.getpid(), created=created)


def write_run(out: str | os.PathLike, *, meta: dict[str, Any], trace: str | os.PathLike | bytes,
              ceilings: "Ceilings | None" = None, summary: dict[str, Any] | None = None,
              files: dict[str, bytes | str] | None = None, force: bool = False, claim: Claim | None = None) -> Run:
    """Write a Run to ``out`` atomically. ``trace`` is a file (gzipped here if it is not) or bytes;
    ``files`` maps further plain file names (telemetry, report) to their contents; ``summary``
    is stored stamped with the analysis version that computed it. ``claim`` (``out``'s, from
    :func:`claim_output`) lets the Run replace the claimed directory's Run; without it only ``force``
    replaces, and only a Run or an empty directory. Only the earlier Run's own files are replaced."""
    import gzip

    # Imported here, not at the top: hardware/ceilings.py imports run/schema.py, and so this package's
    # __init__, which imports this module (a cycle at load when ceilings.py is imported first).
    from roofscope.hardware.ceilings import save_ceilings_file

    target = Path(out)
    if claim is None or claim.path != target or not claim.held():
        check_replaceable(target, force)
    meta = {**meta, "schema_version": SCHEMA_VERSION}
    text = json.dumps(meta, indent=1, default=str)
    info = read_versioned(json.loads(text), RunMeta, key="schema_version", current=SCHEMA_VERSION, what="Run",
                          where=str(target / META_FILE), error=RunError)
    created = not target.exists()
    target.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=target))
    try:
        data = trace if isinstance(trace, bytes) else Path(trace).read_bytes()
        if data[:2] != b"\x1f\x8b":
            data = gzip.compress(data, compresslevel=6)
        (tmp / TRACE_FILE).write_bytes(data)
        if ceilings is not None:
            save_ceilings_file(ceilings, tmp / CEILINGS_FILE)
        for name, content in (files or {}).items():
            if Path(name).name != name or name in (META_FILE, TRACE_FILE, SUMMARY_FILE) or \
                    name.startswith(HOUSEKEEPING_PREFIX):
                raise ValueError(f"invalid Run file name {name!r}")
            (tmp / name).write_bytes(content.encode() if isinstance(content, str) else content)
        if summary is not None:
            (tmp / SUMMARY_FILE).write_text(derived.summary_text(summary))
        (tmp / META_FILE).write_text(text)
        manifest.replace_files(target, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if created:
            shutil.rmtree(target, ignore_errors=True)
        raise
    return Run(path=target, meta=json.loads(text), info=info)
