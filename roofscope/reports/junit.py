"""The gate's verdict as JUnit XML: one testcase per check, so CI systems (GitLab, Jenkins,
GitHub test reporters) list each metric as a test that passed, failed or was skipped."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ..gate.result import GateResult

SUITE = "roofscope gate"
CLASSNAME = "roofscope.gate"


def junit_xml(result: "GateResult") -> str:
    """A ``<testsuites>`` document with one ``<testsuite>``; failures carry the check's message
    as their ``message`` and the kernels that grew in their text."""
    from ..gate.render import evidence_text

    counts = {s: sum(c.status == s for c in result.checks) for s in ("fail", "skip")}
    attrs = {"name": SUITE, "tests": str(len(result.checks)), "failures": str(counts["fail"]), "errors": "0",
             "skipped": str(counts["skip"]), "time": "0"}
    root = ET.Element("testsuites", attrs)
    suite = ET.SubElement(root, "testsuite", attrs)
    props = ET.SubElement(suite, "properties")
    for name, value in (("run", result.run), ("baseline", result.baseline), ("alpha", f"{result.alpha:g}")):
        if value is not None:
            ET.SubElement(props, "property", {"name": name, "value": str(value)})
    evidence = "\n".join(line.strip() for line in evidence_text(result)).strip()
    for c in result.checks:
        case = ET.SubElement(suite, "testcase", {"classname": CLASSNAME, "name": c.name, "time": "0"})
        if c.status == "fail":
            failure = ET.SubElement(case, "failure", {"message": c.message(), "type": c.kind})
            failure.text = c.message() + ("\n\n" + evidence if evidence else "")
        elif c.status == "skip":
            ET.SubElement(case, "skipped", {"message": c.note})
        else:
            ET.SubElement(case, "system-out").text = c.message()
    if result.warnings:
        ET.SubElement(suite, "system-err").text = "\n".join(f"warning: {w}" for w in result.warnings)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
