"""What every human-readable format shows of an op: an unmodeled op has no bound (`-`, never
`0.0 us`, its whole time as gap and `0%`), and the header keeps it apart from the time at the
bound; `n` counts occurrences x runs; ops of one name in several modules are named apart."""

from __future__ import annotations

import copy
import csv
import io
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from hlogap import audit
from hlogap.options import AuditOptions
from hlogap.render.base import RenderOptions, render
from hlogap.render.cells import op_labels
from hlogap.render.text import header_lines
from hlogap.report.model import AuditReport, OpRow
from tests.conftest import FIXTURES, SHARED, browse, headless_chromium, run_cli

PALLAS = SHARED / "tpu-v6e-pallas"


@pytest.fixture(scope="module")
def mlp(tmp_path_factory: pytest.TempPathFactory) -> AuditReport:
    from tests.conftest import write_cpu_chip

    return audit(
        FIXTURES / "mlp", AuditOptions(chip=str(write_cpu_chip(tmp_path_factory.mktemp("chip"))))
    )


def _unmodeled(report: AuditReport, names: set[str] | None = None) -> AuditReport:
    """The report with these ops (all: None) made unmodeled, as the cost model leaves an op it
    cannot cost: bound 0, a reason first among its hints."""
    out = copy.deepcopy(report)
    for r in out.ops:
        if names is None or r.name in names:
            r.bound_by, r.bound_us, r.hints = "unmodeled", 0.0, ["unmodeled: no cost rule"]
    return out


def _table_rows(text: str) -> dict[str, list[str]]:
    """The table's rows by op name: their cells."""
    rows = {}
    for line in text.splitlines():
        if re.match(r"^\s*\d+ │", line):
            cells = [c.strip() for c in line.split("│")]
            rows[cells[1]] = cells
    return rows


def test_an_unmodeled_op_has_no_bound_in_any_format(mlp: AuditReport) -> None:
    name = mlp.ops[0].name
    report = _unmodeled(mlp, {name})
    options = RenderOptions(top=0)
    # table: # op category n measured time bound gap eff bound-by why
    row = _table_rows(render(report, "table", options))[name]
    assert row[6:10] == ["-", "-", "-", "unmodeled"], row
    others = [r for r in _table_rows(render(report, "table", options)).values() if r[1] != name]
    assert all(r[6] != "-" and r[8] != "-" for r in others)
    md = next(line for line in render(report, "md", options).splitlines() if f"`{name}`" in line)
    assert "| - | - | - | unmodeled |" in md
    rows = {r["name"]: r for r in csv.DictReader(io.StringIO(render(report, "csv", options)))}
    assert (rows[name]["bound_us"], rows[name]["gap_us"], rows[name]["efficiency"]) == ("", "", "")
    assert rows[name]["bound_by"] == "unmodeled"
    # JSON keeps the contract's fields: bound 0, the gap its whole time, bound_by says why.
    op = next(o for o in json.loads(render(report, "json", options))["ops"] if o["name"] == name)
    assert op["bound_us"] == 0.0 and op["gap_us"] == op["measured_us"]
    assert op["bound_by"] == "unmodeled"


def test_the_header_keeps_unmodeled_ops_apart(mlp: AuditReport) -> None:
    modeled = "\n".join(header_lines(mlp))
    assert "% at the roofline bound, " in modeled and "% lost in ops, " in modeled
    assert "with every op at its bound" in modeled and "unmodeled" not in modeled

    name = mlp.ops[0].name
    some = "\n".join(header_lines(_unmodeled(mlp, {name})))
    unmodeled_us = next(r.measured_us for r in mlp.ops if r.name == name)
    assert "at the roofline bound or in unmodeled ops (" in some
    assert "of the ops' device time is unmodeled, with no bound), " in some
    assert "% lost in modeled ops, " in some
    assert "with every modeled op at its bound (unmodeled ops kept)" in some
    totals = next(line for line in some.splitlines() if line.startswith("ops, device-time"))
    assert "; modeled ops (" in totals and "unmodeled ops (no bound)" in totals
    assert f"{unmodeled_us / 1e3:.2f} ms" in totals or f"{unmodeled_us:.1f} us" in totals

    none = "\n".join(header_lines(_unmodeled(mlp)))
    assert "no step speedup to tell: every op is unmodeled (no bound)" in none
    assert "in unmodeled ops (no bound: nothing known lost), " in none
    assert "all in unmodeled ops (no bound: no gap or efficiency to tell)" in none
    for wrong in ("at the roofline bound", "lost in ops", "step speedup 1.00x", "efficiency 0%"):
        assert wrong not in none, wrong


def test_a_pallas_kernel_without_a_cost_estimate_reads_unmodeled(
    capsys: pytest.CaptureFixture[str],
) -> None:
    if not PALLAS.is_dir():
        pytest.skip(f"{PALLAS} absent (../shared not beside the project)")
    code, out, _ = run_cli(["audit", str(PALLAS)], capsys)
    assert code == 0
    row = _table_rows(out)["matmul_optimized.1"]
    assert row[6:10] == ["-", "-", "-", "unmodeled"], row
    assert "ops, device-time: measured 227.3 us, all in unmodeled ops" in out
    assert "100% in unmodeled ops" in out and "step speedup 1.00x" not in out
    assert "efficiency 0%" not in out and "gap 227.3 us" not in out


def test_n_counts_runs_and_names_tell_modules_apart(
    cpu_chip_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The flaws profile: ynn_fusion in four modules, wrapped_add 200 times in each of 3 steps.
    args = ["audit", str(FIXTURES / "flaws"), "--chip", str(cpu_chip_file), "--top", "0"]
    code, out, _ = run_cli(args, capsys)
    assert code == 0
    rows = _table_rows(out)
    for module in ("jit_f32_matmul", "jit_skinny_matmul", "jit_transpose_between"):
        assert rows[f"{module}/ynn_fusion"][3] == "3"
    assert rows["jit_tiny_ops/ynn_fusion"][3] == "3x200"
    assert rows["wrapped_add"][3] == "3x200"  # one module's op: its name alone
    assert rows["ynn_fusion.1"][3] == "3" and "ynn_fusion" not in rows
    code, md, _ = run_cli([*args, "-f", "md"], capsys)
    assert "| `jit_tiny_ops/ynn_fusion` | custom fusion | 3x200 |" in md
    code, text, _ = run_cli([*args, "-f", "csv"], capsys)
    by_name = {(r["module"], r["name"]): r for r in csv.DictReader(io.StringIO(text))}
    assert by_name[("jit_tiny_ops", "wrapped_add")]["runs_per_occurrence"] == "200"


def test_one_module_compiled_twice_is_told_apart_by_its_program(mlp: AuditReport) -> None:
    op = mlp.ops[0]
    twice = [op, replace(op, program_id="99"), replace(op, module="jit_other")]
    report = replace(mlp, ops=twice)
    assert op_labels(report, twice) == [
        f"{op.module}({op.program_id})/{op.name}",
        f"{op.module}(99)/{op.name}",
        f"jit_other/{op.name}",
    ]
    alone: list[OpRow] = [op]
    assert op_labels(replace(mlp, ops=alone), alone) == [op.name]


def test_html_shows_no_bound_and_labels(mlp: AuditReport, tmp_path: Path) -> None:
    headless_chromium()  # skips here, before the page is made, where there is none
    name = mlp.ops[0].name
    report = _unmodeled(mlp, {name})
    report.ops[1].module = "jit_elsewhere"
    report.ops[1].name = name  # the same name in another module
    page = tmp_path / "report.html"
    page.write_text(render(report, "html", RenderOptions(top=0)))
    dom = browse(page).stdout
    rows = re.findall(r'<tr class="op" id="op-\d+">(.*?)</tr>', dom)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in rows]
    first = next(c for c in cells if c[1] == f"{mlp.ops[0].module}/{name}")
    assert first[6] == "-" and first[7].endswith("</span> -") and first[8] == "-"
    assert first[9] == "unmodeled"
    assert any(c[1] == f"jit_elsewhere/{name}" and c[6] != "-" for c in cells)


def test_groups_keep_unmodeled_time_apart(mlp: AuditReport) -> None:
    """A group's bound, gap and efficiency are its modeled ops' (oracle: the op rows), its
    unmodeled ops' time beside them; JSON keeps the contract's sums."""
    from hlogap.render.cells import group_bound_cells
    from hlogap.rows.groups import group_key, group_rows

    half = {r.name for r in mlp.ops[::2]}
    report = _unmodeled(mlp, half)
    groups = group_rows(report.ops, "category", 3, "gap")
    assert any(0 < g.unmodeled_us < g.measured_us for g in groups)
    for g in groups:
        members = [r for r in report.ops if group_key(r, "category", 3) == g.name]
        modeled = [r for r in members if r.name not in half]
        row = g.to_dict(1)
        assert row["unmodeled_us"] == pytest.approx(
            sum(r.measured_us for r in members if r.name in half)
        )
        assert row["gap_us"] == pytest.approx(sum(r.gap_us for r in members))  # the contract's
        if not modeled:
            assert row["modeled_gap_us"] is None and row["modeled_efficiency"] is None
            assert group_bound_cells(g) == ("-", "-", "-")
            continue
        assert row["modeled_gap_us"] == pytest.approx(sum(r.gap_us for r in modeled))
        bound, measured = sum(r.bound_us for r in modeled), sum(r.measured_us for r in modeled)
        assert row["modeled_efficiency"] == pytest.approx(bound / measured)


def test_an_unmodeled_group_shows_no_gap(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The Pallas kernel (unmodeled) grouped by scope: `-` for bound, gap and efficiency in
    the table, Markdown and HTML, its whole time as unmodeled; JSON's modeled figures null."""
    if not PALLAS.is_dir():
        pytest.skip(f"{PALLAS} absent (../shared not beside the project)")
    code, out, _ = run_cli(["audit", str(PALLAS), "--group-by", "scope", "-f", "json"], capsys)
    assert code == 0
    document = json.loads(out)
    (group,) = document["groups"]
    measured = sum(o["measured_us"] for o in document["ops"])
    assert group["unmodeled_us"] == pytest.approx(measured)
    assert group["modeled_gap_us"] is None and group["modeled_efficiency"] is None
    code, out, _ = run_cli(["audit", str(PALLAS), "--group-by", "scope"], capsys)
    cells = [c.strip() for c in out.splitlines()[-1].split("│")]
    assert cells[5:] == ["-", "-", "-", f"{measured:.1f} us"]
    code, out, _ = run_cli(["audit", str(PALLAS), "--group-by", "scope", "-f", "md"], capsys)
    assert out.rstrip().endswith(f"| - | - | - | {measured:.1f} us |")
    html = tmp_path / "p.html"
    assert run_cli(["audit", str(PALLAS), "-o", str(html)], capsys)[0] == 0
    data = re.search(r'id="report">(.*?)</script>', html.read_text(), re.S)
    assert data is not None
    (scope,) = json.loads(data.group(1))["html_scopes"]
    assert scope["modeled_gap_us"] is None and scope["unmodeled_us"] == pytest.approx(measured)
    trace = tmp_path / "p.trace.json"
    assert run_cli(["audit", str(PALLAS), "-o", str(trace)], capsys)[0] == 0
    ops = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("ph") == "X"]
    unmodeled = [e["args"] for e in ops if e["args"].get("bound_by") == "unmodeled"]
    assert unmodeled
    for args in unmodeled:
        assert args["op_gap_us"] is None and args["op_efficiency"] is None
        assert args["bound_us"] is None and args["gap_us"] is None
