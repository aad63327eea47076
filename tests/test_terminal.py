"""What a person sees in a real terminal: captures of tmux panes at 80 and 200 columns
(`scripts/capture_terminal.sh` writes tests/terminal/<command>-<columns>.txt)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CAPTURES = Path(__file__).parent / "terminal"


@pytest.mark.parametrize("command", ["audit", "diff", "check"])
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
    if columns == 80 and command != "check":
        assert any(re.search(r"left out to fit 80 columns", line) for line in lines)
