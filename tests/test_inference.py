"""Inference loops on CPU: steps from outermost gradient-free forwards (or --step-on), prefill vs
decode, the no-GPU-kernel error, user formulas (register_formula, --formulas)."""
from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

import roofscope
from roofscope.cli import main
from roofscope.collectors.steps import resolve_function
from roofscope.errors import RoofscopeError
from tests.kineto import TraceBuilder

ROOT = Path(__file__).resolve().parents[1]
PEAKS = ["--peak-tflops", "1", "--peak-bandwidth", "10"]
RUN = [*PEAKS, "--settle", "0"]  # these tests count the schedule's steps exactly

# Greedy decoding with the KV-cache GPT of examples/gpt.py, and no roofscope call, no optimizer:
# 4 prompts of 6 tokens, 5 new tokens each (1 prefill + 4 decode forwards per generate), twice.
DECODE = textwrap.dedent(f'''
    import sys, torch
    sys.path.insert(0, {str(ROOT / "examples")!r})
    from gpt import GPT, GPTConfig, KVCache
    cfg = GPTConfig(vocab=64, seq=32, d_model=32, heads=4, layers=1)
    model = GPT(cfg).eval()
    def generate(prompt, n):
        cache = KVCache(cfg, prompt.shape[0], 32, "cpu", torch.float32)
        logits, _ = model(prompt, cache=cache, pos=0)
        tok = logits[:, -1].argmax(-1, keepdim=True)
        for pos in range(prompt.shape[1], prompt.shape[1] + n - 1):
            logits, _ = model(tok, cache=cache, pos=pos)
            tok = logits[:, -1].argmax(-1, keepdim=True)
    with torch.no_grad():
        for _ in range(2):
            generate(torch.randint(64, (4, 6)), 5)
''')


def _run(tmp_path: Path, source: str, *flags: str) -> tuple[dict, dict]:
    script = tmp_path / "infer.py"
    script.write_text(source)
    out = tmp_path / "run"
    assert main(["run", "-o", str(out), *RUN, "--no-report", "-q", *flags, str(script)]) == 0
    return json.loads((out / "run.json").read_text()), json.loads((out / "summary.json").read_text())


def test_outermost_forwards_are_steps_and_decode_is_told_apart(tmp_path: Path) -> None:
    meta, s = _run(tmp_path, DECODE, "--wait", "0", "--warmup", "1", "--active", "6")
    assert meta["steps"]["source"] == "forward"
    # boundaries at the start of forwards 2..10 (two generate() calls of 1 prefill + 4 decode): forward 1
    # (prefill) is the warm-up step; steps 1-6 recorded: decode x4, then the second generate's prefill,
    # then one decode; the boundaries after the profile are still counted (and timed)
    assert meta["steps"]["boundaries_seen"] == 9 and s["steps"] == [1, 2, 3, 4, 5, 6]
    inf = s["inference"]
    assert inf["steps"] == {"prefill": [5], "decode": [1, 2, 3, 4, 6]}
    assert inf["batch"] == 4 and inf["prefill"]["q_len"] == 6 and inf["decode"]["q_len"] == 1
    assert inf["phase_source"] == ["forward"]
    # decode reads the weights once per step: per step bytes at least the model's fp32 parameters
    assert inf["decode"]["weight_bytes_per_step"] > 0 and inf["tokens_per_s"] == pytest.approx(4 / inf["tpot_s"])
    assert inf["ttft_s"] == inf["prefill"]["step_time_s"]


def test_forwards_with_gradients_are_not_steps(tmp_path: Path) -> None:
    meta, _ = _run(tmp_path, DECODE.replace("torch.no_grad()", "torch.enable_grad()"), "--duration", "30")
    assert meta["steps"]["source"] == "none"


def test_step_on_a_function(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "serve_lib.py").write_text(DECODE.replace("    with torch.no_grad():\n        for _ in range(2):\n"
                                                           "            generate(torch.randint(64, (4, 6)), 5)\n", ""))
    monkeypatch.syspath_prepend(str(tmp_path))
    src = "import torch, serve_lib\nwith torch.no_grad():\n    for _ in range(5):\n" \
          "        serve_lib.generate(torch.randint(64, (2, 6)), 3)\n"
    meta, s = _run(tmp_path, src, "--step-on", "serve_lib.generate", "--wait", "1", "--warmup", "0", "--active", "2")
    assert meta["steps"]["source"] == "function" and meta["steps"]["step_on"] == "serve_lib.generate"
    # five calls, five boundaries (each call's end); steps 1-2 recorded after the one waited for
    assert meta["steps"]["boundaries_seen"] == 5 and s["steps"] == [1, 2]
    sys.modules.pop("serve_lib", None)


def test_resolve_function_errors() -> None:
    owner, name, fn = resolve_function("json.dumps")
    assert (owner, name, fn) == (json, "dumps", json.dumps)
    assert resolve_function("json:JSONEncoder.encode")[2] is json.JSONEncoder.encode
    for bad in ("nosuchmodule_xyz.f", "json.nosuchfunction", "json"):
        with pytest.raises(RoofscopeError, match="--step-on"):
            resolve_function(bad)


def test_step_on_generate_without_transformers_is_one_line(tmp_path: Path, capsys) -> None:
    pytest.importorskip("torch")
    if "transformers" in sys.modules or __import__("importlib").util.find_spec("transformers"):
        pytest.skip("transformers installed")
    script = tmp_path / "s.py"
    script.write_text("pass\n")
    assert main(["run", "-o", str(tmp_path / "r"), *RUN, "--step-on", "generate", str(script)]) == 2
    assert "--step-on generate needs transformers" in capsys.readouterr().err


def test_no_gpu_kernel_on_a_cuda_machine_is_an_error_not_a_cpu_trace(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from roofscope.collectors import metadata

    monkeypatch.setattr(metadata, "device_metadata", lambda: {"type": "cuda", "name": "NVIDIA H100 80GB HBM3"})
    with roofscope.profile(steps=1, settle=0, wait=0, warmup=0, out=tmp_path / "r", report=False, quiet=True,
                           peak_tflops=1, peak_bandwidth_gbs=10) as prof:
        torch.ones(4).sum()
        prof.step()
    assert prof.analysis is None
    assert "NO GPU KERNEL was recorded on this CUDA machine" in prof.result.error
    assert "Fix:" in prof.result.error and not (tmp_path / "r" / "summary.json").exists()
    assert json.loads((tmp_path / "r" / "run.json").read_text())["device"]["type"] == "cuda"


# ---------------------------------------------------------------- user formulas


def _custom_trace(tmp_path: Path) -> Path:
    b = TraceBuilder(device_name=None)
    b.annotation("ProfilerStep#1", 0, 100)
    b.op("mylib::fused_rmsnorm", 10, 50, dims=[[8, 1024], [1024], []], types=["float", "float", "Scalar"],
         concrete=["", "", "1e-06"])
    return b.write(tmp_path / "t.json")


def test_register_formula_costs_a_custom_op(tmp_path: Path) -> None:
    from roofscope.analyzers.cost.formulas import REGISTRY

    seen = []

    def rmsnorm(x, w, eps):
        seen.append((x, w, eps))
        return 4 * x[0] * x[1]

    try:
        roofscope.register_formula("mylib::fused_rmsnorm", rmsnorm, category="normalization")
        with pytest.raises(RoofscopeError, match="already has a cost formula"):
            roofscope.register_formula("mylib::fused_rmsnorm", rmsnorm)
        k = roofscope.analyze(_custom_trace(tmp_path), peak_tflops=1, peak_bandwidth_gbs=10).kernels
        assert seen == [((8, 1024), (1024,), 1e-06)]
        # 4 * 8 * 1024 = 32,768 FLOPs; bytes: x 32,768 + w 4,096 read, an x-sized output 32,768 = 69,632
        assert k.loc[0, "flops"] == 32_768 and k.loc[0, "bytes"] == 69_632 and k.loc[0, "category"] == "normalization"
        roofscope.register_formula("mylib::fused_rmsnorm", lambda x, w, eps: (1.0, 2.0), replace=True)
        k = roofscope.analyze(_custom_trace(tmp_path), peak_tflops=1, peak_bandwidth_gbs=10).kernels
        assert (k.loc[0, "flops"], k.loc[0, "bytes"]) == (1.0, 2.0)
        with pytest.raises(RoofscopeError, match="unknown formula category"):
            roofscope.register_formula("mylib::x", rmsnorm, category="magic")
    finally:
        REGISTRY.pop("mylib::fused_rmsnorm", None)


def test_formulas_option_of_analyze(tmp_path: Path, capsys) -> None:
    from roofscope.analyzers.cost.formulas import REGISTRY

    f = tmp_path / "my_formulas.py"
    f.write_text("import roofscope\n\n@roofscope.register_formula('mylib::fused_rmsnorm', category='normalization')\n"
                 "def rmsnorm(x, w, eps):\n    return 4 * x[0] * x[1]\n")
    out = tmp_path / "s.json"
    try:
        assert main(["analyze", str(_custom_trace(tmp_path)), *PEAKS, "--formulas", str(f), "--json", str(out)]) == 0
        assert json.loads(out.read_text())["summary"]["total_flops"] == 32_768
    finally:
        REGISTRY.pop("mylib::fused_rmsnorm", None)
    broken = tmp_path / "broken.py"
    broken.write_text("raise ValueError('nope')\n")
    assert main(["analyze", str(_custom_trace(tmp_path)), *PEAKS, "--formulas", str(broken)]) == 2
    assert "--formulas" in capsys.readouterr().err


# ---------------------------------------------------------------- H100 Runs (tests/data/README.md)

DATA = ROOT / "tests" / "data"


def test_h100_hf_gqa_generate_run() -> None:
    """examples/generate.py --size tiny --batch 2 --prompt-len 32 --new-tokens 8 under `roofscope run` with no flags."""
    a = roofscope.analyze(DATA / "h100_gqa_decode_run")
    s = a.to_dict()
    inf = s["inference"]
    # forwards 4-6: the measured prompt's prefill, then two decode tokens
    assert inf["steps"] == {"prefill": [3], "decode": [4, 5]} and inf["phase_source"] == ["forward"]
    assert (inf["batch"], inf["prefill"]["q_len"], inf["decode"]["q_len"]) == (2, 32, 1)
    assert inf["tokens_per_s"] == pytest.approx(2 / inf["tpot_s"])
    # GQA decode attention (cuDNN), q [2,8,1,32] over k/v [2,2,33,32]: 2 * 2*8*33 * 64 = 67,584 FLOPs
    att = a.kernels[(a.kernels["category"] == "attention") & (a.kernels["step"] == 4)]
    assert len(att) == 2 and (att["flops"] == 67_584).all()
    assert s["unattributed"]["share"] < 0.01
    rules = [f["rule"] for f in s["findings"]]
    assert rules[0] == "launch_bound_decode" and "cuda_graphs" not in rules
    assert not any("loss" in f["fix"]["snippet"] for f in s["findings"])


def test_h100_decode_cuda_graph_run() -> None:
    """examples/decode.py --cuda-graph --prompt-len 16 --new-tokens 8: decode steps replay one graph whose
    capture roofscope recorded into the Run (graph-capture-0000.json.gz)."""
    a = roofscope.analyze(DATA / "h100_decode_graph_run")
    s = a.to_dict()
    assert s["graphs"]["graph_launches"] == 2 and s["graphs"]["mapped"] == 2
    assert s["unattributed"]["share"] < 0.02 and s["unattributed"]["by_reason"]["graph_replay"]["kernels"] == 0
    inf = s["inference"]
    assert inf["steps"] == {"prefill": [4], "decode": [3, 5]} and inf["phase_source"] == ["region"]
    assert inf["batch"] == 1
    # a decode step reads the GPT's bf16 weights once: 12 layers * 12 * 1024^2 + lm_head 32768 * 1024
    # = 184,549,376 parameters = 369,098,752 bytes (+ activations and biases: within 0.5%)
    assert inf["decode"]["weight_bytes_per_step"] == pytest.approx(369_098_752, rel=5e-3)
    replayed = a.kernels[a.kernels["graph"] >= 0]
    # every replayed kernel is named after its captured op; all but aten::arange (no formula: 12 per graph) costed
    assert (replayed["op_name"] != "").all()
    rest = replayed[replayed["cost_source"] != "capture"]
    assert len(replayed) == 444 and set(rest["op_name"]) == {"aten::arange"} and len(rest) == 24
    assert set(replayed.loc[replayed["category"] == "attention", "attn_q"]) == {(1, 1)}


def test_delay_counts_from_the_first_gpu_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    import torch

    from roofscope.collectors.torchprof import TorchCollector

    queued = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "_lazy_call", queued.append)
    c = TorchCollector(tmp_path / "t.json", duration_s=5.0, delay_s=30.0)
    c.start()
    try:
        # nothing armed until CUDA initializes (its first kernel or allocation runs the queued call)
        assert c.delay_from == "first GPU work" and len(queued) == 1
        assert signal.getitimer(signal.ITIMER_REAL)[0] == 0
        queued[0]()
        assert 29 < signal.getitimer(signal.ITIMER_REAL)[0] <= 30 and c.phase == "idle"
    finally:
        c.stop()
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0
    assert "counted from its first GPU work" in c.shortfall()


# A Hugging Face-style model whose decode steps go through get_compiled_call(): transformers
# returns torch.compile(self.__call__) there, whose module hooks never run; a plain function
# stands in for it (module hooks bypassed through forward()), as 5.17's generate() uses it:
# one eager prefill forward, then the compiled call per decode token.
LM_SOURCE = textwrap.dedent('''
    import torch
    class LM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)
        def forward(self, x):
            return self.lin(x)
        def get_compiled_call(self, compile_config):
            return lambda x: self.forward(x)
''')
COMPILED = LM_SOURCE + textwrap.dedent('''
    model = LM().eval()
    with torch.no_grad():
        for _ in range(2):
            decode = model.get_compiled_call(None)
            model(torch.randn(2, 5, 8))
            for _ in range(4):
                decode(torch.randn(2, 1, 8))
''')


def test_compiled_decode_calls_are_steps(tmp_path: Path) -> None:
    meta, s = _run(tmp_path, COMPILED, "--wait", "0", "--warmup", "1", "--active", "6")
    # the first generate fetched its compiled call before any forward (the root was not known yet):
    # its 4 decode calls are unseen, so it is the warm-up step; the second generate's prefill and
    # 4 compiled decode calls open steps 1..5 (without the wrapper: 1 boundary, nothing recorded)
    assert meta["steps"]["source"] == "forward" and meta["steps"]["boundaries_seen"] == 5
    assert s["inference"]["steps"] == {"prefill": [1], "decode": [2, 3, 4, 5]}
    assert s["inference"]["decode"]["q_len"] == 1 and s["inference"]["prefill"]["q_len"] == 5


HF_STATIC = ROOT / "tests" / "data" / "h100_hf_generate_static"


def test_hf_generate_with_a_static_cache_on_the_h100() -> None:
    # `roofscope run examples/generate.py --static-compile` (H100, 2026-11-25, transformers 5.17): a
    # 1.2B Llama decoding one token per step through generate()'s compiled forward (steps seen through
    # get_compiled_call). Step 3 recorded Inductor's graph (43.5 ms); steps 4 and 5 replayed it.
    a = roofscope.analyze(HF_STATIC)
    s = a.to_dict()
    g = s["graphs"]
    assert (g["graph_launches"], g["mapped"], g["captures"]) == (3, 3, 3)
    assert a.summary.unattributed.share < 0.01
    inf = s["inference"]
    assert inf["capture_steps"] == [3] and inf["steps"]["decode"] == [4, 5]
    # median of the two replay steps' 4.974 and 3.614 ms: 4.294 ms; 1 token per step
    assert inf["tpot_s"] == pytest.approx(4.294e-3, abs=2e-6) and inf["batch"] == 1
    d = s["diagnosis"]
    assert d["capture_steps"] == [3] and d["step_s"] == pytest.approx(4.294e-3, abs=2e-6)
    # no finding claims the recording step's 40 ms of idle: each saving is under a fifth of the step
    assert all(f["saving_s"] < 0.2 * d["step_s"] for f in s["findings"])
    assert {"rule": "launch_bound_decode", "reason": "decode already replays CUDA graphs"} in d["skipped"]
    from roofscope.reports.console import render_summary

    assert "  Step 3 captured a CUDA graph (warm-up): left out of these estimates" in render_summary(a).splitlines()
    from roofscope.reports.html import render_html

    assert "Step 3 captured a CUDA graph (warm-up): left out of these estimates." in render_html(a)


def test_compiled_call_wrapper_counts_forwards_and_lets_go_on_remove() -> None:
    import torch

    from roofscope.collectors.steps import StepHooks

    ns: dict = {}
    exec(LM_SOURCE, ns)  # the stand-in of the script test above
    seen: list[str] = []
    hooks = StepHooks(None, seen.append)
    model = ns["LM"]().eval()
    hooks.install()
    with torch.no_grad():
        model(torch.randn(1, 8))                       # the root: forward 1, no boundary
        decode = model.get_compiled_call(None)
        decode(torch.randn(1, 1, 8))
        decode(torch.randn(1, 1, 8))                   # forwards 2 and 3: two boundaries
        assert seen == ["forward", "forward"] and hooks.forwards == 3
        hooks.remove()                                 # the session ended: the kept callable runs unwatched
        decode(torch.randn(1, 1, 8))
    assert seen == ["forward", "forward"] and "get_compiled_call" not in model.__dict__
