"""`--format table`: the ranked Rich table a person reads in a terminal."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from hlogap.render.text import header_lines
from hlogap.report.model import AuditReport
from hlogap.units import fmt_eff, fmt_us


def render_table(report: AuditReport, top: int, color: bool = False) -> str:
    table = Table(show_edge=False, header_style="bold")
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
    out = io.StringIO()
    # On a terminal Rich fits the table to it; piped output is wide so that rows stay one line.
    console = Console(
        file=out, width=None if color else 220, force_terminal=color, no_color=not color
    )
    for line in header_lines(report):
        console.print(line, highlight=False, markup=False)
    console.print()
    console.print(table)
    shown = len(rows)
    if shown < len(report.ops):
        console.print(f"({shown} of {len(report.ops)} ops; --top 0 shows all)", highlight=False)
    return out.getvalue()
