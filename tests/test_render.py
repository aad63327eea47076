"""The renderer registry: formats by name and by output extension, one module per format."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from hlogap import audit
from hlogap.chips import builtin_chips
from hlogap.errors import UsageError
from hlogap.options import AuditOptions
from hlogap.render.base import ChipList, RenderOptions, choose_format, formats, render, renderers
from tests.conftest import FIXTURES, SHARED, browse, headless_chromium
from tests.test_errors import run_cli

MLP = FIXTURES / "mlp"
RENDER_DIR = Path(__file__).resolve().parents[1] / "hlogap" / "render"


def test_every_format_module_registers_itself() -> None:
    # Adding a format is one module: the registry finds it without any list to update.
    modules = {p.stem for p in RENDER_DIR.glob("*.py")} - {
        "__init__",
        "base",
        "text",
        "plot",
        "cells",
        "sparkline",
        "sections",
    }
    # The trace-event module's format is named after the viewer users know it by.
    named = {"perfetto" if m == "trace_events" else m for m in modules}
    assert {r.name for r in renderers()} == named
    assert set(formats("audit")) == {"table", "json", "md", "csv", "html", "perfetto"}
    assert set(formats("chips")) == {"table", "json"}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("r.json", "json"),
        ("r.CSV", "csv"),
        ("r.md", "md"),
        ("r.html", "html"),
        ("r.out", "table"),
        ("trace.json.gz", "perfetto"),
        ("run.trace.json", "perfetto"),
    ],
)
def test_output_extension_picks_the_format(name: str, expected: str) -> None:
    assert choose_format("audit", None, Path(name)) == expected


def test_format_given_wins_and_an_unsupported_one_is_a_usage_error() -> None:
    assert choose_format("audit", "json", Path("r.html")) == "json"
    with pytest.raises(UsageError, match="use one of: json, md, table"):
        choose_format("diff", "html", None)
    # An extension that names a format this document cannot take falls back to the table.
    assert choose_format("chips", None, Path("chips.csv")) == "table"


def test_each_format_holds_the_same_ops(cpu_chip_file: Path) -> None:
    report = audit(MLP, AuditOptions(chip=str(cpu_chip_file)))
    names = [r.name for r in report.ops]
    options = RenderOptions(top=0)
    doc = json.loads(render(report, "json", options))
    assert [o["name"] for o in doc["ops"]] == names
    rows = list(csv.DictReader(io.StringIO(render(report, "csv", options))))
    assert [r["name"] for r in rows] == names
    assert float(rows[0]["measured_us"]) == pytest.approx(report.ops[0].measured_us)

    # The HTML page carries the report as JSON, which its script draws (the browser test below
    # checks what it draws).
    page = render(report, "html", options)
    found = re.search(r'<script type="application/json" id="report">(.*?)</script>', page, re.S)
    assert found is not None
    assert [o["name"] for o in json.loads(found.group(1))["ops"]] == names
    md = render(report, "md", options)
    assert re.findall(r"^\| \d+ \| `([^`]+)`", md, re.M) == names


def test_cli_output_extension(
    cpu_chip_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ops.csv"
    code, stdout, _ = run_cli(
        ["audit", str(MLP), "--chip", str(cpu_chip_file), "-o", str(out)], capsys
    )
    assert (code, stdout) == (0, "")
    assert out.read_text().startswith("rank,module,program_id,name,")


def test_json_is_the_report_with_non_finite_numbers_as_null(
    cpu_chip_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every value as the report holds it (numpy scalars as numbers, not strings), and NaN or
    infinity, which JSON lacks, as null: strict parsers read the output."""
    import math

    import numpy as np

    report = audit(MLP, AuditOptions(chip=str(cpu_chip_file)))
    data = report.to_dict(0)
    data["summary"]["probe"] = [math.nan, math.inf, np.float64(1.5), np.int64(7), -0.0, 1e-05]
    monkeypatch.setattr(
        type(report), "to_dict", lambda self, top, plain=True, with_steps=True: data
    )
    text = render(report, "json", RenderOptions(top=0))
    strict = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))
    assert strict["summary"]["probe"] == [None, None, 1.5, 7, -0.0, 1e-05]
    data["summary"]["probe"] = None
    strict["summary"]["probe"] = None
    assert strict == json.loads(json.dumps(data, default=str))


def test_chips_as_json_lists_every_chip() -> None:
    doc = json.loads(render(ChipList(builtin_chips()), "json", RenderOptions()))
    assert doc["schema"] == "hlogap.chips/1"
    assert len(doc["chips"]) == len(builtin_chips())


def test_tables_have_no_trailing_spaces(cpu_chip_file: Path) -> None:
    report = audit(MLP, AuditOptions(chip=str(cpu_chip_file)))
    for text in (
        render(report, "table", RenderOptions(top=0, steps=True)),
        render(ChipList(builtin_chips()), "table", RenderOptions()),
    ):
        assert text.endswith("\n")
        assert not [line for line in text.splitlines() if line != line.rstrip()]


@pytest.mark.parametrize("width", [80, 100, 200])
def test_table_fits_the_terminal_one_op_a_line(width: int) -> None:
    from hlogap.render.table import middle

    amd = SHARED / "amd-gpu" / "mi355x_te_attention.xplane.pb"
    if not amd.is_file():
        pytest.skip("AMD fixture absent")
    report = audit(amd)
    text = render(report, "table", RenderOptions(top=0, width=width))
    table = [line for line in text.splitlines() if "│" in line or "┃" in line or "━" in line]
    assert table and max(len(line) for line in table) <= width
    rows = [line for line in table if "│" in line]
    assert len(rows) == len(report.ops)  # every op one line
    for row, op in zip(rows, report.ops, strict=True):
        name = row.split("│")[1].strip()
        assert name == op.name or (name == middle(op.name, len(name)) and "…" in name)
    if width >= 200:
        assert "left out" not in text and "bound by" in text


def test_middle_keeps_both_ends() -> None:
    from hlogap.render.table import middle

    assert middle("copy_bitcast_fusion.14", 12) == "copy_…ion.14"
    assert middle("short", 12) == "short"


def test_diff_and_check_follow_the_terminal_width(cpu_chip_file: Path) -> None:
    from hlogap.report.compare import compare
    from hlogap.report.gate import Thresholds, run_check

    report = audit(MLP, AuditOptions(chip=str(cpu_chip_file)))
    diff = compare(report, report)
    for document in (diff, run_check(diff, Thresholds())):
        for width in (90, 160):
            text = render(document, "table", RenderOptions(width=width))
            table = [line for line in text.splitlines() if "│" in line or "━" in line]
            assert max((len(line) for line in table), default=0) <= width


@pytest.mark.parametrize("command", ["audit", "demo", "diff", "check", "chips", "bound"])
def test_help_lists_exactly_the_formats_a_command_renders(command: str) -> None:
    import re

    from typer.testing import CliRunner

    from hlogap.cli import app
    from hlogap.render.base import formats

    text = " ".join(CliRunner().invoke(app, [command, "--help"]).output.split())
    found = re.search(r"Output format: ([a-z, ]+);", text)
    assert found, text
    listed = {name.strip() for name in found.group(1).split(",")}
    assert listed == set(formats("audit" if command == "demo" else command))
    assert "Examples:" in text


def test_html_report_runs_in_a_headless_browser(tmp_path: Path, cpu_chip_file: Path) -> None:
    # A real browser loads the page from disk (no network): the script runs to its end, logs no
    # error, builds one table row per op, the chart and the scope table; a screenshot is taken.
    import subprocess

    browser = headless_chromium()
    from hlogap import audit
    from hlogap.render.base import RenderOptions, render

    report = audit(FIXTURES / "mlp_train", AuditOptions(chip=str(cpu_chip_file)))
    page = tmp_path / "report.html"
    page.write_text(render(report, "html", RenderOptions(top=0)))
    dom = browse(page, "--enable-logging=stderr")
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console
    assert '<body data-ready="1">' in dom.stdout
    assert dom.stdout.count('<tr class="op"') == len(report.ops)
    assert "<svg" in dom.stdout and dom.stdout.count("<circle") > 0
    assert "By scope" in dom.stdout and "jit(mlp_train)" in dom.stdout
    shot = tmp_path / "report.png"
    subprocess.run(
        [*browser, "--window-size=1280,1600", f"--screenshot={shot}", page.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


MARKUP_NAMES = ("fusion[bold]", "jit(train_step)/reduce_sum[axes=(0, 1, 2)]", "copy[/]")


@pytest.mark.parametrize("width", [None, 200])
def test_table_cells_are_literal_text(cpu_chip_file: Path, width: int | None) -> None:
    # Rich reads `[...]` as markup: `reduce_sum[axes=(0, 1, 2)]` lost its brackets, `[bold]`
    # vanished and `[/]` raised. Every table cell is the text itself.
    import copy

    from msgspec.structs import replace

    from hlogap.render.base import MemoryView
    from hlogap.report.compare import compare
    from hlogap.report.gate import Thresholds, run_check

    report = audit(MLP, AuditOptions(chip=str(cpu_chip_file), group_by="scope"))
    for op, name in zip(report.ops, MARKUP_NAMES, strict=False):
        op.name = name
    report.groups = [replace(g, name=n) for g, n in zip(report.groups, MARKUP_NAMES, strict=False)]
    assert report.memory is not None
    report.memory = replace(
        report.memory,
        modules=tuple(
            replace(m, at_peak=tuple(replace(b, instruction=MARKUP_NAMES[0]) for b in m.at_peak))
            for m in report.memory.modules
        ),
    )
    options = RenderOptions(top=0, width=width)
    grouped = render(report, "table", options)
    ops = copy.copy(report)
    ops.group_by = None
    slower = copy.deepcopy(ops)
    for op in slower.ops[: len(MARKUP_NAMES)]:  # slower than the rest: each regressed
        op.measured_us *= 3
        op.median_us = None  # the check reads the mean
    diff = compare(ops, slower)
    chips = ChipList([replace(builtin_chips()[0], display=MARKUP_NAMES[2])])
    texts = {
        "groups": grouped,
        "ops": render(ops, "table", options),
        "diff": render(diff, "table", options),
        "check": render(run_check(diff, Thresholds()), "table", options),
        "memory": render(MemoryView(report), "table", options),
    }
    for kind, text in texts.items():
        for name in MARKUP_NAMES[: 1 if kind == "memory" else None]:
            assert name in text, (kind, name)
    assert MARKUP_NAMES[2] in render(chips, "table", options)


def test_markdown_has_the_actions_its_rows_name(cpu_chip_file: Path) -> None:
    # The op rows' hints say "action 1: exposed collective"; the Markdown listed no actions.
    report = audit(FIXTURES / "sharded_train", AuditOptions(chip=str(cpu_chip_file)))
    assert report.actions and any("(action 1: " in h for r in report.ops for h in r.hints)
    md = render(report, "md", RenderOptions(top=0))
    section = md[md.index("### What to change") :]
    table = render(report, "table", RenderOptions(top=0))
    text = table[table.index("what to change, ") :].splitlines()
    assert len(report.actions) > 5
    for rank, a in enumerate(report.actions, 1):
        line = text[1 + 3 * (rank - 1)]  # " 1. saves 477.9 us (148.9 us a step: ...): cause: ..."
        saves = line[len(f" {rank}. ") : line.index(f": {a.cause}: ")]
        assert f"\n{rank}. **{saves}**: {a.cause}: `{a.ops[0].name}`" in section
        assert f"   - why: {a.evidence}\n   - change: {a.change}" in section
    # The same lead, the table's clause as the Markdown's sentence.
    lead = text[0].removeprefix("what to change, ").removesuffix(":")
    assert f"\n{lead[0].upper()}{lead[1:]}.\n" in section
    # --top 5 shows five, and says how many there are, as the text does.
    short = render(report, "md", RenderOptions(top=5))
    assert f"(5 of {len(report.actions)} actions; --top 0 or --format json: all)" in short
    assert "\n6. **" not in short
