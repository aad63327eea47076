"""`--format table`: what a person reads in a terminal (Rich tables; the default format)."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from hlogap.bounds.instruction import InstructionBound
from hlogap.chips import Chip
from hlogap.render.base import ChipList, Document, DocumentKind, RenderOptions, register
from hlogap.render.text import (
    CHECK_ROWS,
    DIFF_COLUMNS,
    appeared_lines,
    diff_cells,
    diff_header,
    header_lines,
    more_line,
    multi_module,
    thresholds_line,
)
from hlogap.report.compare import Diff, DiffRow
from hlogap.report.gate import CheckResult
from hlogap.report.model import AuditReport
from hlogap.units import fmt_eff, fmt_si, fmt_us

if TYPE_CHECKING:  # Rich is imported on use: JSON output never loads its table machinery
    from rich.table import Table

DIFF_WIDTH = 140


class TableRenderer:
    name = "table"
    extensions: tuple[str, ...] = (".txt",)
    kinds: frozenset[DocumentKind] = frozenset({"audit", "diff", "check", "chips", "bound"})

    def render(self, document: Document, options: RenderOptions) -> str:
        if isinstance(document, AuditReport):
            return _audit(document, options.top, options.color)
        if isinstance(document, Diff):
            return _diff(document, options.top)
        if isinstance(document, CheckResult):
            return _check(document)
        if isinstance(document, ChipList):
            return _chips(document.chips)
        return _bound(document)


register(TableRenderer())


def _new_table() -> Table:
    from rich.table import Table

    return Table(show_edge=False, header_style="bold")


def _print(
    lines: list[str],
    table: Table | None = None,
    after: list[str] | None = None,
    width: int | None = DIFF_WIDTH,
    color: bool = False,
) -> str:
    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=color, no_color=not color)
    for line in lines:
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    if table is not None:
        console.print(table)
    for line in after or []:
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    return out.getvalue()


def _audit(report: AuditReport, top: int, color: bool) -> str:
    table = _new_table()
    for name, justify in (
        ("#", "right"),
        ("op", "left"),
        ("category", "left"),
        ("n", "right"),
        ("measured", "right"),
        ("bound", "right"),
        ("gap", "right"),
        ("eff", "right"),
        ("bound by", "left"),
        ("why", "left"),
    ):
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    rows = report.ops if top <= 0 else report.ops[:top]
    for rank, r in enumerate(rows, 1):
        table.add_row(
            str(rank),
            r.name,
            r.category,
            str(r.occurrences),
            fmt_us(r.measured_us),
            fmt_us(r.bound_us),
            fmt_us(r.gap_us),
            fmt_eff(r.efficiency),
            r.bound_by,
            r.hints[0] if r.hints else "",
        )
    shown = len(rows)
    after = (
        [f"({shown} of {len(report.ops)} ops; --top 0 shows all)"]
        if shown < len(report.ops)
        else []
    )
    # On a terminal Rich fits the table to it; piped output is wide so that rows stay one line.
    return _print(
        [*header_lines(report), ""], table, after, width=None if color else 220, color=color
    )


def _diff_table(rows: list[DiffRow], with_module: bool) -> Table:
    table = _new_table()
    for col in DIFF_COLUMNS:
        justify = "left" if col in ("status", "op", "match") else "right"
        table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*diff_cells(row, with_module))
    return table


def _diff(diff: Diff, top: int) -> str:
    rows = diff.rows if top <= 0 else diff.rows[:top]
    more = more_line(len(rows), len(diff.rows), "--top 0 shows all")
    return _print([*diff_header(diff), ""], _diff_table(rows, multi_module(diff.rows)), more)


def _check(result: CheckResult) -> str:
    diff = result.diff
    rows = result.regressed[:CHECK_ROWS]
    more = more_line(len(rows), len(result.regressed), "--format json lists all")
    notes = [
        *appeared_lines(result),
        *(f"warning: {w}" for w in diff.warnings),
        thresholds_line(result),
        f"baseline: {diff.base.path}; checked: {diff.new.path}",
    ]
    lines = [result.verdict()]
    lines += [f"  {'FAIL' if c.failed else 'ok  '}  {c.text}" for c in result.checks]
    if not rows:
        return _print([*lines, *notes])
    title = f"ops slower than +{result.thresholds.max_op_regression:g}% per occurrence:"
    table = _diff_table(rows, multi_module(diff.rows))
    return _print([*lines, "", title], table, [*more, "", *notes])


def _chips(chips: list[Chip]) -> str:
    table = _new_table()
    for col in ("name", "chip", "bf16", "int8", "f32", "HBM", "link", "ridge bf16"):
        table.add_column(col, justify="left" if col in ("name", "chip") else "right")
    for c in chips:
        peak = c.peak_flops
        table.add_row(
            c.name,
            c.display,
            *(fmt_si(peak[k], "FLOP/s") if k in peak else "-" for k in ("bf16", "int8", "f32")),
            fmt_si(c.hbm_bw, "B/s"),
            fmt_si(c.interconnect_bw, "B/s") if c.interconnect_bw else "-",
            f"{c.ridge_point('bf16'):.0f}" if "bf16" in peak else "-",
        )
    sources = "Sources for every figure: `hlogap chips --format json` or hlogap/chips/specs/*.toml"
    return _print([], table, [sources])


def _bound(result: InstructionBound) -> str:
    d = result.to_dict()
    intensity = result.intensity
    chip = result.chip
    dtype = result.cost.matrix_dtype or "bf16"
    lines = [
        f"{d['name']} ({d['opcode']}) on {chip.display} [{chip.name}]",
        f"  FLOPs            {fmt_si(result.cost.flops, 'FLOP')}"
        + (
            f" (matrix {fmt_si(result.cost.matrix_flops, 'FLOP')} at {dtype})"
            if result.cost.matrix_flops
            else ""
        ),
        f"  HBM bytes        {fmt_si(result.cost.hbm_bytes, 'B')}",
        f"  interconnect     {fmt_si(result.cost.comm_bytes, 'B')}",
        "  intensity        "
        + ("-" if intensity is None else f"{intensity:.3g} FLOP/B")
        + f" (ridge point {chip.ridge_point(dtype):.0f} for {dtype})",
        f"  T_compute        {d['t_compute_us']:.4g} us",
        f"  T_memory         {d['t_memory_us']:.4g} us",
        f"  T_comm           {d['t_comm_us']:.4g} us",
        f"  bound            {d['bound_us']:.4g} us ({d['bound_by']}); "
        f"upper bound {d['upper_bound_us']:.4g} us",
    ]
    lines += [f"  hint: {h}" for h in result.hints]
    return "\n".join(lines) + "\n"
