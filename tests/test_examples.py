"""The example scripts run end to end on CPU; gpt.py's FLOP count and KV cache are right."""
from __future__ import annotations

import importlib.util
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

import roofscope

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def _run(script: str, *args: str) -> str:
    # The scripts import roofscope from this checkout whether or not it is installed.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, str(EXAMPLES / script), "--device", "cpu", *args],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _number(out: str, label: str) -> float:
    m = re.search(rf"^{re.escape(label)}: (\S+)", out, re.MULTILINE)
    assert m, f"no {label!r} line in:\n{out}"
    value = float(m.group(1))
    assert math.isfinite(value), out
    return value


def _load(name: str) -> ModuleType:
    # Registered under its own name, as the scripts import each other (decode.py: `from gpt import`).
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="module")
def gpt() -> ModuleType:
    return _load("gpt")


def test_mlp_trains() -> None:
    _number(_run("mlp.py", "--steps", "3"), "final loss")


def test_gpt_trains_and_reports_speed() -> None:
    out = _run("gpt.py", "--steps", "3", "--layers", "1", "--seq", "32")
    _number(out, "final loss")
    assert _number(out, "median step") > 0
    assert _number(out, "tokens/s") > 0


def test_decode_runs() -> None:
    if not hasattr(roofscope, "step"):
        pytest.skip("roofscope.step() is not in this checkout yet")
    out = _run("decode.py", "--batch", "2", "--prompt-len", "8", "--new-tokens", "5")
    _number(out, "prefill")
    assert _number(out, "median decode step") > 0
    assert _number(out, "decode tokens/s") > 0


def test_compile_flag_parses(gpt: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    assert gpt.parse_args(["--compile", "--device", "cpu"]).compile
    monkeypatch.setattr(sys, "path", list(sys.path))  # decode.py puts examples/ on sys.path
    decode = _load("decode")
    assert decode.parse_args(["--compile", "--device", "cpu"]).compile


def test_parse_args_fills_device_defaults(gpt: ModuleType) -> None:
    args = gpt.parse_args(["--device", "cpu", "--layers", "3"])
    assert (args.layers, args.d_model, args.batch) == (3, gpt.DEFAULTS["cpu"]["d_model"], gpt.DEFAULTS["cpu"]["batch"])
    assert gpt.parse_args(["--device", "cuda"]).d_model == gpt.DEFAULTS["cuda"]["d_model"]


def test_model_flops_per_step(gpt: ModuleType) -> None:
    cfg = gpt.GPTConfig(vocab=16, seq=4, d_model=8, heads=2, layers=2)
    # N = 12 * layers * d^2 + d * vocab = 12*2*64 + 8*16 = 1536 + 128 = 1664
    # per token: 6N + 12 * layers * d * seq = 9984 + 12*2*8*4 = 9984 + 768 = 10752
    # tokens = batch * seq = 2 * 4 = 8  ->  86016
    assert gpt.model_flops_per_step(cfg, batch=2, seq=4) == 86016
    # N is exactly the model's matmul weights: every Linear's weight, no embeddings, biases or norms.
    model = gpt.GPT(cfg)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert gpt.matmul_params(cfg) == linear == 1664


def test_kv_cache_decode_matches_full_forward(gpt: ModuleType) -> None:
    torch.manual_seed(0)
    cfg = gpt.GPTConfig(vocab=50, seq=16, d_model=16, heads=2, layers=2)
    model = gpt.GPT(cfg).eval()
    idx = torch.randint(cfg.vocab, (2, 12))
    cache = gpt.KVCache(cfg, batch=2, max_len=12, device="cpu", dtype=torch.float32)
    with torch.no_grad():
        full, _ = model(idx)
        # A prefill, a chunk of 3 after it (the explicit-mask path), then one token at a time.
        chunks = [(0, 5), (5, 8)] + [(p, p + 1) for p in range(8, 12)]
        for start, end in chunks:
            logits, _ = model(idx[:, start:end], cache=cache, pos=start)
            assert torch.allclose(logits, full[:, start:end], atol=1e-5), (start, end)
    with pytest.raises(ValueError):
        model(idx[:, :1], cache=cache, pos=12)


def test_build_train_step(gpt: ModuleType) -> None:
    cfg = gpt.GPTConfig(vocab=64, seq=8, d_model=16, heads=2, layers=1)
    trainer = gpt.build(cfg, "cpu", batch=2)
    first = trainer.train_step().item()
    assert math.isfinite(first) and trainer.train_step().item() != first
    assert trainer.tokens_per_step == 16
    assert trainer.flops_per_step == gpt.model_flops_per_step(cfg, 2, 8)
    assert all(p.grad is None for p in trainer.model.parameters())
