"""`--format md`: a Markdown summary and table (CI step summaries, pull-request comments)."""

from __future__ import annotations

from hlogap.render.text import header_lines
from hlogap.report.model import AuditReport
from hlogap.units import fmt_eff, fmt_us


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_md(report: AuditReport, top: int) -> str:
    lines = ["## hlogap audit", ""]
    lines += [f"- {_cell(line)}" for line in header_lines(report)]
    lines += [
        "",
        "| # | op | category | n | measured | bound | gap | eff | bound by | hint |",
        "|---:|---|---|---:|---:|---:|---:|---:|---|---|",
    ]
    rows = report.ops if top <= 0 else report.ops[:top]
    for rank, r in enumerate(rows, 1):
        hint = r.hints[0] if r.hints else ""
        lines.append(
            f"| {rank} | `{_cell(r.name)}` | {_cell(r.category)} | {r.occurrences} | "
            f"{fmt_us(r.measured_us)} | {fmt_us(r.bound_us)} | {fmt_us(r.gap_us)} | "
            f"{fmt_eff(r.efficiency)} | {r.bound_by} | {_cell(hint)} |"
        )
    return "\n".join(lines) + "\n"
