"""docs/ci.md's figures are the tool's: the noise between `mlp` and `mlp_rerun` and the
`mlp_shifted` diff, recomputed here from the committed fixtures and looked up in the page, so
the page cannot go stale without a test failing."""

from __future__ import annotations

from pathlib import Path

from hlogap import audit
from hlogap.options import AuditOptions
from hlogap.report.compare import compare
from tests.conftest import FIXTURES, ROOT

CI_DOC = (ROOT / "docs" / "ci.md").read_text()


def test_the_noise_figures_are_the_tools(cpu_chip_file: Path) -> None:
    first, rerun = (
        audit(FIXTURES / p, AuditOptions(chip=str(cpu_chip_file))) for p in ("mlp", "mlp_rerun")
    )
    there, back = compare(first, rerun), compare(rerun, first)
    per_op = [r.measured_per_occ_delta_pct for r in there.rows]
    low, high = min(p for p in per_op if p is not None), max(p for p in per_op if p is not None)
    assert there.measured_delta_pct is not None and back.measured_delta_pct is not None
    said = (
        f"differ by {there.measured_delta_pct:+.1f}% in total\n"
        f"({back.measured_delta_pct:+.1f}% the other way) and by {low:+.1f}% to {high:+.1f}% per op"
    )
    assert said in CI_DOC


def test_the_shifted_diff_rows_are_the_tools(cpu_chip_file: Path) -> None:
    diff = compare(
        *(
            audit(FIXTURES / p, AuditOptions(chip=str(cpu_chip_file)))
            for p in ("mlp", "mlp_shifted")
        )
    )
    for row in diff.rows:
        pct = row.measured_per_occ_delta_pct
        match = "-" if row.pair.method == "appeared" else row.pair.method
        cells = f" {row.status:<8} │ {row.name:<28} │ {match:<16} │"
        line = next(line for line in CI_DOC.splitlines() if line.startswith(cells))
        assert (f" {pct:+.1f}% │" if pct is not None else "│      - │") in line
