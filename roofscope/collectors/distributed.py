"""Rank awareness: which rank of which job this process is, and where its part of the Run goes.

Under torchrun, srun, or a script that initialized ``torch.distributed`` itself, every rank
profiles the same steps and writes its own Run, a *part*, into one job directory::

    OUT/rank-0000/ ... OUT/rank-NNNN/         one Run per rank; run.json has a `distributed` block
    OUT/job.json, summary.json, report.html   the combined result (`roofscope merge`)

Ranks never talk to each other for this. The default job directory is named after what every
rank of one job sees alike (the rendezvous id, the launcher's start time, the SLURM job), so
ranks that start a few hundred milliseconds apart still agree; rank 0 finds the other parts by
polling the directory, each part's run.json appearing atomically when its Run is renamed in.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import socket
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping

from roofscope.errors import OutputExistsError, RoofscopeError
from roofscope.run import META_FILE, is_run_dir
from roofscope.run.layout import COMBINED_FILES, part_name


class DistributedError(RoofscopeError):
    """The launcher's environment is malformed, or the job's output cannot be named."""


@dataclass
class RankInfo:
    rank: int
    world_size: int
    local_rank: int | None
    local_world_size: int | None
    node: str                          # hostname
    source: str                        # "torchrun", "slurm" or "torch.distributed"
    group_rank: int | None = None      # the node's rank (torchrun GROUP_RANK, SLURM_NODEID)
    master_addr: str | None = None
    master_port: int | None = None
    run_id: str | None = None          # torchrun's rendezvous id, or SLURM's job.step
    backend: str | None = None

    def observe_backend(self) -> None:
        """Record the process group's backend while it exists: scripts often destroy it before exiting."""
        if self.backend is None:
            self.backend = _backend()


def _launcher(env: Mapping[str, str]) -> str | None:
    if "RANK" in env and "WORLD_SIZE" in env:
        return "torchrun"
    # A batch script's own environment also has SLURM_PROCID=0 and SLURM_NTASKS=N; only tasks
    # that srun started (SLURM_STEP_ID) are ranks.
    if "SLURM_PROCID" in env and "SLURM_STEP_ID" in env:
        return "slurm"
    return None


def _int(env: Mapping[str, str], key: str) -> int | None:
    value = env.get(key, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise DistributedError(f"environment variable {key}={env[key]!r} is not an integer") from None


def _tasks_on_node(spec: str | None, node: int | None) -> int | None:
    """One node's task count from SLURM's compressed per-node list, e.g. ``"4(x2),2"``."""
    if not spec or node is None:
        return None
    counts: list[int] = []
    for token in spec.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", token.strip())
        if m is None:
            return None
        counts += [int(m[1])] * int(m[2] or 1)
    return counts[node] if 0 <= node < len(counts) else None


def _backend() -> str | None:
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return str(dist.get_backend())


def _from_torch() -> RankInfo | None:
    # Never imports torch: a process that has not imported it has no process group.
    backend = _backend()
    if backend is None:
        return None
    dist = sys.modules["torch"].distributed
    return RankInfo(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=None,
                    local_world_size=None, node=socket.gethostname(), source="torch.distributed",
                    backend=backend)


def rank_info(env: Mapping[str, str] | None = None) -> RankInfo | None:
    """This process's rank from torchrun's variables, else srun's, else an initialized
    ``torch.distributed``; None when the job has one rank (a plain Run)."""
    e = os.environ if env is None else env
    launcher = _launcher(e)
    run_id = e.get("TORCHELASTIC_RUN_ID")
    if launcher == "torchrun":
        info = RankInfo(rank=_int(e, "RANK"), world_size=_int(e, "WORLD_SIZE"),  # type: ignore[arg-type]
                        local_rank=_int(e, "LOCAL_RANK"), local_world_size=_int(e, "LOCAL_WORLD_SIZE"),
                        node=socket.gethostname(), source="torchrun", group_rank=_int(e, "GROUP_RANK"),
                        master_addr=e.get("MASTER_ADDR") or None, master_port=_int(e, "MASTER_PORT"),
                        run_id=run_id if run_id not in (None, "", "none") else None)
    elif launcher == "slurm":
        node = _int(e, "SLURM_NODEID")
        info = RankInfo(rank=_int(e, "SLURM_PROCID"),  # type: ignore[arg-type]
                        world_size=_int(e, "SLURM_STEP_NUM_TASKS") or _int(e, "SLURM_NTASKS") or 1,
                        local_rank=_int(e, "SLURM_LOCALID"),
                        local_world_size=_tasks_on_node(e.get("SLURM_STEP_TASKS_PER_NODE")
                                                        or e.get("SLURM_TASKS_PER_NODE"), node),
                        node=socket.gethostname(), source="slurm", group_rank=node,
                        run_id=f"{e.get('SLURM_JOB_ID', '')}.{e['SLURM_STEP_ID']}")
    else:
        info = _from_torch()
    if info is None or info.world_size is None or info.world_size <= 1:
        return None
    if info.rank is None or not 0 <= info.rank < info.world_size:
        raise DistributedError(f"rank {info.rank} is outside a world of {info.world_size} ranks"
                               f" ({info.source} environment)")
    return info


def part_dir(out: str | os.PathLike, rank: int, world_size: int) -> Path:
    """``OUT/rank-0003``: four digits, more when the world needs them, so names sort by rank."""
    return Path(out) / part_name(rank, world_size)


def launcher_start(proc: Path = Path("/proc")) -> str | None:
    """When the parent process (torchrun's agent, which started every local rank) started,
    as ``YYYYmmdd-HHMMSS`` local time; None without a Linux /proc."""
    try:
        stat = (proc / str(os.getppid()) / "stat").read_text()
        # Fields after the command name, which may itself hold spaces and parentheses;
        # starttime is field 22 of the whole line, so index 19 after the name.
        ticks = int(stat.rsplit(")", 1)[1].split()[19])
        btime = next(int(line.split()[1]) for line in (proc / "stat").read_text().splitlines()
                     if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    started = btime + ticks / os.sysconf("SC_CLK_TCK")
    return datetime.fromtimestamp(started).strftime("%Y%m%d-%H%M%S")


def job_id(env: Mapping[str, str] | None = None, proc: Path = Path("/proc")) -> str | None:
    """A name every rank of this job computes alike without communicating, or None."""
    e = os.environ if env is None else env
    run_id = e.get("TORCHELASTIC_RUN_ID", "")
    if run_id not in ("", "none"):
        return run_id
    if _launcher(e) == "slurm" and e.get("SLURM_JOB_ID"):
        # srun's ranks on different nodes have different parents: the step names the job.
        return f"{e['SLURM_JOB_ID']}.{e['SLURM_STEP_ID']}"
    return launcher_start(proc) or e.get("SLURM_JOB_ID") or None


def default_job_out(name: str, env: Mapping[str, str] | None = None, proc: Path = Path("/proc"),
                    root: Path = Path("roofscope-out")) -> Path:
    """``roofscope-out/<name>-<job id>``, the same directory on every rank of one job."""
    jid = job_id(env, proc)
    if jid is None:
        raise DistributedError("cannot name an output directory that every rank of this job shares"
                               " (no TORCHELASTIC_RUN_ID, launcher start time or SLURM_JOB_ID):"
                               " pass -o DIR (out= in roofscope.profile()), the same on every rank")
    return root / f"{name}-{jid}"


@dataclass
class JobPart:
    """This rank's part of a job: where it goes and what its run.json records."""

    info: RankInfo
    job_dir: Path
    job_id: str | None

    @property
    def path(self) -> Path:
        return part_dir(self.job_dir, self.info.rank, self.info.world_size)

    def cuda_device(self) -> int | None:
        """The CUDA ordinal this rank computes on: LOCAL_RANK by torchrun's convention, else the
        current device of a script that set it before ``roofscope.profile()``."""
        if self.info.local_rank is not None:
            return self.info.local_rank
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            return int(torch.cuda.current_device())
        return None

    def prepare(self, force: bool) -> None:
        """Before profiling: refuse what would clobber an earlier result without ``force``; with
        it, rank 0 removes the earlier combined result, which would otherwise outlive its parts."""
        if is_run_dir(self.job_dir):
            raise DistributedError(f"{self.job_dir} holds a single-process Run, not a job directory:"
                                   " choose another output directory")
        if self.path.exists() and not force:
            raise OutputExistsError(f"{self.path} already exists (rank {self.info.rank}'s part of an earlier"
                                    " job); pass --force to overwrite it, or choose another output directory")
        if self.info.rank != 0:
            return
        stale = [self.job_dir / n for n in COMBINED_FILES if (self.job_dir / n).exists()]
        if stale and not force:
            raise OutputExistsError(f"{stale[0]} already exists (an earlier job's combined result);"
                                    " pass --force to overwrite it")
        for p in stale:
            if p.is_file():
                p.unlink()

    def meta(self) -> dict[str, Any]:
        """The ``distributed`` block of this part's run.json."""
        return {**asdict(self.info), "job_id": self.job_id}

    def written(self, rank: int) -> bool:
        """Whether ``rank``'s part of this job is in place (an earlier job's part does not count)."""
        try:
            meta = json.loads((part_dir(self.job_dir, rank, self.info.world_size) / META_FILE).read_text())
        except (OSError, ValueError):
            return False
        d = meta.get("distributed") if isinstance(meta, dict) else None
        if not isinstance(d, dict) or d.get("rank") != rank or d.get("world_size") != self.info.world_size:
            return False
        return self.job_id is None or d.get("job_id") == self.job_id

    def wait_for_parts(self, timeout_s: float, poll_s: float = 0.5) -> list[int]:
        """Poll until every rank's part is written or ``timeout_s`` passed; the ranks still missing."""
        deadline = time.monotonic() + timeout_s
        missing = [r for r in range(self.info.world_size) if not self.written(r)]
        while missing and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(poll_s, left))
            missing = [r for r in missing if not self.written(r)]
        return missing

    def merge_command(self) -> str:
        # A job directory as the only source is also where merge writes by default.
        return f"roofscope merge {shlex.quote(str(self.job_dir))}"


def job_part(out: Path | None, name: str, env: Mapping[str, str] | None = None) -> JobPart | None:
    """This process's part of a multi-rank job writing to ``out`` (default: named after the job),
    or None when it is not one rank of several."""
    info = rank_info(env)
    if info is None:
        return None
    job_dir = out if out is not None else default_job_out(name, env)
    return JobPart(info=info, job_dir=job_dir, job_id=job_id(env))
