"""Commands and words (issue 29.11): --device means the device to run or measure on (its old use
as the datasheet warns), tables fit the terminal, a KV-cache-less generation loop is told why it
has no inference section, and examples/generate.py says that it needs transformers."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from roofscope.analysis import analyze
from roofscope.cli import main
from roofscope.reports.console import render_summary
from roofscope.text import middle_cut, table

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
EAGER = DATA / "h100_eager_block.json.gz"
PEAKS = ["--peak-tflops", "0.1", "--peak-bandwidth", "10"]
RUN = [*PEAKS, "--settle", "0"]  # these tests count the schedule's steps exactly

NO_KV = textwrap.dedent('''
    import torch
    torch.manual_seed(0)

    class LM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(100, 32)
            self.attn = torch.nn.MultiheadAttention(32, 4, batch_first=True)
            self.out = torch.nn.Linear(32, 100)

        def forward(self, ids):
            x = self.emb(ids)
            x, _ = self.attn(x, x, x, need_weights=False)
            return self.out(x)

    model = LM().eval()
    ids = torch.randint(0, 100, (2, 8))
    with torch.no_grad():
        for _ in range(8):   # greedy decoding without a KV cache: the whole sequence every time
            ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
''')


# -- --device ----------------------------------------------------------------------------------------

def test_device_for_the_datasheet_is_a_deprecated_alias(tmp_path, capsys) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["analyze", str(EAGER), "--datasheet", "h200", "-q", "--json", str(a)]) == 0
    assert "deprecated" not in capsys.readouterr().err
    assert main(["analyze", str(EAGER), "--device", "h200", "-q", "--json", str(b)]) == 0
    assert "--device KEY is deprecated here: use --datasheet KEY" in capsys.readouterr().err
    # Same ceilings either way: the H200's datasheet, not the trace's H100.
    sa, sb = (json.loads(p.read_text())["summary"]["ceilings"] for p in (a, b))
    assert sa == sb and sa["device"] == "NVIDIA H200 SXM 141GB"
    # --help lists one meaning: --datasheet; --device is hidden here and means the device in microbench.
    assert main(["analyze", "--help"]) == 0
    helptext = capsys.readouterr().out
    assert "--datasheet KEY" in helptext and "--device" not in helptext


# -- tables fit the terminal --------------------------------------------------------------------------

def test_middle_cut_keeps_both_ends() -> None:
    name = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_kernel"
    assert middle_cut(name, 21) == "sm90_xmma_…ute_kernel"   # 10 + "…" + 10
    assert len(middle_cut(name, 20)) == 20 and middle_cut("short", 20) == "short"


def test_table_narrows_text_columns_to_fit() -> None:
    rows = [["1.000", "a" * 100, "b" * 40], ["2.000", "c", "d"]]
    lines = table(["ms", "kernel", "op"], rows, "><<", indent=2, width=60)
    # 60 - 2 (indent) = 58 = 5 + 2 + kernel + 2 + op: the widest column is cut first, down to the
    # next one, then both: kernel 25, op 24.
    assert max(len(x) for x in lines) == 58
    assert lines[2] == "1.000  aaaaaaaaaaaa…aaaaaaaaaaaa  bbbbbbbbbbbb…bbbbbbbbbbb"
    # Figures are never cut, and a table that fits is unchanged.
    assert table(["ms", "kernel"], [["1.000", "x"]], "><", width=60) == ["   ms  kernel", "-----  ------", "1.000  x"]


def test_console_fits_columns(monkeypatch) -> None:
    a = analyze(EAGER)
    # The figures take 82 columns (class "underutilized" included), leaving 38 to the names.
    monkeypatch.setenv("COLUMNS", "120")
    text = render_summary(a, top=8)
    top = text[text.index("Top 8 kernels"):].splitlines()
    assert top[1].strip().startswith("time ms") and max(len(line) for line in top) == 120
    assert any("…" in line for line in top[3:])
    monkeypatch.setenv("COLUMNS", "300")
    wide = render_summary(a, top=8)
    assert max(len(line) for line in wide[wide.index("Top 8 kernels"):].splitlines()) > 120


def test_console_fits_columns_subprocess() -> None:
    env = {**os.environ, "COLUMNS": "110"}
    res = subprocess.run([sys.executable, "-m", "roofscope", "analyze", str(EAGER), "--top", "5"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr
    top = res.stdout[res.stdout.index("Top 5 kernels"):].splitlines()
    assert len(top) == 8 and all(len(line) <= 110 for line in top)


# -- why no inference section -------------------------------------------------------------------------

def test_kv_cacheless_loop_says_why_no_inference_section(tmp_path, capsys) -> None:
    script = tmp_path / "nokv.py"
    script.write_text(NO_KV)
    out = tmp_path / "run"
    assert main(["run", "-o", str(out), *RUN, str(script)]) == 0
    printed = capsys.readouterr().out
    # wait 1, warm-up 2, then steps 3-5: forwards of 8 + 3 = 11 to 13 tokens per sequence.
    note = ("no inference section: no decode step recognized: every forward took 11 to 13 tokens per sequence,"
            " the full sequence each time (no KV cache?)")
    assert note in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["inference"] is None and summary["inference_note"].startswith(note)


def test_training_gets_no_inference_note() -> None:
    s = analyze(DATA / "cpu_block.json.gz", peak_tflops=0.1, peak_bandwidth_gbs=10).to_dict()
    assert s["inference"] is None and s["inference_note"] is None


# -- examples/generate.py without transformers --------------------------------------------------------

@pytest.mark.skipif(importlib.util.find_spec("transformers") is not None, reason="transformers is installed")
def test_generate_example_says_it_needs_transformers() -> None:
    res = subprocess.run([sys.executable, str(ROOT / "examples" / "generate.py"), "--size", "tiny"],
                         capture_output=True, text=True, timeout=600)   # a hang guard, not a time limit
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.strip() == ("examples/generate.py needs Hugging Face transformers, which roofscope does not"
                                  " install: pip install transformers (examples/decode.py decodes in plain PyTorch)")
