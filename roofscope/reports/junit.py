"""JUnit XML, which CI systems (GitLab, Jenkins, GitHub test reporters) list as tests: the gate's
verdict (one testcase per check) and an analysis's diagnosis (one testcase per rule)."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import TYPE_CHECKING

from roofscope.reports.gate import evidence_text
from roofscope.reports.phrases import finding_head

if TYPE_CHECKING:  # pragma: no cover
    from roofscope.analyzers.model.result import Result
    from roofscope.analyzers.model.summary import Recommendation
    from roofscope.gate.result import GateResult

SUITE = "roofscope gate"
CLASSNAME = "roofscope.gate"
RULES_SUITE = "roofscope rules"
RULES_CLASSNAME = "roofscope.rules"


@dataclass
class Case:
    name: str
    status: str            # "pass", "fail", "skip" or "undecided" (an <error>: not a pass, not a regression)
    message: str           # the failure's or skip's message; a passing case's output
    text: str = ""         # a failure's full text (defaults to its message)
    kind: str = ""         # a failure's type


def document(suite: str, classname: str, cases: list[Case], properties: list[tuple[str, str]],
             errors: list[str]) -> str:
    """A ``<testsuites>`` document with one ``<testsuite>``."""
    counts = {s: sum(c.status == s for c in cases) for s in ("fail", "skip", "undecided")}
    attrs = {"name": suite, "tests": str(len(cases)), "failures": str(counts["fail"]),
             "errors": str(counts["undecided"]),
             "skipped": str(counts["skip"]), "time": "0"}
    root = ET.Element("testsuites", attrs)
    element = ET.SubElement(root, "testsuite", attrs)
    props = ET.SubElement(element, "properties")
    for name, value in properties:
        ET.SubElement(props, "property", {"name": name, "value": value})
    for c in cases:
        case = ET.SubElement(element, "testcase", {"classname": classname, "name": c.name, "time": "0"})
        if c.status == "fail":
            failure = ET.SubElement(case, "failure", {"message": c.message, "type": c.kind})
            failure.text = c.text or c.message
        elif c.status == "skip":
            ET.SubElement(case, "skipped", {"message": c.message})
        elif c.status == "undecided":
            ET.SubElement(case, "error", {"message": c.message, "type": "undecided"}).text = c.message
        else:
            ET.SubElement(case, "system-out").text = c.message
    if errors:
        ET.SubElement(element, "system-err").text = "\n".join(f"warning: {w}" for w in errors)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def junit_xml(result: "GateResult") -> str:
    """The gate's verdict; failures carry the check's message as their ``message`` and the
    kernels that grew in their text."""
    evidence = "\n".join(line.strip() for line in evidence_text(result)).strip()
    cases = [Case(c.name, c.status, c.note if c.status == "skip" else c.message(),
                  text=c.message() + ("\n\n" + evidence if evidence else ""), kind=c.kind) for c in result.checks]
    props = [(name, str(value)) for name, value in
             (("run", result.run), ("baseline", result.baseline), ("alpha", f"{result.alpha:g}")) if value is not None]
    return document(SUITE, CLASSNAME, cases, props, list(result.warnings))


def diagnosis_xml(result: "Result") -> str:
    """The diagnosis as tests: each rule with findings fails (its findings' savings per step and
    fixes, largest first), each rule that did not apply is skipped with the engine's reason."""
    s = result.summary
    by_rule: dict[str, list[Recommendation]] = {}
    for f in s.findings:
        by_rule.setdefault(f.rule, []).append(f)
    cases = []
    for rule, found in by_rule.items():
        heads = [finding_head(f, " per step") for f in found]
        text = "\n\n".join(f"{head}. {f.summary}. Fix: {f.fix.text}" for head, f in zip(heads, found))
        cases.append(Case(rule, "fail", heads[0], text=text, kind=found[0].binding))
    cases += [Case(r.rule, "skip", r.reason) for r in s.diagnosis.skipped]
    return document(RULES_SUITE, RULES_CLASSNAME, cases, [("trace", str(result.trace.path)), ("device", str(s.device))],
                    [])
