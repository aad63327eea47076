"""Options that used to do nothing silently (issue 32, item 4): each now acts, or says why not."""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

import hlogap
from tests.conftest import FIXTURES
from tests.test_errors import run_cli

TRAIN = FIXTURES / "mlp_train"


def _csv(args: list[str], capsys: pytest.CaptureFixture[str]) -> list[dict[str, str]]:
    code, out, err = run_cli(["audit", str(TRAIN), "-f", "csv", "-n", "0", *args], capsys)
    assert code == 0, err
    return list(csv.DictReader(io.StringIO(out)))


def test_group_by_in_csv_writes_the_groups(
    cpu_chip_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _csv(["--chip", str(cpu_chip_file), "--group-by", "category"], capsys)
    _, out, _ = run_cli(
        ["audit", str(TRAIN), "--chip", str(cpu_chip_file), "-f", "json", "--group-by", "category"],
        capsys,
    )
    groups = json.loads(out)["groups"]
    assert [r["category"] for r in rows] == [g["name"] for g in groups]
    assert [float(r["measured_us"]) for r in rows] == pytest.approx(
        [g["measured_us"] for g in groups]
    )


def test_steps_in_csv_and_markdown(cpu_chip_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _csv(["--chip", str(cpu_chip_file), "--steps"], capsys)
    code, out, _ = run_cli(
        ["audit", str(TRAIN), "--chip", str(cpu_chip_file), "-f", "json"], capsys
    )
    steps = json.loads(out)["steps"]
    assert len(steps) > 1
    assert [int(r["step"]) for r in rows] == [s["step"] for s in steps]
    assert [float(r["wall_us"]) for r in rows] == pytest.approx([s["wall_us"] for s in steps])
    code, md, err = run_cli(
        ["audit", str(TRAIN), "--chip", str(cpu_chip_file), "-f", "md", "--steps"], capsys
    )
    assert code == 0, err
    assert "| step | start | wall |" in md and md.count("\n| 2 | ") >= 1


def test_a_module_that_matches_nothing_is_exit_3(
    cpu_chip_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chip = ["--chip", str(cpu_chip_file)]
    code, out, err = run_cli(["audit", str(TRAIN), *chip, "--module", "nomatch"], capsys)
    assert code == 3 and out == ""
    assert "no op matches --module 'nomatch' (modules: jit_mlp_train)" in err
    baseline = tmp_path / "base.json"
    code, out, _ = run_cli(["audit", str(TRAIN), *chip, "-f", "json"], capsys)
    baseline.write_text(out)
    # In check the same typo names the option, not the baseline.
    code, _, err = run_cli(
        ["check", str(TRAIN), "--baseline", str(baseline), *chip, "--module", "nomatch"], capsys
    )
    assert code == 3 and "no op matches --module 'nomatch'" in err and "baseline" not in err


def test_plot_without_matplotlib_fails_before_the_audit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as where it is not installed
    # The profile does not exist: the audit would fail with 3; the plot check comes first (2).
    missing = str(tmp_path / "no-such-profile")
    code, _, err = run_cli(["audit", missing, "--plot", str(tmp_path / "c.svg")], capsys)
    assert code == 2 and "--plot needs matplotlib" in err
    code, _, err = run_cli(["audit", missing, "--plot", str(tmp_path / "c.html")], capsys)
    assert code == 2 and "the HTML report (-o report.html) draws the same chart" in err


def test_output_says_where_it_went_on_a_terminal(cpu_chip_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.md"
    args = ["audit", str(TRAIN), "--chip", str(cpu_chip_file), "-o", str(out)]
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "hlogap", *args],
            stderr=follower,
            stdout=subprocess.PIPE,
            timeout=120,
        )
        os.close(follower)
        said = os.read(leader, 4096).decode()
    finally:
        os.close(leader)
    assert done.returncode == 0 and done.stdout == b""
    assert f"hlogap: wrote {out}" in said
    # Off a terminal, nothing but errors on stderr.
    quiet = subprocess.run(
        [sys.executable, "-m", "hlogap", *args], capture_output=True, text=True, timeout=120
    )
    assert quiet.returncode == 0 and quiet.stderr.count("wrote") == 0


def test_demo_writes_a_file(
    cpu_chip_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "demo.html"
    code, out, err = run_cli(["demo", "--chip", str(cpu_chip_file), "-o", str(page)], capsys)
    assert code == 0, err
    assert out == "" and page.read_text().startswith("<!doctype html>")


def test_demo_teaches_on_a_sample_with_flaws(
    cpu_chip_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(["demo", "--chip", str(cpu_chip_file), "-n", "3"], capsys)
    assert code == 0, err
    how, top, nxt = out.rstrip("\n").splitlines()[-3:]
    assert how.startswith("how to read it: one row per op") and "gap = measured - bound" in how
    code, report, _ = run_cli(["demo", "--chip", str(cpu_chip_file), "-f", "json"], capsys)
    action = json.loads(report)["actions"][0]
    assert top.startswith(f"top action: {action['change']}")
    assert nxt.startswith("next: hlogap audit YOUR_LOGDIR")
    # The bundled profile is the flaws fixture itself: the README's showcase is reproducible.
    assert "flaws" in json.loads(report)["source"]["path"]
    run_file = Path("plugins/profile/2026_01_01_00_00_00/vm.xplane.pb")
    bundled = Path(hlogap.__file__).parent / "data" / "flaws" / run_file
    assert bundled.read_bytes() == (FIXTURES / "flaws" / run_file).read_bytes()
    code, out, _ = run_cli(["demo", "--chip", str(cpu_chip_file), "--sample", "mlp"], capsys)
    assert code == 0 and "jit_mlp" in out
    code, _, err = run_cli(["demo", "--sample", "nope"], capsys)
    assert code == 2 and "unknown sample 'nope' (use one of: flaws, mlp)" in err
