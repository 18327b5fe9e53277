"""GPU timeline: busy/idle per step, idle gaps and their causes, host syncs, copies, durations.

Synthetic traces put their first event at t=0 (a ProfilerStep or an op), so a builder time of
``x`` us is ``x * 1000`` ns on the trace clock and every number below is worked by hand.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import roofscope
from roofscope.analyzers.views.metrics import step_table
from roofscope.analyzers.model.timeline import Timeline
from roofscope.analyzers.views.timeline import BUCKET_LABELS, timeline
from roofscope.hardware.devices import Ceilings

from .conftest import external
from .kineto import PID, TID, TraceBuilder
from .test_trace import HTA

DATA = Path(__file__).parent / "data"
TOY = Ceilings(device="toy", source="user", peaks={"fp32": 10e12, "bf16": 100e12}, bandwidth=1e12)
US = 1e-6


def _gpu(b: TraceBuilder, name: str, ts: float, dur: float, *, launch_ts: float | None = None,
         launch_dur: float = 2, device: int = 0, stream: int = 7, cat: str = "kernel",
         nbytes: int | None = None, runtime: str = "cudaLaunchKernel", tid: int = TID) -> None:
    """A GPU activity on any device, launched by ``runtime`` at ``launch_ts`` (None: no launch event)."""
    b._corr += 1
    args = {"correlation": b._corr, "device": device, "stream": stream}
    if nbytes is not None:
        args["bytes"] = nbytes
    if launch_ts is not None:
        b.events.append({"ph": "X", "cat": "cuda_runtime", "name": runtime, "pid": PID, "tid": tid,
                         "ts": launch_ts, "dur": launch_dur, "args": {"correlation": b._corr}})
    else:
        args.pop("correlation")
    b.events.append({"ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream, "ts": ts, "dur": dur,
                     "args": args})


def _runtime(b: TraceBuilder, name: str, ts: float, dur: float, tid: int = TID) -> None:
    b._corr += 1
    b.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": PID, "tid": tid, "ts": ts,
                     "dur": dur, "args": {"correlation": b._corr}})


def _timeline(b: TraceBuilder, tmp_path: Path, latency: float | None = None) -> Timeline:
    a = roofscope.analyze(b.write(tmp_path / f"t{latency}.json"), ceilings=TOY)
    # The windows are the ProfilerStep spans as the comments draw them (Result.steps measures
    # steps on the GPU instead, from one step's first activity to the next's).
    return timeline(a.trace, a.kernels, step_table(a.trace), latency)


def _gaps(tl: Timeline) -> list[tuple]:
    return [(int(r.start_ns), int(r.end_ns), r.kind, bool(r.after_sync)) for r in tl.gaps.itertuples()]


def test_host_bound_step(tmp_path):
    # Each launch (2 us of cudaLaunchKernel) ends after the previous kernel finished:
    #   K1 launched 10-12, runs 15-20;  K2 launched 30-32, runs 35-40;  K3 launched 50-52, runs 55-60.
    # Step 0-100: busy 15 us; gaps 20-35 and 40-55 are host gaps (launch ended at 32 > 20, 52 > 40),
    # 0-15 and 60-100 are edges: host 30 us + edge 55 us = idle 85 us.
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 100)
    for launch, start in ((10, 15), (30, 35), (50, 55)):
        _gpu(b, "elementwise_kernel", start, 5, launch_ts=launch)
    tl = _timeline(b, tmp_path)
    s = tl.steps.loc[1]
    assert s["wall_s"] == pytest.approx(100 * US)
    assert s["busy_s"] == pytest.approx(15 * US)
    assert s["idle_s"] == pytest.approx(85 * US)
    assert s["idle_host_s"] == pytest.approx(30 * US)
    assert s["idle_edge_s"] == pytest.approx(55 * US)
    assert s["idle_queued_s"] == 0 and s["idle_other_s"] == 0
    assert s["kernels"] == 3
    assert s["launch_api_s"] == pytest.approx(6 * US)  # 3 launches x 2 us
    # 3 kernels x the assumed 5 us
    assert s["launch_overhead_s"] == pytest.approx(15 * US)
    assert _gaps(tl) == [(0, 15_000, "edge", False), (20_000, 35_000, "host", False),
                         (40_000, 55_000, "host", False), (60_000, 100_000, "edge", False)]
    # the gap 20-35 ends with K2 (row 1), the trailing edge with nothing
    assert tl.gaps["next_kernel"].tolist() == [0, 1, 2, -1]
    o = tl.overall
    assert o["host_idle_fraction"] == pytest.approx(0.30)
    assert o["busy_fraction"] == pytest.approx(0.15)
    assert o["launch_latency_source"] == "assumed 5 us"
    # a measured launch latency of 4 us: 3 x 4 = 12 us
    measured = _timeline(b, tmp_path, latency=4e-6)
    assert measured.steps.loc[1, "launch_overhead_s"] == pytest.approx(12 * US)
    assert measured.overall["launch_latency_source"] == "measured"


def test_queued_step_is_busy(tmp_path):
    # All three launched up front (1-3, 3-5, 5-7); the GPU runs 10-30, 31-51, 52-72 with 1 us between
    # queued kernels. Step 9-73: wall 64 us, busy 60, queued 2 (two 1 us gaps), edges 1 + 1.
    b = TraceBuilder()
    b.op("train_step", 0, 8)
    b.annotation("ProfilerStep#0", 9, 64)
    for i, start in enumerate((10, 31, 52)):
        _gpu(b, "gemm_kernel", start, 20, launch_ts=1 + 2 * i)
    tl = _timeline(b, tmp_path)
    s = tl.steps.loc[0]
    assert s["busy_s"] == pytest.approx(60 * US)
    assert s["busy_s"] / s["wall_s"] == pytest.approx(60 / 64)
    assert s["idle_queued_s"] == pytest.approx(2 * US)
    assert s["idle_host_s"] == 0
    assert s["idle_edge_s"] == pytest.approx(2 * US)
    assert tl.gaps["kind"].tolist() == ["edge", "queued", "queued", "edge"]


def test_long_wait_of_queued_kernel_and_unlaunched_kernel_are_other(tmp_path):
    # K2 was launched at 1-3 but starts 30 us after K1 ends (an event wait): "other", not "queued".
    # K3 has no launch event at all: its gap is "other" too.
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 100)
    _gpu(b, "k1", 10, 10, launch_ts=1)
    _gpu(b, "k2", 50, 10, launch_ts=3)
    _gpu(b, "k3", 65, 10)
    tl = _timeline(b, tmp_path)
    assert _gaps(tl)[1:3] == [(20_000, 50_000, "other", False), (60_000, 65_000, "other", False)]
    assert tl.steps.loc[0, "idle_other_s"] == pytest.approx(35 * US)


def test_two_streams_union_not_sum(tmp_path):
    # stream 7 runs 10-50, stream 8 runs 30-70: busy is the union 10-70 = 60 us, not 40 + 40.
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 100)
    _gpu(b, "gemm_a", 10, 40, launch_ts=1, stream=7)
    _gpu(b, "gemm_b", 30, 40, launch_ts=3, stream=8)
    tl = _timeline(b, tmp_path)
    s = tl.steps.loc[0]
    assert s["busy_s"] == pytest.approx(60 * US)
    assert s["idle_edge_s"] == pytest.approx(40 * US)  # 0-10 and 70-100
    assert (tl.gaps["kind"] == "edge").all()


def test_communication_half_overlapped(tmp_path):
    # compute 10-50 on stream 7, NCCL all-reduce 30-70 on stream 20: 20 us of the 40 us all-reduce
    # run beside compute (30-50), 20 us (50-70) are exposed.
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 100)
    _gpu(b, "gemm_kernel", 10, 40, launch_ts=1, stream=7)
    _gpu(b, "ncclKernel_AllReduce_RING_LL_Sum_float", 30, 40, launch_ts=3, stream=20)
    tl = _timeline(b, tmp_path)
    s = tl.steps.loc[0]
    assert s["comm_s"] == pytest.approx(40 * US)
    assert s["comm_exposed_s"] == pytest.approx(20 * US)
    assert tl.overall["comm_overlap_share"] == pytest.approx(0.5)


def test_item_and_its_stream_sync_count_once(tmp_path):
    # log_loss (15-70) calls loss.item(): aten::item 20-60 > _local_scalar_dense 21-59, which issues a
    # cudaMemcpyAsync (DtoH copy at 24-25) and a cudaStreamSynchronize 26-58. That is ONE sync, "item",
    # 40 us. A bare cudaStreamSynchronize 80-83 is a second one; an aten::item on a CPU tensor
    # (no runtime call below it) is none.
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 100)
    _gpu(b, "elementwise_kernel", 10, 13, launch_ts=5)
    b.op("mymodel::log_loss", 15, 55)
    b.op("aten::item", 20, 40)
    b.op("aten::_local_scalar_dense", 21, 38)
    _gpu(b, "Memcpy DtoH (Device -> Pageable)", 24, 1, launch_ts=22, launch_dur=1, cat="gpu_memcpy", nbytes=4,
         runtime="cudaMemcpyAsync")
    _runtime(b, "cudaStreamSynchronize", 26, 32)
    b.op("aten::item", 62, 1)
    _gpu(b, "elementwise_kernel", 66, 4, launch_ts=62)
    _runtime(b, "cudaStreamSynchronize", 80, 3)
    tl = _timeline(b, tmp_path)
    sy = tl.syncs
    assert sy[["kind", "name", "op_name", "caller"]].values.tolist() == [
        ["item", "aten::item", "aten::item", "mymodel::log_loss"],
        ["stream_sync", "cudaStreamSynchronize", "", ""]]
    assert sy["dur_s"].tolist() == pytest.approx([40 * US, 3 * US])
    s = tl.steps.loc[0]
    assert s["sync_count"] == 2 and s["sync_s"] == pytest.approx(43 * US)
    # The GPU idles 25-66 (41 us): the sync ended at 60, inside the gap; the next kernel's launch
    # (62-64) ended after the gap began, so it is host-bound, and after a sync.
    assert (25_000, 66_000, "host", True) in _gaps(tl)
    # The trailing edge 70-100 holds the bare sync's end (83) too.
    assert _gaps(tl)[-1] == (70_000, 100_000, "edge", True)
    assert tl.overall["syncs"]["by_kind"] == {"stream_sync": 1, "device_sync": 0, "event_sync": 0,
                                              "memcpy_sync": 0, "item": 1, "dtoh_copy": 0}


def test_dtoh_copy_is_one_sync_and_htod_copy_keeps_its_stream_sync(tmp_path):
    # x.cpu(): aten::to > aten::_to_copy > aten::copy_ launches a DtoH copy and synchronizes: one
    # "dtoh_copy" sync named after the outermost op. y.to("cuda") from pageable memory: aten::to >
    # aten::copy_ launches an HtoD copy followed by a cudaStreamSynchronize: a "stream_sync" whose op is
    # the copy_ and whose caller is above the copy ops.
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 200)
    b.op("evaluate", 5, 150)
    b.op("aten::to", 10, 30)
    b.op("aten::_to_copy", 11, 28)
    b.op("aten::copy_", 12, 26)
    _gpu(b, "Memcpy DtoH (Device -> Pageable)", 15, 5, launch_ts=13, cat="gpu_memcpy", nbytes=64,
         runtime="cudaMemcpyAsync")
    _runtime(b, "cudaStreamSynchronize", 16, 20)
    b.op("aten::to", 50, 30)
    b.op("aten::copy_", 51, 28)
    _gpu(b, "Memcpy HtoD (Pageable -> Device)", 55, 5, launch_ts=52, cat="gpu_memcpy", nbytes=64,
         runtime="cudaMemcpyAsync")
    _runtime(b, "cudaStreamSynchronize", 56, 20)
    tl = _timeline(b, tmp_path)
    assert tl.syncs[["kind", "name", "op_name", "caller"]].values.tolist() == [
        ["dtoh_copy", "aten::to", "aten::to", "evaluate"],
        ["stream_sync", "cudaStreamSynchronize", "aten::copy_", "evaluate"]]
    assert tl.syncs["dur_s"].tolist() == pytest.approx([30 * US, 20 * US])


def test_pageable_and_pinned_htod_copies(tmp_path):
    # Pageable HtoD 10-30 (1000 B) on stream 7, pinned HtoD 40-50 (4000 B) on stream 8, and a kernel
    # 35-45 on stream 7 that hides 40-45 of the pinned copy: exposed 20 + 5 = 25 us.
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 100)
    _gpu(b, "Memcpy HtoD (Pageable -> Device)", 10, 20, launch_ts=1, cat="gpu_memcpy", nbytes=1000,
         runtime="cudaMemcpyAsync")
    _gpu(b, "elementwise_kernel", 35, 10, launch_ts=3)
    _gpu(b, "Memcpy HtoD (Pinned -> Device)", 40, 10, launch_ts=5, stream=8, cat="gpu_memcpy", nbytes=4000,
         runtime="cudaMemcpyAsync")
    _gpu(b, "Memset (Device)", 60, 2, launch_ts=7, cat="gpu_memset", nbytes=4, runtime="cudaMemsetAsync")
    tl = _timeline(b, tmp_path)
    htod = tl.overall["copies"]["HtoD"]
    assert htod["count"] == 2 and htod["bytes"] == 5000
    assert htod["time_s"] == pytest.approx(30 * US)
    assert htod["pageable_count"] == 1 and htod["pageable_time_s"] == pytest.approx(20 * US)
    assert htod["exposed_time_s"] == pytest.approx(25 * US)
    assert tl.overall["copies"]["memset"]["count"] == 1
    s = tl.steps.loc[0]
    assert s["memcpy_s"] == pytest.approx(30 * US) and s["memset_s"] == pytest.approx(2 * US)
    # busy: 10-30, 35-50, 60-62 = 37 us; launch APIs: 4 x 2 us
    assert s["busy_s"] == pytest.approx(37 * US)
    assert s["launch_api_s"] == pytest.approx(8 * US)


def test_duration_buckets_without_steps(tmp_path):
    # Ten kernels back to back (1 us apart) with durations at and around the bucket edges; no
    # ProfilerStep, so one pseudo-step -1 spans first start .. last end.
    durs = [1, 4, 5, 19, 20, 99, 100, 999, 1000, 2000]
    b = TraceBuilder()
    b.op("loop", 0, 5)
    t = 10.0
    for i, d in enumerate(durs):
        _gpu(b, f"kernel_{i}", t, d, launch_ts=i * 0.1, launch_dur=0.05)
        t += d + 1
    tl = _timeline(b, tmp_path)
    assert tl.steps.index.tolist() == [-1]
    # wall: 10 .. 10 + sum(durs) + 9 gaps = 4247 + 9; busy = sum(durs) = 4247 us
    assert tl.steps.loc[-1, "wall_s"] == pytest.approx(4256 * US)
    assert tl.steps.loc[-1, "busy_s"] == pytest.approx(4247 * US)
    assert tl.steps.loc[-1, "idle_queued_s"] == pytest.approx(9 * US)
    d = tl.overall["distribution"]
    assert [d["buckets"][b]["count"] for b in BUCKET_LABELS] == [2, 2, 2, 2, 2]
    assert [d["buckets"][b]["time_s"] for b in BUCKET_LABELS] == pytest.approx(
        [5 * US, 24 * US, 119 * US, 1099 * US, 3000 * US])
    # numpy's linear percentiles of the sorted ten: p50 = (20 + 99) / 2; p90 = 1000 + 0.1 * 1000;
    # p99 = 1000 + 0.91 * 1000
    assert (d["p50_us"], d["p90_us"], d["p99_us"]) == pytest.approx((59.5, 1100, 1910))
    assert d["count"] == 10 and d["kernels_per_step"] == 10


def test_devices_are_separate_and_summed(tmp_path):
    # GPU 0 runs 10-50, GPU 1 runs 30-70: on one device these would union to 60 us, but they are two
    # devices, 40 us busy each out of 100: steps carry the sums (80 of 200 device-us).
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 100)
    _gpu(b, "gemm_kernel", 10, 40, launch_ts=1, device=0)
    _gpu(b, "gemm_kernel", 30, 40, launch_ts=3, device=1)
    tl = _timeline(b, tmp_path)
    s = tl.steps.loc[0]
    assert s["busy_s"] == pytest.approx(80 * US) and s["wall_s"] == pytest.approx(200 * US)
    assert tl.overall["busy_fraction"] == pytest.approx(0.4)
    assert tl.overall["per_device"][1]["busy_s"] == pytest.approx(40 * US)
    assert sorted(tl.gaps["device"].unique().tolist()) == [0, 1]


def test_kernels_spanning_two_steps_are_clipped(tmp_path):
    # A kernel 80-130 straddles steps 0 (0-100) and 1 (100-200): 20 us busy in step 0, 30 in step 1;
    # it is counted in step 0, where it starts.
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 100)
    b.annotation("ProfilerStep#1", 100, 100)
    _gpu(b, "gemm_kernel", 80, 50, launch_ts=70)
    tl = _timeline(b, tmp_path)
    assert tl.steps["busy_s"].tolist() == pytest.approx([20 * US, 30 * US])
    assert tl.steps["kernels"].tolist() == [1, 0]


def test_cpu_only_trace_is_empty():
    a = roofscope.analyze(DATA / "cpu_block.json.gz", ceilings=TOY)
    tl = timeline(a.trace, a.kernels, a.steps, None)
    assert tl.steps.empty and tl.gaps.empty and tl.syncs.empty
    assert tl.overall["busy_fraction"] == 0 and tl.overall["distribution"]["count"] == 0
    assert tl.overall["syncs"]["count"] == 0 and tl.overall["copies"] == {}
    json.dumps(tl.to_dict(), allow_nan=False)


def _invariants(tl: Timeline) -> None:
    s = tl.steps
    idle_parts = s[["idle_host_s", "idle_queued_s", "idle_other_s", "idle_edge_s"]].sum(axis=1)
    np.testing.assert_allclose(idle_parts, s["idle_s"], rtol=1e-9)
    np.testing.assert_allclose(s["busy_s"] + s["idle_s"], s["wall_s"], rtol=1e-9)
    assert (s["comm_exposed_s"] <= s["comm_s"] + 1e-12).all()
    assert tl.gaps.groupby("step")["dur_s"].sum().to_numpy() == pytest.approx(s["idle_s"].to_numpy())
    d = tl.to_dict()
    json.dumps(d, allow_nan=False)
    assert len(d["gaps"]["top"]) == min(5, len(tl.gaps))


def test_h200_gpt_run():
    a = roofscope.analyze(DATA / "h200_gpt_run")
    # Any step windows keep the invariants: the ProfilerStep spans, and Result.steps's own.
    tl = timeline(a.trace, a.kernels, step_table(a.trace), a.ceilings.launch_latency_s)
    for t in (tl, timeline(a.trace, a.kernels, a.steps, a.ceilings.launch_latency_s)):
        _invariants(t)
        assert t.steps.index.tolist() == [3, 4, 5]
        # Every step launches the same work: 142 kernels + 4 memsets.
        assert t.steps["kernels"].tolist() == [146, 146, 146]
        # A 2-layer d_model=256 GPT on an H200 is launch-bound: 0.52 ms of kernels in a 6.3 ms step
        # (measured busy fraction 0.083 over the ProfilerStep spans, 0.086 over the GPU-measured
        # steps); the rest is the GPU waiting for Python to launch the next kernel (host idle 0.90).
        assert 0.05 < t.overall["busy_fraction"] < 0.15
        assert t.overall["host_idle_fraction"] > 0.8
    o = tl.overall
    # median kernel about 2.8 us: most are tiny
    assert o["distribution"]["p50_us"] < 5 and o["distribution"]["buckets"]["<5us"]["count"] > 300
    # Fused AdamW: one multi_tensor_apply kernel per step for all parameters; the longest gaps are the
    # host preparing it (each > 300 us, host-bound).
    fused = a.kernels["op_name"] == "aten::_fused_adamw_"
    assert fused.sum() == 3
    top = tl.to_dict()["gaps"]["top"]
    assert all(g["kind"] == "host" and g["dur_us"] > 300 for g in top)
    # examples/gpt.py times each iteration with torch.cuda.synchronize() after optimizer.step(), where
    # the ProfilerStep boundary is: each span opens with the previous iteration's sync and the last
    # also holds its own (4 inside the spans; a 5th falls after them).
    assert o["syncs"]["by_kind"]["device_sync"] == 4
    assert o["copies"]["memset"]["count"] == 12
    assert o["comm_overlap_share"] is None


def test_hta_a100_nccl_trace():
    a = roofscope.analyze(HTA)
    tl = timeline(a.trace, a.kernels, step_table(a.trace), None)
    _invariants(tl)
    o = tl.overall
    assert tl.steps.index.tolist() == [550, 551, 552, 553, 554]
    # 80 NCCL SendRecv kernels: 164 ms of communication, almost all exposed (nothing to hide behind)
    assert o["total"]["comm_s"] > 0.1
    assert 0 < o["total"]["comm_exposed_s"] <= o["total"]["comm_s"]
    # 945 aten::item calls read CPU tensors (no runtime call below them): no syncs. The 30 x.cpu()
    # DtoH copies are syncs, and the 45 cudaStreamSynchronize of pageable HtoD copies.
    assert o["syncs"]["by_kind"]["item"] == 0
    assert o["syncs"]["by_kind"]["dtoh_copy"] == 30 == o["copies"]["DtoH"]["count"]
    assert o["syncs"]["by_kind"]["stream_sync"] == 45
    assert o["copies"]["HtoD"]["pageable_count"] == 45
    assert 0.3 < o["busy_fraction"] < 0.4


def test_counter_ranges_are_not_timed():
    # 77 cuda_profiler_range events and no kernel events: replayed counter ranges have no real time.
    a = roofscope.analyze(external("hta_a100_alexnet_cupti_counters.json.gz"))
    assert len(a.kernels) == 77
    tl = timeline(a.trace, a.kernels, a.steps, None)
    assert tl.steps.empty and tl.overall["distribution"]["count"] == 0


def test_roofscopes_own_drain_is_not_a_workload_sync(tmp_path):
    # The profiler drains the GPU where recording ends: a cudaDeviceSynchronize inside the
    # "roofscope: drain GPU" annotation (70-90). The workload's own one at 40-45 still counts.
    from roofscope.analyzers.model.trace import DRAIN_LABEL

    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 100)
    _gpu(b, "elementwise_kernel", 15, 5, launch_ts=10)
    _runtime(b, "cudaDeviceSynchronize", 40, 5)
    b.annotation(DRAIN_LABEL, 70, 20)
    _runtime(b, "cudaDeviceSynchronize", 72, 10)
    tl = _timeline(b, tmp_path)
    assert tl.syncs["ts_ns"].tolist() == [40_000]
    assert tl.steps.loc[1, "sync_count"] == 1
