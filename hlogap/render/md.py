"""`--format md`: Markdown for CI step summaries and pull-request comments."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from hlogap.render.base import Document, DocumentKind, RenderOptions, register
from hlogap.render.cells import (
    SUB_ROW,
    SUB_ROWS_NOTE,
    more_sub_cells,
    sub_row_cells,
    sub_rows,
)
from hlogap.render.sections import (
    OP_COLUMNS,
    ActionsSection,
    GroupsSection,
    StepsSection,
    audit_sections,
    groups_section,
    op_cells,
    sentence,
)
from hlogap.render.text import (
    CHECK_ROWS,
    DIFF_COLUMNS,
    check_notes,
    diff_cells,
    diff_header,
    diff_step_lines,
    more_line,
    multi_module,
)

if TYPE_CHECKING:
    from hlogap.report.compare import Diff, DiffRow
    from hlogap.report.gate import CheckResult
    from hlogap.report.model import AuditReport


class MarkdownRenderer:
    name = "md"
    extensions: tuple[str, ...] = (".md", ".markdown")
    kinds: frozenset[DocumentKind] = frozenset({"audit", "diff", "check"})

    def render(self, document: Document, options: RenderOptions) -> str:
        from hlogap.report.model import AuditReport

        if isinstance(document, AuditReport):
            return _audit(document, options.top, options.steps, options.sub_rows)
        from hlogap.report.compare import Diff
        from hlogap.report.gate import CheckResult

        if isinstance(document, Diff):
            return "\n".join(["## hlogap diff", "", *_diff(document, options.top)]) + "\n"
        if isinstance(document, CheckResult):
            return _check(document)
        raise TypeError(f"no Markdown for {type(document).__name__}")


register(MarkdownRenderer())


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _audit(report: AuditReport, top: int, steps: bool, subs: bool = True) -> str:
    sections = audit_sections(report, top)
    lines = ["## hlogap audit", ""]
    lines += [f"- {_cell(line)}" for line in sections.header]
    if report.group_by:
        lines += _groups(groups_section(report, report.groups, report.group_by, top))
        return "\n".join([*lines, *_actions(sections.actions)]) + "\n"
    lines += [
        "",
        "| # | op | category | n | measured | time | bound | gap | eff | bound by | hint |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    rows = report.ops if top <= 0 else report.ops[:top]
    estimated = False
    for r, cells in zip(rows, op_cells(report, rows), strict=True):
        cells["op"] = f"`{cells['op']}`"
        lines.append("| " + " | ".join(_cell(cells[c]) for c in OP_COLUMNS) + " |")
        under, left_out = sub_rows(r, top) if subs else ([], [])
        lines += [_sub_row(sub_row_cells(sub), code=True) for sub in under]
        lines += [_sub_row(more_sub_cells(left_out), code=False)] if left_out else []
        estimated = estimated or bool(under)
    lines += ["", f"{_cell(SUB_ROWS_NOTE)}"] if estimated else []
    lines += _actions(sections.actions)
    if steps:
        lines += _steps(sections.steps)
    return "\n".join(lines) + "\n"


def _groups(section: GroupsSection) -> list[str]:
    """The `--group-by` rows, the group's name as code."""
    align = "|" + "".join("---:|" if figure else "---|" for figure in section.figures)
    lines = ["", "| " + " | ".join(section.columns) + " |", align]
    for rank, name, *figures in section.rows:
        lines.append(f"| {rank} | `{_cell(name)}` | " + " | ".join(figures) + " |")
    return lines


def _steps(section: StepsSection) -> list[str]:
    """`--steps`: the overview as a list, then the steps' table."""
    lines = ["", *(f"- {_cell(line)}" for line in section.overview), ""]
    lines += ["| " + " | ".join(section.columns) + " |", "|" + "---:|" * len(section.columns)]
    lines += ["| " + " | ".join(cells[c] for c in section.columns) + " |" for cells in section.rows]
    return lines + section.more


def _actions(section: ActionsSection) -> list[str]:
    """What to change: a numbered list, each action's saving, cause and ops, its why and
    change under it."""
    if not section.items:
        return []
    lines = ["", f"### {section.title}", "", sentence(section.lead), ""]
    for a in section.items:
        lines += [
            f"{a.rank}. **{a.saves}**: {_cell(a.cause)}: {_cell(a.ops(code=True))}",
            f"   - why: {_cell(a.evidence)}",
            f"   - change: {_cell(a.change)}",
        ]
    return [*lines, "", section.more] if section.more else lines


def _sub_row(cells: dict[str, str], code: bool) -> str:
    """A command buffer's op under its call (`↳ name`, its estimated figures marked `~`), or
    the line standing for the ops left out (`code` False)."""
    name = _cell(cells["op"].removeprefix(SUB_ROW))
    op = f"↳ `{name}`" if code else f"↳ {name}"
    keys = ("category", "n", "measured", "time", "bound", "gap", "eff", "bound by", "why")
    return f"| | {op} | " + " | ".join(_cell(cells[k]) for k in keys) + " |"


def _diff_table(rows: list[DiffRow], with_module: bool) -> list[str]:
    lines = [
        "| " + " | ".join(DIFF_COLUMNS) + " |",
        "|"
        + "|".join("---" if c in ("status", "op", "match") else "---:" for c in DIFF_COLUMNS)
        + "|",
    ]
    for row in rows:
        cells = diff_cells(row, with_module)
        cells[1] = f"`{cells[1]}`"
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return lines


def _diff(diff: Diff, top: int) -> list[str]:
    rows = diff.rows if top <= 0 else diff.rows[:top]
    more = more_line(len(rows), len(diff.rows), "--top 0 shows all")
    header = [f"- {_cell(h)}" for h in diff_header(diff)]
    return [*header, "", *_diff_table(rows, multi_module(diff.rows)), *more]


_MARKS = {"fail": "**FAIL**", "inconclusive": "*inconclusive*"}


def _check(result: CheckResult) -> str:
    diff = result.diff
    rows = result.regressed[:CHECK_ROWS]
    more = more_line(len(rows), len(result.regressed), "--format json lists all")
    notes = check_notes(result)
    mark = {"pass": "✅", "fail": "❌"}.get(result.outcome, "❔")
    lines = [f"### {mark} {_cell(result.verdict())}", "", "| check | result |", "|---|---|"]
    lines += [
        f"| {c.name} | {_MARKS.get(str(c.verdict), 'ok')}: {_cell(c.text)} |" for c in result.checks
    ]
    steps = diff_step_lines(diff)  # the step, then what the baseline's actions realized
    lines += ["", *(f"- {_cell(s.strip())}" for s in steps)] if steps else []
    if rows:
        lines += [
            "",
            f"Ops slower than +{result.thresholds.max_op_regression:g}% per occurrence:",
            "",
            *_diff_table(rows, multi_module(diff.rows)),
            *more,
        ]
    lines += ["", *(f"- {_cell(n)}" for n in notes)]
    lines += [
        "",
        "<details><summary>op-by-op diff</summary>",
        "",
        *_diff(diff, 20),
        "",
        "</details>",
    ]
    return "\n".join(lines) + "\n"


def append_step_summary(result: CheckResult | str, path: Path) -> None:
    """Add the Markdown verdict to a GitHub Actions step summary, or (a string) the one-line
    reason there is none (a check that exits 3); a failure to write is a warning (the verdict
    and the exit code stand)."""
    text = (
        f"### ⚠️ hlogap check: no verdict\n\n{_cell(result)}\n"
        if isinstance(result, str)
        else _check(result)
    )
    try:
        with path.open("a", encoding="utf-8") as f:
            f.write(text + "\n")
    except OSError as exc:
        print(
            f"hlogap: warning: cannot write the step summary {path}: {exc.strerror}",
            file=sys.stderr,
        )
