"""Which files of a Run directory roofscope wrote: the manifest (``.roofscope-files``).

``--force`` replaces a Run's own files and never a file of the user's kept beside them (notes, data): it
removes what the manifest lists. Every writer of a Run file lists the name first and writes the file after
(:func:`add_files`, :func:`record`), so a crash between the two leaves a listed file missing, never a file of
ours unlisted. A Run without a manifest (written before there was one, or copied without its hidden files)
is taken to hold roofscope's files under the layout's names (``layout.RUN_FILES`` and the graph captures).
"""
from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from roofscope.errors import RoofscopeError
from roofscope.fileio import atomic_write
from roofscope.run.layout import CAPTURE_GLOB, MANIFEST_FILE, META_FILE, RUN_FILES


def listed(run_dir: str | os.PathLike) -> set[str] | None:
    """The names the manifest lists; None when the directory has no readable manifest."""
    try:
        names = json.loads((Path(run_dir) / MANIFEST_FILE).read_text()).get("files")
    except (OSError, ValueError, AttributeError):
        return None
    return {n for n in names if isinstance(n, str) and Path(n).name == n} if isinstance(names, list) else None


def _write(run_dir: Path, names: Iterable[str]) -> None:
    atomic_write(run_dir / MANIFEST_FILE, json.dumps({"files": sorted(set(names))}, indent=1) + "\n", force=True)


def ours(run_dir: str | os.PathLike) -> set[str]:
    """The files of ``run_dir`` that roofscope wrote and that are there now."""
    d = Path(run_dir)
    names = listed(d)
    if names is None:
        names = set(RUN_FILES) | {p.name for p in d.glob(CAPTURE_GLOB)}
    return {n for n in names if (d / n).is_file() or (d / n).is_symlink()}


def record(run_dir: str | os.PathLike, names: Iterable[str]) -> None:
    """List ``names`` in the manifest, before they are written (a Run without a manifest gets one that
    also lists its layout files)."""
    d = Path(run_dir)
    before = listed(d)
    if before is None:
        before = ours(d)
    if not set(names) <= before:
        _write(d, before | set(names))


def add_files(run_dir: str | os.PathLike, files: Mapping[str, bytes | str]) -> None:
    """Write ``files`` (name → content) into the Run, each atomically, all listed first."""
    record(run_dir, files)
    for name, content in files.items():
        atomic_write(Path(run_dir) / name, content, force=True)


def replace_files(run_dir: Path, staged: Path) -> None:
    """Make the files in ``staged`` (a directory inside ``run_dir``) the Run's: the earlier Run's own files
    are removed, the user's stay, ``run.json`` comes last (before it a reader sees no Run, never a mixed one)."""
    new = {p.name for p in staged.iterdir()}
    old = ours(run_dir)
    _write(run_dir, old | new)      # every file of ours is listed at every moment of the swap
    for name in [META_FILE, *sorted(old - new - {META_FILE})]:
        (run_dir / name).unlink(missing_ok=True)
    for name in sorted(new - {META_FILE}):
        os.replace(staged / name, run_dir / name)
    if META_FILE in new:
        os.replace(staged / META_FILE, run_dir / META_FILE)
    shutil.rmtree(staged, ignore_errors=True)
    try:
        _write(run_dir, new)
    except (OSError, RoofscopeError):
        pass   # the Run is whole: the manifest still lists every file of it, and some that are gone
