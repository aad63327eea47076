"""Output of `hlogap diff` (an op-by-op comparison) and `hlogap check` (the CI verdict).

Both come as a table for the terminal, JSON (`hlogap.diff/1`, `hlogap.check/1`; docs/ci.md) or
Markdown (pull-request comments, `$GITHUB_STEP_SUMMARY`). The first line of a check's table or
Markdown is its verdict.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from hlogap.render.json import _finite
from hlogap.report.compare import MATCH_METHODS, Diff, DiffRow
from hlogap.report.gate import CheckResult
from hlogap.report.model import AuditReport
from hlogap.units import fmt_eff, fmt_us

WIDTH = 140
CHECK_ROWS = 15  # failing ops listed by `check` (one screen); JSON lists them all
COLUMNS = (
    "status",
    "op",
    "match",
    "n",
    "base/occ",
    "new/occ",
    "Δ/occ",
    "Δ measured",
    "Δ bound",
    "Δ gap",
)


def _signed_us(us: float) -> str:
    return ("+" if us >= 0 else "") + fmt_us(us)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def _occ(row: DiffRow) -> str:
    b = str(row.base.occurrences) if row.base else "-"
    n = str(row.new.occurrences) if row.new else "-"
    return b if b == n else f"{b} -> {n}"


def _opt_us(us: float | None) -> str:
    return "-" if us is None else fmt_us(us)


def _cells(row: DiffRow, with_module: bool) -> list[str]:
    name = f"{row.pair.module}/{row.name}" if with_module else row.name
    return [
        row.status,
        name,
        row.pair.method if row.pair.method in MATCH_METHODS else "-",
        _occ(row),
        _opt_us(row.base_measured_per_occ_us),
        _opt_us(row.new_measured_per_occ_us),
        _pct(row.measured_per_occ_delta_pct),
        _signed_us(row.measured_delta_us),
        _signed_us(row.bound_delta_us),
        _signed_us(row.gap_delta_us),
    ]


def _side(label: str, r: AuditReport) -> str:
    chip = r.chip.name if r.chip else "?"
    return (
        f"{label}: {r.path} ({r.kind}, chip {chip}): measured {fmt_us(r.measured_us)}, "
        f"bound {fmt_us(r.bound_us)}, gap {fmt_us(r.gap_us)}, efficiency {fmt_eff(r.efficiency)}"
    )


def _header(diff: Diff) -> list[str]:
    counts = diff.counts()
    matched = sum(counts[m] for m in MATCH_METHODS)
    how = ", ".join(f"{counts[m]} by {m}" for m in MATCH_METHODS if counts[m])
    return [
        _side("base", diff.base),
        _side("new ", diff.new),
        f"change: measured {_signed_us(diff.measured_delta_us)} "
        f"({_pct(diff.measured_delta_pct)}), bound {_signed_us(diff.bound_delta_us)}, "
        f"gap {_signed_us(diff.gap_delta_us)}, efficiency {fmt_eff(diff.base.efficiency)} -> "
        f"{fmt_eff(diff.new.efficiency)}",
        f"ops: {matched} matched"
        + (f" ({how})" if how else "")
        + f", {counts['appeared']} appeared, {counts['vanished']} vanished",
        *(f"warning: {w}" for w in diff.warnings),
    ]


def _multi_module(rows: list[DiffRow]) -> bool:
    return len({r.pair.module for r in rows}) > 1


def _rich_table(rows: list[DiffRow], with_module: bool) -> Table:
    table = Table(show_edge=False, header_style="bold")
    for col in COLUMNS:
        justify = "left" if col in ("status", "op", "match") else "right"
        table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*_cells(row, with_module))
    return table


def _print(lines: list[str], table: Table | None = None, after: list[str] | None = None) -> str:
    out = io.StringIO()
    console = Console(file=out, width=WIDTH, no_color=True)
    for line in lines:
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    if table is not None:
        console.print(table)
    for line in after or []:
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    return out.getvalue()


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(rows: list[DiffRow], with_module: bool) -> list[str]:
    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join("---" if c in ("status", "op", "match") else "---:" for c in COLUMNS) + "|",
    ]
    for row in rows:
        cells = _cells(row, with_module)
        cells[1] = f"`{cells[1]}`"
        lines.append("| " + " | ".join(_md_cell(c) for c in cells) + " |")
    return lines


def _more(shown: int, total: int, hint: str) -> list[str]:
    return [f"({shown} of {total} ops; {hint})"] if shown < total else []


def _md_diff(diff: Diff, top: int) -> list[str]:
    rows = diff.rows if top <= 0 else diff.rows[:top]
    more = _more(len(rows), len(diff.rows), "--top 0 shows all")
    header = [f"- {_md_cell(h)}" for h in _header(diff)]
    return [*header, "", *_md_table(rows, _multi_module(diff.rows)), *more]


def render_diff(diff: Diff, fmt: str, top: int) -> str:
    if fmt == "json":
        return json.dumps(_finite(diff.to_dict(top)), indent=2) + "\n"
    if fmt == "md":
        return "\n".join(["## hlogap diff", "", *_md_diff(diff, top)]) + "\n"
    rows = diff.rows if top <= 0 else diff.rows[:top]
    more = _more(len(rows), len(diff.rows), "--top 0 shows all")
    return _print([*_header(diff), ""], _rich_table(rows, _multi_module(diff.rows)), more)


def _thresholds_line(result: CheckResult) -> str:
    t = result.thresholds
    text = (
        f"thresholds: max-regression {t.max_regression:g}%, "
        f"max-gap-regression {t.max_gap_regression:g}%, "
        f"max-op-regression {t.max_op_regression:g}%, min-op-share {t.min_op_share:g}%"
    )
    if t.min_efficiency is not None:
        text += f", min-efficiency {t.min_efficiency:g}"
    return text + (f" (config: {t.config})" if t.config else "")


def _appeared_line(result: CheckResult) -> list[str]:
    if not result.appeared:
        return []
    names = ", ".join(
        f"{r.name} ({r.op.measured_us / result.diff.new.measured_us:.0%} of the time)"
        for r in result.appeared[:5]
    )
    extra = len(result.appeared) - 5
    return [
        "new ops (counted in the totals, not gated one by one): "
        + names
        + (f" and {extra} more" if extra > 0 else "")
    ]


def render_check(result: CheckResult, fmt: str) -> str:
    diff = result.diff
    if fmt == "json":
        return json.dumps(_finite(result.to_dict()), indent=2) + "\n"
    rows = result.regressed[:CHECK_ROWS]
    with_module = _multi_module(diff.rows)
    more = _more(len(rows), len(result.regressed), "--format json lists all")
    notes = [
        *_appeared_line(result),
        *(f"warning: {w}" for w in diff.warnings),
        _thresholds_line(result),
        f"baseline: {diff.base.path}; checked: {diff.new.path}",
    ]
    if fmt == "md":
        mark = "✅" if result.passed else "❌"
        lines = [f"### {mark} {_md_cell(result.verdict())}", "", "| check | result |", "|---|---|"]
        lines += [
            f"| {c.name} | {'**FAIL**' if c.failed else 'ok'}: {_md_cell(c.text)} |"
            for c in result.checks
        ]
        if rows:
            lines += [
                "",
                f"Ops slower than +{result.thresholds.max_op_regression:g}% per occurrence:",
                "",
                *_md_table(rows, with_module),
                *more,
            ]
        lines += ["", *(f"- {_md_cell(n)}" for n in notes)]
        lines += [
            "",
            "<details><summary>op-by-op diff</summary>",
            "",
            *_md_diff(diff, 20),
            "",
            "</details>",
        ]
        return "\n".join(lines) + "\n"
    lines = [result.verdict()]
    lines += [f"  {'FAIL' if c.failed else 'ok  '}  {c.text}" for c in result.checks]
    if not rows:
        return _print([*lines, *notes])
    title = f"ops slower than +{result.thresholds.max_op_regression:g}% per occurrence:"
    return _print([*lines, "", title], _rich_table(rows, with_module), [*more, "", *notes])


def append_step_summary(result: CheckResult, path: Path) -> None:
    """Add the Markdown verdict to a GitHub Actions step summary; a failure to write is a warning
    (the verdict and the exit code stand)."""
    try:
        with path.open("a", encoding="utf-8") as f:
            f.write(render_check(result, "md") + "\n")
    except OSError as exc:
        print(
            f"hlogap: warning: cannot write the step summary {path}: {exc.strerror}",
            file=sys.stderr,
        )
