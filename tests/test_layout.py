"""Whether torch.compile takes away cuDNN's layout transposes (analyzers/diagnose/shapes.py), on a ResNet-50
recorded on an H200 and on convolutions as Inductor's layout heuristic sorts them."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from roofscope.analysis import run
from roofscope.analyzers.diagnose.shapes import convolutions, keeps_nchw
from roofscope.analyzers.ingest.kineto_reader import load_trace

# torchvision ResNet-50, fp32, NCHW, SGD, batch 16 (benchmarks/real_clients/resnet50_channels_last.py --plain
# --steps 14 --batch 16 under `roofscope run`, H200, torch 2.11, 2026-11-29).
RESNET = Path(__file__).parent / "data" / "h200_resnet50_nchw_run"


def _convs(*rows: tuple[list[int], int]) -> pd.DataFrame:
    return pd.DataFrame([{"w": w, "x": [8, w[1] * g, 32, 32], "groups": g, "stride": [1, 1], "calls": 1}
                         for w, g in rows], columns=["w", "x", "groups", "stride", "calls"])


def test_resnet50s_convolutions_are_read_from_the_trace_and_inductor_converts_them():
    convs = convolutions(load_trace(RESNET / "trace.json.gz"))
    # ResNet-50 has 53 convolutions a forward (the stem, 16 bottlenecks of three, 4 downsamples); the trace
    # profiled 3 steps: 159 calls, in 23 distinct signatures (the blocks of one stage share theirs).
    assert convs["calls"].sum() == 159 and len(convs) == 23
    assert [16, 3, 224, 224] in convs["x"].tolist() and [64, 3, 7, 7] in convs["w"].tolist()
    assert set(convs["groups"]) == {1}
    # No grouped convolution, no 3x3 narrowing by half (the bottlenecks narrow with 1x1 kernels), channels
    # up to 2048: Inductor's training heuristic converts.
    assert keeps_nchw(convs, top_ops=3000, training=True) == ""
    # 300 graph nodes per convolution, forward and backward: 159 x 600 = 95,400 top-level calls keep it.
    assert keeps_nchw(convs, top_ops=95_400, training=True).startswith("few convolutions")


def test_inductor_layout_heuristic_on_each_kind_of_convolution():
    wide = ([128, 128, 3, 3], 1)
    assert keeps_nchw(_convs(wide), 10, training=True) == ""
    # Grouped with 2 input channels a group: channels_last is up to 31x slower there, Inductor keeps NCHW.
    assert keeps_nchw(_convs(wide, ([224, 2, 3, 3], 112)), 10, training=True).startswith("a grouped")
    # Depthwise (one input channel a group) does not count as grouped.
    assert keeps_nchw(_convs(wide, ([128, 1, 3, 3], 128)), 10, training=True) == ""
    # A 3x3 convolution from 256 to 128 channels (a UNet decoder's) keeps NCHW; a 1x1 one does not.
    assert keeps_nchw(_convs(wide, ([128, 256, 3, 3], 1)), 10, training=True).startswith("a convolution with")
    assert keeps_nchw(_convs(wide, ([128, 256, 1, 1], 1)), 10, training=True) == ""
    assert keeps_nchw(_convs(([32, 3, 3, 3], 1), ([64, 32, 3, 3], 1)), 10, training=True).startswith("every conv")
    # Inference weighs FLOPs by Inductor's measured speed-ups: a 3x3 128->128 convolution on 8x128x32x32 does
    # 2 x 8 x 128 x 1024 x 1152 = 2.42 GFLOP at 0.823; a grouped [224, 2, 3, 3] one on 8x224x32x32 does
    # 2 x 8 x 224 x 1024 x 18 = 0.066 GFLOP at 1.358: 0.823 x 2.42 + 1.358 x 0.066 < 2.48, converted.
    assert keeps_nchw(_convs(wide, ([224, 2, 3, 3], 112)), 10, training=False) == ""
    assert keeps_nchw(_convs(([224, 2, 3, 3], 112)), 10, training=False).startswith("its kinds")
    assert keeps_nchw(_convs(), 10, training=True).startswith("the trace holds no convolution shapes")


def test_compiles_saving_holds_the_transposes_inductor_takes_away():
    f = {x["rule"]: x for x in run(RESNET).to_dict()["findings"]}
    cl, fusion = f["channels_last"], f["fusion"]
    # 195 transposes a step around the convolutions, 1.148 ms of GPU time: channels_last's saving, and now
    # part of compile's, since compiling converts the convolutions as well.
    assert cl["evidence"]["figures"]["transpose_s"] == pytest.approx(1.1477e-3, rel=1e-3)
    assert fusion["evidence"]["figures"]["layout_transposes_s"] == pytest.approx(1.1477e-3, rel=1e-3)
    assert "the 195 cuDNN layout transposes a step go too (their 1.148 ms/step" in fusion["fix"]["text"]
    # Both savings are GPU time scaled by the share of the step the GPU is not waiting on the host (0.442 on
    # this host-bound batch of 16): channels_last's 1.148 ms -> 0.507 ms; compile's, the transposes and the
    # chains' 0.977 ms of intermediates, 2.125 ms -> 0.939 ms.
    assert cl["saving_s"] == pytest.approx(0.507e-3, rel=1e-2)
    assert fusion["saving_s"] == pytest.approx((1.148e-3 + 0.977e-3) * 0.507 / 1.148, rel=1e-2)
