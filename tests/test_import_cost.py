"""What a command loads: every `hlogap` run pays for the modules it imports before it does
anything, so a command loads what it uses and nothing more (issue 43: an audit's imports had
grown to twice e31f4c2's). Checked by the modules loaded, never by a clock."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT, write_cpu_chip

# The process runs `hlogap` as the console script does, then lists the modules it loaded.
RUN_AND_LIST = """
import json, sys
from hlogap.cli import main
listing, sys.argv = sys.argv[1], ["hlogap", *sys.argv[2:]]
try:
    main()
finally:
    with open(listing, "w") as f:
        json.dump(sorted(sys.modules), f)
"""

# What only other commands, formats or sources need: comparison and gate (diff, check), the
# other renderers and what they draw with, remote storage, a cluster.
NOT_FOR_AN_AUDIT_AS_JSON = [
    "asyncio",
    "xml.etree",
    "csv",
    "hlogap.report.compare",
    "hlogap.report.gate",
    "hlogap.cli.comparison",  # what check and diff read, and check's options and verdict
    "hlogap.cli.checking",
    "hlogap.render.table",
    "hlogap.render.md",
    "hlogap.render.html",
    "hlogap.render.csv",
    "hlogap.render.junit",
    "hlogap.render.trace_events",
    "hlogap.render.sections",
    "hlogap.rows.tracks",
    "dask",
    "fsspec",
    "rich",
    "hlogap.trace.nsys",  # an nsys-jax archive's reader
]
# `--help` lists the formats of every renderer without loading what any of them renders.
NOT_FOR_HELP = ["hlogap.report.model", "hlogap.pipeline", "numpy", "typer.rich_utils"]


def _loaded(tmp_path: Path, *args: str) -> set[str]:
    listing = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST, str(listing), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(listing.read_text()))


def _found(loaded: set[str], names: list[str]) -> list[str]:
    """The names loaded, a package counting where any module of it is."""
    return [n for n in names if any(m == n or m.startswith(f"{n}.") for m in loaded)]


def test_an_audit_as_json_loads_only_what_it_uses(tmp_path: Path) -> None:
    chip = str(write_cpu_chip(tmp_path))
    loaded = _loaded(tmp_path, "audit", str(FIXTURES / "mlp"), "--chip", chip, "--format", "json")
    assert "hlogap.render.json" in loaded  # the check sees the audit's own modules
    assert _found(loaded, NOT_FOR_AN_AUDIT_AS_JSON) == []


def test_help_lists_the_formats_without_the_report(tmp_path: Path) -> None:
    loaded = _loaded(tmp_path, "audit", "--help")
    assert "hlogap.render.table" in loaded  # every renderer, for --format's list
    assert _found(loaded, NOT_FOR_HELP) == []


def test_the_collector_is_off_while_modules_load_and_as_it_was_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`main` turns the cyclic garbage collector off while the command's modules load and on,
    what exists frozen, once they are (its passes over every object loaded cost an audit
    ~20 ms); after `main`, in a process that goes on (a test's), nothing stays frozen or off."""
    import gc

    from hlogap.cli import main, process
    from hlogap.cli.commands import audit

    seen: list[tuple[bool, int]] = []
    real = process.collect_from_here

    def watched() -> None:
        seen.append((gc.isenabled(), gc.get_freeze_count()))
        real()
        seen.append((gc.isenabled(), gc.get_freeze_count()))

    monkeypatch.setattr(audit, "collect_from_here", watched)
    chip = str(write_cpu_chip(tmp_path))
    monkeypatch.setattr(sys, "argv", ["hlogap", "audit", str(FIXTURES / "mlp"), "--chip", chip])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 0
    assert seen[0] == (False, 0) and seen[1][0] and seen[1][1] > 0
    assert gc.isenabled() and gc.get_freeze_count() == 0


# The collector's frozen objects when the interpreter's exit begins (atexit runs first).
RUN_AND_SHOW_FROZEN = """
import atexit, gc, sys
from hlogap.cli import run
atexit.register(lambda: print(gc.get_freeze_count() > 0, gc.isenabled()))
sys.argv = ["hlogap", *sys.argv[1:]]
run()
"""


def test_the_command_exits_with_every_object_frozen(tmp_path: Path) -> None:
    """`run` (the `hlogap` command's process) freezes what the run made before the
    interpreter's teardown, whose collector passes over it all were ~40 ms of an audit; what
    `atexit` holds still runs."""
    chip = str(write_cpu_chip(tmp_path))
    args = ["audit", str(FIXTURES / "mlp"), "--chip", chip, "-o", str(tmp_path / "report.json")]
    done = subprocess.run(
        [sys.executable, "-c", RUN_AND_SHOW_FROZEN, *args, "--format", "json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]
    assert (tmp_path / "report.json").stat().st_size > 0
