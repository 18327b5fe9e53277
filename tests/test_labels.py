"""Labels that say what a number is (issue 36): theoretical vs measured vs datasheet ceilings, console lines that
fit the terminal, hints that name options the command has, and no summary of nothing."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from roofscope.analysis import run
from roofscope.cli import main
from roofscope.microbench.cpupeak import theoretical_peak
from roofscope.reports.console import render_summary
from roofscope.reports.html import render_html
from roofscope.reports.markdown import render_markdown

from .conftest import console_field
from .test_microbench import EPYC_AVX2, _cpu_set
from roofscope.microbench.cpu import with_theoretical

DATA = Path(__file__).parent / "data"
CPU_TRACE = DATA / "cpu_block.json.gz"


@pytest.fixture
def theoretical():
    # 2 cores x 3.675 GHz (2450 MHz x 1.5 boost allowance) x 32 fp32 FLOP/cycle (AVX2: 8 lanes x 2 FMA x 2)
    # = 235.2 GFLOP/s theoretical; the matmul measured 68.9 GFLOP/s (29% of it).
    return with_theoretical(_cpu_set(l2=150e9, llc=60e9, dram=20e9, fp32=68.9e9), theoretical_peak(EPYC_AVX2, cores=2))


def test_cpu_roofs_are_called_theoretical_and_the_measured_rates_measured(theoretical, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    result = run(CPU_TRACE, ceilings=theoretical)
    text = render_summary(result)
    ceilings = console_field(text, "ceilings")
    assert ceilings.startswith("theoretical roofs: int8 941 GFLOP/s, fp32 235 GFLOP/s")
    assert "achievable (measured): fp32 68.9 GFLOP/s (29%)" in ceilings
    assert "measured roofs" not in ceilings
    assert "of the theoretical fp32 peak 235 GFLOP/s" in console_field(text, "util")
    header = text.split("\n\n")[0].splitlines()
    assert max(len(line) for line in header) <= 100
    assert "theoretical ceilings: int8 941 GFLOP/s, fp32 235 GFLOP/s" in render_markdown(result)
    html = render_html(result)
    assert "Ceilings (theoretical) are drawn solid" in html and "Ceilings (measured)" not in html


def test_console_wraps_to_a_narrow_terminal(theoretical, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    header = render_summary(run(CPU_TRACE, ceilings=theoretical)).split("\n\n")[0].splitlines()[1:]   # after the path
    # A path or a long number never breaks, so a line may pass 60 only by one unbreakable word.
    assert all(len(line) <= 60 or " " not in line[12:].strip() for line in header)
    assert sum(line.startswith(" " * 12) for line in header) >= 6


def test_without_ceilings_the_util_line_names_options_analyze_has(capsys):
    trace = DATA / "external/hta/trace_compare/base/base.json.gz"   # no deviceProperties: no ceilings
    assert main(["analyze", str(trace)]) == 0
    out = capsys.readouterr().out
    util = console_field(out, "util")
    assert "--datasheet" in util and "--device" not in util
    for option in ("--datasheet", "--peak-tflops", "--peak-bandwidth", "--ceilings"):
        assert main(["analyze", "--help"]) == 0 and option in capsys.readouterr().out


def test_a_script_that_does_no_work_gets_one_line_not_empty_tables(tmp_path):
    script = tmp_path / "quits.py"
    # As examples/generate.py does without transformers: torch imported, then a one-line exit.
    script.write_text("import sys, time\nimport torch\ntorch.cuda.is_available()\ntime.sleep(0.3)\n"
                      "sys.exit('needs a package this machine lacks')\n")
    res = subprocess.run([sys.executable, "-m", "roofscope", "run", "-o", str(tmp_path / "out"), str(script)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 1   # the script's own code
    assert "Time by class" not in res.stdout and "Top 0" not in res.stdout
    assert "nothing   to analyze: the trace holds no CPU op: the script ended (exit, code 1)" in res.stdout


def test_a_window_run_says_it_profiled_a_window_not_steps(tmp_path, capsys):
    script = tmp_path / "window.py"
    script.write_text("import time\nimport torch\nx = torch.randn(256, 256)\nt0 = time.time()\n"
                      "while time.time() - t0 < 1.5:\n    x = (x @ x).tanh()\n")
    assert main(["run", "-q", "--duration", "0.5", "-o", str(tmp_path / "out"), str(script)]) == 0
    capsys.readouterr()
    assert main(["analyze", str(tmp_path / "out")]) == 0
    own = console_field(capsys.readouterr().out, "own time")
    assert own.startswith("not measured: this Run profiled a time window, not steps")
