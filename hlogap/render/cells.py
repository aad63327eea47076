"""What the human-readable formats (table, md, csv, html) show for an op and for the ops'
totals, where the plain numbers would mislead:

- an `unmodeled` op has no bound: its bound, gap and efficiency are `-`, never `0.0 us`, its
  whole time and `0%` (JSON keeps the contract's `bound_us` 0 and `bound_by` says why); a
  group's bound, gap and efficiency are its modeled ops', its unmodeled ops' time in a column
  of its own, and `-` where all its ops are unmodeled;
- an op that runs several times per occurrence (a while body) counts `3x200`: 3 occurrences
  of 200 runs each;
- ops of one name in several modules (`ynn_fusion` of four programs) are told apart by their
  module (`jit_tiny_ops/ynn_fusion`), as `diff` names them.
- a command buffer call (CUDA graph) has its ops under it, their estimated times marked `~`
  and counted in no total or share (`sub_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from hlogap.units import fmt_eff, fmt_us

if TYPE_CHECKING:
    from hlogap.report.model import AuditReport, GroupRow, OpRow

NO_BOUND = "-"


def has_bound(row: OpRow) -> bool:
    return row.bound_by != "unmodeled"


def bound_cells(row: OpRow) -> tuple[str, str, str]:
    """The row's bound, gap and efficiency as text; `-` for an unmodeled op."""
    if not has_bound(row):
        return NO_BOUND, NO_BOUND, NO_BOUND
    return fmt_us(row.bound_us), fmt_us(row.gap_us), fmt_eff(row.efficiency)


def group_bound_cells(group: GroupRow) -> tuple[str, str, str]:
    """A group's bound, gap and efficiency over its modeled ops; `-` where it has none."""
    gap = group.modeled_gap_us
    if gap is None:
        return NO_BOUND, NO_BOUND, NO_BOUND
    return fmt_us(group.bound_us), fmt_us(gap), fmt_eff(group.modeled_efficiency)


def any_unmodeled(groups: Sequence[GroupRow]) -> bool:
    """Whether the groups need the `unmodeled` column (time in ops with no bound)."""
    return any(g.unmodeled_us > 0 for g in groups)


def count_cell(row: OpRow) -> str:
    """Occurrences, times the runs in each where the op runs more than once in one (`3x200`)."""
    runs = row.runs_per_occurrence
    return f"{row.occurrences}x{runs}" if runs > 1 else str(row.occurrences)


def op_labels(report: AuditReport, rows: Sequence[OpRow]) -> list[str]:
    """Each row's name, qualified where the report holds ops of that name in more than one
    module: by the module (`jit_tiny_ops/ynn_fusion`), and by the program id too where one
    module name was compiled more than once (`jit_f(17)/fusion.3`)."""
    programs: dict[str, set[tuple[str, str]]] = {}
    for r in report.ops:
        programs.setdefault(r.name, set()).add((r.module, r.program_id))
    labels = []
    for r in rows:
        seen = programs.get(r.name, set())
        if len(seen) <= 1:
            labels.append(r.name)
            continue
        twice = sum(module == r.module for module, _ in seen) > 1
        module = f"{r.module}({r.program_id})" if twice else r.module
        labels.append(f"{module}/{r.name}")
    return labels


# Unmodeled ops under this share of the ops' time are not told apart in the header (their
# rows still show `-`): "0% of the ops' time is unmodeled" would say nothing.
NOTED_SHARE = 0.005


def unmodeled_us(report: AuditReport) -> float:
    """Device time of the ops hlogap cannot bound, where it is worth saying (`NOTED_SHARE`)."""
    unmodeled = sum(r.measured_us for r in report.ops if not has_bound(r))
    return unmodeled if unmodeled >= NOTED_SHARE * report.measured_us else 0.0


def op_totals_line(report: AuditReport, summed: str) -> str:
    """The ops' totals in device time: measured, then bound, gap and efficiency of the ops
    that have a bound, with the unmodeled ops' time apart (they have none)."""
    measured, unmodeled = report.measured_us, unmodeled_us(report)
    speedup = report.speedup
    frame = " over the steady steps" if report.ops_frame == "steady steps" else ""
    head = f"ops, device-time{summed}{frame}: measured {fmt_us(measured)}"
    if unmodeled <= 0:
        return (
            f"{head}, bound {fmt_us(report.bound_us)}, gap {fmt_us(report.gap_us)}, "
            f"efficiency {fmt_eff(report.efficiency)}, modeled {fmt_eff(report.modeled_fraction)}"
            " of time" + (f", op-time speedup {speedup:.2f}x" if speedup else "")
        )
    modeled = measured - unmodeled
    if modeled <= 0:
        return f"{head}, all in unmodeled ops (no bound: no gap or efficiency to tell)"
    bound = report.bound_us  # unmodeled ops add none
    return (
        f"{head}; modeled ops ({fmt_eff(modeled / measured)} of it): bound {fmt_us(bound)}, "
        f"gap {fmt_us(modeled - bound)}, efficiency {fmt_eff(bound / modeled)}; unmodeled ops "
        f"(no bound) {fmt_us(unmodeled)}"
        + (f"; op-time speedup {speedup:.2f}x (unmodeled ops kept)" if speedup else "")
    )


def step_bound_text(report: AuditReport, at_bound: str, speedup: float) -> str:
    """The step's end: its wall with every op at its bound and the step speedup, said of the
    modeled ops only (unmodeled ops keep their time), or that no op has a bound."""
    unmodeled = unmodeled_us(report)
    if unmodeled <= 0:
        return f"; with every op at its bound {at_bound}: step speedup {speedup:.2f}x"
    if unmodeled >= report.measured_us:
        return "; no step speedup to tell: every op is unmodeled (no bound)"
    return (
        f"; with every modeled op at its bound (unmodeled ops kept) {at_bound}: step speedup "
        f"{speedup:.2f}x"
    )


def step_shares_text(report: AuditReport, at_bound: str, lost: str) -> str:
    """Where each device's step time goes in ops: at the bound, lost, and unmodeled apart."""
    unmodeled = unmodeled_us(report)
    if unmodeled <= 0:
        return f"{at_bound} at the roofline bound, {lost} lost in ops"
    if unmodeled >= report.measured_us:
        return f"{at_bound} in unmodeled ops (no bound: nothing known lost)"
    share = fmt_eff(unmodeled / report.measured_us)
    return (
        f"{at_bound} at the roofline bound or in unmodeled ops ({share} of the ops' device "
        f"time is unmodeled, with no bound), {lost} lost in modeled ops"
    )


# A command buffer's ops under its call (`--no-sub-rows` hides them): their times are the
# call's split by their bounds, an estimate, marked so and never in a total or a share.
ESTIMATED = "~"
SUB_ROW = "  └ "
# Ops shown under a call in the table and Markdown, longest first; `--top 0` shows all.
SHOWN_SUB_ROWS = 5
SUB_ROWS_NOTE = (
    f"{ESTIMATED} estimated: a command buffer (CUDA graph) is timed as one call; the ops under "
    "it share its time in proportion to their bounds, counted once, in the call "
    "(docs/nsys.md; --no-sub-rows hides them)"
)


def sub_rows(row: OpRow, top: int) -> tuple[list[OpRow], list[OpRow]]:
    """The ops of a command buffer call to show under it, longest estimated time first, and
    those left out: `SHOWN_SUB_ROWS` of them, all with `top` 0 (`--top 0` shows all)."""
    longest = sorted(row.command_buffer_ops, key=lambda r: -r.measured_us)
    shown = longest if top <= 0 else longest[:SHOWN_SUB_ROWS]
    return shown, longest[len(shown) :]


def sub_row_cells(row: OpRow) -> dict[str, str]:
    """An estimated op's cells, by the op table's column names: its own bound, its estimated
    time, gap and efficiency marked `~`, no share, and its own first hint (the estimate's
    wording is the note's)."""
    bound, gap, eff = bound_cells(row)
    if has_bound(row):
        gap, eff = ESTIMATED + gap, ESTIMATED + eff
    own = [h for h in row.hints if not h.startswith("estimated: ")]
    return {
        "#": "",
        "op": SUB_ROW + row.name,
        "category": row.category,
        "n": count_cell(row),
        "measured": ESTIMATED + fmt_us(row.measured_us),
        "time": "",
        "bound": bound,
        "gap": gap,
        "eff": eff,
        "bound by": row.bound_by,
        "why": own[0] if own else "",
    }


def more_sub_cells(left_out: Sequence[OpRow]) -> dict[str, str]:
    """The line that stands for a call's ops left out of its sub-rows, with their time."""
    cells = dict.fromkeys(("#", "category", "n", "time", "bound", "gap", "eff", "bound by"), "")
    return cells | {
        "op": f"{SUB_ROW}… {len(left_out)} more ops",
        "measured": ESTIMATED + fmt_us(sum(r.measured_us for r in left_out)),
        "why": "--top 0 shows all",
    }
