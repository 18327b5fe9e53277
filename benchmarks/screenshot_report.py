"""Screenshots and load times of the HTML report in headless Chromium.

    python benchmarks/screenshot_report.py RUN_OR_TRACE_OR_HTML --name gpt-h200 [--out-dir docs/img]

Renders the report (unless given an .html file), loads it --repeat times in Debian's
Chromium (driven by playwright, as tests/test_browser.py does), prints its size, the time
to write it and the median time until the page has drawn everything (navigation start to
the page's ready flag), and writes one PNG per section named ``NAME-SECTION.png``: the
roofline is shot with the mouse over its biggest marker (plotly labels the marker nearest to it).

``--replicate N`` stresses the report: the analysis' kernels are repeated N times (later
copies shifted in time, with their own step numbers and 3,000 module names) before rendering.
"""
from __future__ import annotations

import argparse
import dataclasses
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

SECTIONS = {  # file suffix -> CSS selectors shot together (the first to the last, full width)
    "overview": ("header", "#recommendations, #summary"),
    "roofline": ("#roofline", "#roofline"),
    "breakdowns": ("#breakdowns", "#breakdowns"),
    "timeline": ("#timeline", "#timeline"),
    "telemetry": ("#telemetry", "#telemetry"),
    "tables": ("#kernels", "#kernels"),
    "findings": ("#findings", "#findings"),
}
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def _replicated(a, n: int):
    import numpy as np
    import pandas as pd

    k = a.kernels
    span, steps = int(k["ts_ns"].max()) + 1, max(1, int(k["step"].nunique()))
    parts = [k.assign(ts_ns=k["ts_ns"] + i * span, step=np.where(k["step"] >= 0, k["step"] + i * steps, -1),
                      module="M" + pd.Series(np.arange(len(k)) % 3000 + i * 10, index=k.index).astype(str))
             for i in range(n)]
    return dataclasses.replace(a, kernels=pd.concat(parts, ignore_index=True))


def _report(source: Path, tmp: Path, replicate: int) -> tuple[Path, float | None]:
    if source.suffix == ".html":
        return source, None
    import roofscope
    from roofscope.reports.html import render_html

    a = roofscope.analyze(source)
    if replicate > 1:
        a = _replicated(a, replicate)
    t0 = time.perf_counter()
    out = tmp / "report.html"
    out.write_text(render_html(a), encoding="utf-8")
    print(f"{len(a.kernels):,} kernels; report written in {time.perf_counter() - t0:.2f} s", file=sys.stderr)
    return out, time.perf_counter() - t0


def _hover_biggest_marker(page) -> None:
    page.locator("#roofline-plot").scroll_into_view_if_needed()
    box = page.evaluate("""() => {
        const gd = document.getElementById("roofline-plot"), dom = gd.querySelectorAll(".scatterlayer .trace");
        let best = null;
        gd.data.forEach((t, i) => { if (t.meta === "groups") dom[i].querySelectorAll("path.point").forEach((p) => {
            const r = p.getBoundingClientRect();
            if (!best || r.width > best.w) best = {x: r.x + r.width / 2, y: r.y + r.height / 2, w: r.width}; }); });
        return best; }""")
    if box:
        page.mouse.move(box["x"], box["y"])
        page.wait_for_selector("#roofline-plot .hoverlayer .hovertext", timeout=5000)


def _shoot(page, first: str, last: str, path: Path) -> bool:
    top, bottom = page.locator(first).first, page.locator(last).last
    if not top.count() or not bottom.count():
        return False
    a, b = top.bounding_box(), bottom.bounding_box()
    scroll = page.evaluate("window.scrollY")
    y0, y1 = a["y"] + scroll, b["y"] + b["height"] + scroll
    page.screenshot(path=str(path), full_page=True,
                    clip={"x": 0, "y": max(0, y0 - 8), "width": page.viewport_size["width"], "height": y1 - y0 + 16})
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path, help="Run directory, Kineto trace, or a report .html")
    ap.add_argument("--name", required=True, help="prefix of the PNG files")
    ap.add_argument("--out-dir", type=Path, default=Path("docs/img"))
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated, of {', '.join(SECTIONS)}")
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--repeat", type=int, default=5, help="page loads timed")
    ap.add_argument("--replicate", type=int, default=1, help="repeat the kernels N times (stress test)")
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    args.out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        html, write_s = _report(args.source, Path(tmp), args.replicate)
        ctx = p.chromium.launch_persistent_context(str(Path(tmp) / "profile"), executable_path=args.chromium,
                                                   headless=True, args=FLAGS,
                                                   viewport={"width": args.width, "height": 1000})
        times, errors = [], []
        for _ in range(args.repeat):
            page = ctx.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(html.resolve().as_uri())
            page.wait_for_selector("body[data-ready]", timeout=60_000)
            times.append(page.evaluate("window.roofscopeRenderMs"))
            if len(times) < args.repeat:
                page.close()
        for name in args.sections.split(","):
            if name == "roofline":
                _hover_biggest_marker(page)
            out = args.out_dir / f"{args.name}-{name}.png"
            if _shoot(page, *SECTIONS[name], out):
                print(f"wrote {out} ({out.stat().st_size / 1e3:.0f} kB)", file=sys.stderr)
            page.mouse.move(0, 0)
        ctx.close()
        size = html.stat().st_size
    written = "-" if write_s is None else f"{write_s:.2f} s"
    print(f"| {args.source} | {size / 1e6:.2f} MB | {written} | {statistics.median(times):.0f} ms "
          f"(min {min(times):.0f}, max {max(times):.0f}, {args.repeat} loads) | {len(errors)} console errors |")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
