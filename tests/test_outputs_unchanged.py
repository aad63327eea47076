"""Every output format of the committed fixtures, byte for byte against the outputs kept in
tests/golden/ (issue 42: a refactor of the stages, the report or the renderers changes no
output unless a fix says so). After a change that means to alter an output, rewrite them with
`HLOGAP_UPDATE_GOLDEN=1 pytest tests/test_outputs_unchanged.py` and read the diff."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT, run_cli

GOLDEN = ROOT / "tests" / "golden"
UPDATE = os.environ.get("HLOGAP_UPDATE_GOLDEN") == "1"
# The AMX-like CPU chip (bf16 4x f32) gives the dtype actions beside the others.
CHIP = (
    'name = "testcpu-amx"\n[peak_flops]\nf32 = 1.0e11\nbf16 = 4.0e11\n[memory]\nhbm_bw = 2.0e10\n'
)
AUDITED = ("mlp_train", "documented_step", "documented_sharded", "documented_attention", "scan")
FORMATS = ("table", "md", "csv", "json")


@pytest.fixture(scope="module")
def chip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("chip") / "testcpu-amx.toml"
    path.write_text(CHIP)
    return path


def _same(name: str, out: str, places: dict[Path, str]) -> None:
    for place, word in places.items():
        out = out.replace(str(place), word)
    golden = GOLDEN / name
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        golden.write_text(out)
    assert golden.is_file(), f"{golden} absent: HLOGAP_UPDATE_GOLDEN=1 writes it"
    assert out == golden.read_text(), f"{name} differs from {golden}"


def _run(args: list[str], capsys: pytest.CaptureFixture[str], code: int = 0) -> str:
    got, out, err = run_cli(args, capsys)
    assert got == code, err
    return out


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("fixture", AUDITED)
def test_audit_output_unchanged(
    fixture: str, fmt: str, chip: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = FIXTURES / fixture
    out = _run(["audit", str(path), "--chip", str(chip), "-f", fmt, "--steps", "--wide"], capsys)
    _same(f"audit-{fixture}.{fmt}", out, {path: "FIXTURE", chip: "CHIP"})


def test_audit_html_unchanged(chip: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / "documented_sharded"
    out = _run(["audit", str(path), "--chip", str(chip), "-f", "html"], capsys)
    _same("audit-documented_sharded.html", out, {path: "FIXTURE", chip: "CHIP"})


@pytest.mark.parametrize("fmt", ("table", "json"))
def test_memory_output_unchanged(fmt: str, chip: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / "mem_remat"
    out = _run(["memory", str(path), "--chip", str(chip), "-f", fmt], capsys)
    _same(f"memory-mem_remat.{fmt}", out, {path: "FIXTURE", chip: "CHIP"})


@pytest.mark.parametrize("fmt", ("table", "md", "json"))
def test_diff_output_unchanged(fmt: str, chip: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, new = FIXTURES / "documented_loop", FIXTURES / "documented_vmap"
    out = _run(["diff", str(base), str(new), "--chip", str(chip), "-f", fmt], capsys)
    _same(f"diff-loop-vmap.{fmt}", out, {base: "BASE", new: "NEW", chip: "CHIP"})


@pytest.mark.parametrize("fmt", ("table", "json", "junit"))
def test_check_output_unchanged(
    fmt: str, chip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, new = FIXTURES / "gate_run1", FIXTURES / "gate_run2"
    baseline = tmp_path / "baseline.json"
    _run(["audit", str(base), "--chip", str(chip), "-f", "json", "-o", str(baseline)], capsys)
    got, out, err = run_cli(
        ["check", str(new), "--baseline", str(baseline), "--chip", str(chip), "-f", fmt], capsys
    )
    assert got in (0, 3), err
    _same(f"check-gate.{fmt}", out, {baseline: "BASELINE", new: "NEW", chip: "CHIP"})
