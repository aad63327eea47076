"""`--group-by`: ops rolled up by layer (scope), category, source line, module or the mesh axes
a collective runs over."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, get_args

from hlogap.report.model import GroupRow, OpRow, SortKey, sort_rows
from hlogap.trace.model import OpKey

GroupBy = Literal["scope", "category", "source", "module", "axis"]
GROUP_KEYS: tuple[GroupBy, ...] = get_args(GroupBy)
DEFAULT_DEPTH = 3


def group_key(op: OpRow, by: GroupBy, depth: int) -> str:
    """The group an op falls in; ops without the information group under "(unknown)"."""
    if by == "scope":
        # `jit(train_step)/jvp(model)/dense_1/dot_general` cut to `depth` components.
        value = "/".join(scope_parts(op.op_name)[:depth])
    elif by == "category":
        value = op.category
    elif by == "source":
        value = op.source
    elif by == "axis":
        if op.mesh_axes is None:
            return NOT_ON_AXES
        value = " x ".join(op.mesh_axes) or "(device permutation)"
    else:
        value = op.module
    return value or "(unknown)"


# `--group-by axis`: ops that are not collectives of a partitioned module.
NOT_ON_AXES = "(no mesh axis: not a collective)"


def scope_parts(op_name: str) -> list[str]:
    """The components of an op path, split at the slashes outside parentheses:
    `jit(f)/transpose(jvp(g/h))/dot` -> [`jit(f)`, `transpose(jvp(g/h))`, `dot`]."""
    parts: list[str] = []
    depth = 0
    current = ""
    for char in op_name:
        if char == "/" and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        current += char
    if current:
        parts.append(current)
    return parts


def axis_groups(ops: list[OpRow]) -> dict[str, list[OpKey]]:
    """`--group-by axis`'s collective groups (the mesh axes they run over) and their ops."""
    groups: dict[str, list[OpKey]] = {}
    for op in ops:
        name = group_key(op, "axis", 0)
        if name != NOT_ON_AXES:
            groups.setdefault(name, []).append(OpKey(op.module, op.program_id, op.name))
    return groups


def group_rows(
    ops: list[OpRow],
    by: GroupBy,
    depth: int,
    sort: SortKey,
    exposed_us: Mapping[str, float] | None = None,
) -> list[GroupRow]:
    """One row per group, with its ops' totals, ranked like the ops (`exposed_us`: per axis
    group, the device time its collectives ran alone, from the step pass)."""
    members: dict[str, list[OpRow]] = {}
    for op in ops:
        # A command buffer's call has no scope or source of its own: its ops' estimated shares
        # go to theirs (they add up to its time, and their bounds to its bound when it has one).
        spread = by in ("scope", "source") and op.bound_by != "unmodeled"
        for row in (op.command_buffer_ops or [op]) if spread else [op]:
            members.setdefault(group_key(row, by, depth), []).append(row)
    groups = [
        GroupRow(
            name=name,
            ops=len(rows),
            occurrences=sum(r.occurrences for r in rows),
            measured_us=sum(r.measured_us for r in rows),
            bound_us=sum(r.bound_us for r in rows),
            comm_bytes=sum(r.comm_bytes * r.occurrences for r in rows),
            exposed_us=(exposed_us or {}).get(name) if by == "axis" else None,
            idle_before_us=_summed([r.idle_before_us for r in rows]),
            unmodeled_us=sum(r.measured_us for r in rows if r.bound_by == "unmodeled"),
        )
        for name, rows in members.items()
    ]
    return sort_rows(groups, sort)


def _summed(values: list[float | None]) -> float | None:
    """The sum of the known values; None when none is known."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None
