"""Class 1, data loss: no writer lands in a profile, on a file hlogap reads, or half-written."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.attack.harness import assert_clean, chip_file, logdir_copy, run, snapshot

# Where a user might point -o: (name, target from (logdir, host file, chip file, tmp, suffix of
# a new file: .json, or .svg for --plot, which refuses other suffixes before anything else)).
TARGETS: dict[str, Callable[[Path, Path, Path, Path, str], Path]] = {
    "the host file": lambda logdir, host, chip, tmp, sfx: host,
    "another host's file": lambda logdir, host, chip, tmp, sfx: host.with_name("host01.xplane.pb"),
    "a link to the host file": lambda logdir, host, chip, tmp, sfx: _link(tmp / f"r{sfx}", host),
    "a new .xplane.pb in the run": lambda logdir, host, chip, tmp, sfx: host.with_name(
        "x.xplane.pb"
    ),
    "the run directory": lambda logdir, host, chip, tmp, sfx: host.parent / f"report{sfx}",
    "the plugins tree": lambda logdir, host, chip, tmp, sfx: logdir / "plugins" / f"report{sfx}",
    "the chip file it reads": lambda logdir, host, chip, tmp, sfx: chip,
    "a link to the chip file": lambda logdir, host, chip, tmp, sfx: _link(tmp / f"c{sfx}", chip),
    "a FIFO": lambda logdir, host, chip, tmp, sfx: _fifo(tmp / f"out{sfx}"),
    "a directory": lambda logdir, host, chip, tmp, sfx: tmp,
}
WRITERS = {
    "audit -o": lambda target, logdir, chip: [
        "audit",
        str(logdir),
        "--chip",
        str(chip),
        "-o",
        str(target),
    ],
    "audit --plot": lambda target, logdir, chip: [
        "audit",
        str(logdir),
        "--chip",
        str(chip),
        "--plot",
        str(target),
    ],
    "calibrate -o": lambda target, logdir, chip: ["calibrate", "-o", str(target)],
}


def _link(link: Path, to: Path) -> Path:
    link.symlink_to(to)
    return link


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


CASES = [
    (writer, target)
    for writer in WRITERS
    for target in TARGETS
    # calibrate reads no profile and no chip: only the targets it must refuse on their own
    if writer != "calibrate -o"
    or target not in ("the chip file it reads", "a link to the chip file")
]


@pytest.mark.parametrize(("writer", "target"), CASES)
def test_no_writer_destroys_data(writer: str, target: str, tmp_path: Path) -> None:
    logdir = logdir_copy(tmp_path, hosts=2)
    host = next(logdir.rglob("host00.xplane.pb"))
    chip = chip_file(tmp_path)
    where = TARGETS[target](logdir, host, chip, tmp_path, ".svg" if "plot" in writer else ".json")
    before = snapshot(tmp_path)
    result = run(WRITERS[writer](where, logdir, chip), tmp_path, timeout=20)
    assert_clean(result, (2,))
    assert "refusing to write" in result.err or "--plot takes a .svg" in result.err
    assert snapshot(tmp_path) == before  # nothing written, nothing left half-written


def test_a_report_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    logdir = logdir_copy(tmp_path)
    chip = chip_file(tmp_path)
    out = tmp_path / "report.json"
    result = run(
        ["audit", str(logdir), "--chip", str(chip), "-o", str(out), "--format", "json"], tmp_path
    )
    assert_clean(result, (0,))
    assert out.read_text().startswith("{") and not list(tmp_path.glob(".hlogap-*"))
