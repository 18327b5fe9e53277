"""Rank traces behind fsspec URLs (``s3://bucket/job/``, ``gs://...``, ``hdfs://...``, ``memory://``).

`roofscope merge` accepts a URL wherever it accepts a trace file or a directory of traces:
a URL naming a folder expands to the trace files below it. Reading is done by whoever
analyzes the rank (a local worker process or a Dask worker), so a cluster's workers read
object storage directly and nothing passes through the machine that runs the merge.
fsspec (and the package of the URL's protocol, e.g. s3fs) is imported only for URLs.
"""
from __future__ import annotations

import os
import re
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from roofscope.analyzers import ingest
from roofscope.analyzers.ingest.source import MAX_TRACE_ENV, max_trace_bytes
from roofscope.errors import RoofscopeError
from roofscope.run.layout import NOT_TRACES

_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]+://")
_CHUNK = 1 << 22   # the copy of a file whose size the filesystem cannot tell, 4 MiB at a time


class UrlError(RoofscopeError):
    """A URL that cannot be listed or read."""


def is_url(source: str) -> bool:
    return bool(_URL.match(source))


def is_trace_name(name: str) -> bool:
    """A rank's trace in a folder of them: a file some reader reads, and none of a Run's own files."""
    return ingest.is_trace_name(name) and name not in NOT_TRACES


def _fs(url: str):  # type: ignore[no-untyped-def]
    try:
        from fsspec.core import url_to_fs
    except ImportError:
        raise UrlError(f"{url}: reading URLs needs fsspec: pip install 'roofscope[distributed]'") from None
    try:
        return url_to_fs(url)
    except (ImportError, ValueError) as e:  # an unknown protocol, or its package missing (s3fs, gcsfs)
        raise UrlError(f"{url}: {e}") from None


def local_path(url: str) -> str | None:
    """The local path of a ``file://`` URL, else None."""
    return url[len("file://"):] if url.startswith("file://") else None


def expand(url: str) -> list[str]:
    """The trace files a URL names: itself, or the traces below it when it is a folder (sorted)."""
    fs, root = _fs(url)
    try:
        if not fs.isdir(root):
            if not fs.exists(root):
                raise UrlError(f"{url}: no such file or folder")
            return [url]
        found = sorted(p for p in fs.find(root) if is_trace_name(p.rsplit("/", 1)[-1]))
    except OSError as e:
        raise UrlError(f"{url}: cannot list ({e})") from None
    if not found:
        kinds = ", ".join(f"*{s}" for r in ingest.READERS for s in r.suffixes)
        raise UrlError(f"{url}: no trace files ({kinds}) below it")
    return [fs.unstrip_protocol(p) for p in found]


def read_head(url: str, size: int) -> bytes:
    """The first ``size`` bytes of the file (for its rank), b"" when unreadable."""
    fs, path = _fs(url)
    try:
        with fs.open(path, "rb") as f:
            return f.read(size)
    except OSError:
        return b""


@contextmanager
def fetched(url: str) -> Iterator[Path]:
    """The file behind ``url`` as a local temporary file, removed afterwards."""
    fs, path = _fs(url)
    limit = max_trace_bytes()
    try:
        size = fs.size(path)
    except (OSError, NotImplementedError):   # some fsspec filesystems cannot tell a size: copied within the bound
        size = None
    if size is not None and size > limit:  # refused before it fills the disk
        raise _too_big(url, f"{size:,} bytes")
    fd, tmp = tempfile.mkstemp(prefix="roofscope-rank-", suffix=ingest.trace_suffix(url) or "")
    os.close(fd)
    try:
        try:
            if size is None:
                _copy_within(fs, path, tmp, limit, url)
            else:
                fs.get_file(path, tmp)
        except OSError as e:
            raise UrlError(f"{url}: cannot read ({e})") from None
        yield Path(tmp)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _too_big(url: str, what: str) -> UrlError:
    return UrlError(f"{url}: {what}, more than the limit for a trace; set {MAX_TRACE_ENV} to raise it")


def _copy_within(fs, path: str, dest: str, limit: int, url: str) -> None:  # type: ignore[no-untyped-def]
    """Copy a file of unknown size, refusing it once more than ``limit`` bytes have come."""
    copied = 0
    with fs.open(path, "rb") as src, open(dest, "wb") as out:
        while chunk := src.read(_CHUNK):
            copied += len(chunk)
            if copied > limit:
                raise _too_big(url, f"over {limit:,} bytes")
            out.write(chunk)
