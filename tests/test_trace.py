from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from roofscope.analyzers.ingest.linking import ancestor_where, enclosing, interval_parents
from roofscope.analyzers.ingest import read as read_trace
from roofscope.errors import TraceError

from .conftest import external
from .kineto import TraceBuilder

HTA = external("hta_a100_rank0.json.gz")


def test_interval_parents_nested_and_threads():
    # thread 0: A[0,100] > B[10,50] > C[20,30]; D[60,90] in A; thread 1: E[0,100]
    th = np.array([0, 0, 0, 0, 1])
    st = np.array([0, 10, 20, 60, 0])
    en = np.array([100, 50, 30, 90, 100])
    assert interval_parents(th, st, en).tolist() == [-1, 0, 1, 0, -1]


def test_interval_parents_unsorted_input_and_siblings():
    # Same tree as above given in reverse order, plus siblings sharing a boundary.
    th = np.zeros(4, dtype=int)
    st = np.array([50, 40, 0, 0])
    en = np.array([60, 50, 100, 10])
    # [0,100] contains all; [0,10], [40,50], [50,60] are siblings.
    assert interval_parents(th, st, en).tolist() == [2, 2, -1, 2]


def test_interval_parents_deep_chain_converges():
    n = 5000  # a deep nest: each interval inside the previous one
    st = np.arange(n)
    en = 2 * n - np.arange(n)
    p = interval_parents(np.zeros(n, dtype=int), st, en)
    assert p.tolist() == [-1] + list(range(n - 1))


def test_enclosing_innermost_same_thread_only():
    th = np.array([0, 0, 0, 0, 1])
    st = np.array([0, 10, 20, 60, 0])
    en = np.array([100, 50, 30, 90, 100])
    p = interval_parents(th, st, en)
    q = enclosing(th, st, en, p, np.array([0, 0, 0, 1, 2, 0]), np.array([25, 55, 70, 5, 5, 200]),
                  np.array([26, 56, 71, 6, 6, 201]))
    # 25 is inside C, 55 only inside A, 70 inside D, thread 1 -> E, thread 2 has nothing, 200 is outside.
    assert q.tolist() == [2, 0, 3, 4, -1, -1]


def test_ancestor_where():
    parent = np.array([-1, 0, 1, 0])
    mask = np.array([True, False, False, False])
    assert ancestor_where(parent, np.array([2, 3, -1, 0]), mask).tolist() == [0, 0, -1, 0]


def _block(tmp_path: Path, *, float_ts: bool = False, gz: bool = False, old_style: bool = False,
           device: str | None = "NVIDIA H100 80GB HBM3") -> Path:
    b = TraceBuilder(device_name=device)
    base = 1_700_000_000_000.0 if not float_ts else 5_402_633_914.123
    b.annotation("ProfilerStep#7", base, 1000)
    lin = b.op("aten::linear", base + 10, 100, [[16, 512], [1024, 512], [1024]],
               ["c10::BFloat16"] * 3)
    mm = b.op("aten::addmm", base + 20, 50, [[1024], [16, 512], [512, 1024], [], []],
              ["c10::BFloat16"] * 3 + ["Scalar", "Scalar"], ["", "", "", "1", "1"])
    b.launch_kernel("sm90_xmma_gemm_bf16bf16_bf16f32", base + 30, base + 200, 12.5,
                    ext=None if old_style else mm)
    b.op("aten::relu", base + 300, 20, [[16, 1024]], ["c10::BFloat16"])
    b.launch_kernel("vectorized_elementwise_kernel<relu>", base + 305, base + 400, 3.25,
                    ext=None if old_style else lin + 2, stream=9)
    b.launch_kernel("Memcpy DtoD (Device -> Device)", base + 500, base + 600, 2.0, cat="gpu_memcpy",
                    nbytes=1 << 20, runtime="cudaMemcpyAsync")
    b.extra["distributedInfo"] = {"rank": 1, "world_size": 2}
    return b.write(tmp_path / ("t.json.gz" if gz else "t.json"))


@pytest.mark.parametrize("float_ts,gz,old_style", [(False, False, False), (True, True, False),
                                                   (False, True, True)])
def test_load_links_kernels_to_launching_ops(tmp_path, float_ts, gz, old_style):
    t = read_trace(_block(tmp_path, float_ts=float_ts, gz=gz, old_style=old_style))
    ops, k = t.ops, t.kernels
    assert ops["name"].astype(str).tolist() == ["aten::linear", "aten::addmm", "aten::relu"]
    assert ops["parent"].tolist() == [-1, 0, -1]
    assert k["cat"].astype(str).tolist() == ["kernel", "kernel", "gpu_memcpy"]
    # kernel 0 launched inside addmm, kernel 1 inside relu, the memcpy outside any op
    assert k["op"].tolist() == [1, 2, -1]
    assert k["step"].tolist() == [7, 7, 7]
    assert k["stream"].tolist() == [7, 9, 7]
    # 12.5 us and 3.25 us as integer nanoseconds
    assert k["dur_ns"].tolist() == [12500, 3250, 2000]
    assert k["bytes"].iloc[2] == float(1 << 20)
    assert t.meta.distributed.recorded == {"rank": 1, "world_size": 2} and t.meta.distributed.rank == 1
    assert t.meta.device.name == "NVIDIA H100 80GB HBM3"


def test_signatures_are_deduplicated(tmp_path):
    b = TraceBuilder()
    for i in range(5):
        b.op("aten::mul", 10 * i, 5, [[4, 4], [4, 4]], ["float", "float"])
    b.op("aten::mul", 100, 5, [[8, 4], [8, 4]], ["float", "float"])
    b.op("aten::add", 200, 5, [[8, 4], [8, 4]], ["float", "float"])
    t = read_trace(b.write(tmp_path / "t.json"))
    assert t.ops["sig"].tolist() == [0, 0, 0, 0, 0, 1, 2]
    assert t.signatures.loc[1, "input_dims"] == [[8, 4], [8, 4]]
    assert t.signatures["name"].tolist() == ["aten::mul", "aten::mul", "aten::add"]


def test_kernel_without_launch_uses_modern_external_id(tmp_path):
    b = TraceBuilder()
    ext = b.op("aten::relu", 0, 20, [[4]], ["float"])
    c = b.launch_kernel("relu_kernel", 5, 50, 2, ext=ext)
    b.events = [e for e in b.events if e.get("cat") != "cuda_runtime"]  # launch event lost
    t = read_trace(b.write(tmp_path / "t.json"))
    assert t.kernels["correlation"].tolist() == [c]
    assert t.kernels["op"].tolist() == [0]


def test_no_device_properties_and_no_shapes(tmp_path):
    b = TraceBuilder(device_name=None)
    b.op("aten::relu", 0, 20)
    b.launch_kernel("relu_kernel", 5, 50, 2)
    t = read_trace(b.write(tmp_path / "t.json"))
    assert t.meta.device.name is None
    assert t.signatures.loc[0, "input_dims"] is None
    assert t.kernels["op"].tolist() == [0]


@pytest.mark.parametrize("content,message", [
    (b"", "empty file"),
    (b"{\"traceEvents\": [", "not valid JSON"),
    (b"{\"hello\": 1}", "no 'traceEvents'"),
    (b"{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"foo\", \"ts\": 1}]}", "no torch.profiler events"),
    (b"{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"cpu_op\", \"ts\": \"soon\"}]}", "not a Kineto trace"),
    (b"[1, 2, 3]", "not a Kineto trace"),
])
def test_bad_inputs_raise_trace_error(tmp_path, content, message):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(TraceError, match=message):
        read_trace(p)


def test_truncated_gzip_and_missing_file(tmp_path):
    """A .json.gz cut short (a process killed while writing it) is read up to its last complete
    event and the cut reported; a gzip file with nothing readable is refused."""
    b = TraceBuilder()
    for i in range(300):
        b.op(f"aten::relu_{i}", i * 10, 5)
    data = gzip.compress(json.dumps(b.doc()).encode())
    p = tmp_path / "cut.json.gz"
    p.write_bytes(data[: len(data) // 2])
    t = read_trace(p)
    assert 0 < len(t.ops) < 300
    assert t.ops["name"].astype(str).tolist() == [f"aten::relu_{i}" for i in range(len(t.ops))]
    (reason,) = t.meta.skipped_events
    assert reason.startswith("file cut short at byte ")
    p.write_bytes(data[:10] + b"\xff" * 64)
    with pytest.raises(TraceError, match="truncated or corrupt gzip"):
        read_trace(p)
    with pytest.raises(TraceError, match="no such file"):
        read_trace(tmp_path / "absent.json")
    with pytest.raises(TraceError, match="is a directory, neither a trace file nor a roofscope Run"):
        read_trace(tmp_path)


def test_hta_trace_ingestion_counts():
    t = read_trace(HTA)
    assert t.meta.events == 108_936
    assert len(t.ops) == 25_185
    assert (t.kernels["cat"] == "kernel").sum() == 6_080
    assert (t.kernels["cat"] == "gpu_memcpy").sum() == 1_390
    assert (t.kernels["cat"] == "gpu_memset").sum() == 277
    assert t.meta.device.name == "NVIDIA A100-SXM4-80GB"
    assert t.meta.distributed.world_size == 16 and t.meta.distributed.backend == "nccl"
    assert sorted(set(t.kernels["step"])) == [550, 551, 552, 553, 554]
    # Old torch: kernel External id repeats the correlation id, so links come from launches.
    k = t.kernels
    assert (k["external_id"] == k["correlation"]).all()
    linked = (k["op"] >= 0).sum()
    # 4,010 before thread codes were shared across tables: launches on threads numbered
    # differently in the runtime and op tables found no op.
    assert linked == 6_785


def test_hta_links_match_brute_force():
    """The vectorized containment agrees with a direct search on a sample of real launches."""
    t = read_trace(HTA)
    o, r = t.ops, t.runtime
    for i in np.random.default_rng(0).choice(len(r), 200, replace=False):
        x = r.iloc[i]
        # Raw pid/tid, not the derived thread codes the code under test uses.
        c = o[(o.pid == x.pid) & (o.tid == x.tid) & (o.ts_ns <= x.ts_ns) & (o.end_ns >= x.end_ns)]
        expected = -1 if c.empty else c.sort_values(["ts_ns", "end_ns"], ascending=[True, False]).index[-1]
        assert x.op == expected


def test_take_from_nothing_keeps_the_values_dtype():
    """A trace with no CPU ops gives empty id columns: what is taken from them still indexes arrays
    (the merge of a rank without ops once failed on an object array here)."""
    from roofscope.analyzers.ingest.linking import take

    got = take(np.array([], dtype=np.int64), np.array([-1, -1]), -1)
    assert got.dtype == np.int64 and got.tolist() == [-1, -1]
    assert np.array([10.0, 20.0])[np.maximum(got, 0)].tolist() == [10.0, 10.0]
    # and as before where there is something to take: 7 at 1, the default at -1
    assert take(np.array([5, 7]), np.array([1, -1]), 0).tolist() == [7, 0]
