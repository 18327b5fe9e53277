"""Cross-rank analysis: parts, NCCL collectives, bus bandwidth, stragglers, scaling tax.

The synthetic job (``write_job``): 3 ranks, 5 steps of 25 ms (ProfilerStep#1..5). Per step on
every rank: a GEMM kernel of 10 ms (15 ms on the slow rank) at +0.1 ms, an elementwise kernel
of 2 ms, then an all-reduce that ends when the slowest rank's has moved its 3 ms of data:
at +0.1 + 15 + 2 + 3 = +20.1 ms. So the all-reduce lasts 8 ms on the fast ranks (5 ms
waiting for the slow one) and 3 ms on the slow rank, with nothing beside it (all exposed).
Self time = step - exposed comm: 25 - 8 = 17 ms on fast ranks, 25 - 3 = 22 ms on the slow one.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from roofscope.analysis import AnalysisSettings
from roofscope.analyzers.cost.categories import category_of
from roofscope.analyzers.views.collectives import bus_factor, collective_table, parse_kernel
from roofscope.analyzers.job.ranks import PartsError, resolve_parts
from roofscope.merge import analyze_parts
from roofscope.analyzers.job.straggler import combine, detect, scaling_tax
from tests.conftest import external
from tests.kineto import TraceBuilder

HTA = external("hta_a100_rank0.json.gz")
OLD_NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
NEW_NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
STEP_US = 25_000
NELEMS = 1 << 20   # 4 MiB of fp32 per all-reduce


def rank_trace(rank: int, world: int, gemm_us: list[float], slowest_us: list[float], nccl: str = OLD_NCCL,
               comm_args: bool = False) -> TraceBuilder:
    """One rank of the synthetic job; ``gemm_us``/``slowest_us`` per step (see the module docstring)."""
    b = TraceBuilder(device_name="NVIDIA H100 80GB HBM3")
    b.extra["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
    for i, (gemm, slowest) in enumerate(zip(gemm_us, slowest_us)):
        t0 = 1_000 + i * STEP_US
        b.annotation(f"ProfilerStep#{i + 1}", t0, STEP_US)
        b.op("aten::mm", t0 + 10, 10)
        b.launch_kernel("sm90_xmma_gemm_f32f32_tn", t0 + 12, t0 + 100, gemm)
        b.op("aten::add", t0 + 25, 10)
        b.launch_kernel("vectorized_elementwise_kernel", t0 + 27, t0 + 100 + gemm, 2_000)
        b.op("c10d::allreduce_", t0 + 40, 30, dims=[[], []], types=["TensorList", "Scalar"])
        args = {"Collective name": "allreduce", "In msg nelems": NELEMS, "Out msg nelems": NELEMS,
                "dtype": "Float", "Group size": world} if comm_args else {}
        b.op("record_param_comms", t0 + 45, 20, dims=[[NELEMS]], types=["float"], **args)
        start = t0 + 100 + gemm + 2_000
        b.launch_kernel(nccl, t0 + 50, start, t0 + 100 + slowest + 2_000 + 3_000 - start, stream=20)
    return b


def write_job(tmp_path: Path, gemm: list[list[float]]) -> list[Path]:
    slowest = [int(x) for x in np.max(np.array(gemm), axis=0)]
    out = []
    for r, g in enumerate(gemm):
        b = rank_trace(r, len(gemm), g, slowest, nccl=OLD_NCCL if r == 0 else NEW_NCCL, comm_args=r == 2)
        out.append(b.write(tmp_path / f"rank{r}.json.gz"))
    return out


def straggler_job(tmp_path: Path) -> list[Path]:
    return write_job(tmp_path, [[10_000] * 5, [10_000] * 5, [15_000] * 5])


def test_nccl_names_both_namings():
    assert category_of(OLD_NCCL) == category_of(NEW_NCCL) == "communication"
    assert category_of("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)") == "communication"
    assert parse_kernel(OLD_NCCL) == ("allreduce", "RING", "LL")
    assert parse_kernel(NEW_NCCL) == ("allreduce", "RING", "LL")
    assert parse_kernel("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)") == ("sendrecv", "", "")
    assert parse_kernel("ncclKernel_AllGather_RING_LL128_Sum_int8_t()") == ("allgather", "RING", "LL128")
    assert parse_kernel("ncclDevKernel_ReduceScatter_Sum_bf16_TREE_SIMPLE") == ("reduce_scatter", "TREE", "SIMPLE")
    assert parse_kernel("ncclKernel_Broadcast_RING_LL_Sum_int8_t") == ("broadcast", "RING", "LL")
    assert parse_kernel("sm90_xmma_gemm") == ("", "", "")


def test_bus_bandwidth_arithmetic():
    # nccl-tests: allreduce 2(n-1)/n, allgather/reducescatter (n-1)/n, broadcast 1.
    assert bus_factor("allreduce", 8) == pytest.approx(1.75)
    assert bus_factor("allgather", 4) == pytest.approx(0.75)
    assert bus_factor("reduce_scatter", 2) == pytest.approx(0.5)
    assert bus_factor("broadcast", 8) == 1.0
    assert bus_factor("allreduce", None) is None
    # 2 all-reduces of 100 MB in 10 ms each on 8 ranks: algbw 200e6 / 0.02 = 10 GB/s, busbw 17.5 GB/s.
    kc = pd.DataFrame({"collective": ["allreduce"] * 2, "algorithm": ["RING"] * 2, "protocol": ["LL"] * 2,
                       "step": [1, 2], "dur_s": [0.01, 0.01], "bytes": [100e6, 100e6], "group": [0, 0]})
    t = collective_table(kc, 8).iloc[0]
    assert (t["count"], t["bytes"], t["algorithms"]) == (2, 200e6, "RING_LL")
    assert t["algbw"] == pytest.approx(10e9)
    assert t["busbw"] == pytest.approx(17.5e9)


def test_straggler_flagged_with_kernel_evidence(tmp_path):
    parts, world, warnings = resolve_parts([str(p) for p in straggler_job(tmp_path)])
    assert [p.rank for p in parts] == [0, 1, 2] and world == 3 and warnings == []
    job = combine(analyze_parts(parts, AnalysisSettings(), jobs=1), world)
    r = job.ranks.set_index("rank")
    # All-reduce: 8 ms exposed on the fast ranks, 3 ms on the slow one; self = 25 - exposed.
    assert r["comm_exposed_s"].tolist() == pytest.approx([0.008, 0.008, 0.003], abs=1e-6)
    assert r["self_s"].tolist() == pytest.approx([0.017, 0.017, 0.022], abs=1e-6)
    assert r["step_s"].tolist() == pytest.approx([0.025] * 3, abs=1e-6)
    # Median self per step = 17 ms: rank 2's excess is +5 ms in 5 of 5 steps; noise = 2% of 25 ms = 0.5 ms.
    assert [s.rank for s in job.stragglers] == [2]
    s = job.stragglers[0]
    assert s.excess_s == pytest.approx(0.005, abs=1e-6) and s.positive_share == 1.0
    assert job.noise_s == pytest.approx(0.0005)
    # Its GEMM takes 15 ms/step against the others' 10 ms.
    assert s.kernels[0]["name"] == "sm90_xmma_gemm_f32f32_tn"
    assert s.kernels[0]["excess_ms"] == pytest.approx(5.0, abs=1e-3)
    rules = [f.rule for f in job.findings]
    assert rules[0] == "straggler" and job.findings[0].saving_s == pytest.approx(0.005, abs=1e-6)
    # Pure communication = the least-waiting rank's 3 ms (12% of 25 ms): above 3%, half hideable.
    exposed = next(f for f in job.findings if f.rule == "exposed_communication")
    assert exposed.saving_s == pytest.approx(0.0015, abs=1e-6)
    # Overlap on that same rank: its 3 ms all-reduce runs alone, 0% overlapped (not 1 - 3/8 against the
    # median rank's 8 ms, which includes waiting for rank 2).
    assert exposed.figures["comm_s"] == pytest.approx(0.003, abs=1e-6)
    assert exposed.figures["overlap_share"] == pytest.approx(0.0, abs=1e-9)


def test_noise_only_not_flagged(tmp_path):
    jitter = [[300, -200, 100, -300, 200], [-100, 250, -250, 150, 0], [0, -50, 300, -100, -200]]
    gemm = [[10_000 + j for j in row] for row in jitter]
    parts, world, _ = resolve_parts([str(p) for p in write_job(tmp_path, gemm)])
    job = combine(analyze_parts(parts, AnalysisSettings(), jobs=1), world)
    assert job.stragglers == []
    assert "straggler" not in [f.rule for f in job.findings]
    # Every rank's step still ends at the slowest rank's all-reduce: 25 ms.
    assert job.step_s == pytest.approx(0.025, abs=1e-6)


def test_detect_hand_worked():
    # Steps x ranks self time (ms): rank 2 is +2 ms in 4 of 5 steps (80%), median excess +2.
    st = pd.DataFrame({0: [10.0, 10, 10, 10, 10], 1: [10.0, 10, 10, 10, 10], 2: [12.0, 12, 12, 12, 9]}) / 1e3
    found, noise = detect(st, step_s=0.05)
    # noise = max(2% of 50 ms = 1 ms, 3 x MAD 0) = 1 ms < 2 ms.
    assert noise == pytest.approx(0.001)
    assert found == [(2, pytest.approx(0.002), pytest.approx(0.8))]
    found, _ = detect(st, step_s=0.15)      # noise 3 ms > 2 ms: not flagged
    assert found == []


def test_collectives_and_comm_args(tmp_path):
    parts, world, _ = resolve_parts([str(p) for p in straggler_job(tmp_path)])
    results = analyze_parts(parts, AnalysisSettings(), jobs=1)
    for r in results:
        t = r.collectives.set_index("collective")
        assert list(t.index) == ["allreduce"] and t.loc["allreduce", "count"] == 5
        # 4 MiB per call, from record_param_comms' shape (ranks 0, 1) or its In msg nelems x Float (rank 2).
        assert t.loc["allreduce", "bytes"] == 5 * 4 * NELEMS
        assert t.loc["allreduce", "group"] == 3
    # Rank 2's all-reduces last 3 ms: algbw = 4 MiB / 3 ms = 1.398 GB/s, busbw x 2(3-1)/3 = 1.864 GB/s.
    t2 = results[2].collectives.iloc[0]
    assert t2["algbw"] == pytest.approx(4 * NELEMS / 0.003, rel=1e-6)
    assert t2["busbw"] == pytest.approx(4 * NELEMS / 0.003 * 4 / 3, rel=1e-6)
    assert t2["algorithms"] == "RING_LL"


def test_comm_args_ignore_other_events_arguments(tmp_path):
    from roofscope.analyzers.views.collectives import comm_args
    from roofscope.analyzers.ingest import read as read_trace

    b = rank_trace(0, 2, [10_000] * 2, [10_000] * 2, comm_args=True)
    b.op("aten::foo", 10, 5, dtype=7, **{"Group size": "all"})   # another op's arguments of other types
    args = comm_args(read_trace(b.write(tmp_path / "r0.json")))
    # Both record_param_comms calls: 1 Mi elements of Float in a group of 2; the odd op is no row.
    assert len(args) == 2 and args["in_nelems"].tolist() == [NELEMS] * 2
    assert args["dtype"].tolist() == ["Float"] * 2 and args["group_size"].tolist() == [2, 2]


def test_scaling_tax_arithmetic():
    ranks = pd.DataFrame({"steps": [5, 5, 5], "step_s": [0.025, 0.025, 0.025], "comm_exposed_s": [0.008, 0.008, 0.003]})
    t = scaling_tax(0.015, ranks)
    # tax 25 - 15 = 10 ms: exposed comm 3 ms (least-waiting rank), straggler wait 8 - 3 = 5 ms (the rank
    # that waits most), other 2 ms.
    assert t["tax_s"] == pytest.approx(0.010)
    assert t["exposed_comm_s"] == pytest.approx(0.003)
    assert t["straggler_wait_s"] == pytest.approx(0.005)
    assert t["other_s"] == pytest.approx(0.002)
    assert t["efficiency"] == pytest.approx(0.6)
    # A fourth rank without steps (NaN figures) is not "the rank that waits least" (0 ms): same split.
    t4 = scaling_tax(0.015, pd.concat([ranks, pd.DataFrame({"steps": [0], "step_s": [np.nan],
                                                             "comm_exposed_s": [np.nan]})], ignore_index=True))
    assert (t4["exposed_comm_s"], t4["straggler_wait_s"]) == (pytest.approx(0.003), pytest.approx(0.005))
    # The 2xH200 delayed run: rank 0 waits 13.93 ms exposed, rank 1 0.13 ms; baseline 9.98, job 25.32 ms.
    # Tax 15.34 = 0.13 (communication) + 13.80 (rank 0 waiting for rank 1) + 1.41 (the rest; DDP
    # without the delay paid 0.98 ms over the baseline).
    t2 = scaling_tax(0.00998, pd.DataFrame({"steps": [10, 10], "step_s": [0.02534, 0.02530],
                                            "comm_exposed_s": [0.01393, 0.00013]}))
    assert t2["straggler_wait_s"] == pytest.approx(0.0138)
    assert t2["other_s"] == pytest.approx(0.02532 - 0.00998 - 0.00013 - 0.0138)


def test_parts_errors_and_gaps(tmp_path):
    paths = straggler_job(tmp_path)
    with pytest.raises(PartsError, match="rank0.json.gz is given twice"):
        resolve_parts([str(paths[0]), str(paths[0])])
    shutil.copy(paths[0], tmp_path / "copy.json.gz")        # another file, the same distributedInfo.rank
    with pytest.raises(PartsError, match="rank 0 appears twice"):
        resolve_parts([str(paths[0]), str(tmp_path / "copy.json.gz")])
    (tmp_path / "gathered").mkdir()
    (tmp_path / "gathered" / "job.json").write_text('{"schema_version": 1, "parts": []}')
    with pytest.raises(PartsError, match="no parts to merge"):
        resolve_parts([str(tmp_path / "gathered")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(PartsError, match="not a Run directory"):
        resolve_parts([str(tmp_path / "empty")])
    with pytest.raises(PartsError, match="no such file"):
        resolve_parts([str(tmp_path / "missing.json")])
    parts, world, warnings = resolve_parts([str(paths[0]), str(paths[2])])
    assert [p.rank for p in parts] == [0, 2] and world == 3
    assert warnings == ["1 of 3 ranks missing: 1; figures cover the ranks given"]


def test_rank_from_order_without_distributed_info(tmp_path):
    b = rank_trace(0, 1, [10_000], [10_000])
    del b.extra["distributedInfo"]
    a = b.write(tmp_path / "a.json")
    shutil.copy(a, tmp_path / "b.json")
    parts, world, _ = resolve_parts([str(tmp_path / "b.json"), str(a)])
    assert [(p.rank, p.path.name) for p in parts] == [(0, "b.json"), (1, "a.json")] and world == 2
    # The same file under two spellings is one part named twice, not ranks 0 and 1.
    (tmp_path / "sub").mkdir()
    with pytest.raises(PartsError, match=r"is given twice \(also as "):
        resolve_parts([str(a), str(tmp_path / "sub" / ".." / "a.json")])


def test_rank_without_steps_does_not_hide_the_straggler(tmp_path):
    # A 4th rank whose trace has no ProfilerStep spans: before, its all-NaN column emptied the
    # steps every rank recorded (no straggler test at all) and its NaN exposed time counted as
    # 0 ms, the "least waiting" rank (no exposed-communication finding).
    b = rank_trace(3, 4, [10_000] * 5, [15_000] * 5)
    b.events = [e for e in b.events if not str(e.get("name", "")).startswith("ProfilerStep")]
    paths = [str(p) for p in straggler_job(tmp_path)] + [str(b.write(tmp_path / "nosteps.json"))]
    parts, world, _ = resolve_parts(paths)
    job = combine(analyze_parts(parts, AnalysisSettings(), jobs=1), world)
    assert job.ranks["steps"].tolist() == [5, 5, 5, 0]
    # The same figures as the 3-rank job: rank 2 +5 ms over the median 17 ms, noise 2% of 25 ms.
    assert [(s.rank, round(s.excess_s, 6)) for s in job.stragglers] == [(2, 0.005)]
    assert job.noise_s == pytest.approx(0.0005) and job.step_s == pytest.approx(0.025, abs=1e-6)
    exposed = next(f for f in job.findings if f.rule == "exposed_communication")
    assert exposed.figures["exposed_comm_s"] == pytest.approx(0.003, abs=1e-6)   # rank 2's, not rank 3's NaN
    assert job.warnings == ["rank 3: no profiled step; left out of the straggler test and the job's medians"]


def test_detect_edge_cases():
    ms = 1e-3
    # One rank, or no step common to every rank that has steps: no test (noise NaN).
    assert detect(pd.DataFrame({0: [10 * ms, 10 * ms]}), 0.025)[0] == []
    apart = pd.DataFrame({0: [10 * ms, np.nan], 1: [np.nan, 20 * ms]}, index=[1, 2])
    found, noise = detect(apart, 0.025)
    assert found == [] and np.isnan(noise)
    # Different step sets: only steps 2..4 are common; rank 1 is +2 ms there (its 50 ms step 5 is ignored).
    st = pd.DataFrame({0: [10, 10, 10, 10, np.nan], 1: [np.nan, 12, 12, 12, 50], 2: [10, 10, 10, 10, 10]},
                      index=[1, 2, 3, 4, 5]) * ms
    found, noise = detect(st, 0.025)
    # noise = max(2% of 25 ms = 0.5 ms, 3 x MAD 0) = 0.5 ms; excess = 12 - median(10, 12, 10) = 2 ms in 3 of 3 steps.
    assert found == [(1, pytest.approx(0.002), 1.0)] and noise == pytest.approx(0.0005)
    # A NaN self time in one step drops that step for all ranks, not the rank.
    st.loc[3, 2] = np.nan
    assert detect(st, 0.025)[0] == [(1, pytest.approx(0.002), 1.0)]
    # All ranks equal: no excess anywhere, nothing flagged.
    assert detect(pd.DataFrame({r: [10 * ms] * 4 for r in range(3)}), 0.025)[0] == []


def test_jobs2_same_as_jobs1(tmp_path):
    parts, world, _ = resolve_parts([str(p) for p in straggler_job(tmp_path)])
    one = combine(analyze_parts(parts, AnalysisSettings(), jobs=1), world).to_dict()
    two = combine(analyze_parts(parts, AnalysisSettings(), jobs=2), world).to_dict()
    assert json.dumps(one, sort_keys=True) == json.dumps(two, sort_keys=True)


def test_dead_worker_is_one_error_and_cancels_the_rest(tmp_path, monkeypatch):
    from concurrent.futures.process import BrokenProcessPool

    import roofscope.merge as ranks_mod
    from roofscope.errors import RoofscopeError

    class KilledPool:     # a worker killed by the OOM killer breaks the pool mid-map
        shutdown_args: tuple = ()

        def __init__(self, **kwargs):
            pass

        def map(self, *args):
            raise BrokenProcessPool("A process in the process pool was terminated abruptly")

        def shutdown(self, wait, cancel_futures):
            KilledPool.shutdown_args = (wait, cancel_futures)

    monkeypatch.setattr(ranks_mod, "ProcessPoolExecutor", KilledPool)
    parts, _, _ = resolve_parts([str(p) for p in straggler_job(tmp_path)])
    with pytest.raises(RoofscopeError, match=r"a worker process analyzing the ranks died .* fewer --jobs than 2"):
        analyze_parts(parts, AnalysisSettings(), jobs=2)
    assert KilledPool.shutdown_args == (True, True)


def test_hta_collectives():
    parts, world, warnings = resolve_parts([str(HTA)])
    assert (parts[0].rank, world) == (0, 16) and "15 of 16 ranks missing" in warnings[0]
    (r,) = analyze_parts(parts, AnalysisSettings(), jobs=1)
    t = r.collectives.set_index("collective")
    # 80 NCCL kernels, all SendRecv RING_SIMPLE by name; the c10d op / nccl: annotation names the collective.
    assert t["count"].to_dict() == {"allreduce": 10, "alltoall": 45, "sendrecv": 5, "allgather": 10,
                                    "reduce_scatter": 10}
    assert set(t["algorithms"]) == {"RING_SIMPLE"}
    # Sizes from the c10d ops' largest tensor: all-gather/reduce-scatter 10 x 58.7 MB; all-reduce takes a
    # TensorList (no sizes), the 5 bare SendRecv have no launching op.
    assert t.loc["allgather", "bytes"] == 587_202_560 and t.loc["reduce_scatter", "bytes"] == 587_202_560
    assert t.loc["alltoall", "bytes"] == 169_670_044
    assert np.isnan(t.loc["allreduce", "bytes"]) and t.loc["allreduce", "sized"] == 0
    assert (t["group"] == 16).all()
    assert "exposed_communication" in [f["rule"] for f in r.findings]


def test_exposed_communication_rule_single_rank(tmp_path):
    from roofscope.analysis import analyze

    # A fast rank: 8 ms of its 25 ms step is all-reduce with nothing beside it (32%); half is hideable.
    a = analyze(rank_trace(0, 2, [10_000] * 5, [15_000] * 5).write(tmp_path / "r0.json"))
    f = next(f for f in a.diagnosis.findings if f.rule == "exposed_communication")
    assert f.saving_s == pytest.approx(0.004, abs=1e-6)
    assert f.figures["exposed_share"] == pytest.approx(0.32, abs=1e-4) and f.figures["overlap_share"] == 0.0
    assert "bucket_cap_mb" in f.fix and "bf16_compress_hook" in f.snippet
    # Judged on one rank of 2, the exposed time may be waiting for the other: low confidence, said so.
    assert f.confidence == "low" and "on one rank of 2 it includes waiting" in f.summary
    # No communication at all: the rule's term does not bind and it is skipped.
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1_000)
    b.op("aten::mm", 10, 10)
    b.launch_kernel("sm90_xmma_gemm", 12, 100, 800)
    d = analyze(b.write(tmp_path / "nocomm.json")).diagnosis
    assert any(s["rule"] == "exposed_communication" and s["reason"].startswith("not binding") for s in d.skipped)


def test_straggler_evidence_names_only_kernels_that_explain_the_excess():
    from types import SimpleNamespace

    from roofscope.analyzers.job.straggler import _evidence

    def rank(r, gemm_ms, add_ms, host_ms):
        # Two steps; per-step times are what _evidence compares (sum over steps / 2).
        ks = pd.DataFrame({"name": ["gemm", "gemm", "add", "add"],
                           "time_s": [gemm_ms / 1e3] * 2 + [add_ms / 1e3] * 2})
        return SimpleNamespace(rank=r, kernel_steps=ks, steps=pd.DataFrame({"idle_host_s": [host_ms / 1e3] * 2}))

    # Rank 1 is slow because its host sleeps 14 ms per step; its kernels differ by microseconds of
    # jitter (gemm +0.02 ms), which is 0.3% of a 7 ms excess: under the 5% bar, so no kernel is named.
    results = [rank(0, 10.0, 1.0, 0.1), rank(1, 10.02, 1.0, 14.1), rank(2, 10.0, 1.0, 0.1)]
    kernels, host = _evidence(results, 1, 0.007)
    assert kernels == [] and host == pytest.approx(0.014)
    # A gemm 5 ms slower explains 5 ms of a 5 ms excess: named, with its ms per step.
    results[1] = rank(1, 15.0, 1.0, 0.1)
    kernels, host = _evidence(results, 1, 0.005)
    assert [(k["name"], round(k["excess_ms"], 6)) for k in kernels] == [("gemm", 5.0)] and host == 0.0


def test_two_rank_straggler_excess_is_the_full_gap():
    # The 2xH200 DDP run with rank 1 sleeping 20 ms before backward (docs/multi-gpu.md): own work
    # per step in ms. Against the other rank alone the per-step gaps are 18.13, 16.33, 16.41, 14.15,
    # 13.50, 13.58, 13.20, 13.98, 13.22, 13.55; their median is (13.58 + 13.98) / 2 = 13.78 ms, the
    # time rank 0 waits each step. A median over both ranks would report half of it (6.89 ms).
    r0 = [11.40, 11.35, 11.32, 11.35, 11.35, 11.35, 11.37, 11.37, 11.35, 11.45]
    r1 = [29.53, 27.68, 27.73, 25.50, 24.85, 24.93, 24.57, 25.35, 24.57, 25.00]
    st = pd.DataFrame({0: r0, 1: r1}, index=range(8, 18)) * 1e-3
    found, _ = detect(st, step_s=0.02532)
    assert found == [(1, pytest.approx(0.01378, abs=1e-6), 1.0)]
