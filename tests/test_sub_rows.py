"""A command buffer's ops under its call in the table, CSV, Markdown and HTML (`--no-sub-rows`
hides them): indented, their times marked estimated (`~`), in no total or share.

The profile is `tests/test_command_buffers.py`'s: three launches of the CUDA graph of
`tests/hlo/command_buffer.hlo.txt` (two loop fusions and a cuBLAS gemm), 150 us in all. The real
H100 nsys-jax archive in ../shared has no command buffer (its XLA timed every thunk).
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import replace
from pathlib import Path

import pytest

from hlogap.options import AuditOptions
from hlogap.pipeline import audit
from hlogap.render.base import RenderOptions, render
from hlogap.render.cells import SHOWN_SUB_ROWS, SUB_ROWS_NOTE
from hlogap.report.model import AuditReport
from tests.conftest import browse, run_cli
from tests.test_command_buffers import GRAPH_LAUNCHES, ONE_BUFFER, _dump, _gpu_trace

OPS = ["fusion.2", "fusion.3", "custom-call.1"]  # longest estimated time first


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("graph")
    return _gpu_trace(base / "logdir", "jit_step", GRAPH_LAUNCHES), _dump(base / "dump", ONE_BUFFER)


@pytest.fixture(scope="module")
def report(profile: tuple[Path, Path]) -> AuditReport:
    logdir, dump = profile
    return audit(logdir, AuditOptions(chip="h100-sxm", hlo_dump=dump))


def _table(report: AuditReport, **options: object) -> list[str]:
    return render(report, "table", RenderOptions(**options)).splitlines()  # type: ignore[arg-type]


def test_table_shows_the_ops_under_their_call(report: AuditReport) -> None:
    lines = _table(report)
    call = next(k for k, line in enumerate(lines) if re.match(r"\s*1 │ call ", line))
    subs = lines[call + 1 : call + 4]
    assert [re.search(r"└ (\S+)", line).group(1) for line in subs] == OPS  # type: ignore[union-attr]
    by_time = sorted(report.ops[0].command_buffer_ops, key=lambda r: -r.measured_us)
    for line, op in zip(subs, by_time, strict=True):
        cells = [c.strip() for c in line.split("│")]
        assert cells[0] == ""  # no rank
        assert cells[4] == f"~{op.measured_us:.1f} us"  # estimated
        assert cells[5] == ""  # no share of the ops' time
        assert cells[7].startswith("~") and cells[8].startswith("~")
        assert not cells[10].startswith("estimated")  # its own reason, the note says the rest
    assert SUB_ROWS_NOTE in lines
    # Nothing counted twice: the header is the same with and without them.
    hidden = _table(report, sub_rows=False)
    assert not any("└" in line for line in hidden) and SUB_ROWS_NOTE not in hidden
    assert lines[: lines.index("")] == hidden[: hidden.index("")]


def test_a_narrow_terminal_keeps_them_one_line_each(report: AuditReport) -> None:
    lines = _table(report, width=80)
    assert sum("└" in line for line in lines) == 3
    assert all(len(line) <= 80 for line in lines if "│" in line)


def test_a_long_buffer_shows_its_longest_ops_and_the_rest_in_one_line(
    report: AuditReport,
) -> None:
    call = report.ops[0]
    many = [replace(call.command_buffer_ops[k % 3], name=f"op.{k}") for k in range(8)]
    long = replace(report, ops=[replace(call, command_buffer_ops=many)])
    lines = _table(long)
    assert sum(bool(re.search(r"└ op\.\d", line)) for line in lines) == SHOWN_SUB_ROWS
    rest = sorted(r.measured_us for r in many)[: 8 - SHOWN_SUB_ROWS]
    (more,) = [line for line in lines if "more ops" in line]
    assert f"… {8 - SHOWN_SUB_ROWS} more ops" in more and f"~{sum(rest):.1f} us" in more
    assert sum("└ op." in line for line in _table(long, top=0)) == 8  # --top 0: all


def test_markdown_indents_them(report: AuditReport) -> None:
    text = render(report, "md", RenderOptions())
    subs = [line for line in text.splitlines() if line.startswith("| | ↳")]
    assert [re.search(r"`(.+?)`", s).group(1) for s in subs] == OPS  # type: ignore[union-attr]
    assert all("| ~" in s for s in subs)
    assert "↳" not in render(report, "md", RenderOptions(sub_rows=False))


def test_csv_rows_name_their_call_and_the_ranked_rows_add_up(
    profile: tuple[Path, Path], report: AuditReport, capsys: pytest.CaptureFixture[str]
) -> None:
    logdir, dump = profile
    args = ["audit", str(logdir), "--chip", "h100-sxm", "--hlo-dump", str(dump), "-f", "csv"]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    ranked = [r for r in rows if not r["command_buffer_rank"]]
    subs = [r for r in rows if r["command_buffer_rank"]]
    assert [r["name"] for r in ranked] == ["call"] and ranked[0]["estimated"] == "False"
    assert sorted(r["name"] for r in subs) == sorted(OPS)
    assert all(r["rank"] == "" and r["share"] == "" and r["estimated"] == "True" for r in subs)
    assert {r["command_buffer_rank"] for r in subs} == {ranked[0]["rank"]}
    assert sum(float(r["measured_us"]) for r in ranked) == pytest.approx(report.measured_us)
    assert sum(float(r["measured_us"]) for r in subs) == pytest.approx(report.measured_us)
    code, out, err = run_cli([*args, "--no-sub-rows"], capsys)
    assert code == 0, err
    assert [r["name"] for r in csv.DictReader(io.StringIO(out))] == ["call"]


@pytest.mark.parametrize("shown", [True, False])
def test_html_puts_them_under_their_call(report: AuditReport, tmp_path: Path, shown: bool) -> None:
    page = tmp_path / "report.html"
    page.write_text(render(report, "html", RenderOptions(sub_rows=shown)))
    dom = browse(page).stdout
    rows = re.findall(r'<tr class="(op(?: sub)?)"[^>]*>(.*?)</tr>', dom)
    cells = [(kind, re.findall(r"<td[^>]*>(.*?)</td>", r)) for kind, r in rows]
    assert cells[0][0] == "op" and cells[0][1][1] == "call"
    if not shown:
        assert len(cells) == 1
        return
    subs = cells[1:]
    assert [c[1] for _, c in subs] == [f"└ {name}" for name in OPS]  # longest first
    assert all(kind == "op sub" and c[0] == "" and c[4].startswith("~") for kind, c in subs)
