"""Machine output is complete (issue 39): `audit --format json`, CSV and the HTML page hold every
op whatever `--top` says (`--top` shapes the terminal table and Markdown only); `check` and
`diff` refuse a report an older hlogap saved with `--top N` (exit 3, one line saying how to save
it again), and a profile checked against its own default JSON report passes, with `--module`
too. The oracle is the report's own JSON: its summary counts the ops its `ops` must list.

The profile is the committed CPU fixture `sharded_train`: 33 ops, 24 of them in
`jit_train_step`, more than `--top`'s default 20 either way."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from hlogap import audit
from hlogap.options import AuditOptions
from tests.conftest import FIXTURES, browse, headless_chromium, run_cli, write_cpu_chip

TRAIN = FIXTURES / "sharded_train"
MODULE = "jit_train_step"
REFUSED = (
    "hlogap: error: {role} {path} lists 20 of {total} ops (saved with --top 20 by an older "
    "hlogap): save it again with this version (`hlogap audit PATH --format json -o FILE`)\n"
)


@pytest.fixture(scope="module")
def chip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cpu_chip(tmp_path_factory.mktemp("chip"))


def _json(capsys: pytest.CaptureFixture[str], chip: Path, *extra: str) -> dict[str, Any]:
    code, out, err = run_cli(
        ["audit", str(TRAIN), "--chip", str(chip), "-f", "json", *extra], capsys
    )
    assert code == 0, err
    report: dict[str, Any] = json.loads(out)
    return report


def _old_report(chip: Path, path: Path, module: str | None = None) -> int:
    """What an older hlogap wrote for `audit --format json` (`--top 20`'s default): 20 ops listed,
    the summary counting all. Returns how many ops the summary counts."""
    data = audit(TRAIN, AuditOptions(chip=str(chip), module=module)).to_dict(20)
    path.write_text(json.dumps(data))
    summary = data["summary"]
    assert isinstance(summary, dict)
    total = summary["ops"]
    assert isinstance(total, int) and total > 20
    return total


# ------------------------------------------------------------------- every op in machine output


@pytest.mark.parametrize("top", [[], ["--top", "3"], ["-n", "0"]], ids=["default", "3", "0"])
def test_json_holds_every_op_whatever_top_says(
    top: list[str], chip: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _json(capsys, chip, *top)
    ops, summary = report["ops"], report["summary"]
    assert summary["ops"] > 20 and len(ops) == summary["ops"]
    assert [o["rank"] for o in ops] == list(range(1, len(ops) + 1))
    assert sum(o["measured_us"] for o in ops) == pytest.approx(summary["measured_us"])
    assert ops[-1]["cum_share"] == pytest.approx(1.0)


def test_json_written_to_a_file_holds_every_op(
    chip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "base.json"
    args = ["audit", str(TRAIN), "--chip", str(chip), "--top", "5", "-o", str(saved)]
    assert run_cli(args, capsys)[0] == 0
    report = json.loads(saved.read_text())
    assert len(report["ops"]) == report["summary"]["ops"] > 20


def test_csv_holds_every_op_and_group(chip: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = _json(capsys, chip)
    code, out, _ = run_cli(["audit", str(TRAIN), "--chip", str(chip), "-f", "csv"], capsys)
    assert code == 0
    rows = [r for r in csv.DictReader(io.StringIO(out)) if not r["command_buffer_rank"]]
    assert [(r["module"], r["name"]) for r in rows] == [
        (o["module"], o["name"]) for o in report["ops"]
    ]
    args = ["audit", str(TRAIN), "--chip", str(chip), "--group-by", "scope", "-n", "2"]
    groups = _json(capsys, chip, "--group-by", "scope", "-n", "2")["groups"]
    assert len(groups) > 2
    code, out, _ = run_cli([*args, "-f", "csv"], capsys)
    assert code == 0 and len(list(csv.DictReader(io.StringIO(out)))) == len(groups)


@pytest.mark.parametrize("fmt", ["table", "md"])
def test_top_still_shapes_the_table_and_markdown(
    fmt: str, chip: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    total = _json(capsys, chip)["summary"]["ops"]
    code, out, _ = run_cli(["audit", str(TRAIN), "--chip", str(chip), "-f", fmt], capsys)
    assert code == 0
    if fmt == "table":
        assert f"(20 of {total} ops; --top 0 shows all)" in out
    else:  # Markdown: the first 20 op rows of its table
        assert len(re.findall(r"^\| \d+ \| `", out, re.MULTILINE)) == 20 < total


def test_html_page_has_a_row_for_every_op(
    chip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    headless_chromium()  # skips here, before the page is made, where there is none
    report = _json(capsys, chip)
    page = tmp_path / "report.html"
    args = ["audit", str(TRAIN), "--chip", str(chip), "--top", "5", "-o", str(page)]
    assert run_cli(args, capsys)[0] == 0
    dom = browse(page, "--virtual-time-budget=3000").stdout
    ranks = [int(r) for r in re.findall(r'<tr class="op" id="op-(\d+)">', dom)]
    assert ranks == [o["rank"] for o in report["ops"]]
    total = report["summary"]["ops"]
    assert f'<span id="shown" class="muted">{total} of {total} ops</span>' in dom


# The page's why cells (each op's first hint, each action's evidence) once laid out, written
# into the DOM by a script run after the page's own.
_MEASURE = """<script>
const view = document.documentElement.clientWidth, box = document.querySelector(".scroll");
const cells = [...document.querySelectorAll("#ops tr.op > td:last-child, #actions td:nth-child(7)")]
  .filter((c) => c.textContent).map((c) => c.getBoundingClientRect());
document.body.setAttribute("data-layout", JSON.stringify({
  view, scroll: document.documentElement.scrollWidth, cells: cells.length,
  right: Math.max(...cells.map((r) => r.right)), left: Math.min(...cells.map((r) => r.left)),
  narrowest: Math.min(...cells.map((r) => r.width)),
  box: box.scrollWidth - box.clientWidth,
}));
</script>
</body></html>"""


def test_why_column_is_readable_in_an_800_px_window(
    chip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """At 800 px the op table's why and the actions' why sit inside the window, a readable width
    (on a line of their own under each row's figures), with nothing to scroll sideways to."""
    headless_chromium()
    page = tmp_path / "report.html"
    assert run_cli(["audit", str(TRAIN), "--chip", str(chip), "-o", str(page)], capsys)[0] == 0
    html = page.read_text()
    page.write_text(html[: html.rindex("</body>")] + _MEASURE)
    dom = browse(page, "--window-size=800,1000", "--virtual-time-budget=3000").stdout
    found = re.search(r'data-layout="([^"]*)"', dom)
    assert found, dom[-2000:]
    layout = json.loads(found.group(1).replace("&quot;", '"'))
    assert layout["view"] <= 800 and layout["cells"] > 20
    assert layout["right"] <= layout["view"] and layout["left"] >= 0, layout
    assert layout["narrowest"] >= 0.6 * layout["view"], layout  # the row's width, not a sliver
    assert layout["scroll"] <= layout["view"] and layout["box"] <= 0, layout


# -------------------------------------------------------------------------- check and diff


@pytest.mark.parametrize(
    ("saved_with", "checked_with"),
    [(None, None), (MODULE, MODULE), (None, MODULE)],
    ids=["whole", "module", "whole-filtered-on-load"],
)
def test_a_profile_passes_against_its_own_default_report(
    saved_with: str | None,
    checked_with: str | None,
    chip: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`audit ZIP [--module M] --format json -o base.json`, then `check ZIP --baseline base.json
    [--module M]`: an unchanged run passes (a --top 20 report said FAIL: measured +414.4%); a
    whole report filtered by `--module` as it is read passes too."""
    saved = tmp_path / "base.json"
    args = ["audit", str(TRAIN), "--chip", str(chip), "-f", "json", "-o", str(saved)]
    assert run_cli([*args, *(["--module", saved_with] if saved_with else [])], capsys)[0] == 0
    report = json.loads(saved.read_text())
    assert len(report["ops"]) == report["summary"]["ops"] > 20
    selection = ["--chip", str(chip), *(["--module", checked_with] if checked_with else [])]
    code, out, err = run_cli(["check", str(TRAIN), "--baseline", str(saved), *selection], capsys)
    assert code == 0, out + err
    assert out.startswith("hlogap check: PASS: measured +0.0%") and err == ""
    code, out, err = run_cli(["diff", str(saved), str(TRAIN), *selection], capsys)
    assert code == 0 and "by an older hlogap" not in out + err


@pytest.mark.parametrize("module", [None, MODULE])
def test_check_refuses_a_report_saved_with_top(
    module: str | None, chip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A baseline an older hlogap saved with `--top 20` is refused before `--module` filters it
    (which forgot what its summary counted of the unlisted ops: +414.4% on an unchanged run)."""
    selection = ["--module", module] if module else []
    saved = tmp_path / "base.json"
    total = _old_report(chip, saved, module)
    check = ["check", str(TRAIN), "--baseline", str(saved), "--chip", str(chip), *selection]
    code, out, err = run_cli(check, capsys)
    assert (code, out) == (3, "")
    assert err == REFUSED.format(role="baseline", path=saved, total=f"{total:,}")


def test_diff_refuses_a_report_saved_with_top_on_either_side(
    chip: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    total = _old_report(chip, old)
    args = ["audit", str(TRAIN), "--chip", str(chip), "-f", "json", "-o", str(new)]
    assert run_cli(args, capsys)[0] == 0
    for base, other, role in ((old, new, "BASE"), (new, old, "NEW")):
        code, out, err = run_cli(["diff", str(base), str(other), "-f", "json"], capsys)
        assert (code, out) == (3, "")
        assert err == REFUSED.format(role=role, path=old, total=f"{total:,}")
