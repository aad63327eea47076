"""Advice that does not move with noise (issue 41): a calibrated chip file records how much its
rounds disagreed per peak (`[calibration.flops_spread_by_type]`, `hlogap calibrate`); the dtype
cause, which hinges on the bf16 peak over the f32 one, keeps its finding in two calibrations of
one machine whose ratios fall on either side of its threshold, and says the deciding peaks are
within their spread; without a spread the same two files flip it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hlogap import audit
from hlogap.bounds.hints import NARROWER_WORTH
from hlogap.chips import load_chip
from hlogap.errors import UsageError
from hlogap.options import AuditOptions
from hlogap.report.model import AuditReport
from tests.conftest import FIXTURES

PROGRAM = "mlp"  # f32 dots


def _chip(
    tmp_path: Path, name: str, f32: float, bf16: float, spread: float | None, chip: str = ""
) -> Path:
    calibration = (
        f"[calibration]\nflops_spread = {spread}\nmemory_spread = 0.01\n"
        f"[calibration.flops_spread_by_type]\nf32 = {spread}\nbf16 = {spread}\n"
        if spread is not None
        else ""
    )
    path = tmp_path / f"{name}.toml"
    path.write_text(
        f'name = "{chip or name}"\n[peak_flops]\nf32 = {f32}\nbf16 = {bf16}\n'
        f"[memory]\nhbm_bw = 2.0e10\n{calibration}"
    )
    return path


def _dtype(report: AuditReport) -> list[str]:
    return [a.evidence for a in report.actions or [] if a.cause == "dtype"]


def test_the_spread_is_read(tmp_path: Path) -> None:
    chip = load_chip(str(_chip(tmp_path, "c", 1e11, 1.6e11, 0.1)))
    assert chip.flops_spread == {"f32": 0.1, "bf16": 0.1}
    low, high = chip.peak_band("bf16")
    assert low == pytest.approx(1.44e11) and high == pytest.approx(1.6e11 / 0.9)
    assert load_chip(str(_chip(tmp_path, "d", 1e11, 1.6e11, None))).flops_spread == {}
    bad = _chip(tmp_path, "e", 1e11, 1.6e11, None)
    bad.write_text(bad.read_text() + "[calibration]\nflops_spread = 1.5\n")
    with pytest.raises(UsageError, match="spread"):
        load_chip(str(bad))


def test_dtype_advice_holds_within_the_spread(tmp_path: Path) -> None:
    # Two calibrations of one machine: the bf16 peak 1.6x, then 1.4x the f32 one (the
    # threshold 1.5x between them), each round 12% apart.
    ratios = (1.6, 1.4)
    assert min(ratios) < NARROWER_WORTH < max(ratios)
    quiet = {}
    for k, ratio in enumerate(ratios):
        for spread in (None, 0.12):
            chip = _chip(tmp_path, f"run{k}-{spread}", 1e11, ratio * 1e11, spread)
            quiet[(ratio, spread)] = _dtype(audit(FIXTURES / PROGRAM, AuditOptions(chip=str(chip))))
    # Without a spread the advice flips between the two calibrations.
    assert quiet[(1.6, None)] and not quiet[(1.4, None)]
    assert not any("spread" in e for e in quiet[(1.6, None)])
    # With it, both keep it and say why it is uncertain.
    for ratio in ratios:
        found = quiet[(ratio, 0.12)]
        assert found and len(found) == len(quiet[(1.6, None)])
        assert all(
            "within the calibration's spread (f32 12%, bf16 12% between rounds)" in e for e in found
        )
        assert all("on both sides of the 1.5x this advice needs" in e for e in found)
    # Far from the threshold the spread changes nothing.
    far = _chip(tmp_path, "far", 1e11, 4e11, 0.12)
    found = _dtype(audit(FIXTURES / PROGRAM, AuditOptions(chip=str(far))))
    assert found and not any("spread" in e for e in found)
    near_one = _chip(tmp_path, "none", 1e11, 1.1e11, 0.12)  # 1.1 / 0.88**2 = 1.42: never 1.5
    assert not _dtype(audit(FIXTURES / PROGRAM, AuditOptions(chip=str(near_one))))


def test_below_the_ridge_holds_within_the_spread(tmp_path: Path) -> None:
    """flaws' 8-row matmul (intensity 3.9 FLOP/B): under a 5 FLOP/B ridge (f32 1e11 over
    20 GB/s) it is below the ridge; a calibration recording f32 at 0.8e11 (ridge 4) puts it at
    the ridge, and the finding goes. With the rounds 20% apart both keep it: the second says
    its intensity is within the ridge's band and asks for the batch past the band's top."""

    def found(f32: float, spread: float | None) -> list[str]:
        chip = _chip(tmp_path, f"r{f32:g}-{spread}", f32, 1e11, spread, chip="testcpu")
        report = audit(FIXTURES / "flaws", AuditOptions(chip=str(chip)))
        return [a.evidence for a in report.actions or [] if a.cause == "below the ridge"]

    assert found(1e11, None) and not found(0.8e11, None)
    steady, near = found(1e11, 0.2), found(0.8e11, 0.2)
    assert steady == found(1e11, None)  # 3.9 under the band [4, 6.25]: nothing to say
    (evidence,) = near
    assert "intensity 3.9 FLOP/B is near testcpu" in evidence
    assert "the ridge is 3.2 to 5 FLOP/B, on both sides of its intensity" in evidence
    assert "the ridge needs about 10 (1.3x the batch)" in evidence  # past the band's top, 5
