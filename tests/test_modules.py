"""Module attribution: forward labels, backward via autograd sequence numbers, naming, depth."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import roofscope
from roofscope.analyzers.model.kernels import at_depth
from roofscope.collectors.modules import ModuleLabels
from roofscope.hardware.devices import Ceilings

from .kineto import TraceBuilder

MM = dict(dims=[[64, 64], [64, 64]], types=["float", "float"])


def test_backward_kernels_inherit_the_forward_module(tmp_path: Path) -> None:
    b = TraceBuilder()
    # An autograd-thread op first in the file: thread codes must still agree across tables
    # (they were numbered per table once, and module labels then missed every op).
    b.op("aten::empty", 1, 1, tid=200)
    # Forward on thread 100: fc1's mm inside its label (sequence number 7), a bare mm outside.
    b.annotation("nn.Module: Net", 0, 100)
    b.annotation("nn.Module: Net.fc1", 10, 40)
    e1 = b.op("aten::mm", 20, 20, **MM, **{"Sequence number": 7})
    b.launch_kernel("gemm_fwd", 25, 200, 10, ext=e1)
    e2 = b.op("aten::mm", 60, 20, **MM, **{"Sequence number": 8})
    b.launch_kernel("gemm_net", 65, 220, 10, ext=e2)
    # Backward on autograd's thread 200, outside every label: MmBackward0 carries number 7.
    b.op("autograd::engine::evaluate_function: MmBackward0", 300, 50, tid=200, **{"Sequence number": 7})
    e3 = b.op("aten::mm", 310, 20, tid=200, **MM)
    b.launch_kernel("gemm_bwd", 315, 400, 10, ext=e3, tid=200)
    e4 = b.op("aten::mm", 500, 20, tid=200, **MM)  # no backward node above: no module
    b.launch_kernel("gemm_loose", 505, 600, 10, ext=e4, tid=200)
    a = roofscope.analyze(b.write(tmp_path / "t.json"))
    got = dict(zip(a.kernels["name"].astype(str), a.kernels["module"]))
    assert got == {"gemm_fwd": "Net.fc1", "gemm_net": "Net", "gemm_bwd": "Net.fc1", "gemm_loose": ""}
    # Module labels are not regions.
    assert set(a.kernels["region"]) == {""}
    by = a.by_module()
    assert by.loc["Net.fc1", "calls"] == 2 and by.loc["(no module)", "calls"] == 1
    assert a.by_module(depth=1).loc["Net", "calls"] == 3
    assert a.to_dict()["modules"] is True


def test_at_depth() -> None:
    s = pd.Series(["GPT.blocks.3.mlp.fc", "GPT", ""])
    assert at_depth(s, 3).tolist() == ["GPT.blocks.3", "GPT", ""]
    assert at_depth(s, None) is s
    with pytest.raises(ValueError):
        at_depth(s, 0)


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def test_labels_name_roots_and_close_on_error() -> None:
    labels = ModuleLabels()
    net, other = Net(), Net()
    head_alone = net.head
    assert labels.name_of(head_alone) == "Linear"  # called on its own first: a root of its own
    assert labels.name_of(net) == "Net"            # then its parent claims the whole tree
    assert labels.name_of(head_alone) == "Net.head"
    assert labels.name_of(net.body[0]) == "Net.body.0"
    assert labels.name_of(other) == "Net_1"
    labels.install()
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
            net(torch.randn(4, 8))
            with pytest.raises(RuntimeError):
                net(torch.randn(4, 3))     # shape error inside body.0: spans must still close
            net.head(torch.randn(4, 8))
    finally:
        labels.remove()
    assert labels._stack() == []
    names = [e.name for e in p.events() if e.name.startswith("nn.Module: ")]
    assert names.count("nn.Module: Net.head") == 2 and names.count("nn.Module: Net.body.0") == 2
    net(torch.randn(4, 8))                 # removed: no more calls counted
    # Net, body, body.0, body.1, head; then Net, body, body.0 (which raised); then head alone.
    assert labels.calls == 5 + 3 + 1


def test_profiled_cpu_model_modules(tmp_path: Path) -> None:
    net = Net()
    labels = ModuleLabels()
    labels.install()
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as p:
            net(torch.randn(32, 8)).sum().backward()
    finally:
        labels.remove()
    path = tmp_path / "t.json"
    p.export_chrome_trace(str(path))
    cpu = Ceilings(device="cpu: test", source="user", peaks={"fp32": 1e11}, bandwidth=1e10)
    a = roofscope.analyze(path, ceilings=cpu)
    mm = a.kernels[a.kernels["name"].astype(str).isin(["aten::addmm", "aten::mm"])]
    # Forward addmm in each Linear; backward mm (grad input / grad weight) mapped back to them.
    assert set(mm["module"]) == {"Net.body.0", "Net.head"}
    assert np.all(mm.groupby("module").size() >= 2)
