"""Copies between host and device on the host-link roof (PCIe), not HBM's."""
from __future__ import annotations

from dataclasses import replace

import pytest

import roofscope
from roofscope.hardware.devices import Ceilings, load_ceilings_file, lookup, save_ceilings_file
from roofscope.microbench import hostlink
from roofscope.microbench.gpu import ceilings_from_results, datasheet_figure, plan

from .kineto import TraceBuilder

MIB64 = 64 << 20


def _copies(tmp_path):
    """An H100 trace with a 64 MiB pageable HtoD copy taking 2 ms and a 64 MiB DtoD copy taking 0.1 ms."""
    b = TraceBuilder()
    ext = b.op("aten::copy_", 0, 3000)
    b.launch_kernel("Memcpy HtoD (Pageable -> Device)", 10, 20, 2000, ext=ext, cat="gpu_memcpy", nbytes=MIB64)
    b.launch_kernel("Memcpy DtoD (Device -> Device)", 2100, 2100, 100, ext=ext, cat="gpu_memcpy", nbytes=MIB64)
    return b.write(tmp_path / "t.json")


def test_host_copies_use_the_datasheet_pcie_link(tmp_path):
    a = roofscope.analyze(_copies(tmp_path))
    k = a.kernels.set_index("name")
    h2d = k.loc["Memcpy HtoD (Pageable -> Device)"]
    # 67,108,864 B at PCIe Gen5 x16 (63 GB/s) take 1.065 ms at best: 1.065 / 2 ms = 0.533 -> memory-bound.
    # Against HBM3 (3.35 TB/s: 20 us) it would be 1% efficient, "underutilized".
    assert h2d["efficiency"] == pytest.approx(MIB64 / 63e9 / 2e-3)
    assert h2d["cls"] == "memory"
    dtod = k.loc["Memcpy DtoD (Device -> Device)"]
    # a device copy stays on HBM: read + write = 134,217,728 B at 3.35 TB/s = 40.06 us of 100 us
    assert dtod["efficiency"] == pytest.approx(2 * MIB64 / 3.35e12 / 100e-6)


def test_measured_host_link_wins_and_round_trips(tmp_path):
    c = replace(Ceilings.from_spec(lookup("h100-sxm")), source="measured",
                host_link={"h2d": 50e9, "d2h": 48e9, "h2d_pageable": 20e9, "d2h_pageable": 18e9})
    path = save_ceilings_file(c, tmp_path / "c.json")
    c2 = load_ceilings_file(path)
    assert dict(c2.host_link) == dict(c.host_link)
    assert (c2.copy_roof("HtoD"), c2.copy_roof("DtoH"), c2.copy_roof("DtoD")) == (50e9, 48e9, None)
    a = roofscope.analyze(_copies(tmp_path), ceilings=c2)
    h2d = a.kernels.set_index("name").loc["Memcpy HtoD (Pageable -> Device)"]
    assert h2d["efficiency"] == pytest.approx(MIB64 / 50e9 / 2e-3)  # 0.671


def test_no_ceilings_no_host_link():
    none = Ceilings.none("unknown", "no ceilings: test")
    assert none.copy_roof("HtoD") is None


def test_microbench_plan_and_reduction():
    keys = {b.key for b in plan(True)}
    assert set(hostlink.KEYS) <= keys
    names = {b.name for b in plan(True) if b.key in hostlink.KEYS}
    assert names == {"h2d pinned", "d2h pinned", "h2d pageable", "d2h pageable"}
    spec = lookup("h100-sxm")
    assert datasheet_figure(spec, "h2d") == 63e9
    results = [{"name": "hbm copy", "kind": "memory", "key": "bandwidth", "value": 3.0e12, "error": None},
               {"name": "h2d pinned", "kind": "memory", "key": "h2d", "value": 52e9, "error": None},
               {"name": "h2d pageable", "kind": "memory", "key": "h2d_pageable", "value": 21e9, "error": None},
               {"name": "d2h pinned", "kind": "memory", "key": "d2h", "value": None, "error": "OOM"}]
    c = ceilings_from_results("NVIDIA H100 80GB HBM3", spec, results, "t", {})
    assert dict(c.host_link) == {"h2d": 52e9, "h2d_pageable": 21e9}
    # the direction not measured falls back to the datasheet's link
    assert (c.copy_roof("HtoD"), c.copy_roof("DtoH")) == (52e9, 63e9)


@pytest.mark.gpu
def test_host_link_on_the_gpu():
    pinned = hostlink.copy_bench("h2d", size_mib=64, target_s=0.05)()
    pageable = hostlink.copy_bench("h2d_pageable", size_mib=64, target_s=0.05)()
    # any PCIe/C2C link moves more than 1 GB/s; pinned memory is never slower than pageable by much
    assert pinned.value > 1e9 and pageable.value > 1e8 and pinned.value > 0.8 * pageable.value
