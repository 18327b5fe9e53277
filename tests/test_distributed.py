"""Rank-aware collection: ranks from the launcher's environment, the job directory every rank
agrees on, one part per rank, rank 0 merging, and a real 2-rank gloo job under torchrun.

In-process tests fake one rank of a job through its environment (RANK=1 WORLD_SIZE=2 ...),
which is all a rank knows of its job; the subprocess test runs torchrun for real.
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import time
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import roofscope
from roofscope.cli import main
from roofscope.collectors.distributed import (
    DistributedError, JobPart, RankInfo, default_job_out, job_id, job_part, part_dir, rank_info,
)
from roofscope.collectors.nvml import NvmlSampler, rank_devices
from roofscope.errors import OutputExistsError, RoofscopeError
from tests.test_nvml import FakeNvml, wait_for_passes

REPO = Path(__file__).resolve().parents[1]
PEAKS = ["--peak-tflops", "1", "--peak-bandwidth", "10", "--settle", "0"]  # exact step counts
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                 "MASTER_PORT", "TORCHELASTIC_RUN_ID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                 "SLURM_NODEID", "SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE",
                 "SLURM_TASKS_PER_NODE", "SLURM_JOB_ID", "CUDA_VISIBLE_DEVICES")

# Touches a marker first (did the script run?), prints nothing, raises on request.
TRAIN = textwrap.dedent('''
    import pathlib, sys
    import torch
    pathlib.Path(sys.argv[1]).write_text("ran")
    model = torch.nn.Linear(16, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 16)
    for i in range(6):
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
    if len(sys.argv) > 2:
        raise ValueError("boom")
''')


@pytest.fixture(autouse=True)
def _no_launcher(monkeypatch):
    """Start every test as a plain process, whatever launched pytest (a SLURM job, torchrun)."""
    for var in LAUNCHER_VARS:
        monkeypatch.delenv(var, raising=False)


def _as_rank(monkeypatch, rank: int, world: int = 2, run_id: str = "job-a") -> None:
    for k, v in {"RANK": rank, "WORLD_SIZE": world, "LOCAL_RANK": rank, "LOCAL_WORLD_SIZE": world,
                 "GROUP_RANK": 0, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": 29500,
                 "TORCHELASTIC_RUN_ID": run_id}.items():
        monkeypatch.setenv(k, str(v))


@pytest.fixture
def clock(monkeypatch) -> SimpleNamespace:
    """The wait for the other ranks' parts on a fake clock: each sleep advances it, none takes time,
    so a test reads how long a rank waited exactly, whatever the machine's load."""
    import roofscope.collectors.distributed as distributed

    now = SimpleNamespace(s=0.0)

    def sleep(seconds: float) -> None:
        now.s += seconds

    monkeypatch.setattr(distributed, "time", SimpleNamespace(monotonic=lambda: now.s, sleep=sleep))
    return now


@pytest.fixture
def script(tmp_path: Path) -> Path:
    p = tmp_path / "train.py"
    p.write_text(TRAIN)
    return p


def _run(out: Path, script: Path, *options: str, args: tuple[str, ...] = ()) -> int:
    return main(["run", "-o", str(out), *PEAKS, "--wait", "0", "--warmup", "1", "--active", "2", *options,
                 str(script), str(out.parent / "ran"), *args])


def _meta(run: Path) -> dict:
    return json.loads((run / "run.json").read_text())


# -- ranks from the environment ---------------------------------------------------------------

def test_rank_info_from_torchrun_environment() -> None:
    info = rank_info({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                      "GROUP_RANK": "1", "MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "29400",
                      "TORCHELASTIC_RUN_ID": "abc123"})
    assert info == RankInfo(rank=3, world_size=4, local_rank=1, local_world_size=2, node=socket.gethostname(),
                            source="torchrun", group_rank=1, master_addr="10.0.0.7", master_port=29400,
                            run_id="abc123", backend=None)
    # torchrun's default rendezvous id is the string "none": no run id at all.
    assert rank_info({"RANK": "0", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "none"}).run_id is None


def test_rank_info_from_srun_environment() -> None:
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_STEP_NUM_TASKS": "8", "SLURM_LOCALID": "1",
           "SLURM_NODEID": "1", "SLURM_STEP_TASKS_PER_NODE": "4(x2)", "SLURM_JOB_ID": "777", "SLURM_STEP_ID": "3"}
    info = rank_info(env)
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size, info.group_rank) == (5, 8, 1, 4, 1)
    assert (info.source, info.run_id) == ("slurm", "777.3")
    # "4(x2),2" is nodes of 4, 4 and 2 tasks: node 2 holds 2.
    assert rank_info({**env, "SLURM_NODEID": "2", "SLURM_STEP_TASKS_PER_NODE": "4(x2),2",
                      "SLURM_STEP_NUM_TASKS": "10"}).local_world_size == 2
    # A batch script's own shell also has SLURM_PROCID=0 and SLURM_NTASKS=8 but no step: not a rank.
    assert rank_info({"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_LOCALID": "0", "SLURM_JOB_ID": "777"}) is None


def test_torchrun_variables_win_over_slurm() -> None:
    # torchrun started inside an srun step: its ranks, not SLURM's tasks.
    info = rank_info({"RANK": "1", "WORLD_SIZE": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "1",
                      "SLURM_STEP_ID": "0"})
    assert (info.source, info.rank, info.world_size) == ("torchrun", 1, 2)


def test_no_launcher_and_world_of_one_are_plain_runs() -> None:
    assert rank_info({}) is None
    assert rank_info({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}) is None
    assert rank_info({"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "1", "SLURM_STEP_ID": "0"}) is None


@pytest.mark.parametrize("env, message", [
    ({"RANK": "one", "WORLD_SIZE": "2"}, "RANK='one' is not an integer"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, "rank 2 is outside a world of 2 ranks"),
])
def test_malformed_environment_is_a_one_line_error(env: dict, message: str) -> None:
    with pytest.raises(DistributedError, match=re.escape(message)):
        rank_info(env)


def test_rank_info_from_initialized_torch_distributed(tmp_path: Path, monkeypatch) -> None:
    import torch.distributed as dist

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        assert rank_info({}) is None  # a real group of one rank is a plain Run
        # Two ranks need two processes; the group's answers are faked, its backend is real.
        monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
        monkeypatch.setattr(dist, "get_rank", lambda group=None: 1)
        info = rank_info({})
        assert (info.rank, info.world_size, info.source, info.backend) == (1, 2, "torch.distributed", "gloo")
        assert info.local_rank is None
    finally:
        monkeypatch.undo()
        dist.destroy_process_group()
    assert rank_info({}) is None


def test_torch_is_never_imported_to_find_a_rank() -> None:
    code = ("import sys; from roofscope.collectors.distributed import rank_info; "
            "print(rank_info({}), 'torch' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert res.stdout.split() == ["None", "False"], res.stderr


# -- where parts go ----------------------------------------------------------------------------

def test_part_dir_names_sort_by_rank(tmp_path: Path) -> None:
    assert part_dir(tmp_path, 1, 2) == tmp_path / "rank-0001"
    assert part_dir(tmp_path, 3, 10_000) == tmp_path / "rank-0003"       # ranks 0..9999: four digits
    assert part_dir(tmp_path, 7, 10_001) == tmp_path / "rank-00007"      # rank 10000 needs five
    names = [part_dir(tmp_path, r, 10_001).name for r in (10_000, 9, 100)]
    assert sorted(names) == ["rank-00009", "rank-00100", "rank-10000"]


def _fake_proc(tmp_path: Path, ticks: int, comm: str = "torchrun") -> Path:
    proc = tmp_path / "proc"
    (proc / str(os.getppid())).mkdir(parents=True)
    # /proc/<pid>/stat: pid (comm) state ppid ... with starttime the 22nd field.
    fields = ["S"] + ["0"] * 18 + [str(ticks)] + ["0"] * 30
    (proc / str(os.getppid()) / "stat").write_text(f"{os.getppid()} ({comm}) " + " ".join(fields) + "\n")
    (proc / "stat").write_text("cpu  1 2 3 4\nbtime 1700000000\nprocesses 12\n")
    return proc


def test_default_job_out_branches(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        hz = os.sysconf("SC_CLK_TCK")
        # Started 123 s after boot; boot at 1700000000 = 2023-11-14 22:13:20 UTC -> 22:15:23.
        proc = _fake_proc(tmp_path, 123 * hz, comm="python3 (torchrun) x")
        torchrun = {"RANK": "1", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "none"}
        assert default_job_out("train", torchrun, proc) == Path("roofscope-out/train-20231114-221523")
        assert default_job_out("train", {**torchrun, "TORCHELASTIC_RUN_ID": "r7"}, proc) == \
            Path("roofscope-out/train-r7")
        # torchrun inside a SLURM job: the agent's start, not the job, which may hold several launches.
        assert job_id({**torchrun, "SLURM_JOB_ID": "99"}, proc) == "20231114-221523"
        # srun's ranks on other nodes have other parents: the job step names the job.
        srun = {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_ID": "3", "SLURM_JOB_ID": "99"}
        assert job_id(srun, proc) == "99.3"
        nowhere = tmp_path / "no-proc"
        assert job_id({**torchrun, "SLURM_JOB_ID": "99"}, nowhere) == "99"
        with pytest.raises(DistributedError, match="pass -o DIR"):
            default_job_out("train", torchrun, nowhere)
    finally:
        monkeypatch.undo()
        time.tzset()


def test_sibling_ranks_agree_on_the_launcher_start() -> None:
    # Two children of this process stand for two ranks started by one agent, at different times.
    code = "from roofscope.collectors.distributed import launcher_start; print(launcher_start())"
    seen = []
    for _ in range(2):
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=600)
        seen.append(res.stdout.strip())
        time.sleep(1.1)  # past a second boundary: a per-rank timestamp would differ
    assert seen[0] == seen[1] and re.fullmatch(r"\d{8}-\d{6}", seen[0]), seen
    # ...and it is when this process (their parent) started, as ps tells it.
    ps = subprocess.run(["ps", "-o", "lstart=", "-p", str(os.getpid())], capture_output=True, text=True)
    if ps.returncode == 0:
        assert datetime.strptime(ps.stdout.strip(), "%a %b %d %H:%M:%S %Y").strftime("%Y%m%d-%H%M%S") == seen[0]


def _part(tmp_path: Path, rank: int, world: int = 2, jid: str | None = "job-a") -> JobPart:
    return JobPart(RankInfo(rank, world, rank, world, "host", "torchrun"), tmp_path / "job", jid)


def _write_part(job: Path, rank: int, world: int = 2, jid: str | None = "job-a") -> None:
    d = part_dir(job, rank, world)
    d.mkdir(parents=True, exist_ok=True)
    (d / "run.json").write_text(json.dumps({"schema_version": 1,
                                           "distributed": {"rank": rank, "world_size": world, "job_id": jid}}))


def test_only_this_jobs_parts_count(tmp_path: Path, clock) -> None:
    p = _part(tmp_path, 0, world=3)
    _write_part(p.job_dir, 0, world=3)
    _write_part(p.job_dir, 1, world=3, jid="job-old")   # an earlier job's part, not yet replaced
    _write_part(p.job_dir, 2, world=4)                  # a part of a job with another world size
    assert [r for r in range(3) if p.written(r)] == [0]
    assert p.wait_for_parts(0.6, poll_s=0.1) == [1, 2]
    assert clock.s == pytest.approx(0.6)                # 6 polls of 0.1 s, then the timeout
    _write_part(p.job_dir, 1, world=3)
    _write_part(p.job_dir, 2, world=3)
    assert p.wait_for_parts(5) == []
    # Without a job id (no rendezvous id, /proc or SLURM), any part of the right rank and world counts.
    assert _part(tmp_path, 0, world=4, jid=None).written(2) is False
    _write_part(p.job_dir, 3, world=4, jid="whatever")
    assert _part(tmp_path, 0, world=4, jid=None).written(3) is True


def test_prepare_guards_earlier_results(tmp_path: Path) -> None:
    p0 = _part(tmp_path, 0)
    p0.job_dir.mkdir()
    (p0.job_dir / "summary.json").write_text("{}")
    with pytest.raises(OutputExistsError, match="an earlier job's combined result"):
        p0.prepare(force=False)
    _part(tmp_path, 1).prepare(force=False)  # other ranks leave the combined result alone
    p0.prepare(force=True)
    assert not (p0.job_dir / "summary.json").exists()
    (p0.job_dir / "run.json").write_text("{}")
    with pytest.raises(DistributedError, match="holds a single-process Run"):
        p0.prepare(force=True)


# -- a rank's session --------------------------------------------------------------------------

def test_rank_1_writes_its_part_with_a_distributed_block(tmp_path: Path, script: Path, monkeypatch,
                                                         capsys) -> None:
    _as_rank(monkeypatch, 1)
    out = tmp_path / "job"
    assert _run(out, script) == 0
    stdout = capsys.readouterr().out
    # One line, no summary: rank 0 prints the job's.
    assert stdout == f"roofscope: rank 1 of 2: wrote {out / 'rank-0001'}; rank 0 merges the job in {out}\n"
    assert sorted(p.name for p in out.iterdir()) == ["rank-0001"]
    part = out / "rank-0001"
    meta = _meta(part)
    assert meta["distributed"] == {"rank": 1, "world_size": 2, "local_rank": 1, "local_world_size": 2,
                                   "node": socket.gethostname(), "source": "torchrun", "group_rank": 0,
                                   "master_addr": "127.0.0.1", "master_port": 29500, "run_id": "job-a",
                                   "backend": None, "job_id": "job-a"}
    assert meta["steps"]["recorded"] == [1, 2]  # wait 0, warmup 1, active 2: the same on every rank
    assert (part / "trace.json.gz").exists() and (part / "summary.json").exists() and (part / "report.html").exists()
    assert roofscope.load(part).meta["distributed"]["rank"] == 1


def test_existing_part_fails_before_profiling_without_force(tmp_path: Path, script: Path, monkeypatch,
                                                            capsys) -> None:
    _as_rank(monkeypatch, 1)
    out, marker = tmp_path / "job", tmp_path / "ran"
    assert _run(out, script) == 0
    first = (out / "rank-0001" / "run.json").stat().st_mtime_ns
    marker.unlink()
    capsys.readouterr()
    assert _run(out, script) == 2
    err = capsys.readouterr().err
    assert err == (f"roofscope: error: {out / 'rank-0001'} already exists (rank 1's part of an earlier job);"
                   " pass --force to overwrite it, or choose another output directory\n")
    assert not marker.exists()  # the script never started
    assert _run(out, script, "--force") == 0 and marker.exists()
    assert (out / "rank-0001" / "run.json").stat().st_mtime_ns > first


def test_rank_0_with_merge_timeout_0_prints_the_merge_command(tmp_path: Path, script: Path, monkeypatch,
                                                              capsys) -> None:
    _as_rank(monkeypatch, 0)
    out = tmp_path / "my job"
    assert _run(out, script, "--merge-timeout", "0") == 0
    assert capsys.readouterr().out == (f"roofscope: rank 0 of 2: wrote {out / 'rank-0000'}; merge the ranks' parts"
                                       f" with: roofscope merge '{out}'\n")
    assert sorted(p.name for p in out.iterdir()) == ["rank-0000"]


def test_rank_0_reports_missing_ranks_at_the_timeout(tmp_path: Path, script: Path, monkeypatch, capsys,
                                                     clock) -> None:
    _as_rank(monkeypatch, 0)
    out = tmp_path / "job"
    _write_part(out, 1, jid="an-earlier-job")
    assert _run(out, script, "--merge-timeout", "1") == 0
    assert clock.s == pytest.approx(1.0)                # the 1 s asked for, not the default 300 s
    captured = capsys.readouterr()
    assert "waiting up to 1 s for the other ranks' parts" in captured.out
    assert (f"roofscope: rank 1 of 2 wrote no part in {out} within 1 s; once every rank-* directory is on one"
            f" machine, run: roofscope merge {out}\n") in captured.err
    assert not (out / "summary.json").exists()


def test_failed_rank_0_does_not_wait(tmp_path: Path, script: Path, monkeypatch, capsys, clock) -> None:
    _as_rank(monkeypatch, 0)
    out = tmp_path / "job"
    assert _run(out, script, args=("raise",)) == 1  # the script's own exit code, as without ranks
    assert clock.s == 0                     # no wait at all, not the default 300 s for rank 1
    captured = capsys.readouterr()
    assert f"merge the ranks' parts with: roofscope merge {out}" in captured.out
    assert _meta(out / "rank-0000")["exit_status"]["reason"] == "exception"


def test_rank_0_merges_the_job_once_every_part_is_in(tmp_path: Path, script: Path, monkeypatch, capsys) -> None:
    out = tmp_path / "job"
    _as_rank(monkeypatch, 1)
    assert _run(out, script) == 0
    _as_rank(monkeypatch, 0)
    capsys.readouterr()
    assert _run(out, script) == 0
    stdout = capsys.readouterr().out
    assert "roofscope job: 2 of 2 ranks" in stdout
    assert {"job.json", "summary.json", "report.html", "rank-0000", "rank-0001"} == {p.name for p in out.iterdir()}
    job = json.loads((out / "job.json").read_text())
    assert [(p["rank"], p["path"]) for p in job["parts"]] == [(0, "rank-0000"), (1, "rank-0001")]


def test_failed_merge_is_one_error_line_with_the_retry_command(tmp_path: Path, script: Path, monkeypatch,
                                                                capsys) -> None:
    _as_rank(monkeypatch, 0)
    out = tmp_path / "job"
    _write_part(out, 1)  # rank 1's run.json of this job, but no trace beside it
    assert _run(out, script) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("roofscope: error: merging the ranks' parts failed: ")
    assert err[-1].endswith(f"; retry with: roofscope merge {out}")
    assert (out / "rank-0000" / "run.json").exists() and not (out / "report.html").exists()


def test_profile_context_manager_writes_a_part(tmp_path: Path, monkeypatch, capsys) -> None:
    _as_rank(monkeypatch, 1)
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with roofscope.profile(steps=2, wait=0, warmup=1, out=tmp_path / "job", peak_tflops=1,
                           peak_bandwidth_gbs=10, report=False) as prof:
        for _ in range(4):
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
    assert prof.run_dir == tmp_path / "job" / "rank-0001"
    assert _meta(prof.run_dir)["distributed"]["rank"] == 1
    assert capsys.readouterr().out.count("\n") == 1
    with pytest.raises(RoofscopeError, match="merge_timeout must be >= 0"):
        roofscope.profile(merge_timeout=-1)


def test_default_job_directory_is_shared_by_ranks(tmp_path: Path, script: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    _as_rank(monkeypatch, 1, run_id="r42")
    part = job_part(None, "train")
    assert part.path == Path("roofscope-out/train-r42/rank-0001")
    _as_rank(monkeypatch, 0, run_id="r42")
    assert job_part(None, "train").job_dir == part.job_dir


# -- the rank's GPU ----------------------------------------------------------------------------

def test_rank_devices() -> None:
    assert rank_devices([0, 1, 2, 3], True, 2) == ([2], [])
    assert rank_devices([3, 1], True, 1) == ([1], [])             # CUDA_VISIBLE_DEVICES=3,1: ordinal 1 is GPU 1
    assert rank_devices([5], True, 3) == ([5], [])                # one GPU bound per rank by the launcher
    assert rank_devices([0, 1], True, 4) == ([0, 1], ["CUDA device 4 is not among the 2 visible GPUs:"
                                                      " sampling every GPU"])
    assert rank_devices([0, 1], False, 0)[0] == [0, 1]             # MIG: ordinals unknown


def test_sampler_reads_only_the_ranks_gpu(monkeypatch) -> None:
    nv = FakeNvml(count=4)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    s = NvmlSampler(hz=50, cuda_device=1)   # LOCAL_RANK 1 -> CUDA ordinal 1 -> NVML index 3
    s.start()
    wait_for_passes(s, 1)
    tel = s.stop()
    assert [(d["nvml_index"], d["cuda_index"]) for d in tel.devices] == [(3, 1)]
    assert set(tel.samples["device"]) == {3}


# -- a real job under torchrun -----------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="torch.distributed with gloo is not available")
def test_torchrun_two_ranks_gloo_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "job"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
           str(_free_port()), "-m", "roofscope", "run", "-o", str(out), "--wait", "1", "--warmup", "1",
           "--active", "4", *PEAKS, str(REPO / "examples" / "ddp.py"), "--steps", "8", "--device", "cpu"]
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    metas = [_meta(out / f"rank-000{r}") for r in (0, 1)]
    for r, meta in enumerate(metas):
        d = meta["distributed"]
        assert (d["rank"], d["world_size"], d["local_rank"], d["source"]) == (r, 2, r, "torchrun")
        assert d["backend"] == "gloo"  # seen while the group existed; the script destroys it at the end
        assert meta["steps"]["recorded"] == [2, 3, 4, 5]
    assert metas[0]["distributed"]["job_id"] == metas[1]["distributed"]["job_id"] is not None
    assert f"rank 1 of 2: wrote {out / 'rank-0001'}" in res.stdout
    assert "roofscope job: 2 of 2 ranks" in res.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2
    assert (out / "report.html").stat().st_size > 10_000


@pytest.mark.gpu
def test_torchrun_two_gpus_nccl_flags_the_delayed_rank(tmp_path: Path) -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    out = tmp_path / "job"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
           str(_free_port()), "-m", "roofscope", "run", "-o", str(out), "--wait", "3", "--warmup", "2",
           "--active", "8", str(REPO / "examples" / "ddp.py"), "--steps", "16", "--delay-rank", "1",
           "--delay-ms", "20"]
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    for r in (0, 1):
        assert _meta(out / f"rank-000{r}")["distributed"]["backend"] == "nccl"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2
    # Rank 1 sleeps 20 ms per step before backward; rank 0's all-reduce waits for it.
    assert [s["rank"] for s in summary["stragglers"]] == [1]
    per_rank = {p["rank"]: p for p in summary["per_rank"]}
    assert per_rank[0]["comm_exposed_s"] > per_rank[1]["comm_exposed_s"] + 0.010


def test_rank_0_merges_with_the_ceilings_the_ranks_were_analyzed_with(tmp_path: Path, script: Path, monkeypatch,
                                                                       capsys) -> None:
    """rank 0's merge analyzes the job with the run's --peak-* and thresholds, not the defaults
    (`--latency-floor-us 10` classified each rank with 10 us and the merged job with 3)."""
    import roofscope.merge as merge

    seen = []
    real = merge.merge
    monkeypatch.setattr(merge, "merge", lambda sources, **kw: seen.append(kw) or real(sources, **kw))
    out = tmp_path / "job"
    for rank in (1, 0):
        _as_rank(monkeypatch, rank)
        assert _run(out, script, "--latency-floor-us", "10", "--underutilized-below", "0.5") == 0
    (kw,) = seen
    assert (kw["thresholds"].latency_floor_us, kw["thresholds"].underutilized_below) == (pytest.approx(10.0), 0.5)
    assert (kw["ceilings"].peak_tflops, kw["ceilings"].peak_bandwidth_gbs) == (float(PEAKS[1]), float(PEAKS[3]))
    assert "roofscope job: 2 of 2 ranks" in capsys.readouterr().out
