"""Every output roofscope writes, by the type it renders and a name, behind one signature.

A renderer turns one value (a Result, a Diff, a GateResult, a Job, measured Ceilings) into
text or bytes: ``render(value, options) -> str | bytes``, with a default file name. Commands look
one up by (type, name): `roofscope analyze`, `roofscope run --format NAME` and
``roofscope.profile(formats=[NAME])`` the Result renderers; `diff`, `gate`, `merge` and
`microbench` their own type's. A new output is one :func:`register` call.

A type is keyed by where it is defined (:func:`kind_of`: ``"roofscope.analyzers.model.result.Result"``), so
the built-in entries below name their types as text: listing the formats, which the CLI does on
every start, imports neither those types nor pandas. Renderer modules are imported when a value
is rendered, not when a format is named; none of them imports this module back.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol

from roofscope.config import Presentation
from roofscope.errors import RoofscopeError
from roofscope.run.layout import CEILINGS_FILE, REPORT_FILE, SUMMARY_FILE

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.analyzers.compare.diff import Diff  # start-up time
    from roofscope.analyzers.job.straggler import Job  # start-up time
    from roofscope.analyzers.model.result import Result  # start-up time
    from roofscope.gate.result import GateResult  # start-up time
    from roofscope.hardware.ceilings import Ceilings  # start-up time

Kind = type | str   # a rendered type, or its "module.QualName"

# The built-in rendered types (tests/test_formats.py checks each against its class).
RESULT = "roofscope.analyzers.model.result.Result"
DIFF = "roofscope.analyzers.compare.diff.Diff"
GATE = "roofscope.gate.result.GateResult"
JOB = "roofscope.analyzers.job.straggler.Job"
CEILINGS = "roofscope.hardware.ceilings.Ceilings"


@dataclass(frozen=True)
class RenderOptions:
    top: int = Presentation.top  # kernels listed by the console summary and the diff; the others list their own
    cdn: bool = False      # html: load plotly.js from its CDN instead of inlining it
    reports: Mapping[int, str] | None = None   # a Job's html: each rank's own report.html, relative to the job's


class Renderer(Protocol):
    name: str
    file_name: str         # where `--format NAME` writes a Result's inside a Run; the default file of the others
    description: str

    def render(self, value: Any, options: RenderOptions) -> str | bytes: ...


@dataclass(frozen=True)
class FunctionRenderer:
    """A renderer made of a function of (value, options)."""

    name: str
    file_name: str
    description: str
    function: Callable[[Any, RenderOptions], str | bytes]

    def render(self, value: Any, options: RenderOptions) -> str | bytes:
        return self.function(value, options)


_RENDERERS: dict[str, dict[str, Renderer]] = {}


def kind_of(kind: Kind) -> str:
    """A rendered type's key: ``"module.QualName"`` (a string is taken as one already)."""
    return kind if isinstance(kind, str) else f"{kind.__module__}.{kind.__qualname__}"


def register(kind: Kind, renderer: Renderer, replace: bool = False) -> Renderer:
    by_name = _RENDERERS.setdefault(kind_of(kind), {})
    if renderer.name in by_name and not replace:
        raise ValueError(f"a renderer named {renderer.name!r} is already registered for {kind_of(kind)}")
    by_name[renderer.name] = renderer
    return renderer


def names(kind: Kind) -> list[str]:
    return sorted(_RENDERERS.get(kind_of(kind), {}))


def renderer(kind: Kind, name: str) -> Renderer:
    check_formats(kind, [name])
    return _RENDERERS[kind_of(kind)][name]


def check_formats(kind: Kind, formats: Iterable[str]) -> None:
    """Refuse unknown format names before anything is profiled or analyzed."""
    known = _RENDERERS.get(kind_of(kind), {})
    unknown = [f for f in formats if f not in known]
    if unknown:
        raise RoofscopeError(f"unknown output format {unknown[0]!r}; known: {', '.join(names(kind))}")


# Each function imports what it renders with when called: see the module's docstring.
def _console(result: "Result", o: RenderOptions) -> str:
    from roofscope.reports.console import render_summary  # start-up time

    return render_summary(result, top=o.top)


def _html(result: "Result", o: RenderOptions) -> str:
    from roofscope.reports.html import render_html  # start-up time

    return render_html(result, cdn=o.cdn)


def _markdown(result: "Result", o: RenderOptions) -> str:
    from roofscope.reports.markdown import render_markdown  # start-up time

    return render_markdown(result)


def _json(result: "Result", o: RenderOptions) -> str:
    from roofscope.reports.export import to_json  # start-up time

    return to_json(result)


def _csv(result: "Result", o: RenderOptions) -> str:
    from roofscope.reports.export import kernels_csv  # start-up time

    return kernels_csv(result)


def _junit(result: "Result", o: RenderOptions) -> str:
    from roofscope.reports.junit import diagnosis_xml  # start-up time

    return diagnosis_xml(result)


def _perfetto(result: "Result", o: RenderOptions) -> bytes:
    from roofscope.reports.perfetto import render_perfetto  # start-up time

    return render_perfetto(result)


def _diff_console(d: "Diff", o: RenderOptions) -> str:
    from roofscope.reports.diffview import render_terminal  # start-up time

    return render_terminal(d, top=o.top)


def _diff_markdown(d: "Diff", o: RenderOptions) -> str:
    from roofscope.reports.diffview import render_markdown  # start-up time

    return render_markdown(d, top=o.top)


def _gate_console(r: "GateResult", o: RenderOptions) -> str:
    from roofscope.reports.gate import text  # start-up time

    return text(r)


def _gate_markdown(r: "GateResult", o: RenderOptions) -> str:
    from roofscope.reports.gate import markdown  # start-up time

    return markdown(r)


def _gate_junit(r: "GateResult", o: RenderOptions) -> str:
    from roofscope.reports.junit import junit_xml  # start-up time

    return junit_xml(r)


def _gate_github(r: "GateResult", o: RenderOptions) -> str:
    from roofscope.reports.github import annotations  # start-up time

    return "".join(line + "\n" for line in annotations(r))


def _job_console(job: "Job", o: RenderOptions) -> str:
    from roofscope.reports.multirank import render_terminal  # start-up time

    return render_terminal(job)


def _job_html(job: "Job", o: RenderOptions) -> str:
    from roofscope.reports.multirank import render_multirank  # start-up time

    return render_multirank(job, dict(o.reports or {}))


def _job_json(job: "Job", o: RenderOptions) -> str:
    from roofscope.jsonsafe import json_safe  # start-up time

    return json.dumps(json_safe(job.to_dict()), indent=1)


def _ceilings_console(c: "Ceilings", o: RenderOptions) -> str:
    from roofscope.reports.ceilings import render_table  # start-up time

    return render_table(c)


def _ceilings_json(c: "Ceilings", o: RenderOptions) -> str:
    from roofscope.hardware.ceilings import ceilings_payload  # start-up time

    return json.dumps(ceilings_payload(c), indent=2) + "\n"


def _diff_json(d: "Diff", o: RenderOptions) -> str:
    return json.dumps(d.to_dict(), indent=1, allow_nan=False)   # to_dict() is JSON-safe already


def _gate_json(r: "GateResult", o: RenderOptions) -> str:
    return json.dumps(r.to_dict(), indent=1, allow_nan=False) + "\n"


for _kind, _r in (
        (RESULT, FunctionRenderer("console", "summary.txt", "the terminal summary", _console)),
        (RESULT, FunctionRenderer("html", REPORT_FILE, "the self-contained HTML report", _html)),
        (RESULT, FunctionRenderer("markdown", "summary.md", "markdown summary (GitHub job summary, PR comment)",
                                    _markdown)),
        (RESULT, FunctionRenderer("json", "analysis.json", "summary and aggregate tables as JSON", _json)),
        (RESULT, FunctionRenderer("csv", "kernels.csv", "one CSV row per kernel with every roofline column", _csv)),
        (RESULT, FunctionRenderer("junit", "junit.xml", "JUnit XML: one testcase per diagnosis rule", _junit)),
        (RESULT, FunctionRenderer("perfetto", "trace.annotated.json.gz",
                                    "the kernels with their roofline verdicts, for Perfetto", _perfetto)),
        (DIFF, FunctionRenderer("console", "diff.txt", "the diff for a terminal (80 columns)", _diff_console)),
        (DIFF, FunctionRenderer("markdown", "diff.md", "the diff as GitHub markdown, every table", _diff_markdown)),
        (DIFF, FunctionRenderer("json", "diff.json", "the diff as JSON", _diff_json)),
        (GATE, FunctionRenderer("console", "gate.txt", "the verdict for a terminal, with the kernel evidence",
                                _gate_console)),
        (GATE, FunctionRenderer("markdown", "gate.md", "the verdict as markdown (GitHub step summary)",
                                _gate_markdown)),
        (GATE, FunctionRenderer("junit", "junit.xml", "JUnit XML: one testcase per check", _gate_junit)),
        (GATE, FunctionRenderer("github", "annotations.txt", "GitHub Actions annotations, one per failed check",
                                _gate_github)),
        (GATE, FunctionRenderer("json", "gate.json", "the verdict as JSON", _gate_json)),
        (JOB, FunctionRenderer("console", "job.txt", "the job's terminal summary", _job_console)),
        (JOB, FunctionRenderer("html", REPORT_FILE, "the job's combined HTML report", _job_html)),
        (JOB, FunctionRenderer("json", SUMMARY_FILE, "the cross-rank summary as JSON", _job_json)),
        (CEILINGS, FunctionRenderer("console", "ceilings.txt", "the measured ceilings beside the datasheet",
                                    _ceilings_console)),
        (CEILINGS, FunctionRenderer("json", CEILINGS_FILE, "the ceilings file's content", _ceilings_json))):
    register(_kind, _r)
