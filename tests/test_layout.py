"""Whether torch.compile takes away cuDNN's layout transposes (analyzers/diagnose/shapes.py), on a ResNet-50
recorded on an H200 and on convolutions as Inductor's layout heuristic sorts them."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from roofscope.analysis import run
from roofscope.analyzers.diagnose.shapes import convolutions, keeps_nchw
from roofscope.analyzers.ingest.kineto_reader import load_trace
from roofscope.reports.phrases import savings_note

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
    # cuDNN's NCHW batch norm, per step: bn_bw_1C11_kernel_new 12 kernels, 1.0645 ms, 1079.0 MB; at 0.45 x 4.8
    # TB/s (2.16 TB/s) they take 0.4996 ms, 0.565 ms saved. With the other three kinds (bw singleread 0.7331 ms /
    # 1055.6 MB, fw NCHW 0.4980 / 719.4, fw singleread 0.4775 / 704.1), kernel by kernel: 1.148 ms. Kind by kind
    # it is 0.565 + 0.244 + 0.165 + 0.152 = 1.126 ms: a few small kernels beat the rate and save nothing.
    assert cl["evidence"]["figures"]["batch_norm_s"] == pytest.approx(1.1480e-3, rel=1e-3)
    assert "batch norm on NCHW tensors 2.773 ms/step, of which 1.148 above the NHWC rate" in cl["summary"]
    # Compile fuses the forward's batch norm into its chains (priced there); the backward's, outside them, is
    # generated channels_last: 0.950 ms of the 1.148.
    assert fusion["evidence"]["figures"]["batch_norm_s"] == pytest.approx(0.9502e-3, rel=1e-3)
    # Both savings are GPU time scaled by the share of the step the GPU is not waiting on the host (0.442 on
    # this host-bound batch of 16): channels_last's 1.148 + 1.148 ms -> 1.015 ms; compile's, the transposes,
    # the backward's batch norm and the chains' 0.977 ms of intermediates, 3.075 ms -> 1.359 ms.
    share = 0.507 / 1.148
    assert cl["saving_s"] == pytest.approx((1.1477e-3 + 1.1480e-3) * share, rel=1e-2)
    assert fusion["saving_s"] == pytest.approx((1.148e-3 + 0.977e-3 + 0.950e-3) * share, rel=1e-2)


def test_the_same_loop_channels_last_has_nothing_to_gain_from_it():
    # The same ResNet-50 with model and batch channels_last (NHWC strides): cuDNN transposes nothing, and its
    # batch norm runs the NHWC kernels, so neither channels_last nor compile's layout term claims anything.
    f = {x["rule"]: x for x in run(RESNET.with_name("h200_resnet50_nhwc_run")).to_dict()["findings"]}
    assert "channels_last" not in f
    figures = f["fusion"]["evidence"]["figures"]
    assert "layout_transposes_s" not in figures and "batch_norm_s" not in figures


def test_a_gpu_bound_step_whose_host_work_is_as_long_gains_little_from_faster_kernels():
    # timm EfficientNet-B0, fp32 NCHW, batch 64 (H200): its own step 33.248 ms with the GPU busy 32.36 ms of it;
    # under the profiler the step took 62.525 ms, the GPU waiting on the host, which recorded 6,222.3 events a
    # step (CPU ops and runtime calls). At most 4.8 us each, the profiler added at most 29.867 ms: the host's
    # own work is at least 62.525 - 29.867 = 32.658 ms. channels_last's 7.17 ms of GPU time (0.108 ms of
    # transposes, 7.252 ms of NCHW batch norm, x 0.974 not waiting on the host) can show as 33.248 - 32.658 =
    # 0.590 ms at most. Plain runs with channels_last saved nothing (-4.1 ms [-14.8, 6.6]: the host set the
    # pace at 34-42 ms).
    d = run(RESNET.with_name("h200_timm_effnet_run")).to_dict()
    cl = {x["rule"]: x for x in d["findings"]}["channels_last"]
    figures = cl["evidence"]["figures"]
    assert figures["host_floor_s"] == pytest.approx(0.062525 - 4.8e-6 * 6222.33, rel=1e-4)
    assert figures["batch_norm_s"] == pytest.approx(7.252e-3, rel=1e-3)
    assert figures["unbounded_saving_s"] == pytest.approx(7.173e-3, rel=1e-3)
    assert cl["saving_s"] == pytest.approx(0.033248 - 0.032658, rel=1e-3)
    assert "at least 32.658 ms a step without the profiler" in cl["fix"]["text"]
    # The console says it beside the program time.
    text = "\n".join(savings_note(d["diagnosis"]["program_time"]))
    assert "the host's own work is at least 32.658 ms a step" in text and "saves at most 0.590 ms" in text
    # Compile issues less host work: its saving is not held to the host's present time.
    fusion = {x["rule"]: x for x in d["findings"]}["fusion"]
    assert "host_floor_s" not in fusion["evidence"]["figures"] and fusion["saving_s"] > 0.0050
