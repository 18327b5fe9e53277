"""Costs of depthwise convolutions, fused optimizers, torchvision ops and a user's Triton kernel on a
live CUDA GPU: every costed kernel under its roof (run on the device machine)."""
from __future__ import annotations

import pytest

from .test_gpu import _profile

pytestmark = pytest.mark.gpu


def _under_roof(an) -> None:
    k = an.kernels
    costed = k[(k["unattributed"] == "") & (k["category"] != "communication")]
    assert (costed["efficiency"].fillna(0) <= 1.0).all(), costed.loc[costed["efficiency"] > 1, ["name", "efficiency"]]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_depthwise_conv_training_is_on_the_cuda_core_roof(tmp_path, dtype):
    import torch

    conv = torch.nn.Conv2d(256, 256, 3, padding=1, groups=256).cuda().to(getattr(torch, dtype))
    x = torch.randn(64, 256, 56, 56, device="cuda", dtype=getattr(torch, dtype), requires_grad=True)

    def step():
        conv(x).sum().backward()

    an = _profile(tmp_path, step)
    convs = an.kernels[an.kernels["category"] == "conv"]
    assert len(convs) and not convs["tensor_core"].any()
    _under_roof(an)


def test_fused_adamw_with_clipping_and_grad_scaler_is_costed(tmp_path):
    import torch

    model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(8)]).cuda()
    opt = torch.optim.AdamW(model.parameters(), fused=True)
    scaler = torch.amp.GradScaler()
    x = torch.randn(256, 2048, device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    an = _profile(tmp_path, step)
    mta = an.kernels[an.kernels["name"].str.contains("multi_tensor_apply")]
    assert len(mta) and (mta["unattributed"] == "").all()
    _under_roof(an)


def test_torchvision_detection_ops_are_costed(tmp_path):
    torchvision = pytest.importorskip("torchvision")
    import torch

    feats = torch.randn(2, 256, 50, 50, device="cuda")
    boxes = torch.rand(1000, 4, device="cuda") * 400
    boxes[:, 2:] += boxes[:, :2]
    scores = torch.rand(1000, device="cuda")
    rois = torch.cat([torch.randint(0, 2, (512, 1), device="cuda").float(), boxes[:512]], dim=1)

    def step():
        torchvision.ops.nms(boxes, scores, 0.7)
        torchvision.ops.roi_align(feats, rois, (7, 7), spatial_scale=0.125, sampling_ratio=2)

    an = _profile(tmp_path, step)
    assert an.to_dict()["unattributed"]["by_reason"]["no_formula"]["time_s"] == 0.0
    _under_roof(an)
