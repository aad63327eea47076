"""`check --format junit`: the gate's verdict as a JUnit XML report for CI test reporters.

One `<testcase>` per check (`measured`, `gap`, `work`, `ops`, and the optional ones), in the
`hlogap check` suite:

- pass: an empty test case;
- fail: a `<failure>` (type `regression`), its message the check's verdict, change, interval
  and limit;
- inconclusive: a `<skipped>` whose message says so (the change is within the run-to-run
  noise). Test reporters (GitHub Actions' JUnit actions, GitLab's test report, Jenkins) show a
  skipped case as neither green nor red, which is what an inconclusive check is: not a
  regression, not proof of none. An `<error>` would read as a broken test; the exit code (3)
  still tells the job.

Every test case's `<system-out>` holds two lines: the verdict, value, interval and limit
(`pass: measured -16.4 (interval [-40.9, 18.2], limit 5)`) and the check's line as the table
prints it. The suite's `<properties>` hold the run's verdict and both sides; its `<system-out>`
the verdict line, the step and what the baseline's actions realized, and the notes (docs/ci.md,
"JUnit"). Only the JUnit schema's elements and attributes are written (testsuites, testsuite,
properties, testcase, failure, skipped, system-out), so CI tools that validate it read it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hlogap.render.base import Document, DocumentKind, RenderOptions, register
from hlogap.render.text import check_notes, diff_step_lines

if TYPE_CHECKING:  # the XML library and the gate load where a check is written as JUnit
    import xml.etree.ElementTree as ET

    from hlogap.report.gate import Check, CheckResult

SUITE = "hlogap check"


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


def _interval(check: Check) -> str:
    if check.interval is None:
        return "none"
    lo, hi = check.interval
    return f"[{lo:.6g}, {hi:.6g}]"


def _message(check: Check) -> str:
    """One line: the verdict, the change, its interval and the limit."""
    return (
        f"{check.verdict}: {check.name} {_num(check.value)} (interval {_interval(check)}, "
        f"limit {check.limit:g})"
    )


def _testcase(suite: ET.Element, check: Check) -> ET.Element:
    import xml.etree.ElementTree as ET

    case = ET.SubElement(
        suite, "testcase", {"name": check.name, "classname": "hlogap.check", "time": "0"}
    )
    if check.verdict == "fail":
        failure = ET.SubElement(case, "failure", {"message": _message(check), "type": "regression"})
        failure.text = check.text
    elif check.verdict == "inconclusive":
        message = check.undecided or f"{_message(check)}: within run-to-run noise"
        ET.SubElement(case, "skipped", {"message": message})
    ET.SubElement(case, "system-out").text = f"{_message(check)}\n{check.text}"
    return case


def junit_xml(result: CheckResult) -> str:
    import xml.etree.ElementTree as ET

    checks = result.checks
    counts = {
        "tests": str(len(checks)),
        "failures": str(sum(c.verdict == "fail" for c in checks)),
        "errors": "0",
        "skipped": str(sum(c.verdict == "inconclusive" for c in checks)),
    }
    root = ET.Element("testsuites", {"name": SUITE, **counts, "time": "0"})
    suite = ET.SubElement(root, "testsuite", {"name": SUITE, **counts, "time": "0"})
    props = ET.SubElement(suite, "properties")
    diff = result.diff
    for name, value in (
        ("verdict", result.outcome),
        ("baseline", diff.base.path),
        ("checked", diff.new.path),
    ):
        ET.SubElement(props, "property", {"name": name, "value": str(value)})
    for check in checks:
        _testcase(suite, check)
    out = ET.SubElement(suite, "system-out")
    lines = [result.verdict(), *diff_step_lines(diff), *check_notes(result)]
    out.text = "\n".join(lines) + "\n"
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"


class JUnitRenderer:
    name = "junit"
    extensions: tuple[str, ...] = (".junit.xml",)
    kinds: frozenset[DocumentKind] = frozenset({"check"})

    def render(self, document: Document, options: RenderOptions) -> str:
        from hlogap.report.gate import CheckResult

        if not isinstance(document, CheckResult):
            raise TypeError(f"no JUnit XML for {type(document).__name__}")
        return junit_xml(document)


register(JUnitRenderer())
