"""Findings grouped by the change a user makes, with a combined saving, and fix snippets in the
framework's terms (analyzers/diagnose/program.py, fixes.py, collectors/frameworks.py)."""
from __future__ import annotations

import pytest

import roofscope
from roofscope.collectors.frameworks import loaded_frameworks

from .test_phases import _lightning_step
from .test_rules import F32, TOY, Step, _eltwise_chain


def test_loaded_frameworks_from_modules():
    class State:  # accelerate.state.AcceleratorState: its shared state fills when an Accelerator is made
        _shared_state = {"device": "cuda"}

    state = type("module", (), {"AcceleratorState": State})
    mods = {"transformers": 1, "transformers.trainer": 1, "accelerate": 1, "accelerate.accelerator": 1,
            "accelerate.state": state}
    assert loaded_frameworks(mods) == ["hf_trainer", "accelerate"]
    # transformers imports accelerate when installed: loaded, but no Accelerator made
    State._shared_state = {}
    assert loaded_frameworks(mods) == ["hf_trainer"]
    assert loaded_frameworks({"accelerate.accelerator": 1}) == []
    # transformers as a model library only (no Trainer) drives no loop
    assert loaded_frameworks({"transformers": 1, "pytorch_lightning": 1}) == ["lightning"]
    assert loaded_frameworks({}) == []


def _host_bound_chain(tmp_path):
    """The elementwise chain of test_rules (fusion saves 468.7 us) after 40 tiny kernels, each
    launched 20 us after the GPU went idle (800 us of host-bound idle)."""
    s = Step()
    for _ in range(40):
        s.kernel("aten::add", [[256], [256]], [F32, F32], "vectorized_elementwise_kernel<add>", 2, host_gap=20)
    _eltwise_chain(s)
    return s.write(tmp_path)


def test_compile_change_combines_fusion_and_launch_findings_in_hf_trainer_terms(tmp_path):
    path = _host_bound_chain(tmp_path)
    a = roofscope.analyze(path, ceilings=TOY, run_meta={"frameworks": ["accelerate", "hf_trainer"]})
    d = a.to_dict()["diagnosis"]
    f = {x["rule"]: x for x in a.to_dict()["findings"]}
    assert f["fusion"]["change"] == f["cuda_graphs"]["change"] == "torch_compile"
    # The Trainer's own switch, not torch.compile(model) (HF Trainer before accelerate: the
    # loop the user wrote is the Trainer's).
    assert f["fusion"]["fix"]["snippet"].startswith("TrainingArguments(..., torch_compile=True")
    assert f["fusion"]["fix"]["framework"] == "hf_trainer"
    assert d["frameworks"] == ["hf_trainer", "accelerate"]
    top = d["changes"][0]
    assert top["change"] == "torch_compile" and top["rank"] == 1
    assert sorted(top["rules"]) == ["cuda_graphs", "fusion", "launch_fusion"]
    # Different terms (memory-bound time, host-bound idle): the savings add, each within its term.
    terms = d["terms_s"]
    expect = min(f["fusion"]["saving_s"], terms["memory"]) + min(f["cuda_graphs"]["saving_s"], terms["host"])
    assert top["saving_s"] == pytest.approx(expect)
    assert top["saving_s"] > max(f["fusion"]["saving_s"], f["cuda_graphs"]["saving_s"])


def test_without_a_framework_the_rule_snippet_stays(tmp_path):
    a = roofscope.analyze(_host_bound_chain(tmp_path), ceilings=TOY, run_meta={"frameworks": []})
    f = {x["rule"]: x for x in a.to_dict()["findings"]}
    assert f["fusion"]["fix"]["snippet"] == "model = torch.compile(model)"
    assert f["fusion"]["fix"]["framework"] == ""


def test_lightning_detected_from_a_plain_trace(tmp_path):
    # No run.json: a backward inside optimizer.step is Lightning's closure; its fused
    # optimizer fix is written in configure_optimizers.
    a = roofscope.analyze(_lightning_step(per_param_optimizer=True).write(tmp_path / "t.json"), ceilings=TOY)
    d = a.to_dict()["diagnosis"]
    assert d["frameworks"] == ["lightning"]
    f = {x["rule"]: x for x in a.to_dict()["findings"]}["fused_optimizer"]
    assert "def configure_optimizers(self):" in f["fix"]["snippet"] and "fused=True" in f["fix"]["snippet"]


def test_launch_bound_saving_is_the_idle_inside_forward_and_backward(tmp_path):
    # 20 forward kernels and 20 backward kernels (autograd engine thread) of 2 us, each launched
    # 20 us after the GPU went idle: 19 + 19 in-phase gaps of 20 us = 760 us a graph removes (the
    # step's first gap is its edge). Between the phases the framework's own code keeps the GPU
    # idle 3 ms more (a 3020 us gap): no graph removes that.
    s = Step()
    for _ in range(20):
        s.kernel("aten::add", [[256], [256]], [F32, F32], "vectorized_elementwise_kernel<add>", 2, host_gap=20)
    s.gpu += 3000
    s.cpu = max(s.cpu, s.gpu)
    s.b.op("autograd::engine::evaluate_function: AddBackward0", s.cpu - 1, 2000, tid=200)
    for _ in range(20):
        s.kernel("aten::mul", [[256], [256]], [F32, F32], "vectorized_elementwise_kernel<mul>", 2, host_gap=20,
                 tid=200)
    a = roofscope.analyze(s.write(tmp_path), ceilings=TOY)
    assert set(a.kernels["phase"]) == {"forward", "backward"}
    f = {x["rule"]: x for x in a.to_dict()["findings"]}["cuda_graphs"]
    fig = f["evidence"]["figures"]
    assert fig["host_idle_s"] == pytest.approx(760e-6 + 3020e-6)
    assert fig["in_model_idle_s"] == pytest.approx(38 * 20e-6)
    assert f["saving_s"] == pytest.approx(38 * 20e-6 - 10e-6)
