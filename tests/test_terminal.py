"""What a person sees in a real terminal: captures of tmux panes at 80 and 200 columns
(`scripts/capture_terminal.sh` writes tests/terminal/<command>-<columns>.txt)."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest

from hlogap.options import AuditOptions
from tests.conftest import FIXTURES

CAPTURES = Path(__file__).parent / "terminal"


@pytest.mark.parametrize("command", ["audit", "steps", "diff", "check", "chips", "groups"])
@pytest.mark.parametrize("columns", [80, 200])
def test_every_op_is_one_line_that_fits(command: str, columns: int) -> None:
    lines = (CAPTURES / f"{command}-{columns}.txt").read_text().splitlines()
    assert lines, "empty capture"
    assert all(len(line) <= columns for line in lines)
    rows = [line for line in lines if "│" in line]
    # A row that did not fit would continue on lines whose first cells are empty.
    assert all(line.split("│")[0].strip() for line in rows), "\n".join(rows)
    assert not any(line != line.rstrip() for line in lines)
    if command != "check":  # the check passes: no table of regressed ops
        assert rows
    if columns == 80 and command not in ("check", "groups"):
        assert any(re.search(r"left out to fit 80 columns", line) for line in lines)


@pytest.mark.parametrize("columns", [80, 200])
def test_reasons_are_whole_and_names_too_where_there_is_room(columns: int) -> None:
    lines = (CAPTURES / f"audit-{columns}.txt").read_text().splitlines()
    table = lines[next(i for i, line in enumerate(lines) if line.startswith("━")) + 1 :]
    rows = [line for line in table if "│" in line]
    # No reason cut short: one that does not fit goes on its own lines, between words.
    assert not any(line.rstrip().endswith("…") for line in table)
    assert "achieves 37.2 GFLOP/s, 37% of the f32 peak" in "\n".join(table)
    # Op names whole: the longest of the capture fits at 80 columns, so at 200 too.
    names = [line.split("│")[1].strip() for line in rows]
    assert "multiply_multiply_fusion" in names and not any("…" in n for n in names)


@pytest.mark.parametrize("columns", [80, 200])
def test_steps_headers_are_whole_words(columns: int) -> None:
    from hlogap.render.text import STEP_COLUMNS

    lines = (CAPTURES / f"steps-{columns}.txt").read_text().splitlines()
    header = next(line for line in lines if line.lstrip().startswith("step ┃"))
    cells = [c.strip() for c in header.split("┃")]
    assert set(cells) <= set(STEP_COLUMNS) and "wall" in cells and "at bound" in cells


def test_groups_and_chips_fit_80_columns() -> None:
    groups = (CAPTURES / "groups-80.txt").read_text()
    # A source path is shortened from the left: its file:line stays.
    assert re.search(r"│ …\S*make_fixtures\.py:177 │", groups)
    chips = (CAPTURES / "chips-80.txt").read_text().splitlines()
    assert all(len(line) <= 80 for line in chips)
    assert any(line.startswith(" h100-sxm  │") for line in chips)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_shows_on_a_terminal_after_a_second(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cpu_chip_file: Path
) -> None:
    import shutil

    from hlogap.cli.output import Progress
    from hlogap.pipeline import audit

    source = next((FIXTURES / "mlp").rglob("*.xplane.pb"))
    run_dir = tmp_path / "tb" / "plugins" / "profile" / "run1"
    run_dir.mkdir(parents=True)
    for h in range(3):
        shutil.copy(source, run_dir / f"h{h}.xplane.pb")
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(Progress, "DELAY_S", 0.0)  # as if every step took a second
    with Progress() as progress:
        assert progress is not None
        audit(tmp_path / "tb", AuditOptions(chip=str(cpu_chip_file), jobs=1), progress=progress)
    shown = terminal.getvalue()
    assert "hlogap: reading 3 host file(s)" in shown
    assert "read host 3 of 3 (h2)" in shown and "costing" in shown
    assert shown.endswith("\r\x1b[K")  # the line is cleared before the output


def test_no_progress_off_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from hlogap.cli.output import Progress

    monkeypatch.setattr(sys, "stderr", io.StringIO())
    with Progress() as progress:
        assert progress is None
