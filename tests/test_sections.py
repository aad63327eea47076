"""Sections worded once (issue 42): the op cells, the actions, the steps, the groups, the memory,
the what-ifs and the warnings read the same in the table, the Markdown and the HTML page, whose
script draws the sections' words instead of wording them again. The oracle for the figures is
the report's JSON; for the words, the other formats."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from hlogap import audit
from hlogap.options import AuditOptions
from hlogap.render.base import MemoryView, RenderOptions, render
from hlogap.render.html import page_resource
from hlogap.units import fmt_eff, fmt_si, fmt_us
from tests.conftest import FIXTURES, SHARED, browse, headless_chromium

# The AMX-like CPU chip (bf16 4x f32): the sharded fixture gets dtype actions beside the others.
CHIP = 'name = "amx"\n[peak_flops]\nf32 = 1.0e11\nbf16 = 4.0e11\n[memory]\nhbm_bw = 2.0e10\n'
SHARDED = FIXTURES / "documented_sharded"


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The sharded fixture's JSON, table and Markdown (every row, with the steps) and its
    page."""
    root = tmp_path_factory.mktemp("sections")
    chip = root / "amx.toml"
    chip.write_text(CHIP)
    report = audit(SHARDED, AuditOptions(chip=str(chip)))
    options = RenderOptions(top=0, steps=True)
    out = {fmt: render(report, fmt, options) for fmt in ("json", "table", "md", "html")}
    assert report.actions and report.steps, "the fixture has actions and steps to compare"
    return out


@pytest.fixture(scope="module")
def dom(outputs: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> str:
    """The page once its script ran, its text unescaped."""
    headless_chromium()  # skips without a browser
    page = tmp_path_factory.mktemp("page") / "page.html"
    page.write_text(outputs["html"])
    return html.unescape(browse(page, "--virtual-time-budget=3000").stdout)


def _between(text: str, start: str, end: str) -> str:
    return text[text.index(start) : text.index(end, text.index(start))]


def _cells(row: str) -> list[str]:
    """A table row's cells, as text (a gap cell's bar left out)."""
    return [
        re.sub(r"<[^>]*>", "", c).strip() for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row)
    ]


def test_actions_read_the_same_in_every_format(outputs: dict[str, str], dom: str) -> None:
    report = json.loads(outputs["json"])
    table = _between(outputs["table"], "what to change, ", "\n\n").splitlines()
    md = _between(outputs["md"], "### What to change", "\n\n- steps: ")
    page = _between(dom, 'id="actions"', "<h2>By scope")
    lead = table[0].removeprefix("what to change, ").removesuffix(":")
    assert f"\n{lead[0].upper()}{lead[1:]}.\n" in md
    assert f'<p class="muted">{lead[0].upper()}{lead[1:]}.</p>' in page
    rows = [_cells(r) for r in re.findall(r"<tr>(.*?)</tr>", page)]
    assert rows[0] == ["#", "saves", "a step (median)", "median step", "cause", "ops", "why",
                       "change"]  # fmt: skip
    assert len(rows) - 1 == len(report["actions"])
    for a, cells in zip(report["actions"], rows[1:], strict=True):
        rank, cause, evidence, change = str(a["rank"]), cells[4], a["evidence"], a["change"]
        saves = f"saves {fmt_us(a['saving_us'])} ({fmt_us(a['step_saving_us'])} a step: the "
        saves += f"median step {a['step_speedup']:.2f}x faster)"
        assert cells[:4] == [
            rank,
            fmt_us(a["saving_us"]),
            fmt_us(a["step_saving_us"]),
            f"{a['step_speedup']:.2f}x faster",
        ]
        assert cells[6:] == [evidence, change]
        assert f" {rank}. {saves}: {cause}: {cells[5]}" in table
        assert f"\n{rank}. **{saves}**: {cause}: " in md
        assert f"   - why: {evidence}\n   - change: {change}" in md


def test_steps_read_the_same_in_every_format(outputs: dict[str, str], dom: str) -> None:
    report = json.loads(outputs["json"])
    page = _between(dom, '<table id="steps">', "</table>")
    rows = [_cells(r) for r in re.findall(r'<tr[^>]*class="step"[^>]*>(.*?)</tr>', page)]
    head = _cells(re.findall(r"<tr>(.*?)</tr>", page)[0])
    md = outputs["md"].splitlines()
    at = next(k for k, line in enumerate(md) if line.startswith("| step |"))
    md_head = md[at]
    md_rows = [[c.strip() for c in line.strip("|").split("|")] for line in md[at + 2 :] if line]
    assert head == [c.strip() for c in md_head.strip("|").split("|")]
    assert rows == md_rows and len(rows) == len(report["steps"])
    for s, cells in zip(report["steps"], rows, strict=True):
        by_column = dict(zip(head, cells, strict=True))
        assert by_column["step"] == str(s["step"])
        assert by_column["start"] == fmt_us(s["start_us"])
        assert by_column["wall"] == fmt_us(s["wall_us"])
        assert by_column["idle"] == fmt_eff(s["idle_us"] / s["device_wall_us"])
    # The overview and its columns' legend are the text's.
    overview = _between(outputs["table"], "\nsteps: ", "\n\n").strip().splitlines()
    legend = overview[2]
    assert overview[0] in dom and overview[1] in dom
    assert f"{legend[0].upper()}{legend[1:]}. Click a step for its devices." in dom


def test_the_page_script_words_no_section() -> None:
    """The actions' and the steps' words come from the sections' JSON: the script holds
    none of them."""
    script = page_resource("report.js")
    for words in ("summed over all", "steady steps", "each op in one action", "a step (median)",
                  "slowest device", "x faster", "No change found"):  # fmt: skip
        assert words not in script, words


def test_page_resources_are_package_files(cpu_chip_file: Path) -> None:
    """The page's markup, style and script are files of the package, inlined into the one
    page: nothing it loads from elsewhere."""
    root = Path(__file__).resolve().parents[1] / "hlogap" / "render" / "page"
    for name in ("report.html", "report.css", "report.js"):
        assert page_resource(name) == (root / name).read_text(encoding="utf-8")
    page = render(
        audit(FIXTURES / "mlp", AuditOptions(chip=str(cpu_chip_file))), "html", RenderOptions()
    )
    assert page_resource("report.js") in page and page_resource("report.css") in page
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", page)


def test_memory_reads_the_same_on_the_page_as_in_the_table(
    tmp_path: Path, cpu_chip_file: Path
) -> None:
    """`hlogap memory`'s lines are the page's memory section: each module's static peak and
    share, the allocators' columns and notes; the allocators' figures are the JSON's."""
    headless_chromium()
    offload = SHARED / "tpu-v6e-offload"
    if not offload.is_dir():
        pytest.skip(f"{offload} absent (../shared not beside the project)")
    report = audit(offload, AuditOptions())
    assert report.memory is not None and report.memory.allocators
    table = render(MemoryView(report), "table", RenderOptions(top=0))
    data = json.loads(render(MemoryView(report), "json", RenderOptions(top=0)))
    page = tmp_path / "page.html"
    page.write_text(render(report, "html", RenderOptions()))
    dom = html.unescape(browse(page, "--virtual-time-budget=3000").stdout)
    memory = dom[dom.index('<div id="memory">') :]
    lines = [line.strip() for line in table.splitlines()]
    for module in report.memory.modules:
        (first,) = [line for line in lines if line.startswith(f"{module.module} (program ")]
        assert f"<h3>{first}</h3>" in memory
    note = next(line for line in lines if line.startswith("in use at most: "))
    assert f'<p class="muted">{note}</p>' in memory
    for line in (line for line in lines if ": its peak at " in line):
        assert f'<p class="muted">{line}</p>' in memory
    rows = [_cells(r) for r in re.findall(r"<tr>(.*?)</tr>", memory[memory.index("<h3>At run") :])]
    head, *cells = rows
    assert head[:4] == ["allocator", "host", "device", "in use at most"]
    allocators = data["memory"]["allocators"]
    assert len(cells) == len(allocators)
    by_name = {(a["host"], a["name"]): a for a in allocators}
    for row in cells:
        a = by_name[(row[1], row[0])]
        assert row[3] == fmt_si(a["in_use_peak_bytes"], "B")
        assert row[7] == fmt_si(a["capacity_bytes"], "B")


@pytest.mark.parametrize("key", ["scope", "axis"])
def test_groups_read_the_same_in_every_format(
    key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--group-by`: the Markdown's rows are the table's (the axis's bus bandwidth and time
    alone too), the page's scopes are the same groups; figures against the JSON."""
    chip = tmp_path / "amx.toml"
    chip.write_text(CHIP)
    report = audit(SHARDED, AuditOptions(chip=str(chip), group_by=key))
    data = json.loads(render(report, "json", RenderOptions(top=0)))
    md = render(report, "md", RenderOptions(top=0)).splitlines()
    table = render(report, "table", RenderOptions(top=0))
    at = next(k for k, line in enumerate(md) if line.startswith(f"| # | {key} |"))
    head = [c.strip() for c in md[at].strip("|").split("|")]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in md[at + 2 :]]
    rows = rows[: len(data["groups"])]
    assert head[-2:] == (["bus bw", "alone"] if key == "axis" else head[-2:])
    assert len(rows) == len(data["groups"]) > 0
    for row, g in zip(rows, data["groups"], strict=True):
        by_column = dict(zip(head, row, strict=True))
        assert by_column[key] == f"`{g['name']}`" and by_column["ops"] == str(g["ops"])
        assert by_column["measured"] == fmt_us(g["measured_us"])
        line = next(t for t in table.splitlines() if "│" in t and f" {g['name']} " in t)
        assert [c.strip() for c in line.split("│")][2:] == row[2:]
    if key == "scope":  # the page's scopes are these groups, with the same cells
        headless_chromium()
        page = tmp_path / "page.html"
        page.write_text(render(report, "html", RenderOptions()))
        dom = html.unescape(browse(page, "--virtual-time-budget=3000").stdout)
        scopes = _between(dom, '<table id="scopes">', "</table>")
        cells = [_cells(r) for r in re.findall(r"<tr>(.*?)</tr>", scopes)]
        assert cells[0] == head
        assert [[c[0], f"`{c[1]}`", *c[2:]] for c in cells[1:]] == rows


def test_the_page_holds_the_what_ifs_and_the_warnings(tmp_path: Path) -> None:
    """The page had no what-if and no warning: it lays out the table's lines for both."""
    headless_chromium()
    chip = tmp_path / "amx.toml"
    chip.write_text(CHIP)
    report = audit(SHARDED, AuditOptions(chip=str(chip), what_if=("h100-sxm",)))
    assert report.what_if and report.warnings
    table = render(report, "table", RenderOptions(top=0))
    page = tmp_path / "page.html"
    page.write_text(render(report, "html", RenderOptions()))
    dom = html.unescape(browse(page, "--virtual-time-budget=3000").stdout)
    what_if = [line for line in table.splitlines() if line.startswith("what if on ")]
    warnings = [line for line in table.splitlines() if line.startswith("warning: ")]
    assert len(what_if) == len(report.what_if) and len(warnings) == len(report.warnings)
    for line in (*what_if, *warnings):
        assert line in dom


def test_op_cells_read_the_same_on_the_page_as_in_the_table(tmp_path: Path) -> None:
    """The page's op rows and a command buffer's ops under its call are the table's cells
    (the table of every op, one line each at 220 columns); the figures are the JSON's."""
    headless_chromium()
    from tests.test_command_buffers import GRAPH_LAUNCHES, ONE_BUFFER, _audit

    report = _audit(tmp_path, "jit_step", GRAPH_LAUNCHES, ONE_BUFFER)
    assert report.ops[0].command_buffer_ops
    table = render(report, "table", RenderOptions(top=0, width=220))
    page = tmp_path / "page.html"
    page.write_text(render(report, "html", RenderOptions()))
    dom = html.unescape(browse(page, "--virtual-time-budget=3000").stdout)
    rows = [
        [c.strip() for c in line.split("│")] for line in table.splitlines() if line.count("│") >= 10
    ]
    cells = [_cells(r) for r in re.findall(r'<tr class="op[^"]*"[^>]*>(.*?)</tr>', dom)]
    assert len(cells) == len(rows) == 1 + len(report.ops[0].command_buffer_ops)
    for row, page_cells in zip(rows, cells, strict=True):
        assert [c.lstrip("└ ") for c in page_cells[:-1]] == [c.lstrip("└ ") for c in row[:-1]]
    data = json.loads(render(report, "json", RenderOptions(top=0)))
    (op,) = data["ops"]
    assert cells[0][4] == fmt_us(op["measured_us"]) and cells[0][8] == fmt_eff(op["efficiency"])
