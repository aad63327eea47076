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
            return _audit(document, options)
        if isinstance(document, Diff):
            return _diff(document, options.top, options.width or DIFF_WIDTH)
        if isinstance(document, CheckResult):
            return _check(document, options.width or DIFF_WIDTH)
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
    # Rich pads every cell to its column's width: rows would end in spaces.
    return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())


def _audit(report: AuditReport, options: RenderOptions) -> str:
    top, color = options.top, options.color
    # A terminal's width when known (every op one line, fitted to it); else wide: piped output
    # keeps whole rows for grep and diff.
    width = options.width or WIDE
    if report.group_by:
        table, after = _groups(report, top)
    else:
        table, after = _ops(report, top, options.width)
    text = _print([*header_lines(report), ""], table, after, width=width, color=color)
    if options.steps:
        text += _print(["", "steps:"], _steps(report), width=width, color=color)
    return text


def _columns(table: Table, columns: tuple[tuple[str, str], ...]) -> None:
    for name, justify in columns:
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]


WIDE = 220
OP_COLUMNS: tuple[tuple[str, str], ...] = (
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
)
# Dropped in this order when the terminal is too narrow for every column.
DROP_FIRST = ("category", "bound", "n", "bound by")
MIN_OP, MIN_WHY = 16, 24


def middle(text: str, width: int) -> str:
    """`text` cut to `width` characters in the middle, where names differ least
    (`copy_bitcast_fusion.14` -> `copy_bi…sion.14`)."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]


def _fit(cells: list[dict[str, str]], width: int) -> tuple[list[str], int, int]:
    """The columns that fit `width` (Rich draws a table of n columns of widths w in
    sum(w) + 3n - 1 characters), the op column's width and the why column's (0: dropped)."""
    natural = {name: max([len(name), *(len(c[name]) for c in cells)]) for name, _ in OP_COLUMNS}
    shown = [name for name, _ in OP_COLUMNS]

    def room() -> int:
        fixed = sum(natural[n] for n in shown if n not in ("op", "why"))
        return width - fixed - 3 * len(shown) + 1

    for name in DROP_FIRST:
        if room() >= min(natural["op"], MIN_OP) + MIN_WHY:
            break
        shown.remove(name)
    left = room()
    if left < min(natural["op"], MIN_OP) + MIN_WHY:  # no room for reasons: the op keeps it all
        shown.remove("why")
        return shown, max(left + 3, 4), 0
    op_width = min(natural["op"], max(MIN_OP, left - natural["why"]))
    return shown, op_width, min(natural["why"], left - op_width)


def _ops(report: AuditReport, top: int, width: int | None) -> tuple[Table, list[str]]:
    rows = report.ops if top <= 0 else report.ops[:top]
    cells = [
        {
            "#": str(rank),
            "op": r.name,
            "category": r.category,
            "n": str(r.occurrences),
            "measured": fmt_us(r.measured_us),
            "bound": fmt_us(r.bound_us),
            "gap": fmt_us(r.gap_us),
            "eff": fmt_eff(r.efficiency),
            "bound by": r.bound_by,
            "why": r.hints[0] if r.hints else "",
        }
        for rank, r in enumerate(rows, 1)
    ]
    table = _new_table()
    if width is None:
        _columns(table, OP_COLUMNS)
        for c in cells:
            table.add_row(*(c[name] for name, _ in OP_COLUMNS))
        return table, more_line(len(rows), len(report.ops), "--top 0 shows all")
    shown, op_width, why_width = _fit(cells, width)
    for name, justify in OP_COLUMNS:
        if name in shown:
            fixed = {"op": op_width, "why": why_width}.get(name)
            table.add_column(
                name,
                justify=justify,  # type: ignore[arg-type]
                no_wrap=True,
                overflow="ellipsis",
                width=fixed,
                min_width=fixed,
            )
    for c in cells:
        c["op"] = middle(c["op"], op_width)
        table.add_row(*(c[name] for name in shown))
    dropped = [name for name, _ in OP_COLUMNS if name not in shown]
    after = more_line(len(rows), len(report.ops), "--top 0 shows all")
    if dropped:
        after.append(f"({', '.join(dropped)} left out to fit {width} columns; --wide shows all)")
    return table, after


def _groups(report: AuditReport, top: int) -> tuple[Table, list[str]]:
    table = _new_table()
    _columns(
        table,
        (
            ("#", "right"),
            (report.group_by or "group", "left"),
            ("ops", "right"),
            ("n", "right"),
            ("measured", "right"),
            ("bound", "right"),
            ("gap", "right"),
            ("eff", "right"),
        ),
    )
    rows = report.groups if top <= 0 else report.groups[:top]
    for rank, g in enumerate(rows, 1):
        table.add_row(
            str(rank),
            g.name,
            str(g.ops),
            str(g.occurrences),
            fmt_us(g.measured_us),
            fmt_us(g.bound_us),
            fmt_us(g.gap_us),
            fmt_eff(g.efficiency),
        )
    return table, more_line(len(rows), len(report.groups), "--top 0 shows all", "groups")


def _steps(report: AuditReport) -> Table:
    table = _new_table()
    _columns(
        table,
        (
            ("step", "right"),
            ("start", "right"),
            ("wall", "right"),
            ("busy", "right"),
            ("idle", "right"),
            ("measured", "right"),
            ("bound", "right"),
            ("gap", "right"),
            ("exposed comm", "right"),
        ),
    )
    for s in report.steps:
        device_time = s.wall_us * s.devices
        table.add_row(
            str(s.step),
            fmt_us(s.start_us),
            fmt_us(s.wall_us),
            fmt_eff(s.busy_us / device_time if device_time > 0 else None),
            fmt_eff(s.idle_us / device_time if device_time > 0 else None),
            fmt_us(s.measured_us),
            fmt_us(s.bound_us),
            fmt_us(s.gap_us),
            fmt_us(s.exposed_comm_us),
        )
    return table


def _diff_table(rows: list[DiffRow], with_module: bool) -> Table:
    table = _new_table()
    for col in DIFF_COLUMNS:
        justify = "left" if col in ("status", "op", "match") else "right"
        table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*diff_cells(row, with_module))
    return table


def _diff(diff: Diff, top: int, width: int) -> str:
    rows = diff.rows if top <= 0 else diff.rows[:top]
    more = more_line(len(rows), len(diff.rows), "--top 0 shows all")
    table = _diff_table(rows, multi_module(diff.rows))
    return _print([*diff_header(diff), ""], table, more, width=width)


def _check(result: CheckResult, width: int) -> str:
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
        return _print([*lines, *notes], width=width)
    title = f"ops slower than +{result.thresholds.max_op_regression:g}% per occurrence:"
    table = _diff_table(rows, multi_module(diff.rows))
    return _print([*lines, "", title], table, [*more, "", *notes], width=width)


def _chips(chips: list[Chip]) -> str:
    table = _new_table()
    for col in ("name", "chip", "bf16", "int8", "f32", "HBM", "link", "host", "ridge bf16"):
        table.add_column(col, justify="left" if col in ("name", "chip") else "right")
    for c in chips:
        peak = c.peak_flops
        table.add_row(
            c.name,
            c.display,
            *(fmt_si(peak[k], "FLOP/s") if k in peak else "-" for k in ("bf16", "int8", "f32")),
            fmt_si(c.hbm_bw, "B/s"),
            fmt_si(c.interconnect_bw, "B/s") if c.interconnect_bw else "-",
            fmt_si(c.host_bw, "B/s") if c.host_bw else "-",
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
