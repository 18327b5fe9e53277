"""CPU process groups (gloo): collectives are host intervals, so a CPU job has communication,
exposed waiting and a straggler, from the real two-rank fixture tests/data/cpu_gloo_straggler
(`examples/ddp.py --device cpu --delay-rank 1 --delay-ms 50` under torchrun)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from roofscope.analysis import AnalysisSettings
from roofscope.config import CeilingOverrides
from roofscope.analysis import analyze
from roofscope.analyzers.views.collectives import canonical, host_comm_steps, kernel_collectives
from roofscope.analyzers.job.ranks import resolve_parts
from roofscope.merge import analyze_parts
from roofscope.analyzers.job.straggler import combine
from roofscope.cli import main

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "cpu_gloo_straggler"
TRACES = [str(DATA / "rank-0.json.gz"), str(DATA / "rank-1.json.gz")]
PEAKS = {"peak_tflops": 0.05, "peak_bandwidth_gbs": 10.0}


def test_gloo_names_are_collectives() -> None:
    assert canonical("gloo:all_reduce") == "allreduce" and canonical("gloo:broadcast") == "broadcast"


def test_rank0_waits_for_rank1_in_gloo_all_reduce() -> None:
    a = analyze(TRACES[0], **PEAKS)
    hc = host_comm_steps(a.trace, a.kernels, a.steps)
    # Step 4 of rank 0: gloo:all_reduce runs 10.65 -> 70.12 ms into the step (59.47 ms) while the main
    # thread runs no op between its last AccumulateGrad (10.62 ms) and the bucket copies (70.16 ms):
    # nearly all of it is exposed. The c10d::allreduce_ op that queued it adds ~0.8 ms on the main thread.
    assert list(hc.index) == [3, 4, 5]
    assert hc.at[4, "comm_s"] == pytest.approx(0.0603, abs=1e-3)
    assert hc.at[4, "comm_exposed_s"] == pytest.approx(0.0595, abs=1e-3)
    assert (hc["comm_exposed_s"] <= hc["comm_s"] + 1e-12).all() and (hc["busy_s"] >= hc["comm_s"]).all()
    kc = kernel_collectives(a.trace, a.kernels, a.steps)
    assert list(kc["collective"]) == ["allreduce"] * 3 and list(kc["step"]) == [3, 4, 5]
    assert kc["dur_s"].sum() == pytest.approx(0.16387, abs=1e-4)   # the three gloo:all_reduce: 163.87 ms


def test_cpu_job_names_rank1_the_straggler() -> None:
    parts, world, _ = resolve_parts(TRACES)
    job = combine(analyze_parts(parts, AnalysisSettings(CeilingOverrides(**PEAKS)), jobs=1), world)
    r = job.ranks.set_index("rank")
    # Rank 0 waits ~53 ms/step in the all-reduce (median), rank 1 ~1.3 ms; the step ends at the same
    # all-reduce on both (~76-77 ms), so rank 1's own work is ~46 ms/step longer: its 50 ms sleep,
    # seen as host idle (+48 ms) beyond rank 0's.
    assert r.at[0, "comm_exposed_s"] > 0.045 and r.at[1, "comm_exposed_s"] < 0.005
    assert [s.rank for s in job.stragglers] == [1]
    s = job.stragglers[0]
    # Sized by the arrival skew: rank 0's gloo:all_reduce runs ~50 ms longer than rank 1's in each step (it
    # entered first and waited), the 50 ms sleep; not by rank 0's compute read through its blocked wait.
    assert s.basis == "arrival skew"
    assert 0.048 < s.excess_s < 0.052 and s.positive_share == 1.0
    late = job.lateness
    assert list(late.index) == [3, 4, 5] and (late[0] < 0.002).all() and (late[1] > 0.045).all()
    # Bounded by the balanced step: 76.66 ms less rank 0's own work (busy 72.9 - comm 57.4 = 15.5 ms): 61 ms,
    # above the wait, so the saving is the wait.
    assert s.bound_s == pytest.approx(0.0612, abs=0.002) and s.saving_s == s.excess_s
    assert 0.040 < s.host_idle_excess_s < 0.052
    assert job.findings[0].rule == "straggler" and job.findings[0].figures["rank"] == 1
    assert job.collectives["collective"].tolist() == ["allreduce"]


def test_host_comm_steps_arithmetic() -> None:
    # One step [0, 100] ns-units scaled to ms: work 0-10 and 60-70 on the main thread, a gloo
    # interval 10-65 on a worker thread: comm 55, exposed = union(all) 70 - union(work) 20 = 50,
    # host idle 100 - 70 = 30.
    from roofscope.analyzers.model.trace import Trace

    ms = 1_000_000
    ann = pd.DataFrame({"name": ["gloo:all_reduce"], "pid": [1], "tid": [9], "ts_ns": [10 * ms],
                        "dur_ns": [55 * ms], "end_ns": [65 * ms], "external_id": [1], "thread": [1]})
    ops = pd.DataFrame({c: pd.Series([], dtype=object if c == "name" else np.int64)
                        for c in ("name", "tid", "ts_ns", "end_ns", "sig")})
    trace = Trace.__new__(Trace)
    trace.annotations, trace.ops = ann, ops
    work = pd.DataFrame({"ts_ns": [0, 60 * ms], "dur_ns": [10 * ms, 10 * ms], "tid": [1, 1]})
    steps = pd.DataFrame({"step": [7], "ts_ns": [0], "end_ns": [100 * ms]})
    hc = host_comm_steps(trace, work, steps)
    assert hc.loc[7].to_dict() == pytest.approx({"busy_s": 0.070, "comm_s": 0.055, "comm_exposed_s": 0.050,
                                                 "idle_host_s": 0.030})


def test_merge_cli_names_rank1(tmp_path: Path, capsys) -> None:
    out = tmp_path / "job"
    assert main(["merge", *TRACES, "-o", str(out), "--jobs", "1", "--peak-tflops", "0.05",
                 "--peak-bandwidth", "10"]) == 0
    text = capsys.readouterr().out
    assert "straggler: rank 1 enters the collectives last" in text and "no straggler" not in text


def test_a_job_directorys_summary_alone_on_stdout(tmp_path: Path, capsys) -> None:
    job = Path(__file__).parent / "data" / "h200_gloo_stall"
    assert main(["analyze", str(job), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)   # the job's summary alone: no terminal summary around it
    assert doc["world_size"] == 2 and [s["rank"] for s in doc["stragglers"]] == [1]
    assert not Path("-").exists()


def test_merge_subprocess_names_rank1(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "roofscope", "merge", *TRACES, "-o", str(tmp_path / "job"),
                          "--jobs", "1", "--peak-tflops", "0.05", "--peak-bandwidth", "10"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "straggler: rank 1 enters the collectives last" in res.stdout


def _torchrun_job(tmp_path: Path, name: str, *extra: str) -> tuple[dict, list[float]]:
    """A real two-rank gloo job of examples/ddp.py under `torchrun -m roofscope run`: the job's summary.json and
    the script's own median step per rank (its timer over the second half of the steps, unprofiled)."""
    import json
    import os
    import re
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / name
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(port),
           "-m", "roofscope", "run", "-o", str(out), "--wait", "2", "--warmup", "1", "--active", "8",
           "--peak-tflops", "0.05", "--peak-bandwidth", "10", str(ROOT / "examples" / "ddp.py"), "--steps", "40",
           "--device", "cpu", *extra]
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")}
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    own = [float(m) for m in re.findall(r"median step ([\d.]+) ms \(own timer", res.stdout)]
    assert len(own) == 2, res.stdout
    return json.loads((out / "summary.json").read_text()), own


def test_job_step_is_the_programs_own_and_the_straggler_is_sized_by_its_arrival(tmp_path: Path) -> None:
    """Issue 42 on CPU: rank 1 sleeps 60 ms before each backward. The job's step is the ranks' own (unprofiled)
    step, within 10% of the script's own timer; rank 1 is named, sized by how long rank 0 waits for it in the
    all-reduce (about the sleep); a balanced run names no straggler."""
    stall, own = _torchrun_job(tmp_path, "stall", "--delay-rank", "1", "--delay-ms", "60")
    assert stall["step_time_source"] == "unprofiled"
    assert stall["step_time_s"] * 1e3 == pytest.approx(sum(own) / 2, rel=0.10)
    # The profiled step is shown beside. Its inflation is no test here: 60 ms of sleep dominate the step, and
    # on 2 shared cores the profiled median came out 0.03 ms under the unprofiled one (70.70 vs 70.73 ms).
    assert stall["profiled_step_time_s"] == pytest.approx(stall["step_time_s"], rel=0.5)
    (s,) = stall["stragglers"]
    assert (s["rank"], s["basis"]) == (1, "arrival skew")
    # The others wait about the sleep: 60 ms (0.5-1.5x of it). On this 2-core machine the ranks share cores, so
    # removing the sleep frees CPU for rank 0 as well: the balanced step is shorter by less than the wait
    # (docs/multi-gpu-analysis.md); on GPUs the two agree (docs/validation.md).
    assert 0.030 < s["saving_s"] < 0.090 and s["saving_s"] <= s["excess_s"]
    balanced, own_b = _torchrun_job(tmp_path, "balanced")
    # A balanced run names no straggler the size of the stall. On 2 cores shared with the rest of the test run
    # one rank can fall behind for real (one CI run: rank 1 entered every all-reduce last, 3.7 ms of an 8.7 ms
    # step, its aten::sqrt and aten::div 1 ms slower each): what is named then is that lag, a small part of
    # the stall's wait, with the slower work that shows it.
    for lag in balanced["stragglers"]:
        assert lag["excess_s"] < 0.25 * s["excess_s"], lag
        assert lag["kernels"] or lag["host_idle_excess_s"] > 0, lag
    # Balanced steps are 7-9 ms: two ranks on 2 cores shared with the test run's other work move them by about
    # a millisecond from one stretch of steps to the next (8.67 against the script's 7.59 ms in one CI run),
    # so the bound is 10% or 1.5 ms, whichever is larger.
    assert balanced["step_time_s"] * 1e3 == pytest.approx(sum(own_b) / 2, rel=0.10, abs=1.5)


GPU_GLOO = Path(__file__).parent / "data"
# Recorded on one NVIDIA H200 (2026-11-28): `torchrun --nproc-per-node 2 -m roofscope run
# benchmarks/real_clients/ddp_encoder.py --share-gpu --layers 2 --d-model 512 [--stall-rank 1 --stall-ms 25]`,
# both ranks on cuda:0 over gloo (CUDA tensors): no kernel communicates, gloo's transfers are host intervals
# on two worker threads, so a step's two bucket all-reduces run at once.


def test_gloo_over_cuda_tensors_sizes_the_straggler_by_one_wait_per_overlapping_group(tmp_path: Path) -> None:
    parts, world, _ = resolve_parts([str(GPU_GLOO / "h200_gloo_stall")])
    results = analyze_parts(parts, AnalysisSettings(), jobs=1)
    arrivals = {r.rank: r.arrivals for r in results}
    # Rank 0 (waiting) begins its second all-reduce while the first still waits for rank 1: step 3's calls run
    # 7.78-33.50 and 12.99-49.44 ms into the step; rank 1's do not overlap (5.72-8.73, 12.52-24.87 ms).
    assert arrivals[0]["overlaps"].tolist() == [False, True] * 3 and not arrivals[1]["overlaps"].any()
    job = combine(results, world)
    # Step 3: rank 0's calls last 25.72 and 36.45 ms, rank 1's 3.01 and 12.35: waits of 22.72 and 24.10 ms
    # that overlap, one wait of 24.10 ms (their sum, 46.8 ms, was nearly twice the 25 ms sleep).
    assert job.lateness[1].tolist() == pytest.approx([0.02410, 0.02609, 0.02799], abs=2e-5)
    (s,) = job.stragglers
    assert (s.rank, s.basis, s.positive_share) == (1, "arrival skew", 1.0)
    # The median wait, 26.09 ms; the script's plain runs measured stalled - balanced steps of 23.4-28.0 ms
    # (docs/validation.md): 0.93-1.11x.
    assert s.saving_s == s.excess_s == pytest.approx(0.02609, abs=2e-5)
    r = job.ranks.set_index("rank")
    # The job's step is the ranks' own (48.19 and 48.24 ms unprofiled; the script's timer said 47.86/47.66),
    # and the host transfers are its communication: rank 0 waits most of it.
    assert job.step_s == pytest.approx(0.04822, abs=5e-5) and job.own_time
    assert r.at[0, "comm_s"] > 0.040 and r.at[0, "comm_exposed_s"] > r.at[1, "comm_exposed_s"] + 0.020


def test_gloo_over_cuda_tensors_balanced_has_no_straggler(tmp_path: Path, capsys) -> None:
    parts, world, _ = resolve_parts([str(GPU_GLOO / "h200_gloo_balanced")])
    job = combine(analyze_parts(parts, AnalysisSettings(), jobs=1), world)
    # Rank 0's lateness in steps 3-5 is 2.36, 0.49 and 1.32 ms: it swings by as much as it amounts to (MAD
    # 0.83 ms, 3x = 2.49 ms above its 1.32 ms median), the jitter of two processes' transfers on one GPU.
    assert job.lateness[0].tolist() == pytest.approx([0.002361, 0.000495, 0.001323], abs=2e-6)
    assert job.stragglers == [] and job.step_s == pytest.approx(0.02152, abs=5e-5)
    assert main(["merge", str(GPU_GLOO / "h200_gloo_balanced"), "-o", str(tmp_path / "job")]) == 0
    out = capsys.readouterr().out
    assert "median step 21.52 ms without the profiler" in out
    assert "no straggler: every rank's arrival at the collectives is within the noise (2.54 ms/step)" in out
