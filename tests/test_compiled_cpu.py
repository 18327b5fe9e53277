"""Inductor's C++ kernels on a CPU (cost/compiled_cpu.py): a compiled MLP's fused kernels run as the own time of
``## Call CompiledFxGraph``, which the coverage counts as uncosted; and cat's bytes in its kernel's element size.

tests/data/cpu_compiled_mlp_run: `roofscope run tests/data/record_compiled_cpu.py` on the 2-core CPU dev machine
(torch 2.13.0+cpu, 2026-11-28): two pre-LN MLP blocks of width 256 under torch.compile, AdamW, 3 steps."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from roofscope.analysis import run
from roofscope.analyzers.cost.compiled_cpu import FUSED_NAME, fused_kernel_items
from roofscope.analyzers.ingest import read as read_trace
from tests.kineto import TraceBuilder

RUN = Path(__file__).resolve().parent / "data" / "cpu_compiled_mlp_run"


def test_compiled_graphs_own_time_is_counted_uncosted() -> None:
    r = run(RUN)
    k = r.kernels
    fused = k[k["name"].str.startswith(FUSED_NAME)]
    # 3 steps x (forward graph, backward graph): the graphs' spans less their ops (addmm, mm, copies) on their thread
    assert len(fused) == 6 and set(fused["unattributed"]) == {"compiled_no_metadata"}
    assert fused["flops"].isna().all() and fused["bytes"].isna().all()
    t = read_trace(RUN / "trace.json.gz")
    items = fused_kernel_items(t)
    assert items["dur_ns"].sum() == fused["dur_ns"].sum()
    # the first forward graph: a 65,636.61 us span, its 4 outermost ops (the addmms; their copies nest in them)
    # 44,187.035 us -> 21,449.575 us own time
    assert items["dur_ns"].iat[0] == pytest.approx(21_449_575, abs=2)
    u = r.to_dict()["unattributed"]
    assert u["share"] == pytest.approx(fused["dur_s"].sum() / k["dur_s"].sum())
    assert 0.10 < u["share"] < 0.20  # was 0: "Cost coverage: 100.0%" with the fused kernels not listed
    assert any(n.startswith(f"{FUSED_NAME}: ") and "counted uncosted" in n for n in u["notes"])


def test_a_cpu_trace_without_compiled_graphs_is_unchanged() -> None:
    assert not len(fused_kernel_items(read_trace(Path(__file__).resolve().parent / "data" / "cpu_block.json.gz")))


def test_cli_reports_the_fused_kernels(tmp_path: Path) -> None:
    out = tmp_path / "a.json"
    r = subprocess.run([sys.executable, "-m", "roofscope", "analyze", str(RUN), "--json", str(out), "-q"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    s = json.loads(out.read_text())["summary"]
    assert s["unattributed"]["by_reason"]["compiled_no_metadata"]["kernels"] == 6


def test_bf16_cat_bytes_follow_its_kernels_element_size(tmp_path: Path) -> None:
    # aten::cat of two [4096, 1024] bf16 tensors: Kineto records the list without a dtype (costed as fp32:
    # 2 * 4,194,304 * 4 in + 8,388,608 * 4 out = 67,108,864). The kernel copies OpaqueType<2u>: 2-byte elements,
    # 33,554,432 bytes -- at 4 us the fp32 count was 129%-style above an 8 TB/s roof, the bf16 one is not.
    b = TraceBuilder()
    ext = b.op("aten::cat", 0, 50, dims=[[[4096, 1024], [4096, 1024]], []], types=["TensorList", "Scalar"],
               concrete=["", "0"])
    b.launch_kernel("void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<at::native::"
                    "(anonymous namespace)::OpaqueType<2u>, unsigned int, 2, 128, 1>(at::native::(anonymous namespace)::"
                    "OpaqueType<2u>*, at::native::(anonymous namespace)::CatArrInputTensorMetadata)", 10, 100, 8, ext=ext)
    p = b.write(tmp_path / "cat.json.gz")
    k = run(p).kernels
    assert k["bytes"].iat[0] == 33_554_432
    with gzip.open(p, "rt") as f:  # an fp32 cat (OpaqueType<4u>) keeps its bytes
        doc = json.load(f)
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["name"] = e["name"].replace("OpaqueType<2u>", "OpaqueType<4u>")
    p.write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert run(p).kernels["bytes"].iat[0] == 67_108_864
