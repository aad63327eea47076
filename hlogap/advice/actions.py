"""Actions: the causes' findings, each op in one action, ranked by the step time they save.

Each action's ops are shortened by its saving (every op by the same share of its gap) and the
steps re-timed on every device's critical path (`hlogap.trace.steps.step_totals`, `changes`):
concurrency, idle gaps, order and skew are kept, so an op hidden behind another saves nothing.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np

from hlogap.advice.base import Context, Finding, causes
from hlogap.report.model import Action, OpRef, OpRow, StepRow, step_ratio, warmup_of
from hlogap.trace.model import OpKey
from hlogap.trace.steps import StepTotals
from hlogap.units import fmt_us

MAX_ACTIONS = 12


def findings(ctx: Context, after_steps: bool = False) -> list[Finding]:
    """Every cause's findings (those that read the step pass, with `after_steps`), largest op
    saving first, each op kept in its largest one only (so no op's time is counted by two
    actions), at most `MAX_ACTIONS`."""
    found = sorted(
        (f for cause in causes(after_steps) for f in cause(ctx)), key=lambda f: -f.op_saving_us
    )
    taken: set[tuple[str, str, str]] = set()
    kept: list[Finding] = []
    for f in found:
        ops = tuple(r for r in f.ops if _key(r) not in taken)
        if not ops:
            continue
        share = sum(r.gap_us for r in ops) / max(sum(r.gap_us for r in f.ops), 1e-300)
        if len(ops) < len(f.ops):
            f = Finding(f.cause, ops, f.op_saving_us * min(share, 1.0), f.evidence, f.change)
        taken.update(_key(r) for r in ops)
        kept.append(f)
        if len(kept) == MAX_ACTIONS:
            break
    return kept


def changes(found: Sequence[Finding]) -> list[dict[OpKey, float]]:
    """Per finding: the fraction of its time each of its ops would take after the change."""
    out = []
    for f in found:
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
    unclaimed: Sequence[Finding] = (),
    steady_only: bool = False,
) -> list[Action]:
    """The findings as actions, ranked by step time saved (`saved`: per finding and step, from
    `step_savings`; summed over the steps, wall time); without steps, by the device time
    saved. Their sum never exceeds the steps' own time above their bound. The `unclaimed`
    ones (causes run after the step pass: no change of theirs was re-timed) follow, saving 0.
    `steady_only` (the report's steady frame): the savings are summed over the steady steps."""
    first = warmup_of(steps)
    counted = first if steady_only else 0
    total = saved[:, counted:].sum(axis=1) if saved is not None and steps else None
    above = sum(
        max(s.wall_us - s.bound_wall_us, 0.0)
        for s in steps[counted:]
        if s.bound_wall_us is not None
    )
    if saved is not None and total is not None and total.sum() > above > 0:
        # Changes that overlap cannot together beat every op at its bound.
        saved = saved * (above / total.sum())
        total = saved.sum(axis=1)
    # Each action's saving per step in the summary's frame: the steady steps', each step
    # against itself (steps_summary).
    walls = [s.wall_us for s in steps[first:]]
    exposed = [s.exposed_comm_us for s in steps[first:]]
    actions = []
    for k, f in enumerate(found):
        evidence = f.evidence
        if f.cause == "exposed collective" and exposed:
            alone = fmt_us(statistics.median(exposed))
            evidence += f"; collectives run alone {alone} a step (device time, median step)"
        actions.append(
            Action(
                cause=f.cause,
                ops=tuple(OpRef(r.module, r.program_id, r.name) for r in f.ops),
                saving_us=float(total[k]) if total is not None else f.op_saving_us,
                frame="wall" if total is not None else "device-time",
                op_saving_us=f.op_saving_us,
                evidence=evidence,
                change=f.change,
                **(
                    _per_step(walls, saved[k][first:].tolist())
                    if saved is not None and saved.shape[1] == len(steps)
                    else {}
                ),
            )
        )
    # A change that saves no step time (its ops are hidden behind others) is not worth making.
    saving = sorted((a for a in actions if a.saving_us > 0), key=lambda a: -a.saving_us)
    return saving + [
        Action(
            cause=f.cause,
            ops=tuple(OpRef(r.module, r.program_id, r.name) for r in f.ops),
            saving_us=0.0,
            frame="wall" if steps else "device-time",
            op_saving_us=f.op_saving_us,
            evidence=f.evidence,
            change=f.change,
        )
        for f in unclaimed
    ]


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


def step_savings(totals: StepTotals, count: int) -> np.ndarray:
    """Per change (the first `count` asked of `step_totals`) and step: how much the step's wall
    time falls (us). A step's wall runs from its first device's start to its last device's end;
    each device's end moves up by its own saving."""
    ran = totals.ran
    out = np.zeros((count, ran.shape[1]))
    if not ran.any() or totals.change_saving_ps.shape[0] < count:
        return out
    first = np.where(ran, totals.first_ps, np.iinfo(np.int64).max).min(axis=0)
    last = np.where(ran, totals.last_ps, np.iinfo(np.int64).min).max(axis=0)
    ran_step = ran.any(axis=0)
    for c in range(count):
        ends = np.where(ran, totals.last_ps - totals.change_saving_ps[c], -np.inf).max(axis=0)
        shorter = np.where(ran_step, last - np.maximum(ends, first), 0.0)
        out[c] = np.clip(shorter, 0.0, None) / 1e6
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
