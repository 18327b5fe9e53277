"""The ranks of a distributed job: which inputs are which rank, and each rank's Result reduced to a
compact :class:`RankResult` (``roofscope/merge.py`` analyzes the ranks in parallel processes).

A source is a Run directory, a trace file, or a job directory (``rank-NNNN/`` Run
subdirectories, as ``roofscope run`` writes under torchrun, or a ``job.json`` that
``roofscope merge`` wrote) that expands to its parts. A part's rank is its Run's
``distributed.rank``, else the rank its trace's first bytes name (the reader's ``peek_rank``;
Kineto: ``distributedInfo.rank``), else its position among the sources.

Each worker runs the normal analysis and :func:`rank_result` reduces it:
per-step figures, per-step time of the top kernels, collectives, findings and the roofline
aggregated by kernel name; kilobytes instead of the million-row kernel frame.
"""
from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from roofscope.analyzers import ingest
from roofscope.analyzers.ingest.source import HEAD_BYTES, unzip_head
from roofscope.analyzers.job.urls import expand, is_trace_name, is_url, local_path, read_head
from roofscope.analyzers.model.result import Result
from roofscope.analyzers.model.trace import Distributed
from roofscope.analyzers.views.collectives import (collective_table, host_communicates, host_comm_steps,
                                                   kernel_collectives)
from roofscope.errors import RoofscopeError, TraceError
from roofscope.run import RunError, is_run_dir, read_meta
from roofscope.run.layout import JOB_FILE, RANK_DIR, REPORT_FILE, TRACE_FILE
from roofscope.run.schema import JOB_SCHEMA_VERSION, JobDoc, read_versioned

TOP_KERNELS = 40        # kernels per rank whose per-step time is kept (straggler evidence)
ROOFLINE_ROWS = 300     # kernel aggregates per rank for the per-rank roofline
# No job has more ranks (the largest run some 10^5 GPUs): a rank or world size past it is a corrupt
# distributedInfo, refused before ranges of it are listed (2**63 ranks would take the machine's memory).
MAX_RANKS = 1 << 24
STEP_COLUMNS = ("step_s", "busy_s", "comm_s", "comm_exposed_s", "self_s", "idle_host_s", "idle_queued_s",
                "idle_other_s", "idle_edge_s", "mfu", "hfu")


class PartsError(RoofscopeError):
    """The sources do not make up one job (not a Run or trace, duplicate ranks)."""


@dataclass
class Part:
    """One rank's input: a Run directory or a trace file, local or behind an fsspec ``url``."""

    path: Path
    rank: int | None
    world_size: int | None = None
    node: str | None = None
    is_run: bool = False
    url: str | None = None           # set for a trace read through fsspec (``path`` is then unused)

    @property
    def source(self) -> str:
        return self.url or str(self.path)

    def report(self) -> Path | None:
        p = self.path / REPORT_FILE
        return p if self.is_run and p.is_file() else None


@dataclass
class RankResult:
    """What a worker returns for one rank (see the module docstring)."""

    rank: int
    path: str
    node: str | None
    device: str
    world_size: int | None
    summary: dict[str, Any]          # metrics, communication and timeline figures (no tables)
    steps: pd.DataFrame              # index step; STEP_COLUMNS
    kernel_steps: pd.DataFrame       # step, name, time_s: the top kernels' time per step
    collectives: pd.DataFrame        # collectives.collective_table
    findings: list[dict[str, Any]]
    roofline: pd.DataFrame           # by kernel name: calls, time_s, flops, bytes, intensity, achieved_flops, cls
    ceilings: dict[str, Any] = field(default_factory=dict)
    # One row per collective call of the profiled steps, in issue order: step, seq (its place in the
    # step), collective, dur_s, overlaps (it began before an earlier call of the step had ended, on this
    # rank's clock). A rank that enters a collective last waits least inside it: the job compares these
    # durations across ranks (straggler.lateness), which needs no common clock.
    arrivals: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(
        {"step": pd.Series([], dtype=np.int64), "seq": pd.Series([], dtype=np.int64), "collective": [],
         "dur_s": pd.Series([], dtype=np.float64), "overlaps": pd.Series([], dtype=bool)}))


# ---------------------------------------------------------------------------------------------
# Sources -> parts


def _peek_dist(path: Path | str) -> Distributed:
    """The process group the trace's first 64 KiB name (by the reader of its format), or an
    empty one."""
    try:
        if isinstance(path, str):  # a URL
            raw = read_head(path, HEAD_BYTES)
        elif not path.is_file():  # a FIFO would block open(); the analysis refuses it in one line
            return Distributed()
        else:
            with open(path, "rb") as f:
                raw = f.read(HEAD_BYTES)
        head = unzip_head(raw)
    except (OSError, zlib.error):
        return Distributed()
    return ingest.peek_rank(head, path if isinstance(path, str) else path.name) or Distributed()


def _part(path: Path | str) -> Part:
    if isinstance(path, str):  # a URL
        d = _peek_dist(path)
        return Part(Path(path.split("://", 1)[1]), d.rank, d.world_size, url=path)
    if is_run_dir(path):
        try:
            meta = read_meta(path)[1]
        except RunError as e:
            raise PartsError(str(e)) from None
        dist = meta.distributed
        node = (dist and dist.node) or meta.environment.hostname
        part = Part(path, dist and dist.rank, dist and dist.world_size, node, is_run=True)
        if part.rank is None:
            d = _peek_dist(path / TRACE_FILE)
            part.rank, part.world_size = d.rank, part.world_size or d.world_size
        return part
    if path.is_file():
        d = _peek_dist(path)
        return Part(path, d.rank, d.world_size)
    raise PartsError(f"{path}: not a Run directory, a trace file or a job directory (rank-NNNN/ Runs or {JOB_FILE})")


def is_job_dir(path: str | os.PathLike) -> bool:
    """A directory holding rank-NNNN/ Runs or a job.json (and not itself a Run)."""
    p = Path(path)
    return p.is_dir() and not is_run_dir(p) and ((p / JOB_FILE).is_file() or bool(_rank_dirs(p)))


def _job_of(run_dir: Path) -> tuple[str | None, int | None]:
    """The Run's job id and world size; a damaged or newer run.json is refused (naming the rank's
    directory), never taken for a Run of another job."""
    try:
        d = read_meta(run_dir)[1].distributed
    except RunError as e:
        raise PartsError(f"{run_dir.name} of the job: {e}") from None
    return (d.job_id, d.world_size) if d is not None else (None, None)


def _rank_runs(p: Path) -> tuple[list[Path], dict[int, str]]:
    """The job's rank-* Runs, and the reason for each Run left out (by the rank its folder names). A
    --force rerun with fewer ranks leaves the earlier job's higher ranks behind: only parts of
    the job rank 0 belongs to (else of the most parts) count."""
    dirs = sorted(d for d in p.iterdir() if RANK_DIR.match(d.name) and is_run_dir(d)) if p.is_dir() else []
    jobs = [_job_of(d) for d in dirs]
    if len(set(jobs)) <= 1:
        return dirs, {}
    keep = jobs[0] if jobs[0][0] is not None else max(set(jobs), key=jobs.count)
    left = {int(RANK_DIR.match(d.name).group(1)):  # type: ignore[union-attr]
            f"{d.name} is a Run of another job (job id {j[0] or 'none'}, world size {j[1] or '?'};"
            f" this job: {keep[0] or 'none'}, {keep[1] or '?'})"
            for d, j in zip(dirs, jobs) if j != keep}
    return [d for d, j in zip(dirs, jobs) if j == keep], left


def _rank_dirs(p: Path) -> list[Path]:
    return _rank_runs(p)[0]


def _traces_in(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_file() and is_trace_name(p.name)) if path.is_dir() else []


def _expand_source(source: str, allow_remote: bool, left: dict[int, str]) -> list[Path | str]:
    if is_url(source) and local_path(source) is None:
        return list(expand(source))
    return _expand(Path(local_path(source) or source), allow_remote, left)


def _expand(path: Path, allow_remote: bool, left: dict[int, str]) -> list[Path | str]:
    if not path.exists():
        raise PartsError(f"{path}: no such file or directory")
    if not is_job_dir(path):
        # A folder of rank traces (one file per rank, as the profiler wrote them) is the job too.
        return [path] if is_run_dir(path) else (_traces_in(path) or [path])
    ranks, stale = _rank_runs(path)
    left.update(stale)
    if ranks:
        return ranks
    try:
        data = (path / JOB_FILE).read_bytes()
    except OSError as e:
        raise PartsError(f"{path / JOB_FILE}: unreadable ({e})") from None
    job: JobDoc = read_versioned(data, JobDoc, key="schema_version", current=JOB_SCHEMA_VERSION, what="job",
                                 where=str(path / JOB_FILE), error=PartsError)
    return [_job_part(path, p.path, allow_remote) for p in job.parts]


def _job_part(job: Path, part: str, allow_remote: bool) -> Path | str:
    """A part that job.json names: inside the job's folder, unless ``allow_remote`` (a job.json
    is data: it must not make a merge read /etc, another user's files or a server)."""
    if is_url(part):
        if not allow_remote:
            raise PartsError(f"{job / JOB_FILE}: part {part!r} is a URL; pass --allow-remote to read it")
        return part
    target = (job / part).resolve()   # an absolute part stays as it is
    if not allow_remote and not target.is_relative_to(job.resolve()):
        raise PartsError(f"{job / JOB_FILE}: part {part!r} lies outside {job}; pass --allow-remote to read it")
    return target


def resolve_parts(sources: list[str], allow_remote: bool = False) -> tuple[list[Part], int, list[str]]:
    """The parts of ``sources`` sorted by rank, the world size and warnings (missing ranks, and
    why a rank's Run was left out). Raises :class:`PartsError` for a source that is none of the
    accepted kinds, a damaged or newer run.json, a job.json part outside its folder or behind a
    URL (unless ``allow_remote``), a part given twice, two parts claiming one rank, or sources
    that hold no part at all."""
    if not sources:
        raise PartsError("no sources given")
    left: dict[int, str] = {}
    parts = [_part(p) for s in sources for p in _expand_source(s, allow_remote, left)]
    if not parts:
        raise PartsError(f"{', '.join(sources)}: no parts to merge (an empty {JOB_FILE})")
    for p in parts:
        if max(p.rank or 0, p.world_size or 0) >= MAX_RANKS:
            raise PartsError(f"{p.source}: rank {p.rank} of {p.world_size}: no job has {MAX_RANKS:,} ranks or"
                             " more (a corrupt distributedInfo)")
    given: dict[Path | str, Path] = {}
    for p in parts:
        # A trace naming no rank, given twice, would otherwise become two ranks by order.
        key: Path | str = p.url or p.path.resolve()
        if key in given:
            also = f" (also as {given[key]})" if given[key] != p.path else ""
            raise PartsError(f"{p.source} is given twice{also}")
        given[key] = p.path
    claimed = {p.rank for p in parts if p.rank is not None}
    free = iter(r for r in range(len(parts) + len(claimed)) if r not in claimed)
    for p in parts:
        if p.rank is None:
            p.rank = next(free)
    seen: dict[int, str] = {}
    for p in parts:
        if p.rank in seen:
            raise PartsError(f"rank {p.rank} appears twice: {seen[p.rank]} and {p.source}")
        seen[p.rank] = p.source  # type: ignore[index]
    parts.sort(key=lambda p: p.rank)  # type: ignore[arg-type, return-value]
    world = max([p.world_size or 0 for p in parts] + [parts[-1].rank + 1])  # type: ignore[operator]
    missing = sorted(set(range(world)) - set(seen))
    warnings = []
    if missing:
        shown = ", ".join(map(str, missing[:16])) + (", ..." if len(missing) > 16 else "")
        warnings.append(f"{len(missing)} of {world} ranks missing: {shown}; figures cover the ranks given")
    warnings += [f"rank {r} left out: {left[r]}" for r in missing if r in left]
    return parts, world, warnings


# ---------------------------------------------------------------------------------------------
# One rank


def _step_frame(result: Result) -> pd.DataFrame:
    steps = result.steps.set_index("step")
    tl = result.timeline.steps
    samples = result.step_samples
    out = pd.DataFrame({"step_s": steps["dur_s"]}, index=steps.index.rename("step"))
    if not len(tl):
        # No GPU timeline (a CPU trace): a CPU process group's collectives are host intervals.
        tl = host_comm_steps(result.trace, result.kernels, result.steps)
    elif host_communicates(result.trace, result.kernels):
        # gloo over CUDA tensors: the transfers run on the host, no kernel of the device's timeline
        # communicates; exposed is the part of them during which the device runs none of the rank's kernels.
        host = host_comm_steps(result.trace, result.kernels, result.steps)
        tl = tl.assign(comm_s=host["comm_s"].reindex(tl.index), comm_exposed_s=host["comm_exposed_s"].reindex(tl.index))
    for c in ("busy_s", "comm_s", "comm_exposed_s", "idle_host_s", "idle_queued_s", "idle_other_s", "idle_edge_s"):
        out[c] = tl[c].reindex(out.index).astype(float) if c in tl else np.nan
    # Time on the rank's own work: what the step would take were no collective waited for.
    out["self_s"] = out["step_s"] - out["comm_exposed_s"].fillna(0.0)
    out["mfu"] = samples["mfu"].reindex(out.index).astype(float)
    out["hfu"] = samples["hfu"].reindex(out.index).astype(float)
    return out[list(STEP_COLUMNS)]


def _kernel_steps(k: pd.DataFrame) -> pd.DataFrame:
    """Per-step time of the rank's top non-communication kernels (long format)."""
    k = k[(k["step"] >= 0) & (k["category"] != "communication") & k["dur_s"].notna()]
    if not len(k):
        return pd.DataFrame({"step": pd.Series([], dtype=np.int64), "name": [], "time_s": []})
    names = k["name"].astype(str)
    top = k.groupby(names, sort=False)["dur_s"].sum().nlargest(TOP_KERNELS).index
    sel = names.isin(top)
    return (k[sel].groupby([k.loc[sel, "step"], names[sel]], sort=False)["dur_s"].sum()
            .rename("time_s").rename_axis(["step", "name"]).reset_index())


def _arrivals(calls: pd.DataFrame) -> pd.DataFrame:
    """:func:`kernel_collectives`' rows of the profiled steps numbered in their step (issue order)."""
    calls = calls[calls["step"] >= 0]
    end = calls["ts_ns"] + (calls["dur_s"].fillna(0.0) * 1e9).round().astype(np.int64)
    # gloo runs a step's calls on several worker threads at once, so their waits overlap; NCCL's
    # kernels on one stream follow each other.
    before = end.groupby(calls["step"]).transform(lambda e: e.cummax().shift(1))
    return pd.DataFrame({"step": calls["step"].to_numpy(dtype=np.int64),
                         "seq": calls.groupby("step").cumcount().to_numpy(dtype=np.int64),
                         "collective": calls["collective"].astype(str).to_numpy(),
                         "dur_s": calls["dur_s"].to_numpy(dtype=np.float64),
                         "overlaps": (calls["ts_ns"] < before).to_numpy()})


def _own_time(s: dict[str, Any]) -> dict[str, Any]:
    """The rank's step without and with the profiler (summary.json's step_time block), where it has one."""
    block = s.get("step_time") or {}
    return {"own_step_s": block.get("unprofiled_median_s"), "profiled_step_s": block.get("profiled_median_s"),
            "own_steps": block.get("unprofiled_steps")}


def _roofline(result: Result) -> pd.DataFrame:
    by = result.by_kernel()
    by = by[by["cls"] != "communication"].head(ROOFLINE_ROWS)
    cols = ["calls", "time_s", "flops", "bytes", "intensity", "achieved_flops", "cls"]
    return by[cols].rename_axis("name").reset_index()


def rank_result(part: Part, result: Result) -> RankResult:
    """One rank's Result reduced to what the job compares; a rank whose trace was cut short is refused."""
    cut = result.trace.meta.cut_short
    if cut:
        # `analyze` reads what is complete; among ranks, the part that is missing would make this
        # rank look faster or slower than the others, so the job is not judged on it
        raise TraceError(f"{part.source}: {cut}; a merge compares whole rank traces: copy this rank's"
                         " trace again (or analyze it alone with roofscope analyze)")
    s = result.to_dict()
    dist = result.trace.meta.distributed
    world = part.world_size or (dist.world_size if dist else None)
    steps = _step_frame(result)
    tl = s.get("timeline") or {}
    summary = {"metrics": s.get("metrics"), "kernel_time_s": s["kernel_time_s"],
               "communication_time_s": s["communication_time_s"], "trace": part.url or s["trace"],
               "comm_overlap_share": (tl.get("overall") or {}).get("comm_overlap_share"),
               "diagnosis": {k: v for k, v in (s.get("diagnosis") or {}).items() if k != "skipped"},
               **_own_time(s)}
    calls = kernel_collectives(result.trace, result.kernels, result.steps)
    return RankResult(rank=int(part.rank or 0), path=part.source, node=part.node, device=str(s["device"]),
                      world_size=world, summary=summary, steps=steps, kernel_steps=_kernel_steps(result.kernels),
                      collectives=collective_table(calls, world), findings=s.get("findings") or [],
                      roofline=_roofline(result), ceilings=s["ceilings"], arrivals=_arrivals(calls))
