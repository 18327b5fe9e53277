"""MFU that holds (analyzers/cost/modelflops.py): model FLOPs from the trace's forward phase,
never embedding lookups, and HFU >= MFU, on an embedding-heavy language model step."""
from __future__ import annotations

import pandas as pd
import pytest

import roofscope
from roofscope.analyzers.cost.modelflops import ModelFlops, model_flops
from roofscope.hardware.devices import Ceilings
from roofscope.run import typed_meta

from .kineto import TraceBuilder

TOY = Ceilings(device="toy", source="user", peaks={"fp32": 10e12, "bf16": 100e12}, bandwidth=1e12)
BF16, I64 = "c10::BFloat16", "long int"
MAIN, ENGINE = 100, 200
V, D, B, S, H, Q = 32000, 512, 8, 512, 8, 64
T = B * S  # 4096 tokens per step
PARAMS = V * D + D * D  # the embedding table (16.4M) dwarfs the one 512x512 projection (262k)
MM_FWD = 2 * T * D * D  # 2,147,483,648
ATTN_FWD = 4 * B * H * S * S * Q // 2  # causal: 2,147,483,648


def _lm_step(attention: bool = True) -> TraceBuilder:
    """Embedding lookup -> one projection (mm) -> causal flash attention, then the backward
    of both on the autograd engine's thread, then a foreach AdamW step."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 10000)
    ext = b.op("aten::embedding", 10, 20, [[V, D], [B, S], [], [], []], [BF16, I64, "Scalar", "Scalar", "Scalar"])
    b.launch_kernel("indexSelectLargeIndex", 11, 100, 30, ext=ext)
    ext = b.op("aten::mm", 40, 20, [[T, D], [D, D]], [BF16, BF16])
    b.launch_kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 41, 200, 100, ext=ext)
    gpu = 400
    if attention:
        qkv = [[B, H, S, Q]] * 3
        ext = b.op("aten::_scaled_dot_product_flash_attention", 70, 20, qkv + [[], [], [], []],
                   [BF16] * 3 + ["Scalar", "Scalar", "Scalar", ""], concrete=["", "", "", "0.", "True", "False", ""])
        b.launch_kernel("flash_fwd_kernel", 71, gpu, 100, ext=ext)
        gpu += 200
    b.op("autograd::engine::evaluate_function: MmBackward0", 1000, 100, tid=ENGINE)
    ext = b.op("aten::mm", 1010, 20, [[T, D], [D, D]], [BF16, BF16], tid=ENGINE)
    b.launch_kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 1011, gpu, 100, ext=ext, tid=ENGINE)
    ext = b.op("aten::mm", 1040, 20, [[D, T], [T, D]], [BF16, BF16], tid=ENGINE)
    b.launch_kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 1041, gpu + 200, 100, ext=ext, tid=ENGINE)
    b.op("autograd::engine::evaluate_function: EmbeddingBackward0", 1200, 100, tid=ENGINE)
    ext = b.op("aten::embedding_dense_backward", 1210, 50, [[B, S, D], [B, S], [], [], []],
               [BF16, I64, "Scalar", "Scalar", "Scalar"], tid=ENGINE)
    b.launch_kernel("embedding_backward_feature_kernel", 1211, gpu + 400, 300, ext=ext, tid=ENGINE)
    b.annotation("Optimizer.step#AdamW.step", 2000, 500)
    ext = b.op("aten::_foreach_add_", 2010, 50, [[[V, D], [D, D]], [[V, D], [D, D]]], ["TensorList", "TensorList"])
    b.launch_kernel("multi_tensor_apply_kernel<BinaryOpListAlphaFunctor>", 2011, gpu + 800, 200, ext=ext)
    return b


def _metrics(tmp_path, tokens: int | None = T, **meta):
    run_meta = {"optimizer": {"class": "AdamW", "params": PARAMS, "tensors": 2}, **meta}
    if tokens:
        run_meta["tokens_per_step"] = tokens
    a = roofscope.analyze(_lm_step(**{k: v for k, v in meta.items() if k == "attention"})
                          .write(tmp_path / "t.json"), ceilings=TOY, run_meta=run_meta)
    return a, a.to_dict()["metrics"]


def test_embedding_heavy_model_flops_come_from_the_forward_matmuls(tmp_path):
    # 6 * N * T would count the 16.4M-parameter table: 6 * 16,646,144 * 4096 = 409 GFLOP per
    # step, 29x the 14 GFLOP the kernels did; MFU far above HFU (the bug on HF Trainer).
    a, m = _metrics(tmp_path, attention=False)
    assert m["mfu_source"] == "forward_x3"
    assert m["model_flops_per_step"] == 3 * MM_FWD  # 6.44 GFLOP: the lookup is no matmul
    # Counted: the three GEMMs (3 x 2.147 GFLOP) plus the optimizer's adds; the step's GPU
    # window runs from the lookup (100 us) to the optimizer's end (600 + 800 + 200 us).
    assert m["hfu"] >= m["mfu"] and m["hfu_source"] == "counted"
    assert m["mfu"] == pytest.approx(3 * MM_FWD / (m["step_time_s"] * 100e12))
    assert m["mfu_formula"].startswith("3 * forward")


def test_transformer_with_tokens_uses_palm_without_the_embedding(tmp_path):
    a, m = _metrics(tmp_path)
    assert m["mfu_source"] == "palm"
    # 6 * N_non_embedding * T = 6 * 262,144 * 4096 = 6.44 GFLOP (the embedding table left out)
    # + 3 x the causal forward attention's 2.147 GFLOP = 12.88 GFLOP.
    assert m["model_flops_per_step"] == 6 * D * D * T + 3 * ATTN_FWD
    assert m["hfu"] >= m["mfu"]


def test_hfu_is_never_below_mfu(tmp_path):
    # A user's model FLOPs above what the kernels were counted doing: HFU is raised and says so.
    a, m = _metrics(tmp_path, model_flops_per_step=1e15)
    assert m["mfu_source"] == "model_flops"
    assert m["hfu"] == m["mfu"] and m["hfu_source"] == "raised_to_mfu"
    samples = a.step_samples
    assert (samples["hfu"] >= samples["mfu"]).all()


def _no_input_gradient_step() -> TraceBuilder:
    """One Linear's forward (mm, 2·T·D·D) and a backward that computes only its weight gradient
    (a first layer needs no input gradient): 2 GEMMs counted, where 3 × forward assumes 3."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 700)
    ext = b.op("aten::mm", 40, 20, [[T, D], [D, D]], [BF16, BF16])
    b.launch_kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 41, 200, 100, ext=ext)
    b.op("autograd::engine::evaluate_function: MmBackward0", 500, 100, tid=ENGINE)
    ext = b.op("aten::mm", 540, 20, [[D, T], [T, D]], [BF16, BF16], tid=ENGINE)
    b.launch_kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 541, 600, 100, ext=ext, tid=ENGINE)
    return b


def _console(a) -> str:
    from roofscope.reports.registry import RESULT, RenderOptions, renderer

    return renderer(RESULT, "console").render(a, RenderOptions(top=3))


def test_an_estimate_above_the_count_is_capped_and_said_on_screen(tmp_path):
    # Before: MFU 3 x 2.147 = 6.44 GFLOP over the step, HFU silently raised to it from the counted
    # 4.29 GFLOP, and the printed "achieved vs peak" ratio (the count's) did not match either figure.
    a = roofscope.analyze(_no_input_gradient_step().write(tmp_path / "t.json"), ceilings=TOY)
    m = a.to_dict()["metrics"]
    assert m["model_flops_per_step"] == 3 * MM_FWD and m["flops_per_step"] == 2 * MM_FWD
    assert m["mfu_source"] == "forward_x3" and m["hfu_source"] == "counted"
    assert m["mfu_formula"] == "3 * forward matmul/conv/attention FLOPs (trace), capped at the counted FLOPs"
    # MFU = HFU = counted / (step x bf16 peak): the step's GPU window is 200-700 us = 0.5 ms;
    # 4.295e9 / (5e-4 s x 100e12) = 8.59%.
    assert m["step_time_s"] == pytest.approx(500e-6)
    assert m["mfu"] == m["hfu"] == pytest.approx(2 * MM_FWD / (500e-6 * 100e12))
    s = a.step_samples
    assert (s["mfu"] <= s["hfu"]).all() and s["mfu"].iloc[0] == pytest.approx(m["mfu"])
    text = " ".join(_console(a).split())
    assert "MFU 8.6%, HFU 8.6%" in text
    # The rate printed is HFU's: 8.59 TFLOP/s of 100 TFLOP/s, the 8.6% printed.
    assert "HFU is 8.59 TFLOP/s of the given bf16 peak 100 TFLOP/s" in text
    assert ("MFU capped at HFU: the model FLOPs estimate (3 * forward matmul/conv/attention FLOPs (trace)),"
            " 6.44 GFLOP per step, exceeds the 4.29 GFLOP the kernels were counted doing") in text
    md = renderer_text(a, "markdown")
    assert "| MFU/HFU adjusted | MFU capped at HFU:" in md
    html = renderer_text(a, "html")
    assert 'id="utilization-note">MFU capped at HFU' in html and "forward_x3, capped at HFU" in html


def renderer_text(a, name: str) -> str:
    from roofscope.reports.registry import RESULT, RenderOptions, renderer

    out = renderer(RESULT, name).render(a, RenderOptions(top=3))
    return out.decode() if isinstance(out, bytes) else out


def test_a_users_model_flops_above_the_count_raise_hfu_and_say_so(tmp_path):
    a, m = _metrics(tmp_path, model_flops_per_step=1e15)
    assert m["hfu"] == m["mfu"] and m["hfu_source"] == "raised_to_mfu"
    text = " ".join(_console(a).split())
    assert "HFU raised to MFU: the kernels were counted doing" in text and "(--model-flops-per-step)" in text
    # The printed rate is the raised HFU's: 1 PFLOP per step over the step, so the ratio shown matches.
    rate = m["hfu"] * m["peak_flops"]
    assert rate == pytest.approx(1e15 / m["step_time_s"])
    assert 'raised to MFU' in renderer_text(a, "html")


def test_without_ceilings_the_achieved_rate_is_shown(tmp_path):
    # No peaks: no MFU, but the counted FLOPs over the step are known (4.295e9 / 5e-4 s = 8.59 TFLOP/s),
    # and the kernels' rates are over their costed time, all of it ("costed 0.0%" and "-" before).
    a = roofscope.analyze(_no_input_gradient_step().write(tmp_path / "t.json"),
                          ceilings=Ceilings.none("toy", "no ceilings in this test"))
    text = " ".join(_console(a).split())
    assert "util achieved 8.59 TFLOP/s" in text and "MFU, HFU and MBU need ceilings" in text
    k = a.by_kernel()
    assert k["coverage"].tolist() == [1.0] and k["achieved_flops"].iloc[0] == pytest.approx(2 * MM_FWD / 200e-6)
    assert "Cost coverage: 100.0% of non-communication time costed (0.0% without a cost model)" in text
    md = renderer_text(a, "markdown")
    assert "| achieved | 8.59 TFLOP/s (no ceilings: no MFU, HFU or MBU) |" in md
    assert "| costed by the cost model | 100.0% of non-communication time (0.0% without) |" in md
    html = renderer_text(a, "html")
    assert ">Achieved<" in html and ">8.59 TFLOP/s<" in html and ">Costed<" in html


def test_model_flops_from_frames() -> None:
    """Two training steps of hand-made kernels: forward model work 10 + 4 FLOPs, 7 per step."""
    k = pd.DataFrame({"step": [0, 0, 1, 1, 1], "phase": ["forward", "backward", "forward", "backward", "forward"],
                      "category": ["gemm", "gemm", "attention", "gemm", "elementwise"],
                      "flops": [10.0, 20.0, 4.0, 8.0, 100.0]})
    sig = pd.DataFrame({"name": ["aten::embedding", "aten::mm"],
                        "input_dims": [[[100, 2], [8]], [[2, 2], [2, 2]]]})
    assert model_flops(k, sig, None) == ModelFlops(21.0, "forward_x3")
    # Parameters and tokens known, attention present: PaLM, less the 100 x 2 embedding table:
    # 6 * 800 * 10 + 3 * 4 / 2 = 48,006.
    meta = typed_meta({"optimizer": {"params": 1000}, "tokens_per_step": 10})
    assert model_flops(k, sig, meta) == ModelFlops(48006.0, "palm")
    assert model_flops(k, sig, typed_meta({"model_flops_per_step": 5})).formula == "--model-flops-per-step"
    assert model_flops(k.iloc[:0], sig, None) == ModelFlops() and ModelFlops().formula == "counted FLOPs"
