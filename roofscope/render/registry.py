"""Output formats by name: every renderer of a Result behind one signature.

Each renderer module keeps its own function (``render_summary``, ``render_html``, ...); this
registry adapts them to ``render(analysis, options) -> str | bytes`` with a default file name,
which is all that `roofscope analyze`, `roofscope run --format NAME` and
``roofscope.profile(formats=[NAME])`` call. A new format is one :func:`register` call.
Renderer modules are imported when a format is rendered, not when it is named: the CLI
lists the names on every start.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Protocol

from roofscope.config import Presentation
from roofscope.errors import RoofscopeError
from roofscope.run import REPORT_FILE

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.model.result import Result


@dataclass(frozen=True)
class RenderOptions:
    top: int = Presentation.top  # kernels listed by the terminal summary (console); the others list their own number
    cdn: bool = False      # html: load plotly.js from its CDN instead of inlining it


class Renderer(Protocol):
    name: str
    file_name: str         # where `--format NAME` writes it inside a Run
    description: str

    def render(self, analysis: "Result", options: RenderOptions) -> str | bytes: ...


@dataclass(frozen=True)
class FunctionRenderer:
    """A renderer made of a function of (analysis, options)."""

    name: str
    file_name: str
    description: str
    function: Callable[["Result", RenderOptions], str | bytes]

    def render(self, analysis: "Result", options: RenderOptions) -> str | bytes:
        return self.function(analysis, options)


_RENDERERS: dict[str, Renderer] = {}


def register(renderer: Renderer, replace: bool = False) -> Renderer:
    if renderer.name in _RENDERERS and not replace:
        raise ValueError(f"a renderer named {renderer.name!r} is already registered")
    _RENDERERS[renderer.name] = renderer
    return renderer


def names() -> list[str]:
    return sorted(_RENDERERS)


def renderer(name: str) -> Renderer:
    check_formats([name])
    return _RENDERERS[name]


def check_formats(formats: Iterable[str]) -> None:
    """Refuse unknown format names before anything is profiled or analyzed."""
    unknown = [f for f in formats if f not in _RENDERERS]
    if unknown:
        raise RoofscopeError(f"unknown output format {unknown[0]!r}; known: {', '.join(names())}")


def _console(a: "Result", o: RenderOptions) -> str:
    from roofscope.render.console import render_summary

    return render_summary(a, top=o.top)


def _html(a: "Result", o: RenderOptions) -> str:
    from roofscope.render.html import render_html

    return render_html(a, cdn=o.cdn)


def _markdown(a: "Result", o: RenderOptions) -> str:
    from roofscope.render.markdown import render_markdown

    return render_markdown(a)


def _json(a: "Result", o: RenderOptions) -> str:
    from roofscope.render.export import to_json

    return to_json(a)


def _csv(a: "Result", o: RenderOptions) -> str:
    from roofscope.render.export import kernels_csv

    return kernels_csv(a)


def _junit(a: "Result", o: RenderOptions) -> str:
    from roofscope.render.junit import diagnosis_xml

    return diagnosis_xml(a)


def _perfetto(a: "Result", o: RenderOptions) -> bytes:
    from roofscope.render.perfetto import render_perfetto

    return render_perfetto(a)


for _r in (FunctionRenderer("console", "summary.txt", "the terminal summary", _console),
           FunctionRenderer("html", REPORT_FILE, "the self-contained HTML report", _html),
           FunctionRenderer("markdown", "summary.md", "markdown summary (GitHub job summary, PR comment)", _markdown),
           FunctionRenderer("json", "analysis.json", "summary and aggregate tables as JSON", _json),
           FunctionRenderer("csv", "kernels.csv", "one CSV row per kernel with every roofline column", _csv),
           FunctionRenderer("junit", "junit.xml", "JUnit XML: one testcase per diagnosis rule", _junit),
           FunctionRenderer("perfetto", "trace.annotated.json.gz", "the kernels with their roofline verdicts, for Perfetto",
                            _perfetto)):
    register(_r)
