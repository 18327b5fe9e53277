"""CUDA-graph replays costed from their captures (analyzers/cost/graphs.py) on real H100 traces
(tests/data/h100_graph_*.json.gz, torch 2.11: one decode-like step of 5 kernels: mm, GQA cuDNN
attention, mm, relu (clamp_min), sum; recorded eagerly, captured, and replayed 3 times)."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import roofscope
from roofscope.analyzers.cost.graphs import find_captures
from roofscope.analyzers.ingest import read as read_trace

DATA = Path(__file__).resolve().parent / "data"
CAPTURE, REPLAY, EAGER = (DATA / f"h100_graph_{n}.json.gz" for n in ("capture", "replay", "eager"))
COLS = ["flops", "bytes", "category", "op_name", "cost_op_name", "dtype", "tensor_core"]


def test_capture_holds_the_five_launches_in_order() -> None:
    caps = find_captures(read_trace(CAPTURE))
    assert len(caps) == 1 and caps[0].label == "0"
    # two fill_ kernels before cudaStreamBeginCapture ran for real and are not part of the graph
    names = [n for n, _ in caps[0].fingerprint()]
    assert names == ["aten::mm", "aten::_cudnn_attention_forward", "aten::mm", "aten::clamp_min", "aten::sum"]


def test_replayed_kernels_cost_what_the_eager_kernels_cost() -> None:
    eager = roofscope.analyze(EAGER).kernels
    a = roofscope.analyze(REPLAY, graph_capture=[str(CAPTURE)])
    k = a.kernels
    assert a.to_dict()["graphs"]["mapped"] == 3 and (k["cost_source"] == "capture").all()
    assert a.summary.unattributed.share == 0.0
    # 3 replays of the eager step's 5 kernels: same per-kernel costs, in the same order
    e = eager[COLS].iloc[:5].reset_index(drop=True)
    for i in range(3):
        r = k[COLS].iloc[5 * i:5 * i + 5].reset_index(drop=True)
        assert r.equals(e), (r, e)
    # GQA attention q [4,8,1,64] over k/v [4,2,256,64]: 2 * 4*8*256 * 128 = 2,097,152 FLOPs
    att = k[k["category"] == "attention"]
    assert (att["flops"] == 2_097_152).all() and att["attn_q"].tolist() == [(4, 1)] * 3
    assert (k["graph"] >= 0).all() and k["graph"].nunique() == 3


def test_without_a_capture_replays_have_time_only_and_the_note_says_why() -> None:
    a = roofscope.analyze(REPLAY)
    u = a.to_dict()["unattributed"]
    assert u["share"] == pytest.approx(1.0)
    assert u["by_reason"]["graph_replay"]["kernels"] == 15
    assert a.kernels["flops"].isna().all()
    assert u["notes"][0].startswith("3 CUDA-graph launches") and "--graph-capture" in u["notes"][1]
    assert "no capture of the graph was recorded" in u["notes"][1]


def test_capture_in_the_same_trace_needs_nothing_extra() -> None:
    a = roofscope.analyze(DATA / "h100_graph_capture_and_replay.json.gz")
    g = a.kernels[a.kernels["graph"] >= 0]
    assert len(g) == 10 and (g["cost_source"] == "capture").all()
    # the two real fill_ kernels before the capture stay eager
    assert (a.kernels.loc[a.kernels["graph"] < 0, "op_name"] == "aten::fill_").all()


def test_unlabelled_replays_match_by_kernel_count() -> None:
    # no roofscope annotations in either trace: 5 kernels per launch single out the 5-launch capture
    a = roofscope.analyze(DATA / "h100_graph_replay_live.json.gz",
                          graph_capture=[DATA / "h100_graph_capture_live.json.gz"])
    assert a.to_dict()["graphs"]["mapped"] == 2 and a.summary.unattributed.share == 0.0


def _variant(tmp_path: Path, rows: int) -> Path:
    """The capture with its mm ops recorded at another batch size (as a serving engine captures one graph
    per batch size)."""
    doc = json.loads(gzip.decompress(CAPTURE.read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("name") == "aten::mm":
            e["args"]["Input Dims"][0][0] = rows
        if e.get("name", "").startswith("roofscope: graph capture"):
            e["name"] = "renamed"  # no id: matching falls back to the kernel count
    path = tmp_path / f"capture-{rows}.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def test_same_count_different_shapes_is_ambiguous(tmp_path: Path) -> None:
    live = DATA / "h100_graph_replay_live.json.gz"
    a = roofscope.analyze(live, graph_capture=[_variant(tmp_path, 8), _variant(tmp_path, 16)])
    assert a.to_dict()["graphs"]["unmapped"] == {"ambiguous": 2}
    assert "several captures" in a.summary.unattributed.notes[1]
    # identical captures are not ambiguous: either gives the same costs
    b = roofscope.analyze(live, graph_capture=[_variant(tmp_path, 8), _variant(tmp_path, 8)])
    assert b.to_dict()["graphs"]["mapped"] == 2
    # each mm of the 8-row capture: 2 * 8*512*512 = 4,194,304 FLOPs on its one kernel
    mm = b.kernels[b.kernels["op_name"] == "aten::mm"]
    assert len(mm) == 4 and set(mm["flops"]) == {4_194_304}


def test_label_with_a_count_mismatch_is_not_mapped() -> None:
    # the eager trace holds no capture at all
    a = roofscope.analyze(REPLAY, graph_capture=[EAGER])
    assert a.to_dict()["graphs"]["unmapped"] == {"no_capture": 3}


def test_cli_graph_capture(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    res = subprocess.run([sys.executable, "-m", "roofscope", "analyze", str(REPLAY), "--graph-capture", str(CAPTURE),
                          "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "3 CUDA-graph launches (0.041 ms of kernels): 3 mapped to 1 capture" in res.stdout
    s = json.loads(out.read_text())["summary"]
    assert s["unattributed"]["share"] == 0.0 and s["graphs"]["mapped"] == 3
    bad = subprocess.run([sys.executable, "-m", "roofscope", "analyze", str(REPLAY), "--graph-capture",
                          str(tmp_path / "missing.json")], capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and "no such file" in bad.stderr and "Traceback" not in bad.stderr
    assert np.isfinite(s["total_flops"])



def test_report_takes_the_graph_capture_too(tmp_path: Path) -> None:
    # `report` reads what `analyze` reads: the replayed kernels' costs reach the HTML's data.
    from roofscope.cli import main

    out = tmp_path / "r.html"
    assert main(["report", str(REPLAY), "--graph-capture", str(CAPTURE), "-o", str(out)]) == 0
    # Without the capture: "100.0% of non-communication time has no cost model: graph_replay 100.0% (15)".
    assert "0.0% of non-communication time has no cost model." in out.read_text()


def test_recorder_labels_captures_and_replays(tmp_path: Path, fake_graph) -> None:
    """GraphRecorder's patching on a stand-in CUDAGraph class (CPU): ids, a capture profiler of its own
    while the session's is idle, replay annotations, and everything restored on remove()."""
    import torch

    from roofscope.collectors.graphs import GraphRecorder

    FakeGraph, calls = fake_graph
    idle = [True]
    given_back = []
    originals = dict(FakeGraph.__dict__)
    rec = GraphRecorder(tmp_path / "g", lambda: idle[0], lambda: given_back.append(1))
    rec.install()
    assert FakeGraph.__dict__["replay"] is not originals["replay"]
    g = FakeGraph()
    g.capture_begin()
    assert rec.capturing == 1
    torch.ones(3).add(1)  # an op issued during the capture
    g.capture_end()
    assert rec.capturing == 0 and len(rec.files) == 1
    assert given_back == [1]  # the session's profiler may come back once the capture is recorded
    idle[0] = False  # the session's profiler cannot step aside: the next capture is skipped, with a note
    g2 = FakeGraph()
    g2.capture_begin()
    g2.capture_end()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
        g.replay()
    rec.remove()
    rec.remove()  # idempotent: the class keeps its own methods
    assert calls == ["begin", "end", "begin", "end", "replay"]
    assert all(FakeGraph.__dict__[m] is originals[m] for m in ("capture_begin", "capture_end", "replay"))
    assert (g._roofscope_graph_id, g2._roofscope_graph_id) == (0, 1)
    assert rec.skipped == 1 and "1 CUDA-graph capture was not recorded" in rec.notes()[0]
    trace = read_trace(rec.files[0])
    assert "roofscope: graph capture 0" in set(trace.annotations["name"])
    assert "aten::add" in set(trace.ops["name"])
    assert any(e.name == "roofscope: graph replay 0" for e in p.events())


def test_warming_up_profiler_steps_aside_for_a_capture_and_records_its_steps(tmp_path):
    """Inductor's cudagraph trees capture during the first steps, which warm-up covers; a second
    Kineto session started then cancels the first (its trace is lost). The collector drops its
    warming-up profiler for the capture's own and starts it again: the active steps are recorded,
    numbered on from the steps seen (wait 1 + warmup 2: steps 3 and 4)."""
    import torch

    from roofscope.analyzers.ingest import read as read_trace
    from roofscope.collectors.torchprof import Schedule, TorchCollector

    c = TorchCollector(tmp_path / "trace.json", Schedule(wait=1, warmup=2, active=2))
    c.start()
    x = torch.randn(32, 32)
    for step in range(5):
        torch.mm(x, x)
        if step == 1:
            assert c.phase == "warmup" and c.make_room() and c.phase == "idle"
            own = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            own.start()
            torch.add(x, 1)
            own.stop()
            assert any(e.name == "aten::add" for e in own.events())
            c.give_back_room()
            assert c.phase == "warmup"
        c.step()
    assert c.stop() and c.trace_ready
    trace = read_trace(tmp_path / "trace.json")
    names = set(trace.annotations["name"])
    assert {"ProfilerStep#3", "ProfilerStep#4"} <= names and "ProfilerStep#1" not in names
    # the active steps' two matmuls, and nothing of the capture's own profile
    assert (trace.ops["name"] == "aten::mm").sum() == 2 and "aten::add" not in set(trace.ops["name"])
    assert c.phase == "done" and c.make_room()   # nothing left to step aside


def test_a_failed_capture_recording_never_fails_the_capture(tmp_path, fake_graph):
    """Recording is roofscope's business: when it fails (here the session's profiler cannot step
    aside), the user's capture still runs, the failure becomes a note, and nothing stays aside."""
    from roofscope.collectors.graphs import GraphRecorder

    FakeGraph, calls = fake_graph

    def cannot_step_aside():
        raise RuntimeError("profiler busy")

    rec = GraphRecorder(tmp_path / "g", cannot_step_aside, lambda: calls.append("back"))
    rec.install()
    try:
        g = FakeGraph()
        g.capture_begin()
        g.capture_end()
    finally:
        rec.remove()
    assert calls == ["begin", "end"] and rec.capturing == 0 and not rec.files
    assert rec.notes() == ["recording a CUDA-graph capture failed (RuntimeError: profiler busy): replays of that"
                           " graph have time only"]


LIGHTNING = DATA / "h100_lightning_cudagraph_trees"


def test_cudagraph_trees_of_a_lightning_step_map_with_a_dropped_memset() -> None:
    # `roofscope run benchmarks/real_clients/lightning_cnn.py --compile reduce-overhead` on an H100
    # (2026-11-25): Inductor's cudagraph trees captured 3 graphs (one empty) during warm-up; each of the
    # 3 steps replays the forward graph (63 captured launches: 57 kernels + 6 memsets; 62 replayed: 57
    # kernels + 5 memsets) and the backward graph (80 and 80).
    a = roofscope.analyze(LIGHTNING)
    g = a.to_dict()["graphs"]
    assert (g["graph_launches"], g["mapped"], g["captures"]) == (6, 6, 3)
    assert a.summary.unattributed.share == 0.0
    k = a.kernels[a.kernels["graph"] >= 0]
    # every Triton kernel lands on the capture's launch of the same name: the order holds
    tri = k[k["name"].astype(str).str.startswith("triton_")]
    assert len(tri) == 294 and (tri["name"].astype(str) == tri["op_name"].astype(str)).all()
    assert (k.loc[k["category"] != "memset", "cost_source"] == "capture").all()
