"""`--format table`: what a person reads in a terminal (Rich tables; the default format)."""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import TYPE_CHECKING

from hlogap.render.base import (
    ChipList,
    Document,
    DocumentKind,
    MemoryView,
    RenderOptions,
    register,
)
from hlogap.render.cells import (
    SUB_ROWS_NOTE,
    more_sub_cells,
    sub_row_cells,
    sub_rows,
)
from hlogap.render.sections import (
    ALLOCATOR_COLUMNS,
    ALLOCATOR_FIGURES,
    BUFFER_COLUMNS,
    BUFFER_FIGURES,
    OP_COLUMNS,
    OP_FIGURES,
    ActionsSection,
    StepsSection,
    audit_sections,
    groups_section,
    memory_sections,
    op_cells,
)
from hlogap.render.sparkline import allocator_timeline_lines
from hlogap.render.text import (
    CHECK_ROWS,
    DIFF_COLUMNS,
    DIFF_LEGEND,
    check_notes,
    diff_cells,
    diff_header,
    diff_step_lines,
    faster_or_slower,
    more_line,
    multi_module,
)
from hlogap.units import fmt_si, fmt_us

if TYPE_CHECKING:  # Rich is imported on use: JSON output never loads its table machinery
    from rich.table import Table

    from hlogap.report.compare import Diff, DiffRow
    from hlogap.report.gate import CheckResult
    from hlogap.report.model import AuditReport
    from hlogap.report.schema import Chip, InstructionBound

DIFF_WIDTH = 140


class TableRenderer:
    name = "table"
    extensions: tuple[str, ...] = (".txt",)
    kinds: frozenset[DocumentKind] = frozenset(
        {"audit", "diff", "check", "chips", "bound", "memory"}
    )

    def render(self, document: Document, options: RenderOptions) -> str:
        from hlogap.report.model import AuditReport

        if isinstance(document, AuditReport):
            return _audit(document, options)
        if isinstance(document, ChipList):
            return _chips(document.chips, options.width)
        if isinstance(document, MemoryView):
            return _memory(document.report, options.top, options.width)
        from hlogap.report.compare import Diff
        from hlogap.report.gate import CheckResult

        if isinstance(document, Diff):
            return _diff(document, options.top, options.width)
        if isinstance(document, CheckResult):
            return _check(document, options.width)
        return _bound(document)


register(TableRenderer())


def _new_table() -> Table:
    from rich.table import Table

    return Table(show_edge=False, header_style="bold")


def _row(table: Table, cells: Iterable[str]) -> None:
    """One row of literal text: names such as `reduce_sum[axes=(0, 1, 2)]` or `[bold]` are
    not Rich markup."""
    from rich.text import Text

    table.add_row(*(Text(c) for c in cells))


def _fitted(lines: list[str], width: int | None) -> list[str]:
    """Lines broken between words to fit `width` (continuations indented), not mid-word by the
    terminal; as they are when there is no width (a pipe, a file)."""
    if not width or width >= WIDE:  # no terminal: lines stay whole for grep
        return lines
    import textwrap

    out: list[str] = []
    for line in lines:
        indent = " " * (len(line) - len(line.lstrip()))
        out += textwrap.wrap(
            line,
            width,
            subsequent_indent=indent + "  ",
            break_long_words=False,
            break_on_hyphens=False,
        ) or [""]
    return out


def _print(
    lines: list[str],
    table: Table | list[str] | None = None,
    after: list[str] | None = None,
    width: int | None = DIFF_WIDTH,
    color: bool = False,
) -> str:
    """Lines fitted to `width`, then the table (a Rich table, or one drawn already: its
    lines as they are), then more lines."""
    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=color, no_color=not color)
    for line in _fitted(lines, width):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    if isinstance(table, list):
        out.writelines(line + "\n" for line in table)
    elif table is not None:
        console.print(table)
    for line in _fitted(after or [], width):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    # Rich pads every cell to its column's width: rows would end in spaces.
    return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())


def _audit(report: AuditReport, options: RenderOptions) -> str:
    top, color = options.top, options.color
    sections = audit_sections(report, top)
    # A terminal's width when known (every op one line, fitted to it); else wide: piped output
    # keeps whole rows for grep and diff.
    width = options.width or WIDE
    drawn: Table | list[str]
    if report.group_by:
        drawn, after = _groups(report, top, options.width)
    else:
        drawn, after = _ops(report, top, options.width, color, options.sub_rows)
    checked = sections.cross_check
    after = [*after, *(["", *checked] if checked else [])]
    actions = [*_actions(sections.actions), *sections.what_if]
    after += ["", *actions] if actions else []
    after += sections.warnings
    text = _print([*sections.header, ""], drawn, after, width=width, color=color)
    if options.steps:
        steps = sections.steps
        table = _steps(steps, options.width)
        text += _print(["", *steps.overview, ""], table, steps.more, width=width, color=color)
    return text


def _actions(section: ActionsSection) -> list[str]:
    """What to change: each action's saving, cause and ops on a line, its why and change on
    lines of their own under it."""
    if not section.items:
        return []
    lines = [f"{section.title.lower()}, {section.lead}:"]
    for a in section.items:
        lines += [
            f" {a.rank}. {a.saves}: {a.cause}: {a.ops()}",
            f"    why: {a.evidence}",
            f"    change: {a.change}",
        ]
    return lines + ([section.more] if section.more else [])


def _columns(table: Table, columns: tuple[tuple[str, str], ...]) -> None:
    for name, justify in columns:
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]


WIDE = 220
OP_TABLE_COLUMNS = tuple((c, "right" if c in OP_FIGURES else "left") for c in OP_COLUMNS)
# Dropped in this order when the terminal is too narrow for every column.
DROP_FIRST = ("category", "bound", "n", "bound by", "time")
MIN_OP, MIN_WHY = 16, 24


def middle(text: str, width: int) -> str:
    """`text` cut to `width` characters in the middle, where names differ least
    (`copy_bitcast_fusion.14` -> `copy_bi…sion.14`); a renamed op's two names each cut so,
    its arrow kept (`ynn…ion.1 -> ynn…ion.2`)."""
    if len(text) <= width:
        return text
    from hlogap.report.compare import RENAMED

    old, arrow, new = text.partition(RENAMED)
    room = width - len(RENAMED)
    if arrow and room >= 6:  # each name keeps its first and last characters
        first = min(len(old), max(room // 2, room - len(new)))
        return middle(old, first) + RENAMED + middle(new, room - first)
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]


def _fit(
    cells: list[dict[str, str]],
    columns: tuple[tuple[str, str], ...],
    drop_first: tuple[str, ...],
    width: int,
    text: str | None = "why",
) -> tuple[list[str], int, int]:
    """The columns that fit `width` (Rich draws a table of n columns of widths w in
    sum(w) + 3n - 1 characters), the op column's width and the `text` column's (0: dropped or
    none). Columns in `drop_first` go first, in that order, then the text column."""
    natural = {name: max([len(name), *(len(c[name]) for c in cells)]) for name, _ in columns}
    shown = [name for name, _ in columns]
    flexible = ("op", text)
    min_text = MIN_WHY if text else 0
    text_natural = natural[text] if text else 0

    def room() -> int:
        fixed = sum(natural[n] for n in shown if n not in flexible)
        return width - fixed - 3 * len(shown) + 1

    for name in drop_first:
        if room() >= min(natural["op"], MIN_OP) + min_text:
            break
        shown.remove(name)
    left = room()
    if text is None or left < min(natural["op"], MIN_OP) + min_text:
        if text is not None:  # no room for reasons: the op keeps it all
            shown.remove(text)
            left += 3
        return shown, max(min(left, natural["op"]), 4), 0
    # Names whole where they fit beside a reason column of MIN_WHY: a reason that does not
    # fit then goes on lines of its own (`_ops`), not the name.
    op_width = min(natural["op"], max(MIN_OP, left - min_text))
    return shown, op_width, min(text_natural, left - op_width)


def _fitted_table(
    cells: list[dict[str, str]],
    columns: tuple[tuple[str, str], ...],
    drop_first: tuple[str, ...],
    width: int,
    text: str | None = "why",
) -> tuple[Table, list[str]]:
    """Every row one line at `width`: low-priority columns dropped, the op name shortened in
    the middle; returns the table and a line naming what was left out."""
    shown, op_width, text_width = _fit(cells, columns, drop_first, width, text)
    table = _new_table()
    for name, justify in columns:
        if name in shown:
            fixed = {"op": op_width, text: text_width}.get(name)
            table.add_column(
                name,
                justify=justify,  # type: ignore[arg-type]
                no_wrap=True,
                overflow="ellipsis",
                width=fixed,
                min_width=fixed,
            )
    for c in cells:
        _row(table, (middle(c[name], op_width) if name == "op" else c[name] for name in shown))
    dropped = [name for name, _ in columns if name not in shown]
    if not dropped:
        return table, []
    return table, [f"({', '.join(dropped)} left out to fit {width} columns; --wide shows all)"]


def _ops(
    report: AuditReport, top: int, width: int | None, color: bool = False, subs: bool = True
) -> tuple[Table | list[str], list[str]]:
    rows = report.ops if top <= 0 else report.ops[:top]
    cells = []
    note: list[str] = []
    for r, row_cells in zip(rows, op_cells(report, rows), strict=True):
        cells.append(row_cells)
        shown, left_out = sub_rows(r, top) if subs else ([], [])
        cells += [sub_row_cells(sub) for sub in shown]
        cells += [more_sub_cells(left_out)] if left_out else []
        if shown:
            note = [SUB_ROWS_NOTE]
    if width is None:
        table = _new_table()
        _columns(table, OP_TABLE_COLUMNS)
        for c in cells:
            _row(table, (c[name] for name, _ in OP_TABLE_COLUMNS))
        return table, [*more_line(len(rows), len(report.ops), "--top 0 shows all"), *note]
    more = [*more_line(len(rows), len(report.ops), "--top 0 shows all"), *note]
    _, _, why_width = _fit(cells, OP_TABLE_COLUMNS, DROP_FIRST, width)
    if all(len(c["why"]) <= why_width for c in cells):
        table, dropped = _fitted_table(cells, OP_TABLE_COLUMNS, DROP_FIRST, width)
        return table, [*more, *dropped]
    # A reason cut to the column's width says too little: each goes on lines of its own under
    # its row, wrapped between words, and the row keeps the room for its other columns.
    table, dropped = _fitted_table(cells, OP_TABLE_COLUMNS[:-1], DROP_FIRST, width, text=None)
    return _with_reasons(table, [c["why"] for c in cells], width, color), [*more, *dropped]


def _with_reasons(table: Table, reasons: list[str], width: int, color: bool) -> list[str]:
    """The table drawn, each reason under its row, indented to the op column."""
    import re
    import textwrap

    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=width, force_terminal=color, no_color=not color).print(table)
    drawn = [line.rstrip() for line in out.getvalue().splitlines()]
    header = 2  # the column names and the rule under them: one line each (no_wrap)
    plain_header = re.sub(r"\x1b\[[0-9;]*m", "", drawn[0])  # without its colour codes
    indent = " " * (plain_header.index("┃") + 2)
    lines = drawn[:header]
    for row, reason in zip(drawn[header:], reasons, strict=True):
        lines.append(row)
        lines += textwrap.wrap(
            reason,
            width,
            initial_indent=indent,
            subsequent_indent=indent,
            break_long_words=False,
            break_on_hyphens=False,
        )
    return lines


def _groups(report: AuditReport, top: int, width: int | None) -> tuple[Table, list[str]]:
    """The `--group-by` rows; at a terminal's width, group names shortened to fit (a source
    path from the left, keeping its `file:line`; other names in the middle)."""
    section = groups_section(report, report.groups, report.group_by or "group", top)
    names = section.columns
    cells = [list(row) for row in section.rows]
    name_width = None
    if width is not None and cells:
        others = sum(
            max(len(n), *(len(c[k]) for c in cells)) for k, n in enumerate(names) if k != 1
        )
        name_width = max(width - others - 3 * len(names) + 1, MIN_OP)
        cut = _left if report.group_by == "source" else middle
        for c in cells:
            c[1] = cut(c[1], name_width)
    table = _new_table()
    for k, n in enumerate(names):
        if k == 1:
            table.add_column(n, no_wrap=True, max_width=name_width)
        else:
            table.add_column(n, justify="right", no_wrap=True)
    for c in cells:
        _row(table, c)
    return table, section.more


def _left(text: str, width: int) -> str:
    """`text` cut to `width` characters from the left: a path keeps its end (`…/mlp.py:42`)."""
    return text if len(text) <= width else "…" + text[len(text) - width + 1 :]


def _steps(section: StepsSection, width: int | None) -> Table:
    # The start column goes first where the terminal is narrow: the step number says the order.
    columns = [c for c in section.columns if c != "start" or not width or width >= 90]
    table = _new_table()
    for c in columns:  # a header is never split mid-word: its column is at least as wide
        table.add_column(c, justify="right", min_width=len(c), no_wrap=True)
    for cells in section.rows:
        _row(table, (cells[c] for c in columns))
    return table


DIFF_TABLE_COLUMNS = tuple(
    (c, "left" if c in ("status", "op", "match") else "right") for c in DIFF_COLUMNS
)
# Dropped in this order when the terminal is too narrow for every column.
DIFF_DROP_FIRST = ("Δ bound", "match", "Δ gap", "n", "base/occ", "new/occ")


def _diff_table(
    rows: list[DiffRow], with_module: bool, width: int | None
) -> tuple[Table, list[str]]:
    cells = [dict(zip(DIFF_COLUMNS, diff_cells(row, with_module), strict=True)) for row in rows]
    if width is None:
        table = _new_table()
        _columns(table, DIFF_TABLE_COLUMNS)
        for c in cells:
            _row(table, (c[name] for name in DIFF_COLUMNS))
        return table, []
    return _fitted_table(cells, DIFF_TABLE_COLUMNS, DIFF_DROP_FIRST, width, text=None)


def _diff(diff: Diff, top: int, width: int | None) -> str:
    rows = diff.rows if top <= 0 else diff.rows[:top]
    more = more_line(len(rows), len(diff.rows), "--top 0 shows all")
    table, dropped = _diff_table(rows, multi_module(diff.rows), width)
    after = [*more, *dropped, DIFF_LEGEND]
    return _print([*diff_header(diff), ""], table, after, width=width or WIDE)


def _check(result: CheckResult, width: int | None) -> str:
    diff = result.diff
    rows = result.regressed[:CHECK_ROWS]
    more = more_line(len(rows), len(result.regressed), "--format json lists all")
    notes = check_notes(result)
    lines = [result.verdict()]
    lines += [f"  {c.mark}  {c.text}" for c in result.checks]
    lines += diff_step_lines(diff)  # the step, then what the baseline's actions realized
    if not rows:
        return _print([*lines, *notes], width=width or WIDE)
    title = f"ops slower than +{result.thresholds.max_op_regression:g}% per occurrence:"
    table, dropped = _diff_table(rows, multi_module(diff.rows), width)
    after = [*more, *dropped, DIFF_LEGEND, "", *notes]
    return _print([*lines, "", title], table, after, width=width or WIDE)


def _memory(report: AuditReport, top: int, width: int | None) -> str:
    """Per module: what makes up its static peak, then the buffers held at it, largest first;
    then what each allocator held while the profile ran."""
    memory = memory_sections(report, top)
    if report.memory is None:
        return _print(memory.warnings or [memory.none], width=width or WIDE)
    text = ""
    for m in memory.modules:
        table = _new_table()
        _columns(table, BUFFER_TABLE_COLUMNS)
        for cells in m.buffers:
            _row(table, cells)
        text += _print([*m.lines, ""], table, [*m.more, ""], width=width or WIDE)
    if memory.allocators:
        table = _new_table()
        _columns(table, ALLOCATOR_TABLE_COLUMNS)
        for cells in memory.allocators:
            _row(table, cells)
        note, *peaks = memory.allocator_notes
        title = f"{memory.allocators_title}:"
        text += _print([title], table, [note, "", *peaks], width=width or WIDE)
        allocators = report.memory.allocators or ()
        curves = allocator_timeline_lines(allocators, report.steps, width)
        text += "".join(line + "\n" for line in [*curves, *([""] if curves else [])])
    return text + (_print(memory.warnings, width=width or WIDE) if memory.warnings else "")


BUFFER_TABLE_COLUMNS = tuple(
    (c, "right" if c in BUFFER_FIGURES else "left") for c in BUFFER_COLUMNS
)
ALLOCATOR_TABLE_COLUMNS = tuple(
    (c, "right" if c in ALLOCATOR_FIGURES else "left") for c in ALLOCATOR_COLUMNS
)


CHIP_COLUMNS = ("name", "chip", "bf16", "int8", "f32", "HBM", "link", "host", "ridge bf16")
# Left out in this order where the terminal is narrow; the chip's name (what --chip takes) stays.
CHIP_DROP_FIRST = ("host", "ridge bf16", "int8", "link", "f32")
MIN_DISPLAY = 24


def _chips(chips: list[Chip], width: int | None) -> str:
    cells = []
    for chip in chips:
        peak = chip.peak_flops
        flops = {
            k: fmt_si(peak[k], "FLOP/s") if k in peak else "-" for k in ("bf16", "int8", "f32")
        }
        cells.append(
            {
                "name": chip.name,
                "chip": chip.display,
                **flops,
                "HBM": fmt_si(chip.hbm_bw, "B/s"),
                "link": fmt_si(chip.interconnect_bw, "B/s") if chip.interconnect_bw else "-",
                "host": fmt_si(chip.host_bw, "B/s") if chip.host_bw else "-",
                "ridge bf16": f"{chip.ridge_point('bf16'):.0f}" if "bf16" in peak else "-",
            }
        )
    natural = {k: max([len(k), *(len(c[k]) for c in cells)]) for k in CHIP_COLUMNS}
    shown = list(CHIP_COLUMNS)

    def room() -> int:  # what the display name may take
        fixed = sum(natural[k] for k in shown if k != "chip")
        return (width or WIDE) - fixed - 3 * len(shown) + 1

    for name in CHIP_DROP_FIRST:
        if room() >= min(natural["chip"], MIN_DISPLAY):
            break
        shown.remove(name)
    display_width = max(min(room(), natural["chip"]), MIN_DISPLAY)
    table = _new_table()
    for k in shown:
        left = k in ("name", "chip")
        table.add_column(k, justify="left" if left else "right", no_wrap=True)
    for c in cells:
        _row(table, (middle(c[k], display_width) if k == "chip" else c[k] for k in shown))
    dropped = [k for k in CHIP_COLUMNS if k not in shown]
    notes = [f"({', '.join(dropped)} left out to fit {width} columns)"] if dropped else []
    sources = "Sources for every figure: `hlogap chips --format json` or hlogap/chips/specs/*.toml"
    return _print([], table, [*notes, sources], width=width or WIDE)


def _bound(result: InstructionBound) -> str:
    d = result.to_dict()
    intensity = result.intensity
    chip = result.chip
    dtype = result.cost.matrix_dtype or "bf16"
    key = chip.matrix_key(dtype)  # the peak the bound used: f32 operands may run at tf32
    lines = [
        f"{d['name']} ({d['opcode']}) on {chip.display} [{chip.name}]",
        f"  FLOPs            {fmt_si(result.cost.flops, 'FLOP')}"
        + (
            f" (matrix {fmt_si(result.cost.matrix_flops, 'FLOP')}, {dtype} at the {key} peak)"
            if result.cost.matrix_flops
            else ""
        ),
        f"  HBM bytes        {fmt_si(result.cost.hbm_bytes, 'B')}",
        f"  interconnect     {fmt_si(result.cost.comm_bytes, 'B')}",
        "  intensity        "
        + ("-" if intensity is None else f"{intensity:.3g} FLOP/B")
        + f" (ridge point {chip.ridge_point(dtype, result.cost.hbm_bytes):.0f} for {key})",
        f"  T_compute        {_time(d['t_compute_us'])}",
        f"  T_memory         {_time(d['t_memory_us'])}",
        f"  T_comm           {_time(d['t_comm_us'])}",
        f"  bound            {_time(d['bound_us'])} ({d['bound_by']}); "
        f"upper bound {_time(d['upper_bound_us'])}",
    ]
    lines += [f"  hint: {h}" for h in result.hints]
    for other in d["what_if"]:  # type: ignore[attr-defined]
        speedup = other["speedup"]
        lines.append(
            f"  what if on {other['chip']}: bound {_time(other['bound_us'])} ({other['bound_by']})"
            + (f", {faster_or_slower(speedup)}" if speedup else "")
        )
    return "\n".join(lines) + "\n"


def _time(us: object) -> str:
    """A time as `audit` prints it (`95.61 ms`); under a microsecond with three significant
    digits, where audit's one decimal would read 0.0 us."""
    assert isinstance(us, float | int)
    return fmt_us(us) if us == 0 or abs(us) >= 1 else f"{us:.3g} us"
