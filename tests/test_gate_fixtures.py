"""`hlogap check` on the committed gate fixtures (issue 45's "Done when"; scripts/make_fixtures.py's
gate_* programs): one training step profiled the documented way in three separate processes
(gate_run1..3: noise only), the same program with a 1.3125x wider hidden layer (gate_more: ~30%
more work a step) and a 3-step run (gate_short). Every default gate, with the step and idle
gates too: a noise pair passes or is inconclusive, never fails; the wider program fails with its
interval wholly past the limit; the short run never fails. The expected intervals are recomputed
here from the reports' own `steps` with scipy's t (tests/test_check_noise.py's oracle).

Also `check --format junit` read back by a JUnit XML reader (junitparser), its test cases and
failures those of the JSON's checks, and `check` printing the step and each baseline action's
promise against what the new run realized, in `diff`'s words.
"""

from __future__ import annotations

import copy
import json
import math
import re
import statistics
import xml.etree.ElementTree as ET
from itertools import permutations
from pathlib import Path

import pytest

from hlogap import audit
from hlogap.options import AuditOptions
from tests.conftest import FIXTURES, write_cpu_chip
from tests.test_check_noise import (
    CPU_RUN_NOISE,
    UNDECIDED,
    _by_name,
    _check,
    _load,
    _steady,
    _welch_interval,
    run_cli,
)

RUNS = ("gate_run1", "gate_run2", "gate_run3")
MORE, SHORT = "gate_more", "gate_short"
LIMIT = 5.0  # --max-regression's default: the measured and work checks' limit
EVERY_GATE = ("--max-step-regression", "5", "--max-idle-regression", "5")


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each gate fixture's saved report, audited against the test chip."""
    tmp = tmp_path_factory.mktemp("gate")
    chip = str(write_cpu_chip(tmp))
    out = {}
    for name in (*RUNS, MORE, SHORT):
        path = tmp / f"{name}.json"
        path.write_text(json.dumps(audit(FIXTURES / name, AuditOptions(chip=chip)).to_dict(0)))
        out[name] = path
    return out


def test_the_fixtures_are_what_the_script_says() -> None:
    for name in (*RUNS, MORE):
        oracle = json.loads((FIXTURES / name / "oracle.json").read_text())
        assert oracle["steps"] == 10 and oracle["pattern"].startswith("documented")
        assert [m["module"] for m in oracle["modules"]] == ["jit_gate_step"]
    assert json.loads((FIXTURES / SHORT / "oracle.json").read_text())["steps"] == 3
    # ~30% more FLOPs a step: XLA's own cost analysis of the two programs.
    flops = {
        n: json.loads((FIXTURES / n / "oracle.json").read_text())["modules"][0]["cost_analysis"][
            "flops"
        ]
        for n in ("gate_run1", MORE)
    }
    assert 1.25 < flops[MORE] / flops["gate_run1"] < 1.35


def _assert_not_failed(code: int, doc: dict, err: str) -> None:
    assert code in (0, 3), doc.get("line")
    assert doc["verdict"] in ("pass", "inconclusive")
    assert [c["name"] for c in doc["checks"] if c["verdict"] == "fail"] == []
    assert not any(o["verdict"] == "fail" for o in doc["op_checks"])
    if code == 3:
        lines = err.splitlines()
        assert len(lines) == 1 and UNDECIDED.fullmatch(lines[0]), err
    else:
        assert err == ""


@pytest.mark.parametrize(("base", "new"), list(permutations(RUNS, 2)))
@pytest.mark.parametrize("gates", [(), EVERY_GATE], ids=["defaults", "every-gate"])
def test_noise_pairs_never_fail(
    base: str, new: str, gates: tuple[str, ...], reports: dict[str, Path], tmp_path: Path
) -> None:
    code, doc, err = _check(tmp_path, reports[new], reports[base], *gates)
    _assert_not_failed(code, doc, err)
    work = _by_name(doc)["work"]  # the same program: the same work, exactly
    assert work["verdict"] == "pass" and work["value"] == pytest.approx(0.0, abs=1e-6)


def _bound_per_step(report: dict) -> float:
    """The roofline bound per steady step, from the report's own steps."""
    return statistics.fmean(s["bound_us"] for s in _steady(report))


@pytest.mark.parametrize("base", RUNS)
def test_more_work_fails_with_its_interval_wholly_past_the_limit(
    base: str, reports: dict[str, Path], tmp_path: Path
) -> None:
    code, doc, _ = _check(tmp_path, reports[MORE], reports[base])
    assert code == 1 and doc["verdict"] == "fail"
    checks = _by_name(doc)
    # The work check fails, whatever the runner did to the times: no noise, its interval is
    # the change, recomputed here from the steps' bounds.
    b, n = _load(reports[base]), _load(reports[MORE])
    expected = (_bound_per_step(n) / _bound_per_step(b) - 1) * 100
    work = checks["work"]
    assert work["value"] == pytest.approx(expected, rel=1e-6)
    assert 25 < expected < 35
    assert work["verdict"] == "fail"
    assert work["interval"] == pytest.approx([expected, expected], rel=1e-6)
    assert work["interval"][0] > LIMIT
    # The measured check: the steps' interval as documented (Welch t on the steady steps'
    # logs), its verdict by the rule (fail: past the limit even widened by the run-to-run
    # allowance; pass: the steps' interval within it).
    per_b = b["summary"]["measured_us"] / len(_steady(b))
    per_n = n["summary"]["measured_us"] / len(_steady(n))
    args = (
        [s["measured_us"] for s in _steady(b)],
        [s["measured_us"] for s in _steady(n)],
        math.log(per_n / per_b),
        1.0,
    )
    lo, hi = _welch_interval(*args, 0.0)
    widened, _ = _welch_interval(*args, CPU_RUN_NOISE)
    measured = checks["measured"]
    assert measured["interval"] == pytest.approx([lo, hi], rel=1e-6)
    assert measured["verdict"] == (
        "fail" if widened > LIMIT else "pass" if hi <= LIMIT else "inconclusive"
    )
    failed = [c["name"] for c in doc["checks"] if c["verdict"] == "fail"]
    assert "work" in failed and set(failed) <= {"work", "measured", "gap", "ops"}
    assert all(checks[name]["interval"][0] > LIMIT for name in failed if name != "ops")


@pytest.mark.parametrize(
    ("base", "new"), [(r, SHORT) for r in RUNS] + [(SHORT, r) for r in RUNS] + [(SHORT, SHORT)]
)
def test_a_short_run_never_fails(
    base: str, new: str, reports: dict[str, Path], tmp_path: Path
) -> None:
    code, doc, err = _check(tmp_path, reports[new], reports[base], *EVERY_GATE)
    _assert_not_failed(code, doc, err)
    short = _load(reports[SHORT])
    assert len(short["steps"]) == 3
    if base != new:
        step = _by_name(doc)["step"]
        n_b, n_n = (len(_steady(_load(reports[x]))) for x in (base, new))
        assert f"{n_b} and {n_n} steady steps" in step["text"]
        walls_b = [s["wall_us"] for s in _steady(_load(reports[base]))]
        walls_n = [s["wall_us"] for s in _steady(_load(reports[new]))]
        center = math.log(statistics.median(walls_n) / statistics.median(walls_b))
        lo, hi = _welch_interval(walls_b, walls_n, center, math.sqrt(math.pi / 2), 0.0)
        assert step["interval"] == pytest.approx([lo, hi], rel=1e-6)


# --- check --format junit -----------------------------------------------------------------


def _junit(tmp: Path, new: Path, base: Path, *extra: str) -> tuple[int, str]:
    result = run_cli(
        "check", str(new), "--baseline", str(base), "--format", "junit", *extra, cwd=tmp
    )
    return result.returncode, result.stdout


@pytest.mark.parametrize(
    ("base", "new", "gates"),
    [
        ("gate_run1", MORE, ()),
        ("gate_run1", "gate_run2", EVERY_GATE),
        ("gate_run2", "gate_run2", ()),
    ],
    ids=["fail", "noise", "pass"],
)
def test_junit_is_read_back_by_a_junit_reader(
    base: str, new: str, gates: tuple[str, ...], reports: dict[str, Path], tmp_path: Path
) -> None:
    from junitparser import Error, Failure, JUnitXml, Skipped

    code, doc, _ = _check(tmp_path, reports[new], reports[base], *gates)
    junit_code, text = _junit(tmp_path, reports[new], reports[base], *gates)
    assert junit_code == code  # the format changes what is written, not the verdict
    path = tmp_path / "check.xml"
    path.write_text(text)
    xml = JUnitXml.fromfile(str(path))
    (suite,) = list(xml)
    assert suite.name == "hlogap check"
    cases = {case.name: case for case in suite}
    assert list(cases) == [c["name"] for c in doc["checks"]]
    assert suite.tests == len(doc["checks"])
    assert suite.failures == sum(c["verdict"] == "fail" for c in doc["checks"])
    assert suite.skipped == sum(c["verdict"] == "inconclusive" for c in doc["checks"])
    assert suite.errors == 0
    for check in doc["checks"]:
        case = cases[check["name"]]
        results = case.result
        said, text = case.system_out.split("\n")
        assert text == check["text"]
        found = re.fullmatch(rf"(\w+): {check['name']} (\S*) \(interval (.+), limit (\S+)\)", said)
        assert found, said
        assert found.group(1) == check["verdict"]
        assert float(found.group(4)) == pytest.approx(check["limit"])
        if check["interval"] is None:
            assert found.group(3) == "none"
        else:
            lo, hi = (float(x) for x in found.group(3).strip("[]").split(","))
            assert [lo, hi] == pytest.approx(check["interval"], rel=1e-5, abs=1e-9)
        assert not any(isinstance(r, Error) for r in results)
        if check["verdict"] == "fail":
            (failure,) = results
            assert isinstance(failure, Failure) and failure.type == "regression"
            assert failure.message.startswith(f"fail: {check['name']} ")
            assert failure.text == check["text"]
        elif check["verdict"] == "inconclusive":
            (skipped,) = results
            assert isinstance(skipped, Skipped) and "within run-to-run noise" in skipped.message
        else:
            assert results == []
    # The suite's own output (junitparser reads a test case's only): the verdict line first.
    suite_out = ET.parse(path).getroot().find("testsuite/system-out")
    assert suite_out is not None and suite_out.text is not None
    assert suite_out.text.splitlines()[0] == doc["line"]


def test_junit_is_a_check_format_only(reports: dict[str, Path], tmp_path: Path) -> None:
    result = run_cli("diff", str(reports["gate_run1"]), str(reports[MORE]), "--format", "junit")
    assert result.returncode == 2 and "unknown format 'junit'" in result.stderr


# --- check prints the step and what the baseline's actions realized, as diff does ------------


def test_check_prints_diffs_step_and_actions_realized(tmp_path: Path) -> None:
    """The materialized logits against their chunked fix (tests/test_patterns.py's pair):
    `check` prints `diff`'s step line and its action lines, word for word, and its JSON
    carries both."""
    chip = str(write_cpu_chip(tmp_path))
    base, new = (str(FIXTURES / n) for n in ("documented_logits", "documented_logits_chunked"))
    diff = run_cli("diff", base, new, "--chip", chip)
    check = run_cli("check", new, "--baseline", base, "--chip", chip, cwd=tmp_path)
    assert diff.returncode == 0, diff.stderr
    step_lines = []
    for line in diff.stdout.splitlines():
        if not (line.startswith("step: ") or line.startswith("  action ")):
            break
        step_lines.append(line)
    assert step_lines[0].startswith("step: ") and "faster" in step_lines[0]
    assert step_lines[1].startswith("  action 1, materialized logits: promised ")
    assert check.returncode in (0, 1, 3), check.stderr
    lines = check.stdout.splitlines()
    at = lines.index(step_lines[0])
    assert lines[at : at + len(step_lines)] == step_lines
    js = run_cli("check", new, "--baseline", base, "--chip", chip, "--format", "json", cwd=tmp_path)
    doc = json.loads(js.stdout)
    diff_doc = json.loads(run_cli("diff", base, new, "--chip", chip, "--format", "json").stdout)
    assert doc["steps"] == diff_doc["steps"] and doc["steps"]["change"] < 0
    assert doc["actions_realized"] == diff_doc["actions_realized"]
    assert doc["actions_realized"][0]["cause"] == "materialized logits"
    md = run_cli("check", new, "--baseline", base, "--chip", chip, "--format", "md", cwd=tmp_path)
    assert [f"- {line.strip()}" for line in step_lines] == [
        line for line in md.stdout.split("<details>")[0].splitlines() if line.startswith("- ")
    ][: len(step_lines)]


def test_diff_leads_with_the_step(reports: dict[str, Path]) -> None:
    """`diff`'s first line is the steady median step before -> after, recomputed here from the
    reports' steps; its JSON `steps` holds the same."""
    from hlogap.units import fmt_us

    base, new = _load(reports["gate_run1"]), _load(reports[MORE])
    b, n = (statistics.median(s["wall_us"] for s in _steady(r)) for r in (base, new))
    result = run_cli("diff", str(reports["gate_run1"]), str(reports[MORE]))
    first = result.stdout.splitlines()[0]
    assert first.startswith(f"step: {fmt_us(b)} -> {fmt_us(n)} (steady median, ")
    assert f"{(n / b - 1) * 100:+.1f}%" in first
    doc = json.loads(
        run_cli("diff", str(reports["gate_run1"]), str(reports[MORE]), "--format", "json").stdout
    )
    assert doc["steps"] == pytest.approx(
        {"base_step_us": b, "new_step_us": n, "change": n / b - 1}, rel=1e-9
    )


def test_the_committed_fixture_pairs_from_the_command_line(tmp_path: Path) -> None:
    """The profiles themselves (not saved reports), as a CI job would gate them."""
    chip = str(write_cpu_chip(tmp_path))
    more = run_cli(
        "check",
        str(FIXTURES / MORE),
        "--baseline",
        str(FIXTURES / "gate_run1"),
        "--chip",
        chip,
        cwd=tmp_path,
    )
    assert more.returncode == 1 and "FAIL  work (roofline bound)" in more.stdout


def _edited(report: dict, factor: float, step_shows: bool) -> dict:
    """Another run (the steps shifted in time) whose largest op takes `factor` times as long;
    with `step_shows`, every steady step is longer by the op's added time."""
    out = copy.deepcopy(report)
    op = max(out["ops"], key=lambda o: o["measured_us"])
    steady = _steady(out)
    added = op["measured_us"] * (factor - 1) / len(steady)
    op["measured_us"] *= factor
    op["median_us"] *= factor
    out["summary"]["measured_us"] = sum(o["measured_us"] for o in out["ops"])
    for step in out["steps"]:
        step["start_us"] += 1.0
    for step in steady if step_shows else []:
        for key in ("wall_us", "device_wall_us", "busy_us", "measured_us"):
            step[key] += added
    return out


@pytest.mark.parametrize(
    ("factor", "step_shows", "expected"),
    [(2.0, False, "inconclusive"), (4.0, True, "fail")],
    ids=["step-unchanged", "step-shows-it"],
)
def test_an_op_fails_only_where_the_step_shows_it(
    factor: float,
    step_shows: bool,
    expected: str,
    reports: dict[str, Path],
    tmp_path: Path,
) -> None:
    """An op's time moving between runs of one program (the gate fixtures: multiply_tanh_fusion
    122 us a run, 1.43 ms the next, the step -2.4%) is not a regression unless the step shows
    it: a fail needs the step's interval, widened by the run-to-run noise, to have grown by at
    least the op's allowed growth."""
    base = _load(reports["gate_run1"])
    new = _edited(base, factor, step_shows)
    path = tmp_path / "new.json"
    path.write_text(json.dumps(new))
    code, doc, _ = _check(tmp_path, path, reports["gate_run1"])
    name = max(base["ops"], key=lambda o: o["measured_us"])["name"]
    (op,) = [o for o in doc["op_checks"] if o["name"] == name]
    assert op["change"] == pytest.approx((factor - 1) * 100)
    assert op["verdict"] == expected and not op["waiting"]
    assert op["interval"][0] > 20  # its own range is past the limit either way
    assert _by_name(doc)["ops"]["verdict"] == expected
    assert (code == 1) == (expected == "fail")


DOC_PAIRS = [
    *permutations(RUNS, 2),
    *((r, MORE) for r in RUNS),
    ("gate_run1", SHORT),
    (SHORT, "gate_run1"),
]


def test_docs_table_is_the_tools(reports: dict[str, Path], tmp_path: Path) -> None:
    """docs/ci.md's table of the gate fixtures' verdicts, recomputed."""
    from tests.conftest import ROOT

    doc_text = (ROOT / "docs" / "ci.md").read_text()

    def rng(c: dict) -> str:
        lo, hi = c["interval"]
        return f"{lo:+.1f}%..{hi:+.1f}%"

    for base, new in DOC_PAIRS:
        code, doc, _ = _check(tmp_path, reports[new], reports[base], "--max-step-regression", "5")
        c = _by_name(doc)
        failed = [x["name"] for x in doc["checks"] if x["verdict"] == "fail"]
        verdict = doc["verdict"] + (f" ({', '.join(failed)})" if failed else "")
        row = (
            f"| {base} | {new} | {c['step']['value']:+.1f}% ({rng(c['step'])}) | "
            f"{c['measured']['value']:+.1f}% ({rng(c['measured'])}) | {c['work']['value']:+.1f}% | "
            f"{c['ops']['verdict']} | {verdict} | {code} |"
        )
        assert row in doc_text
