from __future__ import annotations

import pytest
import torch

import roofscope
from roofscope.hardware.devices import Ceilings

CPU = Ceilings(device="cpu: test", source="user", peaks={"fp32": 1e12}, bandwidth=50e9)


@roofscope.region("decode")
def _decode(x: torch.Tensor) -> torch.Tensor:
    return x @ x


def test_regions_label_work_in_the_analysis(tmp_path):
    x = torch.randn(128, 128)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as p:
        with roofscope.region("prefill"):
            torch.mm(x, x)
            with roofscope.region("attention"):
                torch.softmax(x, dim=-1)
        _decode(x)
        _decode(x)
        torch.relu(x)
    path = tmp_path / "t.json"
    p.export_chrome_trace(str(path))
    a = roofscope.analyze(path, ceilings=CPU)
    by = {r: sorted(set(map(str, names))) for r, names in a.kernels.groupby("region")["name"]}
    assert by["prefill"] == ["aten::mm"]
    assert by["attention"] == ["aten::_softmax"]  # innermost region wins
    assert by["decode"] == ["aten::mm"]
    assert a.by_region().loc["decode", "calls"] == 2  # one span per decorated call
    assert by[""] == ["aten::clamp_min"]  # relu runs as clamp_min on CPU; outside any region


def test_region_closes_on_error_and_validates_name():
    with pytest.raises(RuntimeError):
        with roofscope.region("boom"):
            raise RuntimeError("x")
    with roofscope.region("after"):  # the stack is balanced again
        pass
    with pytest.raises(ValueError):
        roofscope.region("  ")
