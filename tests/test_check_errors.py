"""`check` without a verdict (exit 3): the one line on stderr, nothing on stdout (JSON asked for
or not), and the same line in GitHub Actions' step summary when GITHUB_STEP_SUMMARY is set; a
saved report checked is called a report in the line, a profile a profile."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from hlogap import audit
from hlogap.options import AuditOptions
from tests.conftest import FIXTURES, run_cli

MLP = FIXTURES / "mlp"


@pytest.fixture
def mlp_report(cpu_chip_file: Path) -> dict[str, Any]:
    return audit(MLP, AuditOptions(chip=str(cpu_chip_file))).to_dict(0)


def _save(tmp_path: Path, report: dict[str, Any], name: str) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(report))
    return path


@pytest.mark.parametrize("fmt", [[], ["--format", "json"]])
def test_no_verdict_is_one_line_on_stderr_and_in_the_step_summary(
    mlp_report: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    fmt: list[str],
) -> None:
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    other = copy.deepcopy(mlp_report)
    for op in other["ops"]:
        op["module"] = "jit_other"
    baseline = _save(tmp_path, mlp_report, "base.json")
    cases = [  # nothing in common; a baseline that is not there
        [str(_save(tmp_path, other, "other.json")), "--baseline", str(baseline)],
        [str(baseline), "--baseline", str(tmp_path / "gone.json")],
    ]
    for args in cases:
        code, out, err = run_cli(["check", *args, *fmt], capsys)
        assert (code, out) == (3, "")
        (line,) = err.splitlines()
        assert line.startswith("hlogap: error: ")
        assert summary.read_text().endswith(f"\n\n{line.removeprefix('hlogap: ')}\n\n")
        summary.unlink()


def test_a_checked_report_is_called_a_report(
    mlp_report: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every op's bound 4x its measured time: impossible times, refused, naming what PATH is."""
    fast = copy.deepcopy(mlp_report)
    for op in fast["ops"]:
        op["bound_us"] = 4 * op["measured_us"]
        op["gap_us"] = op["measured_us"] - op["bound_us"]
    path = _save(tmp_path, fast, "fast.json")
    baseline = _save(tmp_path, mlp_report, "base.json")
    code, _, err = run_cli(["check", str(path), "--baseline", str(baseline)], capsys)
    assert code == 3
    assert err.startswith(f"hlogap: error: report {path} is 4x faster than its own roofline")
