"""The steps' summary: the warm-up steps, and over the steady steps after them the median step,
the devices' own step time split into time at the bound, time lost in ops and idle time, and
what the FLOP rates divide by. Made once per list of steps (`AuditReport.step_summary`) and
read by the summary's JSON, the gate, `diff`, the advice and the renderers."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hlogap.report.codec import meta

if TYPE_CHECKING:
    from hlogap.report.model import StepRow

# A leading step this many times the median step's wall is warm-up (compilation, autotuning,
# the first input): the summary's figures leave it out and say which (a 2.5 s first step beside
# 125 ms ones made a run read 79% idle where its steady steps sit 1% idle).
WARMUP_FACTOR = 1.5


def warmup_steps(walls: Sequence[float]) -> int:
    """How many leading steps (in order) are warm-up: each over `WARMUP_FACTOR` times the
    median wall of all steps. One step at least is kept steady."""
    if len(walls) < 2:
        return 0
    limit = WARMUP_FACTOR * statistics.median(walls)
    count = 0
    while count < len(walls) - 1 and walls[count] > limit:
        count += 1
    return count


def step_ratio(walls: Sequence[float], shorter: Sequence[float]) -> float | None:
    """The median over steps of each step's wall over its wall after a change (each step
    against itself: the medians of the two lists may come from different steps)."""
    ratios = [w / t for w, t in zip(walls, shorter, strict=True) if t > 0]
    return statistics.median(ratios) if ratios and len(ratios) == len(walls) else None


@dataclass(frozen=True)
class StepSummary:
    """The summary's step keys (docs/json.md, fields in their order), over the steady steps:
    the median step (wall time), and the devices' own step time (device time) split into time
    at the roofline bound, time lost inside ops and idle time (they add up to
    `device_wall_us`). The fields after `lost_in_ops_us` are not written."""

    steps: int  # steady steps
    warmup_steps: int  # leading steps left out (`warmup_steps`)
    step_us: float | None  # the median steady step's wall
    skew_us: float | None
    # The median step at the median step's own ratio of wall to wall at the bound.
    step_bound_us: float | None
    device_wall_us: float
    # The devices' own steps over the steps' wall on every device: the rest is before a
    # device's first op or after its last (skew, host work, input, launch).
    device_span_fraction: float | None
    # Device time: from the step's start to each device's first op, and from each device's
    # last op to the step's end (None: a report without the devices' parts).
    before_first_op_us: float | None
    after_last_op_us: float | None
    busy_us: float
    idle_us: float
    idle_fraction: float | None
    exposed_comm_us: float
    exposed_host_us: float
    at_bound_us: float
    lost_in_ops_us: float
    # The median of each steady step's wall over its wall with every op at its bound (None:
    # a step without that wall).
    bound_ratio: float | None = field(metadata=meta(written="never"))
    # The steady steps' wall on every device, in seconds, and their FLOPs: the FLOP rates'.
    device_seconds: float = field(metadata=meta(written="never"))
    flops: float = field(metadata=meta(written="never"))

    @classmethod
    def of_steps(cls, steps: Sequence[StepRow]) -> StepSummary:
        warmup = warmup_steps([s.wall_us for s in steps])
        steady = list(steps[warmup:])
        device_wall = sum(s.device_wall_us for s in steady)
        window = sum(s.wall_us * s.devices for s in steady)
        idle = sum(s.idle_us for s in steady)
        before_first = sum(d for s in steady for d in s.first_op_delays_us())
        parted = bool(steady) and all(s.device_rows for s in steady)
        walls = [s.wall_us for s in steady]
        step_us = _median(walls)
        bound_walls = [s.bound_wall_us for s in steady if s.bound_wall_us is not None]
        ratio = step_ratio(walls, bound_walls) if len(bound_walls) == len(steady) else None
        return cls(
            steps=len(steady),
            warmup_steps=warmup,
            step_us=step_us,
            skew_us=_median([s.skew_us for s in steady]),
            step_bound_us=step_us / ratio if ratio and step_us is not None else None,
            device_wall_us=device_wall,
            device_span_fraction=device_wall / window if window > 0 else None,
            before_first_op_us=before_first if parted else None,
            after_last_op_us=window - device_wall - before_first if parted else None,
            busy_us=sum(s.busy_us for s in steady),
            idle_us=idle,
            idle_fraction=idle / device_wall if device_wall > 0 else None,
            exposed_comm_us=sum(s.exposed_comm_us for s in steady),
            exposed_host_us=sum(s.exposed_host_us for s in steady),
            at_bound_us=sum(s.at_bound_us for s in steady),
            lost_in_ops_us=sum(s.lost_in_ops_us for s in steady),
            bound_ratio=ratio,
            device_seconds=window * 1e-6,
            flops=sum(s.flops for s in steady),
        )


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None
