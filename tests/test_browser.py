"""The HTML report in headless Chromium (Debian's package, driven by playwright): it loads
with no console errors and no network request, draws one roofline marker per costed group,
shows hover data, sorts and filters its tables, and downloads CSV.

Chromium comes from PATH or /usr/bin/chromium; without one these tests skip with the reason (a test
installs nothing: `.ci/run` installs Debian's ``chromium`` for CI). How fast a report renders is
measured by benchmarks/screenshot_report.py, not asserted here: a loaded machine measures its load.
"""
from __future__ import annotations

import csv
import os
import shutil
from pathlib import Path

import pytest

import roofscope
from roofscope.analyzers.model.kernels import aggregate
from roofscope.text import shorten
from roofscope.reports.html import render_html

from .test_counters_analysis import probe_run  # noqa: F401  (fixture)
from .test_html import EVIL, H200_RUN, HTA, _evil_analysis

FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def _chromium() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    return found or ("/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None)


@pytest.fixture(scope="session")
def chromium() -> str:
    path = _chromium()
    if path is None:
        pytest.skip("no Chromium on PATH or at /usr/bin/chromium: install Debian's `chromium` package"
                    " (.ci/run does) to run the browser tests")
    return path


@pytest.fixture(scope="session")
def browser(chromium, tmp_path_factory):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed: pip install -e '.[dev]'")
    with sync_api.sync_playwright() as p:
        # A fresh profile per session; Debian's browser, never a downloaded one.
        ctx = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=chromium, headless=True, args=FLAGS,
            accept_downloads=True, viewport={"width": 1400, "height": 1000})
        yield ctx
        ctx.close()


class Page:
    """A report opened in a new tab, with what the tab logged."""

    def __init__(self, ctx, path: Path, block_network: bool = False) -> None:
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        self.page = p = ctx.new_page()
        p.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        p.on("pageerror", lambda e: self.errors.append(str(e)))
        p.on("request", lambda r: self.requests.append(r.url))
        p.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        if block_network:
            p.route(lambda url: not url.startswith("file:"), lambda route: route.abort())
        p.goto(path.as_uri())
        p.wait_for_selector("body[data-ready]", timeout=600_000)        # a hang guard
        self.render_ms = p.evaluate("window.roofscopeRenderMs")

    def markers(self, plot: str = "roofline-plot", meta: str = "groups") -> int:
        """Marker points in the SVG of the plot's traces tagged ``meta``."""
        return self.page.evaluate("""([id, meta]) => {
            const gd = document.getElementById(id), dom = gd.querySelectorAll(".scatterlayer .trace");
            let n = 0;
            gd.data.forEach((t, i) => { if (t.meta === meta) n += dom[i].querySelectorAll("path.point").length; });
            return n; }""", [plot, meta])

    def group_points(self) -> list[dict]:
        """Viewport boxes of the roofline's group markers (not the ridge diamonds)."""
        self.page.locator("#roofline-plot").scroll_into_view_if_needed()
        return self.page.evaluate("""() => {
            const gd = document.getElementById("roofline-plot"), dom = gd.querySelectorAll(".scatterlayer .trace");
            const out = [];
            gd.data.forEach((t, i) => { if (t.meta === "groups") dom[i].querySelectorAll("path.point").forEach((p) => {
                const r = p.getBoundingClientRect();
                out.push({x: r.x + r.width / 2, y: r.y + r.height / 2, w: r.width}); }); });
            return out; }""")

    def hover(self, point: dict) -> str:
        self.page.mouse.move(point["x"], point["y"])
        self.page.wait_for_selector("#roofline-plot .hoverlayer .hovertext", timeout=60_000)
        return self.page.text_content("#roofline-plot .hoverlayer .hovertext")

    def column(self, table: str, index: int) -> list[str]:
        return self.page.eval_on_selector_all(f"#{table}-table tbody tr",
                                              f"rows => rows.map(r => r.children[{index}].textContent)")

    def header(self, table: str, label: str):
        return self.page.locator(f"#{table}-table th", has_text=label).first

    def close(self) -> None:
        self.page.close()


def _drawn(t) -> int:
    """Groups the roofline can place: FLOPs, bytes and time all positive."""
    return int(((t["flops"] > 0) & (t["bytes"] > 0) & (t["time_s"] > 0)).sum())


@pytest.fixture(scope="module")
def h200():
    return roofscope.analyze(H200_RUN)


@pytest.fixture(scope="module")
def h200_report(h200, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("report") / "h200.html"
    path.write_text(render_html(h200))
    return path


def test_gpu_run_report_loads_offline_and_draws_every_group(browser, h200, h200_report):
    page = Page(browser, h200_report)
    print(f"\nH200 GPT Run report: {h200_report.stat().st_size / 1e6:.2f} MB, rendered in {page.render_ms:.0f} ms")
    assert page.errors == [] and page.dialogs == []
    assert page.requests and all(u.startswith("file://") for u in page.requests)
    # 30 of the 40 kernel names have FLOPs and bytes: one marker each; 3 ridge diamonds (bf16, fp32).
    # cuBLAS's split-K reduce and cuDNN's dq conversion do none of their op's math: bytes only.
    assert _drawn(h200.by_kernel()) == 30 and page.markers() == 30
    assert page.markers(meta="ridge") == 2
    assert page.page.inner_text("#roofline-note").startswith("30 of 40 groups drawn")
    # One bar per kernel of the median step (146), four telemetry panels of one GPU, step bars per class:
    # memory and latency (the three 2 µs kernels without a formula are latency-bound by their duration).
    assert page.page.locator("#timeline-plot .barlayer path").count() == 146
    assert page.page.evaluate("document.getElementById('telemetry-plot').data.length") == 4
    assert page.page.locator("#steps-plot .barlayer .trace").count() == 2
    page.close()


def test_grouping_and_filters_redraw_the_roofline(browser, h200, h200_report):
    page = Page(browser, h200_report)
    k = h200.kernels
    page.page.select_option("#group-by", "op")
    assert page.markers() == _drawn(h200.by_op())
    page.page.select_option("#group-by", "module")
    assert page.markers() == _drawn(h200.by_module())
    page.page.select_option("#group-by", "kernel")
    page.page.select_option("#filter", "s:4")
    assert page.markers() == _drawn(aggregate(k[k["step"] == 4], "name"))
    # The tables follow the filter: step 4 holds 146 kernels of 40 names (every name runs every step).
    assert page.page.inner_text("#kernels-count") == "40 rows"
    calls = sum(int(c.replace(",", "")) for c in page.column("kernels", 4))
    assert calls == 146
    page.page.select_option("#filter", "r:1")                      # the optimizer's region: 6 kernels
    assert page.markers() == _drawn(aggregate(k[k["region"] == "Optimizer.step#AdamW.step"], "name"))
    assert page.errors == []
    page.close()


def test_hover_shows_the_group(browser, h200, h200_report):
    page = Page(browser, h200_report)
    # The biggest marker is the kernel with the most time among those drawn.
    text = page.hover(max(page.group_points(), key=lambda b: b["w"]))
    top = h200.by_kernel().iloc[0]                                 # reduce_kernel: 24 calls, 0.225 ms
    assert "at::native::reduce_kernel<128, 4" in text
    assert f"{int(top['calls'])} calls" in text and "op aten::sum" in text and "module GPT.blocks" in text
    assert f"total {top['time_s'] * 1e3:.3f} ms" in text and "efficiency" in text
    page.close()


def test_tables_sort_and_filter(browser, h200, h200_report):
    page = Page(browser, h200_report)
    times = [float(t) for t in page.column("kernels", 5)]
    assert times == sorted(times, reverse=True) and times[0] == pytest.approx(0.225, abs=5e-4)
    assert page.header("kernels", "time ms").get_attribute("aria-sort") == "descending"
    calls_header = page.header("kernels", "calls")
    calls_header.click()
    calls = [int(c.replace(",", "")) for c in page.column("kernels", 4)]
    assert calls == sorted(calls, reverse=True) and calls[0] == 81       # the bf16 copy kernel
    assert calls_header.get_attribute("aria-sort") == "descending"
    assert page.header("kernels", "time ms").get_attribute("aria-sort") is None
    calls_header.click()
    calls = [int(c.replace(",", "")) for c in page.column("kernels", 4)]
    assert calls == sorted(calls) and calls_header.get_attribute("aria-sort") == "ascending"
    page.page.fill("#kernels-filter", "nvjet")
    names = h200.by_kernel().index.astype(str)
    assert page.page.inner_text("#kernels-count") == f"{names.str.contains('nvjet').sum()} rows"
    assert all("nvjet" in n for n in page.column("kernels", 0))
    # Ops: the op table sorts too (text columns ascending first).
    page.header("ops", "op").click()
    ops = page.column("ops", 0)
    assert page.header("ops", "op").get_attribute("aria-sort") == "ascending" and ops[0] < ops[-1]
    page.close()


def test_csv_download_has_every_row_at_full_precision(browser, h200, h200_report):
    page = Page(browser, h200_report)
    with page.page.expect_download() as info:
        page.page.click("#kernels-csv")
    dl = info.value
    assert dl.suggested_filename == "roofscope-kernels.csv"
    rows = list(csv.DictReader(open(dl.path(), newline="")))
    assert list(rows[0])[:6] == ["name", "op", "module", "cls", "calls", "time_s"]
    table = h200.by_kernel()
    assert len(rows) == 40 and [r["name"] for r in rows] == [str(n) for n in table.index]
    assert sum(float(r["time_s"]) for r in rows) == pytest.approx(0.001614897, abs=1e-12)
    assert float(rows[0]["efficiency"]) == pytest.approx(table.iloc[0]["efficiency"], rel=1e-9)
    page.page.select_option("#filter", "s:3")
    with page.page.expect_download() as info:
        page.page.click("#ops-csv")
    assert info.value.suggested_filename == "roofscope-ops-s3.csv"
    assert page.errors == [] and all(u.startswith(("file://", "blob:")) for u in page.requests)
    page.close()


def test_hostile_names_stay_text_in_the_browser(browser, tmp_path):
    path = tmp_path / "evil.html"
    path.write_text(render_html(_evil_analysis(tmp_path)))
    page = Page(browser, path)
    p = page.page
    assert page.dialogs == [] and page.errors == []
    assert p.evaluate("document.querySelectorAll('img').length") == 0
    cells = p.eval_on_selector_all("#kernels-table tbody td.name", "tds => tds.map(td => [td.textContent, td.title])")
    assert cells == [[shorten("relu<!--" + EVIL), "relu<!--" + EVIL], [shorten("gemm" + EVIL), "gemm" + EVIL]]
    assert p.inner_text("header").count("train</script><img src=x onerror=alert(1)>.py") == 1
    # Hovering the gemm marker (30 us, the smaller of the two) shows its name as text.
    text = page.hover(min(page.group_points(), key=lambda b: b["w"]))
    assert "gemm</script><img src=x onerror=alert(1)>" in text and "module Net.fc</script><img" in text
    assert p.evaluate("document.querySelectorAll('img').length") == 0
    page.close()


def test_cdn_report_without_network_still_fills_its_tables(browser, h200, tmp_path):
    path = tmp_path / "cdn.html"
    path.write_text(render_html(h200, cdn=True))
    page = Page(browser, path, block_network=True)
    assert page.page.inner_text("#kernels-count") == "40 rows"
    assert "plotly.js did not load" in page.page.inner_text("#roofline-plot")
    assert page.errors == ["Failed to load resource: net::ERR_FAILED"]       # the blocked CDN script
    page.close()


def test_hta_report(browser, tmp_path):
    a = roofscope.analyze(HTA)
    path = tmp_path / "hta.html"
    path.write_text(render_html(a))
    page = Page(browser, path)
    print(f"\nHTA A100 report: {path.stat().st_size / 1e6:.2f} MB, rendered in {page.render_ms:.0f} ms")
    assert page.errors == [] and all(u.startswith("file://") for u in page.requests)
    assert path.stat().st_size < 6_000_000
    # 37 of 91 kernel names carry FLOPs and bytes (communication and uncosted kernels have none;
    # cuBLAS's split-K reduce has bytes only; apex's fused Adam, launched by no op, is streamed from its grid).
    assert _drawn(a.by_kernel()) == 37 and page.markers() == 37
    assert page.page.locator("#telemetry").count() == 0
    page.close()

def test_report_in_a_browser_shows_l2_points_and_tensor_cores(probe_run, browser, tmp_path):
    from roofscope.reports.html import render_html

    path = tmp_path / "report.html"
    path.write_text(render_html(roofscope.analyze(probe_run)))
    page = Page(browser, path, block_network=True)
    assert page.errors == [] and page.requests == [path.as_uri()]
    # 7 kernel groups with FLOPs and bytes: 7 filled (DRAM) markers and 7 hollow (L2) ones.
    assert page.markers(meta="groups") == 7 and page.markers(meta="l2") == 7
    headers = page.page.eval_on_selector_all("#kernels-table th", "ths => ths.map((t) => t.textContent)")
    assert "tensor cores" in headers
    cells = page.page.eval_on_selector_all("#kernels-table tbody tr",
                                           "rows => rows.map((r) => Array.from(r.cells).map((c) => c.textContent))")
    col = headers.index("tensor cores")
    # 8 groups (the memsets too): the bf16 GEMM and the SDPA used tensor cores, the fp32 GEMM did not.
    assert sorted(r[col] for r in cells) == ["", "", "", "", "", "NO", "yes", "yes"]


def test_job_report_draws_every_rank_offline(browser, tmp_path):
    from roofscope.cli import main

    from .test_merge import torchrun_layout

    job = torchrun_layout(tmp_path)
    assert main(["merge", str(job), "--jobs", "1", "-q"]) == 0
    page = Page(browser, job / "report.html", block_network=True)
    assert page.errors == [] and page.requests == [(job / "report.html").as_uri()]
    traces = page.page.evaluate("""() => Object.fromEntries(["steps-plot", "split-plot", "roofline-plot"].map(
        (id) => [id, document.getElementById(id).data.map((t) => t.name)]))""")
    # 3 ranks: a step line and an own-work line each; 4 stacked parts; one marker trace per rank.
    assert traces["steps-plot"] == [f"rank {r} {w}" for r in range(3) for w in ("step", "own work")]
    assert len(traces["split-plot"]) == 4
    assert [t for t in traces["roofline-plot"] if t.startswith("rank")] == ["rank 0", "rank 1", "rank 2"]
    # Rank 2 does 5 ms/step more own work (22 vs 17 ms, tests/test_ranks.py): its dashed line is above.
    own = page.page.evaluate("() => document.getElementById('steps-plot').data.filter((t, i) => i % 2).map((t) => t.y)")
    assert all(abs(y2 - y0 - 5.0) < 1e-6 for y0, y2 in zip(own[0], own[2]))
    page.page.select_option("#rank-select", "1")
    shown = page.page.evaluate("() => document.getElementById('roofline-plot').data.map((t) => t.name)")
    assert [t for t in shown if t.startswith("rank")] == ["rank 1"]
    # Each rank's own report is linked relatively, so the job directory can move.
    assert page.page.get_attribute("a[href='rank-0001/report.html']", "href") == "rank-0001/report.html"
    page.close()
