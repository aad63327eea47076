"""`--what-if CHIP`: the same ops bounded on another chip (their FLOPs, bytes and link bytes
against its peaks): the ceiling on the speedup, the ops that would then take longest, and the ops
near this chip's roof already, which cap the gain (Amdahl)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hlogap.report.model import OpRow, StepRow, WhatIf, step_ratio
from hlogap.trace.model import OpKey

NEAR_ROOF = 0.8  # efficiency here from which an op is "at the roof already"
TOP = 5


def ceiling_change(rows: Sequence[OpRow], chip: str) -> dict[OpKey, float] | None:
    """The fraction of its time each op would take at the other chip's bound, for re-timing
    the steps; None when some op would be slower there (a step cannot be re-timed longer)."""
    change: dict[OpKey, float] = {}
    for r in rows:
        other = (r.what_if_us or {}).get(chip)
        if other is None or r.measured_us <= 0 or r.bound_by == "unmodeled":
            continue
        if other > r.measured_us:
            return None
        change[OpKey(r.module, r.program_id, r.name)] = other / r.measured_us
    return change


def what_if(
    rows: Sequence[OpRow],
    chip: str,
    steps: Sequence[StepRow],
    warmup: int,
    step_saved_us: np.ndarray | None,
) -> WhatIf:
    """The ceiling on another chip; `step_saved_us` per step (from re-timing the steps with
    `ceiling_change`), or None where the steps could not be re-timed; `warmup`: the leading
    warm-up steps (the report's `step_summary.warmup_steps`)."""
    measured = sum(r.measured_us for r in rows)
    then: list[tuple[float, OpRow]] = []
    unmodeled = 0.0
    for r in rows:
        other = (r.what_if_us or {}).get(chip)
        if other is None or r.bound_by == "unmodeled":
            unmodeled += r.measured_us
            then.append((r.measured_us, r))  # neither chip bounds it: its time is kept
        else:
            then.append((other, r))
    total = sum(t for t, _ in then)
    step_speedup = None
    if step_saved_us is not None and steps and len(step_saved_us) == len(steps):
        # The steady steps, each against itself (the summary's frame).
        walls = [s.wall_us for s in steps[warmup:]]
        saved = step_saved_us[warmup:].tolist()
        after = [max(w - d, 0.0) for w, d in zip(walls, saved, strict=True)]
        step_speedup = step_ratio(walls, after)
    step_unavailable = None
    if step_speedup is None:
        step_unavailable = _why_no_step(rows, chip, steps)
    near_roof = sorted(
        (
            (t, r)
            for t, r in then
            if (r.efficiency or 0.0) >= NEAR_ROOF and t >= 0.5 * r.measured_us > 0
        ),
        key=lambda x: -x[0],
    )
    return WhatIf(
        chip=chip,
        speedup=measured / total if total > 0 else None,
        step_speedup=step_speedup,
        new_top_ops=[r.name for _, r in sorted(then, key=lambda x: -x[0])[:TOP]],
        capped_by=[r.name for _, r in near_roof[:3]],
        unmodeled_us=unmodeled,
        step_unavailable=step_unavailable,
    )


def _why_no_step(rows: Sequence[OpRow], chip: str, steps: Sequence[StepRow]) -> str:
    """Why the steps were not re-timed on the other chip, with the ops that stopped it."""
    if not steps:
        return "no steps to re-time"
    slower = sorted(
        (
            ((r.what_if_us or {}).get(chip, 0.0) / r.measured_us, r.name)
            for r in rows
            if r.measured_us > 0
            and r.bound_by != "unmodeled"
            and (r.what_if_us or {}).get(chip, 0.0) > r.measured_us
        ),
        reverse=True,
    )
    if not slower:
        return "every step would re-time to nothing"
    ratio, name = slower[0]
    return (
        f"{len(slower)} op(s) would take longer at their bound there than measured here "
        f"({name} {ratio:.2f}x), and a step is only re-timed shorter"
    )
