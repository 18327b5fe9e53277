"""Traces recorded on an H100 (torch 2.11.0+cu130, 2026-11-24) with each torch.profiler option a user
might set (tests/data/record_profiler_options.py; tests/data/README.md): every one is analyzed, and
what the option leaves out of the trace is what goes missing from the analysis, nothing more."""
from __future__ import annotations

from pathlib import Path

import pytest

import roofscope
from roofscope.cli import main
from roofscope.reports.console import render_summary

DATA = Path(__file__).resolve().parent / "data" / "profiler_options"
# One step of the MLP workload: 3 bf16 Linear(512, 512) on a batch of 64, forward and backward
# (the first layer needs no input gradient): 2*64*512*512 = 33.55 MFLOP per GEMM, x3 forward,
# x5 backward = 268.4 MFLOP, plus GELU/MSE/SGD elementwise work: 270.6 MFLOP in all.
STEP_FLOPS = 2.706e8

# file -> (CPU ops, GPU activities, steps, FLOPs of the recorded steps); without shapes only the optimizer's
# foreach kernels are costed, streamed from their launch grids: 1,966,080 FLOP
NO_SHAPES = 1_966_080.0
EXPECTED = {
    "opt_defaults.json.gz": (161, 31, [2], NO_SHAPES),      # record_shapes off
    "opt_shapes.json.gz": (161, 31, [2], STEP_FLOPS),
    "opt_stack.json.gz": (161, 31, [2], STEP_FLOPS),         # + python_function events
    "opt_modules.json.gz": (161, 31, [2], NO_SHAPES),        # with_modules, no shapes
    "opt_memory.json.gz": (161, 31, [2], STEP_FLOPS),        # + [memory] instant events
    "opt_flops.json.gz": (161, 31, [2], STEP_FLOPS),
    "opt_acc_events.json.gz": (161, 31, [5], STEP_FLOPS),
    "opt_experimental.json.gz": (161, 31, [2], STEP_FLOPS),  # _ExperimentalConfig(verbose=True)
    "opt_tensorboard.json.gz": (161, 31, [2], NO_SHAPES),    # tensorboard_trace_handler(use_gzip=True)
    "opt_cuda_activity_only.json.gz": (0, 31, [], NO_SHAPES),  # activities=[CUDA]: kernels without ops
    "opt_cpu_activity_only.json.gz": (161, 30, [2], STEP_FLOPS),  # activities=[CPU]: a CPU-only analysis
    "opt_cuda_graph.json.gz": (27, 27, [0, 1, 2], None),     # a captured forward replayed 3 times
}


def test_every_fixture_is_listed():
    assert {p.name for p in DATA.glob("*.json.gz")} == set(EXPECTED)
    assert all(p.stat().st_size < 300_000 for p in DATA.glob("*.json.gz"))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_profiler_option_trace(name, tmp_path, capsys):
    ops, activities, steps, flops = EXPECTED[name]
    a = roofscope.analyze(DATA / name)
    s = a.to_dict()
    render_summary(a)
    assert (len(a.trace.ops), len(a.kernels), s["steps"], s["skipped_events"]) == (ops, activities, steps, {})
    if flops is not None:
        assert s["total_flops"] == pytest.approx(flops, rel=1e-3, abs=1.0)
    assert a.cpu_only == (name == "opt_cpu_activity_only.json.gz")
    if not a.cpu_only:
        assert a.ceilings.datasheet.key == "h100-sxm"
    # the command line too: analyze with every output, and the HTML report
    assert main(["analyze", str(DATA / name), "-q", "--json", str(tmp_path / "s.json"),
                 "--csv", str(tmp_path / "k.csv")]) == 0
    assert main(["report", str(DATA / name), "-o", str(tmp_path / "r.html")]) == 0


def test_host_copies_of_the_workload_on_the_pcie_roof():
    """Each step copies 64x512 fp32 = 131,072 B host->device twice (pageable, then pinned)."""
    a = roofscope.analyze(DATA / "opt_shapes.json.gz")
    k = a.kernels[a.kernels["name"].astype(str).str.startswith("Memcpy HtoD")]
    assert sorted(k["name"].astype(str)) == ["Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pinned -> Device)"]
    assert (k["bytes"] == 131072).all()
    # floor on the 63 GB/s PCIe Gen5 link: 131,072 / 63e9 = 2.08 us (on HBM it would be 39 ns)
    assert k["floor_s"].tolist() == pytest.approx([131072 / 63e9] * 2)
