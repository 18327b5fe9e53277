"""Advice that holds for the program (issue 37): fix code written for how it runs (analyzers/diagnose/
program.py, snippets.py), preconditions checked on the trace (blockers.py: gradient accumulation, library
kernels, the optimizer outside the compiled model), SDPA's backend and why it fell back (sdpa.py), advice
that saves nothing, the ``apply`` names ``roofscope verify`` injects, and the rows of the issue's table as
synthetic traces: each a case the rules once got wrong.

Ceilings are test_rules' TOY (fp32 10 TFLOP/s, 1 TB/s); times in the builder are microseconds.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from roofscope.analysis import run
from roofscope.analyzers.diagnose.fixes import compile_apply, compile_code
from roofscope.analyzers.diagnose.program import Program
from roofscope.analyzers.diagnose.sdpa import sdpa_calls
from roofscope.analyzers.ingest import read
from roofscope.analyzers.model.findings import APPLY_NAMES

from .kineto import TraceBuilder
from .test_fixes_apply import _launch_bound
from .test_rules import F32, TOY, Step, _eltwise_chain

DATA = Path(__file__).parent / "data"
GQA = DATA / "h100_gqa_decode_run"          # examples/generate.py: decode steps, a Run with no program block
GPT2 = DATA / "h200_gpt2_generate_run"      # GPT-2 generate() sampling on an H200 (steps.rearmed names generate())
ENGINE = 200
# NAME or NAME:ARG, several joined by ";" (analyzers/model/findings.APPLY_NAMES)
APPLY = re.compile(r"^(?:(?:%s)(?::[\w=.-]+)?)(?:;(?:(?:%s)(?::[\w=.-]+)?))*$" % (("|".join(APPLY_NAMES),) * 2))


def _findings(result) -> dict[str, dict]:
    return {f["rule"]: f for f in result.to_dict()["findings"]}


def _code(snippet: str) -> str:
    """A snippet's code without its comments."""
    return "\n".join(line.split("#", 1)[0] for line in snippet.splitlines())


def _forward_backward(s: Step, n: int) -> None:
    """A forward of ``n`` elementwise kernels on the main thread, then a backward of ``n`` on the autograd
    engine's thread, every kernel 2 us and launched 20 us after the GPU went idle (launch-bound)."""
    for _ in range(n):
        s.kernel("aten::add", [[256], [256]], [F32, F32], "vectorized_elementwise_kernel<add>", 2, host_gap=20)
    s.b.op("autograd::engine::evaluate_function: AddBackward0", s.cpu, 40 * n, tid=ENGINE)
    for _ in range(n):
        s.kernel("aten::mul", [[256], [256]], [F32, F32], "vectorized_elementwise_kernel<mul>", 2, host_gap=20,
                 tid=ENGINE)


def _accumulating(tmp_path: Path, micro: int) -> Path:
    """One optimizer step of ``micro`` micro-batches (each :func:`_forward_backward` of 10 kernels), then a
    foreach optimizer step."""
    s = Step()
    for _ in range(micro):
        _forward_backward(s, 10)
        s.cpu += 5
    s.b.annotation("Optimizer.step#AdamW.step", s.cpu, 30)
    s.kernel("aten::_foreach_add_", [[[256]] * 4, [[256]] * 4], ["TensorList", "TensorList"],
             "multi_tensor_apply_kernel<BinaryOpListAlphaFunctor>", 5)
    return s.write(tmp_path, f"acc{micro}.json")


# -- gradient accumulation blocks graph capture ---------------------------------------------------

def test_gradient_accumulation_blocks_the_cuda_graph_and_says_how_around_it(tmp_path: Path) -> None:
    # The PEFT LoRA row of the issue: 4 micro-batches per optimizer step crashed under
    # mode="reduce-overhead" (a replay overwrote the outputs the step still used). With a graph step
    # marked before each forward, benchmarks/real_clients/lora_accum.py crashed too (H200, in its backward):
    # the marks are named as a way to try, not applied, and compiling without graphs is launch_fusion's fix.
    r = run(_accumulating(tmp_path, 4), ceilings=TOY)
    assert r.diagnosis.program["forwards_per_step"] == 4.0
    f = _findings(r)["cuda_graphs"]
    assert f["status"] == "blocked" and f["saving_s"] == 0.0 and f["fix"]["apply"] == ""
    assert [(b["kind"], b["per_step"]) for b in f["blockers"]] == [("outputs_reused", 4.0)]
    assert "torch.compiler.cudagraph_mark_step_begin()" in f["fix"]["snippet"]
    assert 'mode="max-autotune-no-cudagraphs"' in f["fix"]["snippet"]
    # What the graph would have saved is kept apart, claimed by nothing.
    assert f["evidence"]["figures"]["unblocked_saving_s"] > 0
    assert all("cuda_graphs" not in c["rules"] for c in r.to_dict()["diagnosis"]["changes"])


def test_a_launch_bound_step_whose_graph_is_blocked_is_told_to_compile_without_graphs(tmp_path: Path) -> None:
    # The same 4 micro-batches: 80 model kernels a step, each launched 20 us after the GPU went idle. Inside
    # forward and backward, 9 + 9 gaps a micro-batch: 4 x 18 x 20 us = 1.44 ms of host-bound idle. Compiled,
    # 4 chains of 10 fusible kernels become 4 kernels: 36 of the 80 launches go, 1.44 ms x 36 / 80 = 0.648 ms.
    # (LoRA on the H200: graphs blocked, fusion not binding, and compile saved 39.8 ms of 88.)
    f = _findings(run(_accumulating(tmp_path, 4), ceilings=TOY))["launch_fusion"]
    figs = f["evidence"]["figures"]
    assert (figs["model_kernels_per_step"], figs["fused_away_per_step"], figs["chains_per_step"]) == (80, 36, 4)
    assert figs["in_model_idle_s"] == pytest.approx(1.44e-3)
    assert f["saving_s"] == pytest.approx(0.648e-3) and f["status"] == "ok"
    assert f["fix"]["apply"] == "compile:default" and f["change"] == "torch_compile"
    assert "Without CUDA graphs" in f["fix"]["text"]


def test_one_forward_per_step_leaves_the_graph_fix_applicable(tmp_path: Path) -> None:
    r = run(_accumulating(tmp_path, 1), ceilings=TOY)
    assert r.diagnosis.program["forwards_per_step"] == 1.0
    f = _findings(r)["cuda_graphs"]
    assert f["status"] == "ok" and f["saving_s"] > 0
    assert f["fix"]["apply"] == "compile:reduce-overhead"
    assert f["fix"]["snippet"] == 'model = torch.compile(model, mode="reduce-overhead")'


def test_micro_batches_counted_on_a_real_run() -> None:
    # benchmarks/real_clients/lora_accum.py on this machine's CPU (tests/data/cpu_lora_accum_run: 1 layer,
    # d 64, 4 micro-batches of gradient accumulation per AdamW step): 4 forwards per optimizer step.
    p = run(DATA / "cpu_lora_accum_run").diagnosis.program
    assert p["forwards_per_step"] == 4.0 and p["training"] and p["optimizer"] == "AdamW"
    assert p["root_module"] == "LoraLM" and p["kind"] == "training_loop" and p["generate"] is False


def test_a_runs_forward_spans_count_the_micro_batches(tmp_path: Path) -> None:
    # A Run labels each root forward "roofscope: forward [B, T]": 3 in the step are 3 micro-batches, even
    # where the backward passes cannot be told apart.
    s = Step()
    for i in range(3):
        t = s.cpu
        s.kernel("aten::add", [[256], [256]], [F32, F32], "vectorized_elementwise_kernel<add>", 2, host_gap=20)
        s.b.annotation("roofscope: forward [8, 128]", t, s.cpu - t)
    s.b.op("autograd::engine::evaluate_function: AddBackward0", s.cpu, 100, tid=ENGINE)
    s.kernel("aten::mul", [[256], [256]], [F32, F32], "vectorized_elementwise_kernel<mul>", 2, host_gap=20,
             tid=ENGINE)
    r = run(s.write(tmp_path), ceilings=TOY)
    assert r.diagnosis.program["forwards_per_step"] == 3.0


# -- SDPA: the backend it fell to, and why -----------------------------------------------------------

def test_sdpa_fallback_reason_from_strides_on_a_real_cpu_trace() -> None:
    # tests/data/record_sdpa_strides.py: UNet-style attention, q/k/v [2, 2, 64, 32] as transposed views
    # (last-dim stride 64), then the same made contiguous.
    calls = sdpa_calls(read(DATA / "cpu_sdpa_strides.json.gz"), on_cpu=True)
    by = {c.backend: c for c in calls}
    assert set(by) == {"math", "flash"}
    math = by["math"]
    assert math.q == [2, 2, 64, 32] and math.dtype == "fp32" and math.is_causal == "False" and not math.mask
    assert [r.kind for r in math.reasons] == ["strides"] and math.reasons[0].keeps
    assert "q 64, k 64, v 64" in math.reasons[0].text
    assert by["flash"].reasons == ()


def _sdpa_math(tmp_path: Path, strides_last: int, causal: str = "False", head: int = 32) -> Path:
    """One step: scaled_dot_product_attention on q, k, v [2, 2, 1024, head] fp32 (last-dim stride
    ``strides_last``) falling to the math backend: bmm (QK^T, 40 us), softmax over 4M scores (40 us), bmm (40 us)."""
    b = TraceBuilder()
    qkv = [[2, 2, 1024, head]] * 3
    st = [[2 * 1024 * head, 1024 * head, 1, strides_last] if strides_last != 1 else [2 * 1024 * head, 1024 * head,
                                                                                        head, 1]] * 3
    b.op("aten::scaled_dot_product_attention", 0, 300, qkv + [[], [], [], [], []],
         [F32] * 3 + ["", "Scalar", "Scalar", "", "Scalar"], ["", "", "", "", "0.", causal, "", "False"],
         **{"Input Strides": st + [[]] * 5})
    b.op("aten::_scaled_dot_product_attention_math", 1, 298, qkv + [[], [], [], [], [], []],
         [F32] * 3 + [""] * 6)
    ext = b.op("aten::bmm", 10, 20, [[4, 1024, head], [4, head, 1024]], [F32, F32])
    b.launch_kernel("gemm_kernel", 11, 100, 40, ext=ext)
    ext = b.op("aten::_softmax", 40, 20, [[2, 2, 1024, 1024], [], []], [F32, "Scalar", "Scalar"])
    b.launch_kernel("softmax_warp_forward", 41, 140, 40, ext=ext)
    ext = b.op("aten::bmm", 70, 20, [[4, 1024, 1024], [4, 1024, head]], [F32, F32])
    b.launch_kernel("gemm_kernel", 71, 180, 40, ext=ext)
    b.annotation("ProfilerStep#1", 0, 400)
    return b.write(tmp_path / "sdpa.json")


def test_sdpa_already_called_says_its_backend_and_the_stride_fix(tmp_path: Path) -> None:
    # The UNet row: the program calls SDPA; it fell to math (last-dim stride 1024 != 1). The fix makes
    # q, k, v contiguous and never sets is_causal (the call passed False: a causal mask would change it).
    f = _findings(run(_sdpa_math(tmp_path, 1024), ceilings=TOY))["sdpa"]
    assert f["title"] == "SDPA falls back to the math backend (strides)"
    assert "already calls scaled_dot_product_attention" in f["fix"]["text"]
    assert "last-dim stride not 1 (q 1024, k 1024, v 1024)" in f["fix"]["text"]
    assert "is_causal=False" in f["fix"]["text"] and "Keep is_causal" in f["fix"]["text"]
    assert ".contiguous()" in f["fix"]["snippet"] and "is_causal" not in _code(f["fix"]["snippet"])
    # The kernels on the S x S scores go: the 40 us softmax.
    assert f["saving_s"] == pytest.approx(40e-6)
    assert f["fix"]["apply"] == "" and f["status"] == "ok"


def test_sdpa_math_fallback_with_no_visible_reason_is_advice(tmp_path: Path) -> None:
    # Contiguous, fp32, head 32 (a multiple of 4): the memory-efficient kernel should have run; the trace
    # does not show why it did not (storage offsets, a disabled backend): ask PyTorch, claim nothing.
    f = _findings(run(_sdpa_math(tmp_path, 1), ceilings=TOY))["sdpa"]
    assert f["kind"] == "advice" and f["saving_s"] == 0.0
    assert "sdpa_kernel" in f["fix"]["snippet"]


def test_sdpa_head_dim_fallback_pads_with_the_scale_of_the_call(tmp_path: Path) -> None:
    # fp32 head size 30: not a multiple of 4 (memory-efficient), and flash takes no fp32: pad to 32 and
    # pass scale = 1/sqrt(30) = 0.182574, slicing the output back: results unchanged.
    f = _findings(run(_sdpa_math(tmp_path, 1, head=30), ceilings=TOY))["sdpa"]
    assert f["title"] == "SDPA falls back to the math backend (head_dim)"
    assert "zero-pad q, k and v to 32" in f["fix"]["text"] and "scale=0.182574" in f["fix"]["text"]


def _hand_attention(tmp_path: Path, mask: bool) -> Path:
    """Attention written by hand (no SDPA): bmm, (masked_fill), softmax, bmm on 4M fp32 scores."""
    b = TraceBuilder()
    ext = b.op("aten::bmm", 0, 20, [[4, 1024, 32], [4, 32, 1024]], [F32, F32])
    b.launch_kernel("gemm_kernel", 1, 100, 40, ext=ext)
    if mask:
        ext = b.op("aten::masked_fill", 30, 10, [[2, 2, 1024, 1024], [2, 2, 1024, 1024], []], [F32, "bool", "Scalar"])
        b.launch_kernel("masked_fill_kernel", 31, 140, 40, ext=ext)
    ext = b.op("aten::_softmax", 50, 20, [[2, 2, 1024, 1024], [], []], [F32, "Scalar", "Scalar"])
    b.launch_kernel("softmax_warp_forward", 51, 180, 40, ext=ext)
    ext = b.op("aten::bmm", 80, 20, [[4, 1024, 1024], [4, 1024, 32]], [F32, F32])
    b.launch_kernel("gemm_kernel", 81, 220, 40, ext=ext)
    b.annotation("ProfilerStep#1", 0, 300)
    return b.write(tmp_path / f"hand{int(mask)}.json")


@pytest.mark.parametrize("mask", [False, True])
def test_is_causal_is_never_invented(tmp_path: Path, mask: bool) -> None:
    f = _findings(run(_hand_attention(tmp_path, mask), ceilings=TOY))["sdpa"]
    code = _code(f["fix"]["snippet"])
    assert "scaled_dot_product_attention(q, k, v" in code and "is_causal" not in code
    # A mask in the trace is passed on as the program's own; none, none.
    assert ("attn_mask=mask" in code) is mask
    assert f["saving_s"] == pytest.approx((80e-6 if mask else 40e-6))


# -- fix text per program kind --------------------------------------------------------------------

def _host_bound_chain(tmp_path: Path) -> Path:
    s = Step()
    for _ in range(40):
        s.kernel("aten::add", [[256], [256]], [F32, F32], "vectorized_elementwise_kernel<add>", 2, host_gap=20)
    _eltwise_chain(s)
    return s.write(tmp_path)


@pytest.mark.parametrize("meta, graphs, fusion", [
    ({"frameworks": ["hf_trainer", "accelerate"]},
     'TrainingArguments(..., torch_compile=True, torch_compile_mode="reduce-overhead")',
     "TrainingArguments(..., torch_compile=True)"),
    ({"frameworks": ["lightning"], "program": {"root_module": "LitCNN"}},
     'model = torch.compile(model, mode="reduce-overhead")   # the LightningModule (LitCNN), before trainer.fit(model)',
     "model = torch.compile(model)   # the LightningModule (LitCNN), before trainer.fit(model)"),
    # A LightningModule whose training_step calls self.body: compiling the LightningModule compiles a forward
    # no step runs (benchmarks/real_clients/cpu/lightning_cpu_cnn.py), so the child the steps call is compiled.
    ({"frameworks": ["lightning"], "program": {"root_module": "Sequential", "root_owner": "Net", "root_attr": "body"}},
     'self.body = torch.compile(self.body, mode="reduce-overhead")   # in Net.__init__ or configure_model(): the'
     ' steps call Net.body, not Net.forward',
     "self.body = torch.compile(self.body)   # in Net.__init__ or configure_model(): the steps call Net.body, not"
     " Net.forward"),
    ({"frameworks": [], "program": {"root_module": "BertModel", "root_owner": "Classifier", "root_attr": "encoder"}},
     'model.encoder = torch.compile(model.encoder, mode="reduce-overhead")   # model: your Classifier; the steps'
     ' call Classifier.encoder, not Classifier.forward',
     "model.encoder = torch.compile(model.encoder)   # model: your Classifier; the steps call Classifier.encoder,"
     " not Classifier.forward"),
    ({"frameworks": ["accelerate"]},
     'model = torch.compile(model, mode="reduce-overhead")   # before accelerator.prepare(model, ...)',
     'accelerator = Accelerator(dynamo_backend="inductor")'),
    ({"frameworks": [], "program": {"root_module": "SmallCNN", "root_package": "__main__"}},
     'model = torch.compile(model, mode="reduce-overhead")   # your SmallCNN',
     "model = torch.compile(model)   # your SmallCNN"),
    ({"frameworks": [], "steps": {"source": "function", "step_on": "__main__.train_step"}},
     'train_step = torch.compile(train_step, mode="reduce-overhead")   # the function each step runs',
     "train_step = torch.compile(train_step)   # the function each step runs"),
])
def test_compile_fixes_are_written_in_the_programs_terms(tmp_path: Path, meta, graphs, fusion) -> None:
    f = _findings(run(_host_bound_chain(tmp_path), ceilings=TOY, run_meta=meta))
    assert f["cuda_graphs"]["fix"]["snippet"] == graphs and f["cuda_graphs"]["fix"]["apply"] == "compile:reduce-overhead"
    assert f["fusion"]["fix"]["snippet"] == fusion and f["fusion"]["fix"]["apply"] == "compile:default"


@pytest.mark.parametrize("kind, compiled, code, apply", [
    # generate() calls the module's eager forward even when the module is compiled: its compile is the static cache
    ("generate", "", 'model.generation_config.cache_implementation = "static"', "static_cache"),
    ("decode_loop", "", 'model.forward = torch.compile(model.forward, mode="reduce-overhead")', "compile:reduce-overhead"),
    ("training_loop", "", 'model = torch.compile(model, mode="reduce-overhead")', "compile:reduce-overhead"),
    # a program that compiles itself is told its mode, and nothing is injected over it
    ("training_loop", "inductor", 'model = torch.compile(model, mode="reduce-overhead")', ""),
])
def test_compile_code_and_apply_by_program_kind(kind, compiled, code, apply) -> None:
    p = Program(kind, compiled=compiled)
    assert compile_code(p, "reduce-overhead")[0].startswith(code)
    assert compile_apply(p, "reduce-overhead") == apply


def test_generate_on_the_cpu_compiles_the_forward_with_its_static_cache() -> None:
    # transformers' generate() compiles its forward with a static cache on GPUs only
    # (GenerationMixin._valid_auto_compile_criteria): on the CPU the cache alone compiled nothing, and a small
    # GPT-2 ran 0.8 ms/token slower with it (benchmarks/real_clients/cpu/gpt2_cpu_generate.py, 4 pairs).
    p = Program("generate", cpu=True)
    code = compile_code(p)[0].splitlines()
    assert code[0].startswith('model.generation_config.cache_implementation = "static"')
    assert code[1].startswith("model.forward = torch.compile(model.forward)")
    assert "CUDA graphs" not in compile_code(p)[0]
    assert compile_apply(p) == "static_cache;compile:default"


def test_generate_gets_the_static_cache_and_can_apply_it() -> None:
    # GPT-2 generate() on an H200: roofscope saw generate() (its second call was profiled again); the
    # static cache then made 6.85 -> 3.67 ms/token (the table).
    r = run(GPT2)
    assert r.diagnosis.program["kind"] == "generate"
    f = _findings(r)["launch_bound_decode"]
    assert f["fix"]["snippet"].startswith('model.generation_config.cache_implementation = "static"')
    assert f["fix"]["apply"] == "static_cache"


def test_a_decode_loop_of_its_own_never_hears_of_generate() -> None:
    # The hand-written Llama loop row: a Run that saw no generate() call of its transformers model.
    meta = {**read_meta(GQA), "program": {"root_module": "LlamaForCausalLM", "root_package": "transformers",
                                          "generate_calls": 0}}
    r = run(GQA, run_meta=meta)
    assert r.diagnosis.program["kind"] == "decode_loop"
    f = _findings(r)["launch_bound_decode"]
    assert "generate" not in f["fix"]["snippet"] and "generate" not in f["fix"]["text"]
    assert "StaticCache" in f["fix"]["snippet"] and 'torch.compile(model.forward, mode="reduce-overhead"' in \
        f["fix"]["snippet"]
    assert f["fix"]["apply"] == ""   # a source edit: the loop builds its cache


def test_a_bare_decode_trace_says_both_ways() -> None:
    # No program block (an older Run): the fix names generate() only as a condition.
    r = run(GQA)
    assert r.diagnosis.program["kind"] == "decode" and r.diagnosis.program["generate"] is None
    f = _findings(r)["launch_bound_decode"]
    assert "If the program decodes with Hugging Face generate()" in f["fix"]["text"]
    assert f["fix"]["apply"] == ""


def read_meta(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())


# -- no loss without a loss ------------------------------------------------------------------------

def test_a_loop_without_backward_gets_no_loss_fix(tmp_path: Path) -> None:
    # The Triton-loop row: the step reads a value back (aten::item) and runs no backward: no loss exists.
    r = _launch_bound(tmp_path, sync_ops=("aten::item",))
    assert not r.diagnosis.program["training"]
    f = _findings(r)
    for rule in ("host_syncs", "cuda_graphs"):
        assert "loss" not in f[rule]["fix"]["snippet"], rule
    assert "out.item()" in f["host_syncs"]["fix"]["snippet"]


def test_a_training_loop_is_told_to_accumulate_its_loss(tmp_path: Path) -> None:
    s = Step()
    _forward_backward(s, 20)
    t = s.cpu
    s.b.op("aten::item", t, 30, [[]], [F32])
    s.b._corr += 1
    s.b.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 100, "tid": 100,
                       "ts": t + 5, "dur": 10, "args": {"correlation": s.b._corr}})
    s.cpu = t + 40
    s.kernel("aten::add", [[256], [256]], [F32, F32], "vectorized_elementwise_kernel<add>", 2, host_gap=20)
    f = _findings(run(s.write(tmp_path), ceilings=TOY))["host_syncs"]
    assert f["fix"]["snippet"].startswith("loss_sum += loss.detach()")


# -- compile's preconditions: library kernels, the optimizer outside the model -------------------------

def _small_grid_library(tmp_path: Path) -> Path:
    """Faster R-CNN's ROI heads: torchvision::roi_align launching 8 blocks on 132 SMs, 200 us x 5 a step."""
    b = TraceBuilder(device_name=None, extra={"deviceProperties": [
        {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85e9, "numSms": 132}]})
    for i in range(5):
        ext = b.op("torchvision::roi_align", 300 * i, 20, [[2, 256, 50, 50], [512, 5]], [F32, F32])
        b.launch_kernel("roi_align_forward_kernel", 300 * i + 5, 300 * i + 30, 200, ext=ext, grid=[8, 1, 1])
    b.annotation("ProfilerStep#1", 0, 1600)
    return b.write(tmp_path / "roi.json")


def test_small_grids_in_a_librarys_ops_block_the_compile_fix(tmp_path: Path) -> None:
    # The Faster R-CNN row: "fewer blocks than SMs: torch.compile(max-autotune) -16.8%" named kernels of
    # torchvision's ops, which compile does not touch.
    f = _findings(run(_small_grid_library(tmp_path), ceilings=TOY))["small_grid"]
    assert f["status"] == "blocked" and f["saving_s"] == 0.0 and f["fix"]["apply"] == ""
    assert [(b["kind"], b["op"], b["per_step"]) for b in f["blockers"]] == [
        ("library_kernel", "torchvision::roi_align", 5.0)]
    assert "torch.compile(" not in f["fix"]["snippet"]


def test_an_inspection_is_advice_with_no_saving(tmp_path: Path) -> None:
    # 10 adds moving 12.6 MB in 500 us each: 2.5% of their floor. "Inspect with Nsight Compute" finds out
    # why; it saves nothing itself (the "-23.3%" for an inspection).
    b = TraceBuilder(device_name="toy")
    for i in range(10):
        ext = b.op("aten::add", 600 * i, 5, [[1 << 20], [1 << 20]], [F32, F32])
        b.launch_kernel("elementwise_kernel", 600 * i + 1, 600 * i + 10, 500, ext=ext)
    b.annotation("ProfilerStep#1", 0, 6100)
    r = run(b.write(tmp_path / "u.json"), ceilings=TOY)
    f = _findings(r)["underutilized"]
    assert f["kind"] == "advice" and f["saving_s"] == 0.0 and f["fix"]["apply"] == ""
    # 10 x (500 - 12.6 / 0.5) us = 4748 us if a fix found by it reached half the floor: said, not claimed.
    assert f["evidence"]["figures"]["gap_to_half_floor_s"] == pytest.approx(10 * (500 - 2 * 12.583) * 1e-6, rel=1e-3)
    assert all(c["rules"] != ["underutilized"] for c in r.to_dict()["diagnosis"]["changes"])
    assert r.diagnosis.findings[-1].rule == "underutilized"   # advice ranks after every fix


def test_chains_in_the_optimizer_are_not_the_models_to_fuse(tmp_path: Path) -> None:
    # The HF Trainer BERT row: compiling the model fuses its forward and backward, not gradient clipping
    # or the optimizer after them. The same elementwise chain (add, mul, gelu: 468.7 us fused away) in the
    # optimizer's span saves nothing; in the forward it does.
    def step(in_optimizer: bool) -> Path:
        s = Step()
        if in_optimizer:
            s.b.annotation("Optimizer.step#AdamW.step", 0, 5000)
            s.b.op("autograd::engine::evaluate_function: AddBackward0", 0, 5, tid=ENGINE)
            s.kernel("aten::mul", [[256], [256]], [F32, F32], "vectorized_elementwise_kernel<mul>", 2, tid=ENGINE)
        _eltwise_chain(s)
        return s.write(tmp_path, f"opt{int(in_optimizer)}.json")

    assert "fusion" not in _findings(run(step(True), ceilings=TOY))
    fwd = _findings(run(step(False), ceilings=TOY))["fusion"]
    assert fwd["saving_s"] == pytest.approx(468.7e-6, rel=1e-3) and fwd["fix"]["apply"] == "compile:default"


def test_cudnn_layout_transposes_around_convolutions_are_a_channels_last_fix(tmp_path: Path) -> None:
    # An fp16 conv net in NCHW: each cudnn_convolution transposes its input (30 us) and output (20 us)
    # around the NHWC tensor-core kernel (100 us), 4 convolutions a step: 200 us of transposes.
    # The host launches ahead (10 us apart): the GPU runs them back to back, never waiting on it.
    b = TraceBuilder()
    gpu = 50.0
    for i in range(4):
        t = 10 * i
        ext = b.op("aten::cudnn_convolution", t, 8, [[32, 64, 56, 56], [64, 64, 3, 3]], ["c10::Half"] * 2)
        for name, dur in (("nchwToNhwcKernel", 30), ("sm80_xmma_fprop_implicit_gemm", 100), ("nhwcToNchwKernel", 20)):
            b.launch_kernel(name, t + 2, gpu, dur, ext=ext)
            gpu += dur
    b.annotation("ProfilerStep#1", 0, gpu + 5)
    f = _findings(run(b.write(tmp_path / "conv.json"), ceilings=TOY))["channels_last"]
    assert f["saving_s"] == pytest.approx(200e-6) and f["fix"]["apply"] == "channels_last"
    assert "memory_format=torch.channels_last" in f["fix"]["snippet"]


# -- apply names ----------------------------------------------------------------------------------

def test_every_apply_is_in_the_grammar(tmp_path: Path) -> None:
    paths = [_accumulating(tmp_path, 1), _host_bound_chain(tmp_path), GPT2, DATA / "cpu_cnn_runs" / "threads2"]
    for path in paths:
        d = run(path, ceilings=None if isinstance(path, Path) and path.is_dir() else TOY).to_dict()
        for f in d["findings"]:
            a = f["fix"]["apply"]
            assert a == "" or APPLY.match(a), (path, f["rule"], a)
            if f["status"] == "blocked" or f["kind"] == "advice":
                assert a == ""
        for c in d["diagnosis"]["changes"]:
            assert c["apply"] == "" or APPLY.match(c["apply"])
