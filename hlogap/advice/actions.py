"""Actions: the causes' findings, each op in one action, ranked by the step time they save.

Each action's ops are shortened by its saving (every op by the same share of its gap) and the
steps re-timed on every device's critical path (`hlogap.trace.steps.step_totals`, `changes`):
concurrency, idle gaps, order and skew are kept, so an op hidden behind another saves nothing.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

import numpy as np
from msgspec.structs import replace

from hlogap.advice.base import Context, Finding, causes
from hlogap.report.model import (
    Action,
    OpRef,
    OpRow,
    SavingFrame,
    StepRow,
    step_ratio,
)
from hlogap.trace.model import OpKey
from hlogap.trace.steps import StepTotals
from hlogap.units import fmt_us

MAX_ACTIONS = 12


def findings(ctx: Context, after_steps: bool = False) -> list[Finding]:
    """Every cause's findings (those that read the step pass, with `after_steps`), largest op
    saving first, each op kept in its largest one only (so no op's time is counted by two
    actions), the same cause and change on repeated layers as one (`repeated`), at most
    `MAX_ACTIONS`."""
    found = repeated(
        sorted(
            (f for cause in causes(after_steps) for f in cause(ctx)),
            key=lambda f: -(f.claimed_us or f.op_saving_us),
        )
    )
    taken: set[tuple[str, str, str]] = set()
    kept: list[Finding] = []
    for f in found:
        ops = tuple(r for r in f.ops if _key(r) not in taken)
        if not ops:
            continue
        if len(ops) < len(f.ops):
            f = _only(f, ops)
        taken.update(_key(r) for r in ops)
        kept.append(f)
        if len(kept) == MAX_ACTIONS:
            break
    return kept


def _only(f: Finding, ops: tuple[OpRow, ...]) -> Finding:
    """The finding on some of its ops only (the others are another finding's)."""
    if f.op_savings is not None:
        own = dict(zip((_key(r) for r in f.ops), f.op_savings, strict=True))
        savings = tuple(own[_key(r)] for r in ops)
        return replace(f, ops=ops, op_saving_us=sum(savings), op_savings=savings)
    share = sum(r.gap_us for r in ops) / max(sum(r.gap_us for r in f.ops), 1e-300)
    return replace(f, ops=ops, op_saving_us=f.op_saving_us * min(share, 1.0))


SAME = "; the same on "  # where a merged finding's evidence names its other ops


def repeated(found: Sequence[Finding]) -> list[Finding]:
    """In one program: findings of one cause on ops of the same structure (the same
    fingerprints: one layer's ops and another's), then findings of one cause whose evidence and
    change read the same (one batch advice for a layer's several matmuls), as one finding
    with their summed saving, `layers` their count, in the place of the largest."""

    def program(f: Finding) -> tuple[tuple[str, str], ...]:
        return tuple(sorted({(r.module, r.program_id) for r in f.ops}))

    def structure(k: int, f: Finding) -> tuple[object, ...]:
        prints = tuple(r.fingerprint for r in f.ops)
        if not all(prints) or f.claimed_us is not None:
            return (k,)
        return (f.cause, f.where, program(f), prints)

    def advice(k: int, f: Finding) -> tuple[object, ...]:
        if f.claimed_us is not None:
            return (k,)
        return (f.cause, f.where, program(f), f.change, f.evidence.split(SAME)[0])

    merged = _merge(_merge(found, structure), advice)
    return sorted(merged, key=lambda f: -(f.claimed_us or f.op_saving_us))


def _merge(
    found: Sequence[Finding], key_of: Callable[[int, Finding], tuple[object, ...]]
) -> list[Finding]:
    groups: dict[tuple[object, ...], list[Finding]] = {}
    for k, f in enumerate(found):
        groups.setdefault(key_of(k, f), []).append(f)
    out = []
    for group in groups.values():
        first = group[0]
        ops = tuple(r for f in group for r in f.ops)
        if len(group) == 1 or len({_key(r) for r in ops}) < len(ops):
            out.extend(group)  # one finding, or the same ops twice: not repeated layers
            continue
        others = ", ".join(r.name for f in group[1:4] for r in f.ops[:1])
        more = f" and {len(group) - 4} more" if len(group) > 4 else ""
        savings = (
            tuple(x for f in group for x in f.op_savings or ())
            if all(f.op_savings is not None for f in group)
            else None
        )
        layers = sum(f.layers for f in group)
        out.append(
            replace(
                first,
                ops=ops,
                op_saving_us=sum(f.op_saving_us for f in group),
                op_savings=savings,
                layers=layers,
                evidence=f"{first.evidence.split(SAME)[0]}{SAME}{len(ops) - len(first.ops)} "
                f"more op(s), {layers} in all (repeated layers: {others}{more})",
            )
        )
    return out


def changes(found: Sequence[Finding]) -> list[dict[OpKey, float]]:
    """Per finding: the fraction of its time each of its ops would take after the change."""
    out = []
    for f in found:
        if f.op_savings is not None:
            out.append(
                {
                    OpKey(r.module, r.program_id, r.name): max(0.0, 1.0 - saved / r.measured_us)
                    for r, saved in zip(f.ops, f.op_savings, strict=True)
                    if r.measured_us > 0
                }
            )
            continue
        gap = sum(max(r.gap_us, 0.0) for r in f.ops)
        share = f.op_saving_us / gap if gap > 0 else 0.0
        out.append(
            {
                OpKey(r.module, r.program_id, r.name): 1.0
                - max(r.gap_us, 0.0) * share / r.measured_us
                for r in f.ops
                if r.measured_us > 0
            }
        )
    return out


def ranked(
    found: Sequence[Finding],
    saved: np.ndarray | None,
    steps: Sequence[StepRow],
    warmup: int,
    unclaimed: Sequence[Finding] = (),
    steady_only: bool = False,
) -> list[Action]:
    """The findings as actions, ranked by step time saved (`saved`: per finding and step, from
    `step_savings`; summed over the steps, wall time); without steps, by the device time
    saved. The changes that only recover lost time never together exceed the steps' own time
    above their bound (a program change, `op_savings`, removes work: its saving is its own).
    The `unclaimed` ones (causes run after the step pass: no change of theirs was re-timed)
    save what they claim (`claimed_us`). An action that saves nothing is not listed (its
    finding stays a hint on its ops). `warmup`: the leading warm-up steps (the report's
    `step_summary.warmup_steps`); `steady_only` (the report's steady frame): the savings are
    summed over the steady steps after them."""
    first = warmup
    total, saved = _capped_totals(found, saved, steps, first if steady_only else 0)
    # Each action's saving per step in the summary's frame: the steady steps', each step
    # against itself (hlogap.report.summary).
    walls = [s.wall_us for s in steps[first:]]
    exposed = [s.exposed_comm_us for s in steps[first:]]
    actions = []
    for k, f in enumerate(found):
        evidence = f.evidence
        if f.cause == "exposed collective" and exposed:
            alone = fmt_us(statistics.median(exposed))
            evidence += f"; collectives run alone {alone} a step (device time, median step)"
        per_step = (
            _per_step(walls, saved[k][first:].tolist())
            if saved is not None and saved.shape[1] == len(steps)
            else {}
        )
        if total is not None:
            actions.append(_action(f, float(total[k]), "wall", evidence, per_step))
        else:
            actions.append(_action(f, f.op_saving_us, "device-time", evidence, per_step))
    for f in unclaimed:
        claimed = f.claimed_us or 0.0
        each = claimed / len(walls) if walls else 0.0
        per_step = _per_step(walls, [each] * len(walls)) if claimed > 0 else {}
        frame: SavingFrame = "wall" if steps else "device-time"
        actions.append(_action(f, claimed, frame, f.evidence, per_step))
    # A change that saves no step time (its ops are hidden behind others) is not worth making.
    saving = []
    for a, f in zip(actions, [*found, *unclaimed], strict=True):
        if _saves(a, bool(steps)):
            saving.append(a)
        else:
            _hint(f)
    return sorted(saving, key=lambda a: -a.saving_us)


def _capped_totals(
    found: Sequence[Finding], saved: np.ndarray | None, steps: Sequence[StepRow], counted: int
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Each finding's saving summed over the steps from `counted` on, and the per-step savings,
    where the changes that only recover lost time are scaled down together to the steps' own
    time above their bound: changes that overlap cannot together beat every op at its bound."""
    if saved is None or not steps:
        return None, saved
    total = saved[:, counted:].sum(axis=1)
    above = sum(
        max(s.wall_us - s.bound_wall_us, 0.0)
        for s in steps[counted:]
        if s.bound_wall_us is not None
    )
    gaps = np.array([f.op_savings is None for f in found], dtype=bool)
    if gaps.any() and total[gaps].sum() > above > 0:
        saved = saved.copy()
        saved[gaps] *= above / total[gaps].sum()
        total = saved[:, counted:].sum(axis=1)
    return total, saved


def _action(
    f: Finding,
    saving_us: float,
    frame: SavingFrame,
    evidence: str,
    per_step: dict[str, float | None],
) -> Action:
    return Action(
        cause=f.cause,
        ops=tuple(OpRef(r.module, r.program_id, r.name) for r in f.ops),
        saving_us=saving_us,
        frame=frame,
        op_saving_us=f.op_saving_us,
        evidence=evidence,
        change=f.change,
        layers=f.layers,
        where=f.where,
        **per_step,
    )


def _saves(action: Action, steps: bool) -> bool:
    """Whether the action saves time: rounded to 0.1 us, and per step where there are steps."""
    if round(action.saving_us, 1) <= 0:
        return False
    return not steps or round(action.step_saving_us or 0.0, 1) > 0


def _hint(f: Finding) -> None:
    """A finding that saves no step time stays a hint on its first op."""
    if not f.ops:
        return
    row = f.ops[0]
    text = f"{f.cause} (no step time saved): {f.evidence}"
    if text not in row.hints:
        row.hints.append(text)


def _per_step(walls: list[float], saved: list[float]) -> dict[str, float | None]:
    """`step_speedup` (the median over the steady steps of each step's wall over its wall with
    the change) and `step_saving_us`, what that ratio takes off the median step: one frame
    with the header's step line (the median step at the median ratio), never a saving and a
    ratio of two different steps."""
    if not walls:
        return {}
    after = [max(w - d, 0.0) for w, d in zip(walls, saved, strict=True)]
    ratio = step_ratio(walls, after)
    if ratio is None:
        return {}
    median = statistics.median(walls)
    return {"step_saving_us": median - median / ratio, "step_speedup": ratio}


def step_savings(totals: StepTotals, changes: Sequence[int]) -> np.ndarray:
    """Per change (`changes`: their positions among those asked of `step_totals`) and step:
    how much the step's wall time falls (us). A step's wall runs from its first device's start
    to its last device's end; each device's end moves up by its own saving."""
    ran = totals.ran
    out = np.zeros((len(changes), ran.shape[1]))
    if not ran.any() or any(c >= totals.change_saving_ps.shape[0] for c in changes):
        return out
    first = np.where(ran, totals.first_ps, np.iinfo(np.int64).max).min(axis=0)
    last = np.where(ran, totals.last_ps, np.iinfo(np.int64).min).max(axis=0)
    ran_step = ran.any(axis=0)
    for row, c in enumerate(changes):
        ends = np.where(ran, totals.last_ps - totals.change_saving_ps[c], -np.inf).max(axis=0)
        shorter = np.where(ran_step, last - np.maximum(ends, first), 0.0)
        out[row] = np.clip(shorter, 0.0, None) / 1e6
    return out


def _key(row: OpRow) -> tuple[str, str, str]:
    return (row.module, row.program_id, row.name)


# Hints that only restate an op's efficiency (hlogap.bounds.hints): an action says more.
_RESTATES = ("achieves ", "moves ")


def point_hints(rows: Sequence[OpRow], actions: Sequence[Action]) -> None:
    """Each op of an action points to it in its first hint (the why column): a hint that only
    restated the op's efficiency gives way to the action's numbers; another keeps its words and
    gains the action's rank and cause. A batch hint goes where the action says no batch helps."""
    by_key = {_key(r): r for r in rows}
    for rank, action in enumerate(actions, 1):
        for ref in action.ops:
            row = by_key.get((ref.module, ref.program_id, ref.name))
            if row is None:
                continue
            kept = row.hints
            if action.cause in ("activation-bound", "slow kernel"):
                kept = [h for h in kept if "(batch)" not in h]
            if not kept or kept[0].startswith(_RESTATES):
                row.hints = [f"action {rank}, {action.cause}: {action.evidence}", *kept[1:]]
            else:
                row.hints = [f"{kept[0]} (action {rank}: {action.cause})", *kept[1:]]
