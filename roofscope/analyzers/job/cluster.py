"""Per-rank analysis on a Dask distributed cluster (`roofscope merge --scheduler ADDRESS`).

A job of thousands of ranks outgrows one machine's cores; its per-rank analyses are
independent, so they run as one Dask task each on an existing cluster, and only the compact
:class:`~.ranks.RankResult` of each (tens of KB) comes back to the merging process.

Why Dask distributed (not Ray): it is pure Python (``pip install distributed`` takes seconds
and pulls no compiled runtime), HPC sites already run it under SLURM/PBS (dask-jobqueue) and
Kubernetes, its workers read fsspec URLs natively (rank traces in object storage are read by
the worker that analyzes them), and a ``LocalCluster`` gives CI a real scheduler with worker
processes. Workers need roofscope installed at the same version; local paths must be visible
to them (a shared filesystem), URLs need only the protocol's package (s3fs, gcsfs).

``scheduler`` is a scheduler address (``tcp://host:8786``) or ``local`` / ``local:N`` for a
cluster of N worker processes on this machine (default: one per CPU) that lives for the merge.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Protocol, TypeVar

from roofscope.errors import RoofscopeError

CONNECT_TIMEOUT_S = 30


class ClusterError(RoofscopeError):
    """The Dask cluster cannot be reached or lost the work."""


def _client(scheduler: str, jobs: int | None) -> Any:
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ClusterError("--scheduler needs Dask distributed: pip install 'roofscope[distributed]'") from None
    if scheduler == "local" or scheduler.startswith("local:"):
        n = int(scheduler[6:]) if scheduler[6:].isdigit() else (jobs or os.cpu_count() or 1)
        # Dask's nanny writes its worker environment (OMP_NUM_THREADS=1, ...) into this process's
        # os.environ so the workers inherit it; a merge called in-process must not leave the
        # caller's torch and subprocesses single-threaded, so the environment is put back.
        saved = dict(os.environ)
        try:
            # One single-threaded process per worker: the analysis holds the GIL in pandas/Python code.
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
            return Client(cluster, set_as_default=False)
        finally:
            os.environ.clear()
            os.environ.update(saved)
    try:
        return Client(scheduler, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as e:
        raise ClusterError(f"cannot reach the Dask scheduler at {scheduler}: {e}") from None


class Ranked(Protocol):
    """A job's part (:class:`.ranks.Part`), as far as the cluster reads it: ranks.py calls this module, so the
    types it passes stay structural."""
    rank: int


R = TypeVar("R")  # what analyze_part returns: ranks.RankResult


def analyze_on_dask(analyze_part: Callable[..., R], parts: list[Ranked], settings: Any,
                    scheduler: str, jobs: int | None = None) -> list[R]:
    """``analyze_part`` (:func:`roofscope.merge.analyze_part`, passed in: the job stage does not run the analysis)
    of every part as Dask tasks; results in the order of ``parts``. The first rank that fails
    (a bad trace) raises its own error, as in a local merge."""
    from concurrent.futures import CancelledError

    from distributed import KilledWorker

    client = _client(scheduler, jobs)
    try:
        futures = client.map(analyze_part, parts, settings=settings, pure=False,
                             key=[f"roofscope-rank-{p.rank}-{os.getpid()}" for p in parts])
        try:
            return client.gather(futures)
        except (KilledWorker, CancelledError, OSError, TimeoutError) as e:
            # a worker died (out of memory?) or the scheduler went away; a rank's own error
            # (a bad trace: RoofscopeError) is raised by gather as it is
            raise ClusterError(f"the Dask cluster lost a rank's analysis ({type(e).__name__}: {e});"
                               " check the workers' memory and logs") from None
    finally:
        cluster = client.cluster
        client.close()
        if cluster is not None:
            cluster.close()
