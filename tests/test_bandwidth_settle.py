"""The seam between costing and placement: cost.attribution answers without a device, and
place.bandwidth settles what only the memory roof decides (layout kernels' bytes, streams'
bounds). End-to-end numbers are in test_analysis.py and test_optimizer_costs.py."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from roofscope.analyzers.cost.attribution import attribute
from roofscope.analyzers.cost.costmodel import signature_costs
from roofscope.analyzers.ingest import read as load_trace
from roofscope.analyzers.place.bandwidth import settle
from tests.kineto import TraceBuilder
from tests.test_analysis import cudnn_conv
from tests.test_optimizer_costs import _unlaunched


def _attributed(path: Path):
    trace = load_trace(path)
    return attribute(trace, signature_costs(trace.signatures))


def _conv(tmp_path: Path) -> Path:
    # test_analysis.test_conv_cost_walks_up_from_cudnn_op's convolution: operands 6,422,528 B
    # (input, output) and 147,456 B (weight); layout kernels of 15, 1 and 15 us.
    b = TraceBuilder()
    cudnn_conv(b)
    return b.write(tmp_path / "conv.json")


def test_layout_kernels_share_by_duration_until_the_roof_picks_an_operand(tmp_path: Path) -> None:
    k, choices = _attributed(_conv(tmp_path))
    assert choices.layout_rows.tolist() == [0, 1, 3]
    op = int(k["cost_op"].iat[0])
    assert choices.operand_bytes[op].tolist() == [294_912, 12_845_056, 12_845_056]
    # Without a roof, the layout kernels share the op's 12,992,512 compulsory bytes by duration (15:1:15).
    assert k["bytes"].iloc[[0, 1, 3]].tolist() == pytest.approx([12_992_512 * 15 / 31, 12_992_512 / 31,
                                                                  12_992_512 * 15 / 31])
    unchanged = k.copy()
    settle(k, choices, None)
    settle(k, choices, 0.0)
    pd.testing.assert_frame_equal(k, unchanged)
    # At 1 TB/s, 15 us moves 15 MB (an input or output, read and written), 1 us the weight only.
    settle(k, choices, 1e12)
    assert k["bytes"].tolist() == [12_845_056, 294_912, 12_992_512, 12_845_056]
    # At 10 GB/s, 1 us is too short for any operand: no bytes (latency).
    k, choices = _attributed(_conv(tmp_path))
    settle(k, choices, 10e9)
    assert k["bytes"].iat[1] == 0.0


def test_a_stream_bound_the_roof_rules_out_is_dropped(tmp_path: Path) -> None:
    k, choices = _attributed(_unlaunched(tmp_path))
    # apex Adam: 18,350,080 B in 100 us (183.5 GB/s); torch's foreach add: 1,572,864 B (15.7 GB/s).
    assert list(k["cost_source"]) == ["launch", "launch"] and list(choices.unstreamed.index) == [0, 1]
    settle(k, choices, 1e12)
    assert list(k["cost_source"]) == ["launch", "launch"]
    k, choices = _attributed(_unlaunched(tmp_path))
    settle(k, choices, 100e9)
    adam, add = k.iloc[0], k.iloc[1]
    assert np.isnan(adam["flops"]) and np.isnan(adam["bytes"]) and np.isnan(adam["flops_analytic"])
    assert (adam["cost_source"], adam["dtype"], adam["unattributed"]) == ("none", "", "no_launch_op")
    assert (add["cost_source"], add["bytes"], add["dtype"]) == ("launch", 1_572_864, "bf16")

