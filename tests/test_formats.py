"""Output formats by name (reports/registry.py): one signature for every renderer, `roofscope run
--format NAME` and `roofscope.profile(formats=[...])` writing them into the Run."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

import roofscope
from roofscope.cli import main
from roofscope.errors import RoofscopeError
from roofscope.reports import registry
from roofscope.reports.console import render_summary
from roofscope.reports.export import kernels_csv, to_json
from roofscope.reports.html import render_html
from roofscope.reports.markdown import render_markdown
from roofscope.reports.registry import RESULT, FunctionRenderer, RenderOptions, renderer

from .test_collect import PEAKS, TRAIN

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def eager():
    return roofscope.analyze(DATA / "h100_eager_block.json.gz")


@pytest.fixture
def script(tmp_path: Path) -> Path:
    p = tmp_path / "train.py"
    p.write_text(TRAIN)
    return p


def test_every_renderer_is_its_module_behind_one_signature(eager) -> None:
    assert registry.names(RESULT) == ["console", "csv", "html", "json", "junit", "markdown", "perfetto"]
    opts = RenderOptions(top=4)
    assert renderer(RESULT, "console").render(eager, opts) == render_summary(eager, top=4)
    assert renderer(RESULT, "json").render(eager, opts) == to_json(eager)            # --top is the console's only
    assert renderer(RESULT, "csv").render(eager, opts) == kernels_csv(eager)
    assert renderer(RESULT, "markdown").render(eager, opts) == render_markdown(eager)
    assert renderer(RESULT, "html").render(eager, RenderOptions(cdn=True)) == render_html(eager, cdn=True)
    assert {n: renderer(RESULT, n).file_name for n in registry.names(RESULT)} == {
        "console": "summary.txt", "csv": "kernels.csv", "html": "report.html", "json": "analysis.json",
        "junit": "junit.xml", "markdown": "summary.md", "perfetto": "trace.annotated.json.gz"}


def test_each_output_is_keyed_by_the_type_it_renders() -> None:
    from roofscope.analyzers.model.result import Result
    from roofscope.analyzers.compare.diff import Diff
    from roofscope.gate.result import GateResult
    from roofscope.hardware.ceilings import Ceilings
    from roofscope.analyzers.job.straggler import Job

    # The built-in kinds are named as text (no import at CLI start): each must name its class.
    for kind, cls in ((registry.RESULT, Result), (registry.DIFF, Diff), (registry.GATE, GateResult),
                      (registry.JOB, Job), (registry.CEILINGS, Ceilings)):
        assert registry.kind_of(cls) == kind
    assert registry.names(Diff) == ["console", "json", "markdown"]
    assert registry.names(GateResult) == ["console", "github", "json", "junit", "markdown"]
    assert registry.names(Job) == ["console", "html", "json"]
    assert registry.names(Ceilings) == ["console", "json"]
    assert renderer(Job, "html") is renderer(registry.JOB, "html")
    with pytest.raises(RoofscopeError, match=r"^unknown output format 'csv'; known: console, html, json$"):
        renderer(Job, "csv")


def test_junit_lists_each_rule_as_a_test(eager) -> None:
    suite = ET.fromstring(renderer(RESULT, "junit").render(eager, RenderOptions())).find("testsuite")
    # The eager H100 block: 3 rules find something (CUDA graphs 1.305 ms/step, compiling without graphs 0.110,
    # fusion 0.006), 17 do not apply.
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("20", "3", "17")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    graphs = cases["cuda_graphs"].find("failure")
    assert graphs.get("message") == ("Launch-bound: capture the step in a CUDA graph: -1.305 ms per step (48.2%),"
                                     " high confidence")
    assert graphs.get("type") == "host" and "Fix: Replay the step as a CUDA graph" in graphs.text
    assert cases["throttling"].find("skipped").get("message") == "no NVML telemetry in this run"


def test_register_refuses_a_taken_name_and_unknown_names_are_one_line_errors(eager) -> None:
    with pytest.raises(ValueError, match="already registered"):
        registry.register(RESULT, FunctionRenderer("json", "x.json", "", lambda a, o: ""))
    with pytest.raises(RoofscopeError, match=r"^unknown output format 'pdf'; known: console, csv, html, json, junit,"
                                             r" markdown, perfetto$"):
        renderer(RESULT, "pdf")


def test_run_writes_each_format_into_the_run(script: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["run", "-o", str(out), *PEAKS, "--no-report", "--format", "json", "--format", "markdown",
                 "--format", "junit", "--format", "json", str(script)]) == 0
    printed = capsys.readouterr().out
    assert "report: " not in printed and not (out / "report.html").exists()
    doc = json.loads((out / "analysis.json").read_text())
    # The JSON output's summary is the one the Run keeps, and its kernels add up to the summary's time.
    assert doc["summary"] == roofscope.load(out).summary()   # the stored one, less its analysis stamp
    assert sum(k["time_s"] for k in doc["by_kernel"]) <= doc["summary"]["kernel_time_s"] + 1e-12
    assert doc["summary"]["steps"] == [3, 4, 5]
    a = roofscope.analyze(out, peak_tflops=1, peak_bandwidth_gbs=10)
    assert (out / "summary.md").read_text() == render_markdown(a)
    suite = ET.parse(out / "junit.xml").getroot().find("testsuite")
    assert suite.find("properties/property[@name='trace']").get("value") == str(out / "trace.json.gz")


def test_run_refuses_an_unknown_format_before_the_script_runs(script: Path, tmp_path: Path, capsys) -> None:
    assert main(["run", "-o", str(tmp_path / "run"), "--format", "pdf", str(script)]) == 2
    out, err = capsys.readouterr()
    assert err == ("roofscope: error: unknown output format 'pdf'; known: console, csv, html, json, junit,"
                   " markdown, perfetto\n")
    assert "SEEN" not in out and not (tmp_path / "run").exists()


def test_profile_formats(tmp_path: Path) -> None:
    x = torch.randn(32, 32)
    with roofscope.profile(steps=2, settle=0, wait=0, warmup=0, out=tmp_path / "p", peak_tflops=1, peak_bandwidth_gbs=10,
                           quiet=True, report=False, formats="console") as prof:
        for _ in range(2):
            torch.tanh(x @ x)
            prof.step()
    assert sorted(p.name for p in prof.run_dir.iterdir() if p.suffix in (".txt", ".html")) == ["summary.txt"]
    assert (prof.run_dir / "summary.txt").read_text() == prof.summary()
    with pytest.raises(RoofscopeError, match="unknown output format 'xml'"):
        roofscope.profile(formats=["json", "xml"])


def test_run_format_in_a_subprocess(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-m", "roofscope", "run", "-q", "-o", str(out), *PEAKS, "--format", "csv",
                          str(script)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader((out / "kernels.csv").open()))
    a = roofscope.analyze(out, peak_tflops=1, peak_bandwidth_gbs=10)
    # A CPU Run: one row per CPU op, the ops' own durations, and the default report.html beside it.
    assert len(rows) == len(a.kernels) > 0 and (out / "report.html").exists()
    assert sum(int(r["dur_ns"]) for r in rows) == int(a.kernels["dur_ns"].sum())
    assert {"aten::addmm", "aten::mm"} & {r["name"] for r in rows}
