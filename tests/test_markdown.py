from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import roofscope
from roofscope.cli import main
from roofscope.reports.console import render_summary
from roofscope.reports.markdown import render_markdown
from roofscope.text import md_code, md_table, md_text

from .test_html import EVIL, H200_RUN, _evil_analysis, _finding, _with_summary


def test_md_text_is_inert():
    assert md_text(EVIL) == "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;"
    # Table pipes, emphasis and links are escaped; a newline would end the table row.
    assert md_text("a|b *c* [d](e)\nf") == "a\\|b \\*c\\* \\[d\\](e) f"
    assert md_text("x_y & z") == "x\\_y &amp; z"


def test_md_code_keeps_names_verbatim():
    assert md_code(EVIL) == "`" + EVIL + "`"                   # code spans show HTML as text
    assert md_code("a|b") == "`a\\|b`"                          # GFM tables need \\| even in code
    assert md_code("x`y") == "``x`y``" and md_code("`x") == "`` `x ``" and md_code("") == ""


def test_md_table_alignment():
    assert md_table(["a", "b"], [["1", "2"]], "<>") == ["| a | b |", "|:---|---:|", "| 1 | 2 |"]


@pytest.fixture(scope="module")
def h200():
    return roofscope.analyze(H200_RUN)


def test_markdown_of_the_h200_run(h200):
    md = render_markdown(h200)
    assert md.startswith("## roofscope: NVIDIA H200\n")
    # GPU-measured steps of 6.293, 6.332 and 5.923 ms: median 6.293; 512 tokens / 6.293366 ms = 81.4 k tokens/s.
    assert "| step time (profiled), median of 3 | 6.293 ms (5.923 to 6.332) |" in md
    assert "| tokens/s | 81.4 k |" in md
    # memory 0.222013 ms of 1.614897 ms = 13.7%.
    assert "| memory | 0.222 | 13.7% |" in md
    # The first kernel row: at::native::reduce_kernel, 24 calls, 0.225 ms (13.9%).
    rows = [line for line in md.splitlines() if line.startswith("| 0.")]
    assert rows[0].startswith("| 0.225 | 13.9% | 24 | latency |") and "`aten::sum`" in rows[0]


def test_markdown_and_console_list_the_same_kernels(h200):
    md, text = render_markdown(h200, top=10), render_summary(h200, top=10)
    md_times = [line.split(" | ")[0].lstrip("| ") for line in md.splitlines()[-11:-1]]
    top = text[text.index("Top 10 kernels"):].splitlines()[3:13]
    assert md_times == [line.split()[0] for line in top]


def test_findings_are_escaped(tmp_path):
    a = _with_summary(_evil_analysis(tmp_path), findings=[_finding("Graphs" + EVIL, summary="idle|" + EVIL)])
    md = render_markdown(a)
    # Raw markup only ever appears inside code spans, where GitHub shows it as text.
    assert "<" not in re.sub(r"`[^`]*`", "", md.replace("<br>", ""))
    assert "`gemm</script><img src=x onerror=alert`" in md
    assert "| 1 | **Graphs&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;**<br>idle\\|&lt;/script&gt;" in md
    # 2.5 ms per step, 20% of the step.
    assert "| 2.500 ms (20.0%) | high | Capture the step in a CUDA graph |" in md


def test_analyze_markdown_option(tmp_path, capsys):
    out = tmp_path / "summary.md"
    assert main(["analyze", str(H200_RUN), "-q", "--markdown", str(out)]) == 0
    assert out.read_text() == render_markdown(roofscope.analyze(H200_RUN))
    assert main(["analyze", str(H200_RUN), "-q", "--markdown", str(out)]) == 2
    capsys.readouterr()
    # '-' prints the markdown in place of the terminal summary.
    assert main(["analyze", str(H200_RUN), "--markdown", "-"]) == 0
    stdout = capsys.readouterr().out
    assert stdout.startswith("## roofscope: NVIDIA H200\n") and "roofscope analyze:" not in stdout


def test_analyze_markdown_as_a_subprocess(tmp_path):
    p = subprocess.run([sys.executable, "-m", "roofscope", "analyze", str(H200_RUN), "--markdown", "-"],
                       capture_output=True, text=True, timeout=600, cwd=Path(__file__).parents[1])
    assert p.returncode == 0, p.stderr
    assert "| MBU | 1.1% |" in p.stdout
