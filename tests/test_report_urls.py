"""A saved report given as a URL (`check --baseline URL`, `diff URL ...`) is read as a report
through fsspec, as a local one is: by its `.json` name, or by content that starts with `{`.

The oracle is the same report read from local disk: every op and total the same, and a diff of
the two sides changing nothing. A profile given as a URL is still audited.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hlogap import audit
from hlogap.options import AuditOptions
from hlogap.pipeline import is_json_report, load_report
from tests.conftest import FIXTURES, run_cli

MLP = FIXTURES / "mlp"


@pytest.fixture
def saved(cpu_chip_file: Path, tmp_path: Path) -> Path:
    path = tmp_path / "base.json"
    path.write_text(json.dumps(audit(MLP, AuditOptions(chip=str(cpu_chip_file))).to_dict(0)))
    return path


def test_a_report_url_is_read_as_the_local_report(saved: Path, tmp_path: Path) -> None:
    unnamed = tmp_path / "baseline.txt"  # no `.json`: known by its first byte
    unnamed.write_bytes(saved.read_bytes())
    local = load_report(saved, "baseline").to_dict(0)
    for url in (f"file://{saved}", f"file://{unnamed}"):
        assert is_json_report(url)
        remote = load_report(url, "baseline")
        assert remote.kind == "report" and remote.path == url
        loaded = remote.to_dict(0)
        assert loaded["ops"] == local["ops"] and loaded["summary"] == local["summary"]
    profile = next(MLP.rglob("*.xplane.pb"))
    assert not is_json_report(f"file://{profile}") and not is_json_report(f"file://{MLP}")


def test_check_and_diff_take_a_report_url(saved: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"file://{saved}"
    measured = json.loads(saved.read_text())["summary"]["measured_us"]
    code, out, err = run_cli(["check", str(saved), "--baseline", url, "-f", "json"], capsys)
    assert code == 0, err
    verdict = json.loads(out)
    assert verdict["verdict"] == "pass" and verdict["diff"]["base"]["path"] == url
    code, out, err = run_cli(["diff", url, str(saved), "-f", "json"], capsys)
    assert code == 0, err
    diff = json.loads(out)
    assert diff["base"]["kind"] == "report" and diff["base"]["path"] == url
    assert diff["base"]["measured_us"] == pytest.approx(measured)
    assert diff["summary"]["measured_delta_us"] == 0
    assert all(row["status"] == "unchanged" for row in diff["ops"])


def test_a_missing_report_url_is_one_line(saved: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = f"file://{saved.parent}/gone.json"
    code, out, err = run_cli(["check", str(saved), "--baseline", missing], capsys)
    assert (code, out) == (3, "")
    assert err == f"hlogap: error: not found: {missing} (no such bucket or path)\n"
