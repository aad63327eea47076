"""An audit's sections, worded once: the header, the op rows' cells, what to change, the
what-ifs, the steps, the cross-check, the warnings, the memory (static and at run time), the
hosts' tables and the groups, each a typed section holding its sentences and its tables' cells.
The table, the Markdown and the HTML page lay these out and word none of it themselves (the
page's script draws the sections' JSON, their `to_dict`), so that a section reads the same in
every format and a new one is written here once. The header's lines (chip, steps, memory,
mesh, hosts) are hlogap.render.text's, which diff and check share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from hlogap.render.cells import (
    any_unmodeled,
    bound_cells,
    count_cell,
    group_bound_cells,
    op_labels,
)
from hlogap.render.text import (
    STEP_COLUMNS,
    cross_check_lines,
    header_lines,
    more_line,
    outside_steps,
    step_cells,
    steps_overview,
    what_if_lines,
)
from hlogap.units import fmt_eff, fmt_si, fmt_us

if TYPE_CHECKING:
    from hlogap.report.model import Action, AuditReport, GroupRow, OpRow
    from hlogap.report.schema import AllocatorPeak
    from hlogap.report.sections import StepSkew

OP_COLUMNS = (
    "#",
    "op",
    "category",
    "n",
    "measured",
    "time",
    "bound",
    "gap",
    "eff",
    "bound by",
    "why",
)
OP_FIGURES = frozenset(("#", "n", "measured", "time", "bound", "gap", "eff"))  # right-aligned


def op_cells(report: AuditReport, rows: list[OpRow]) -> list[dict[str, str]]:
    """The op rows' cells by `OP_COLUMNS`, ranked from 1: each op's name told apart from
    another module's, `-` for the bound, gap and efficiency of an op with none, the time's
    share of the report's, the first hint (hlogap.render.cells)."""
    return [
        dict(
            zip(
                OP_COLUMNS,
                (
                    str(rank),
                    label,
                    r.category,
                    count_cell(r),
                    fmt_us(r.measured_us),
                    fmt_eff(share),
                    *bound_cells(r),
                    r.bound_by,
                    r.hints[0] if r.hints else "",
                ),
                strict=True,
            )
        )
        for rank, (r, label, (share, _)) in enumerate(
            zip(rows, op_labels(report, rows), report.shares(rows), strict=True), 1
        )
    ]


SHOWN_ACTIONS = 5  # in the table and Markdown; `--top 0`, the JSON and the page hold them all
# The actions' table (the page's): the first `ACTION_FIGURES` columns are figures.
ACTION_COLUMNS = ("#", "saves", "a step (median)", "median step", "cause", "ops", "why", "change")
ACTION_FIGURES = 4
NO_ACTIONS = "No change found that saves step time."
T = TypeVar("T")


def sentence(text: str) -> str:
    """A clause as a sentence of its own: capitalised, with its full stop."""
    return text[:1].upper() + text[1:] + "."


@dataclass(frozen=True)
class ActionItem:
    """One action, worded: its saving in the actions' frame, the median step's, the cause,
    its ops, the numbers that show it and the change."""

    rank: int
    saving: str  # `198.04 ms`: the actions' frame (`ActionsSection.frame`)
    claimed: bool  # False: a cause run after the step pass (device idle) claims no step time
    step_saving: str | None  # `35.68 ms`: off the median step; None without steps
    step_faster: str | None  # `1.40x faster`: the median step with the change
    cause: str  # with the layers it covers and where a device idle's gaps sit
    names: tuple[str, ...]  # its first three ops' names
    more_ops: int  # its ops after them
    evidence: str
    change: str

    @property
    def saves(self) -> str:
        """`saves 198.04 ms (35.68 ms a step: the median step 1.40x faster)`."""
        if not self.claimed:
            return "no step time claimed"
        each = (
            f" ({self.step_saving} a step: the median step {self.step_faster})"
            if self.step_saving is not None and self.step_faster is not None
            else ""
        )
        return f"saves {self.saving}{each}"

    def ops(self, code: bool = False) -> str:
        """`a, b, c and 2 more`; each name in backticks with `code` (Markdown)."""
        quote = "`" if code else ""
        names = ", ".join(f"{quote}{n}{quote}" for n in self.names)
        return names + (f" and {self.more_ops} more" if self.more_ops else "")

    def cells(self) -> list[str]:
        """The action's cells, by `ACTION_COLUMNS`."""
        return [
            str(self.rank),
            self.saving,
            self.step_saving or "-",
            self.step_faster or "-",
            self.cause,
            self.ops(),
            self.evidence,
            self.change,
        ]


@dataclass(frozen=True)
class ActionsSection:
    """What to change, ranked by the step time each saves: the first few actions (all with
    `top` 0) and a line saying how many were left out."""

    frame: str  # what the savings are: wall time over which steps, or device time
    items: list[ActionItem]
    more: str | None
    title: str = "What to change"

    @property
    def lead(self) -> str:
        """The clause that says how the actions are ranked and what their figures are."""
        return f"by the time it saves ({self.frame}; each op in one action)"

    def to_dict(self) -> dict[str, object]:
        return {
            "title": self.title,
            "lead": sentence(self.lead),
            "none": NO_ACTIONS,
            "columns": list(ACTION_COLUMNS),
            "figures": ACTION_FIGURES,
            "rows": [item.cells() for item in self.items],
        }


@dataclass(frozen=True)
class StepsSection:
    """`--steps`: the overview (how many steps, how long, the slowest, the columns' legend),
    then a row per step."""

    overview: list[str]
    columns: tuple[str, ...]
    rows: list[dict[str, str]]  # each step's cells, by `columns`
    more: list[str]  # the line saying how many steps were left out

    @property
    def legend(self) -> str:
        """What the columns mean ("" without steps)."""
        return self.overview[2] if len(self.overview) > 2 else ""

    def to_dict(self) -> dict[str, object]:
        return {
            "columns": list(self.columns),
            "rows": [[row[c] for c in self.columns] for row in self.rows],
        }


@dataclass(frozen=True)
class AuditSections:
    """Every section of an audit, worded, with `top` rows of its tables (0: all)."""

    header: list[str]
    actions: ActionsSection
    what_if: list[str]
    steps: StepsSection
    cross_check: list[str]
    warnings: list[str]


def audit_sections(report: AuditReport, top: int) -> AuditSections:
    return AuditSections(
        header=header_lines(report),
        actions=actions_section(report, top),
        what_if=what_if_lines(report),
        steps=steps_section(report, top),
        cross_check=cross_check_lines(report),
        warnings=[f"warning: {w}" for w in report.warnings],
    )


def actions_frame(report: AuditReport) -> str:
    """The frame of the actions' savings: wall time over all the steps, and the step figures'
    median over the steady ones; or device time."""
    actions = report.actions
    if not actions or actions[0].frame != "wall":
        return "device time (no steps to re-time)"
    steps = len(report.steps)
    warmup = report.step_summary.warmup_steps
    if report.ops_frame == "steady steps" and warmup:
        return (
            f"wall time, summed over the {steps - warmup} steady steps (warm-up left out); "
            "a step: their median"
        )
    return f"wall time, summed over the {steps} steps; a step: the median of the " + (
        f"{steps - warmup} steady steps" if warmup else "steps"
    )


def cause_text(action: Action) -> str:
    """The cause, with the layers it covers and where a device idle's gaps sit."""
    extra = [f"{action.layers} layers"] if action.layers > 1 else []
    extra += [action.where] if action.where else []
    return action.cause + (f" ({', '.join(extra)})" if extra else "")


def actions_section(report: AuditReport, top: int) -> ActionsSection:
    """The first `SHOWN_ACTIONS` actions (all with `top` 0)."""
    actions = report.actions or []
    shown = actions[: min(SHOWN_ACTIONS, top)] if top > 0 else actions
    items = []
    for rank, a in enumerate(shown, 1):
        names = tuple(o.name for o in a.ops[:3])
        items.append(
            ActionItem(
                rank=rank,
                saving=fmt_us(a.saving_us),
                claimed=a.saving_us > 0,
                step_saving=None if a.step_saving_us is None else fmt_us(a.step_saving_us),
                step_faster=None if a.step_speedup is None else f"{a.step_speedup:.2f}x faster",
                cause=cause_text(a),
                names=names,
                more_ops=len(a.ops) - len(names),
                evidence=a.evidence,
                change=a.change,
            )
        )
    more = (
        f"({len(shown)} of {len(actions)} actions; --top 0 or --format json: all)"
        if len(shown) < len(actions)
        else None
    )
    return ActionsSection(actions_frame(report), items, more)


def steps_section(report: AuditReport, top: int) -> StepsSection:
    rows = report.steps if top <= 0 else report.steps[:top]
    return StepsSection(
        steps_overview(report),
        STEP_COLUMNS,
        [step_cells(s) for s in rows],
        more_line(len(rows), len(report.steps), "--top 0 shows all", "steps"),
    )


BUFFER_COLUMNS = ("#", "buffer", "kind", "bytes", "share", "shape", "source")
BUFFER_FIGURES = frozenset(("#", "bytes", "share"))  # right-aligned
ALLOCATOR_COLUMNS = (
    "allocator",
    "host",
    "device",
    "in use at most",
    "of it stack",
    "when",
    "step",
    "capacity",
    "share",
    "heap's own peak",
    "fragmentation",
)
ALLOCATOR_FIGURES = frozenset(ALLOCATOR_COLUMNS[2:])  # right-aligned
ALLOCATORS_NOTE = (
    "in use at most: heap + reserved stack, the most at any of the allocator's events "
    "(time from the profile's first op), its stack part beside it; heap's own peak: the "
    "heap alone at its high-water mark since the allocator was created (xprof's "
    "peakBytesUsageLifetime), reached at its own time: it counts no stack, so it can be "
    "below the in-use figure (a TPU keeps its program's temporaries in the stack)"
)


@dataclass(frozen=True)
class ModuleBuffers:
    """A module's static peak, what makes it up and its share of the device, then the buffers
    held at it, largest first."""

    lines: list[str]
    buffers: list[list[str]]  # by BUFFER_COLUMNS
    more: list[str]  # the line saying how many buffers were left out


@dataclass(frozen=True)
class MemorySections:
    """`hlogap memory` (and the page's memory): each module's static memory, largest peak
    first, then what each allocator held while the profile ran."""

    modules: list[ModuleBuffers]
    allocators: list[list[str]]  # by ALLOCATOR_COLUMNS
    allocator_notes: list[str]  # the columns' note, then where peaks fell between steps
    warnings: list[str]  # the report's memory warnings
    none: str = "memory: none in this profile"
    no_modules: str = "No buffer assignment in this profile."
    allocators_title: str = "at run time (allocator events)"

    def to_dict(self) -> dict[str, object]:
        return {
            "modules": [
                {"lines": m.lines, "buffers": m.buffers, "more": m.more} for m in self.modules
            ],
            "buffer_columns": list(BUFFER_COLUMNS),
            "buffer_figures": [c in BUFFER_FIGURES for c in BUFFER_COLUMNS],
            "allocators": self.allocators,
            "allocator_columns": list(ALLOCATOR_COLUMNS),
            "allocator_figures": [c in ALLOCATOR_FIGURES for c in ALLOCATOR_COLUMNS],
            "allocators_title": sentence(self.allocators_title)[:-1],
            "allocator_notes": self.allocator_notes,
            "none": sentence(self.none),
            "no_modules": self.no_modules,
        }


def memory_sections(report: AuditReport, top: int) -> MemorySections:
    memory = report.memory
    warnings = [f"warning: {w}" for w in report.warnings if w.startswith("memory:")]
    if memory is None:
        return MemorySections([], [], [], warnings)
    modules = []
    for m in sorted(memory.modules, key=lambda m: -m.peak_bytes):
        lines = [
            f"{m.module} (program {m.program_id}): static peak {fmt_si(m.peak_bytes, 'B')} per "
            f"device = arguments {fmt_si(m.arguments_bytes, 'B')} + outputs "
            f"{fmt_si(m.outputs_bytes, 'B')} + temporaries {fmt_si(m.temporaries_bytes, 'B')} - "
            f"aliased (donated) {fmt_si(m.aliased_bytes, 'B')}"
            + (f"; in host memory: {fmt_si(m.host_bytes, 'B')}" if m.host_bytes else ""),
        ]
        if memory.capacity_bytes:
            free = memory.capacity_bytes - m.peak_bytes
            lines.append(
                f"{m.peak_bytes / memory.capacity_bytes:.0%} of the device's "
                f"{fmt_si(memory.capacity_bytes, 'B')}: {fmt_si(free, 'B')} free"
            )
        held = m.at_peak if top <= 0 else m.at_peak[:top]
        buffers = [
            [
                str(rank),
                b.instruction or "?",
                b.kind,
                fmt_si(b.bytes, "B"),
                fmt_eff(b.bytes / m.peak_bytes if m.peak_bytes else None),
                b.shape,
                b.source or b.op_name,
            ]
            for rank, b in enumerate(held, 1)
        ]
        more = more_line(len(held), len(m.at_peak), "--top 0 shows all", "buffers")
        modules.append(ModuleBuffers(lines, buffers, more))
    allocators = memory.allocators or ()
    notes = [
        f"{a.name} ({a.host}): its peak at {fmt_us(a.in_use_peak_us)} is {outside_steps(a)}"
        for a in allocators
        if a.step is None and a.steps_peak_bytes is not None
    ]
    return MemorySections(
        modules,
        [_allocator_cells(a) for a in sorted(allocators, key=_allocator_order)],
        [ALLOCATORS_NOTE, *notes] if allocators else [],
        warnings,
    )


def _allocator_order(a: AllocatorPeak) -> tuple[str, bool, int]:
    return a.host, a.device is None, a.device or 0


def _allocator_cells(a: AllocatorPeak) -> list[str]:
    """What an allocator held while the profile ran (its events on the host plane)."""
    return [
        a.name,
        a.host,
        "-" if a.device is None else str(a.device),
        fmt_si(a.in_use_peak_bytes, "B"),
        "-" if a.in_use_stack_bytes is None else fmt_si(a.in_use_stack_bytes, "B"),
        fmt_us(a.in_use_peak_us),
        "-" if a.step is None else str(a.step),
        fmt_si(a.capacity_bytes, "B"),
        fmt_eff(a.in_use_peak_bytes / a.capacity_bytes if a.capacity_bytes else None),
        fmt_si(a.peak_bytes, "B"),
        "-" if a.fragmentation is None else f"{a.fragmentation:.0%}",
    ]


@dataclass(frozen=True)
class Table:
    """A titled table of a section: its columns, which of them are figures, its rows."""

    title: str
    columns: list[str]
    figures: list[bool]
    rows: list[list[str]]


SKEWED_STEPS = 5  # the page's most skewed steps


@dataclass(frozen=True)
class HostsSection:
    """Several hosts (the header says which is slowest, the hosts' step spread, their clocks
    and who arrives last): what a host's time in ops is, then the slowest hosts, the most
    skewed steps and each host's clock offset, as tables."""

    note: str
    tables: list[Table]

    def to_dict(self) -> dict[str, object]:
        return {"note": self.note, "tables": [vars(t) for t in self.tables]}


def hosts_section(report: AuditReport) -> HostsSection | None:
    skew = report.host_skew
    if skew is None:
        return None
    hosts = len(skew.hosts)
    note = (
        f"{hosts:,} host{'' if hosts == 1 else 's'}; time in ops is device time of one host "
        "(self time summed over its devices)"
    )
    slowest = Table(
        "Slowest hosts (time in ops)",
        ["host", "time in ops", "over the median host", "median step"],
        [False, True, True, True],
        [
            [h.host, fmt_us(h.measured_us), _over(h.over_median_pct), _opt_us(h.step_median_us)]
            for h in skew.slowest_hosts
        ],
    )
    skewed = sorted(skew.steps, key=lambda s: -(s.over_median_pct or 0.0))[:SKEWED_STEPS]
    steps = Table(
        "Most skewed steps (slowest host's time in ops over the median host's)",
        ["step", "slowest host", "its time", "median host", "over"],
        [True, False, True, True, True],
        [_step_skew_cells(s) for s in skewed],
    )
    offsets = Table(
        "Clock offsets from the first host's clock (wall; removed before the steps' times and "
        "skew)",
        ["host", "offset", "estimated from"],
        [False, True, False],
        [
            [host, _opt_us(_at(skew.clock_offset_us, k)), _at(skew.clock_offset_from, k) or "-"]
            for k, host in enumerate(skew.hosts)
        ],
    )
    return HostsSection(note, [slowest, *([steps] if skewed else []), offsets])


def _step_skew_cells(step: StepSkew) -> list[str]:
    return [
        str(step.step),
        step.slowest_host,
        fmt_us(step.slowest_us),
        fmt_us(step.median_us),
        _over(step.over_median_pct),
    ]


def _at(values: list[T], k: int) -> T | None:
    """The `k`th value, None past the end (an older report's shorter list)."""
    return values[k] if k < len(values) else None


def _over(pct: float | None) -> str:
    return "-" if pct is None else f"{pct:+.1f}%"


def _opt_us(us: float | None) -> str:
    """A time that may be negative (a clock offset) or unknown (`-`)."""
    return "-" if us is None else ("-" + fmt_us(-us) if us < 0 else fmt_us(us))


@dataclass(frozen=True)
class GroupsSection:
    """Ops rolled up by a key (`--group-by`, the page's scopes): bound, gap and efficiency
    over each group's modeled ops, its unmodeled ops' time beside them where there is any, and
    by mesh axis its bus bandwidth and the time its collectives ran alone."""

    columns: list[str]  # the group's name second, after its rank
    figures: list[bool]  # which columns are figures (all but the name)
    rows: list[list[str]]
    more: list[str]  # the line saying how many groups were left out

    def to_dict(self) -> dict[str, object]:
        return {"columns": self.columns, "figures": self.figures, "rows": self.rows}


def groups_section(
    report: AuditReport, groups: list[GroupRow], key: str, top: int
) -> GroupsSection:
    by_axis = key == "axis"
    shown = groups if top <= 0 else groups[:top]
    unmodeled = any_unmodeled(shown)
    columns = ["#", key, "ops", "n", "measured", "bound", "gap", "eff"]
    columns += ["unmodeled"] if unmodeled else []
    columns += ["bus bw", "alone"] if by_axis else []
    rows = [
        [
            str(rank),
            g.name,
            str(g.ops),
            str(g.occurrences),
            fmt_us(g.measured_us),
            *group_bound_cells(g),
            *([fmt_us(g.unmodeled_us)] if unmodeled else []),
            *(_axis_cells(g) if by_axis else []),
        ]
        for rank, g in enumerate(shown, 1)
    ]
    more = more_line(len(shown), len(groups), "--top 0 shows all", "groups")
    return GroupsSection(columns, [c != key for c in columns], rows, more)


def _axis_cells(group: GroupRow) -> list[str]:
    """A mesh axis's bus bandwidth and the time its collectives ran alone."""
    return [fmt_si(group.bus_bw, "B/s") if group.bus_bw else "-", _opt_us(group.exposed_us)]


def page_scopes(report: AuditReport) -> tuple[list[GroupRow], str]:
    """The page's ops by scope: `--group-by scope`'s own groups, else the default depth's over
    every op; and the depth, in words."""
    from hlogap.rows.groups import DEFAULT_DEPTH, group_rows

    if report.group_by == "scope":
        return report.groups, "--depth levels"
    return group_rows(report.ops, "scope", DEFAULT_DEPTH, report.sort), f"{DEFAULT_DEPTH} levels"
