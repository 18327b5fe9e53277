"""Safe file I/O: never clobber without --force, never leave a half-written file, read
(possibly gzipped) inputs and the user's own Python files (``--formulas``, ``--fix-module``) with
one-line errors; and the garbage collector paused while a large input is read and analyzed."""
from __future__ import annotations

import contextlib
import gc
import gzip
import importlib
import importlib.util
import os
import sys
import tempfile
import zlib
from typing import Iterator
from pathlib import Path

from roofscope.errors import OutputExistsError, RoofscopeError


def check_writable(path: str | os.PathLike, force: bool) -> Path:
    """Fail early, before any work, when ``path`` exists and ``force`` is off."""
    p = Path(path)
    if p.exists() and not force:
        raise OutputExistsError(f"{p} already exists; pass --force to overwrite it")
    if p.is_dir():
        raise RoofscopeError(f"{p} is a directory, expected a file path")
    return p


def atomic_write(path: str | os.PathLike, data: str | bytes, force: bool = False) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    p = check_writable(path, force)
    parent = p.parent if str(p.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=parent)
    except OSError as e:
        raise RoofscopeError(f"cannot write {p}: {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp creates 0600; give the file the mode a plain open() would have.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def read_maybe_gzip(path: str | os.PathLike, error: type[RoofscopeError], directory_hint: str) -> bytes:
    """A file's bytes, gunzipped when it starts with the gzip magic; any problem is ``error``
    with a one-line message (``directory_hint`` says what the path should have been)."""
    p = Path(path)
    if not p.exists():
        raise error(f"{p}: no such file")
    if p.is_dir():
        raise error(f"{p}: is a directory, {directory_hint}")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise error(f"{p}: cannot read: {e.strerror}") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as e:
            raise error(f"{p}: truncated or corrupt gzip ({e})") from None
    return data


def import_source(source: str, option: str, prefix: str) -> None:
    """Import ``source``, a Python file (as module ``<prefix><n>``) or an importable module's name,
    for the registrations it makes; whatever goes wrong is a one-line error naming ``option``."""
    path = Path(source)
    try:
        if source.endswith(".py") or path.is_file():
            if not path.is_file():
                raise RoofscopeError(f"{option} {source}: no such file")
            spec = importlib.util.spec_from_file_location(f"{prefix}{len(sys.modules)}", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
        else:
            importlib.import_module(source)
    except RoofscopeError:
        raise
    except (Exception, SystemExit) as e:  # the user's module failed or exited: one line, never a silent exit
        raise RoofscopeError(f"{option} {source}: {import_failure(e)}") from None


def import_failure(e: BaseException) -> str:
    """What went wrong importing a user's module, in a few words."""
    if isinstance(e, SystemExit):
        return f"called sys.exit({e.code!r}) while being imported"
    return f"{type(e).__name__}: {e}"


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off inside, and back on after where it was on. Reading a trace,
    unpickling its columns and importing the analysis allocate millions of short-lived containers; each
    full collection walks every live object to find the few cycles pandas makes, freed once it resumes."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
