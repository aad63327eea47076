"""Steps: where each step's time goes, device by device (docs/json.md, `steps`).

A step is an annotated step of the program (`StepTraceAnnotation`), else one execution of the
module that takes most device time (hlogap.trace.steps). Each device's part of a step runs from
its first op start to its last op end; in it the device is busy (at least one op runs) or idle.
Skew between devices (one starts later than another) is reported as skew, never as idle.
Exposed communication is busy time when a collective runs and no compute op does; exposed host
time, when only transfers to or from host memory run.
"""

from __future__ import annotations

import numpy as np

from hlogap.hlo.opcodes import is_transfer
from hlogap.report.model import DeviceStep, OpRow, StepRow
from hlogap.trace.model import OpKey, Step
from hlogap.trace.steps import FIRST_NONE, OpStepCosts, StepTotals
from hlogap.trace.summary import RunSummary


def op_step_costs(rows: list[OpRow]) -> OpStepCosts:
    """What hosts need to split the ops' bounds and FLOPs over steps and devices."""
    bound: dict[OpKey, float] = {}
    flops: dict[OpKey, float] = {}
    at_bound: dict[OpKey, float] = {}
    collective: set[OpKey] = set()
    host: set[OpKey] = set()
    for row in rows:
        key = OpKey(row.module, row.program_id, row.name)
        bound[key] = row.bound_us / row.occurrences if row.occurrences else 0.0
        flops[key] = row.flops
        modeled = row.bound_by != "unmodeled" and row.measured_us > 0
        at_bound[key] = min(row.bound_us / row.measured_us, 1.0) if modeled else 1.0
        if row.bound_by == "host":
            host.add(key)
        elif row.bound_by == "communication" or is_transfer(row.opcode):
            collective.add(key)
    return OpStepCosts(bound, flops, at_bound, frozenset(collective), frozenset(host))


def step_rows(run: RunSummary, steps: list[Step], totals: list[StepTotals]) -> list[StepRow]:
    """One row per step from every host's `StepTotals` (stacked in host order: a row of the
    stack is a device of the run)."""
    if not steps or not totals or run.origin_ps is None or not run.times.devices:
        return []
    t = totals[0]
    for more in totals[1:]:
        t = t.stacked(more)
    origin = min(run.origin_ps, min(s.start_ps for s in steps))  # the profile's first event
    rows: list[StepRow] = []
    for k, s in enumerate(steps):
        ran = np.flatnonzero(t.first_ps[:, k] != FIRST_NONE)
        first, last = t.first_ps[ran, k], t.last_ps[ran, k]
        wall = (last - first) / 1e6
        busy = t.busy_ps[ran, k] / 1e6
        compute, no_host = t.compute_ps[ran, k] / 1e6, t.no_host_ps[ran, k] / 1e6
        bound_wall = np.maximum(wall - t.saving_ps[ran, k] / 1e6, 0.0)
        per_device = tuple(
            DeviceStep(
                device=int(d),
                start_us=(int(first[i]) - origin) / 1e6,
                wall_us=float(wall[i]),
                busy_us=float(busy[i]),
                exposed_comm_us=float(no_host[i] - compute[i]),
                exposed_host_us=float(busy[i] - no_host[i]),
                measured_us=float(t.measured_ps[d, k]) / 1e6,
                bound_us=float(t.bound_us[d, k]),
                bound_wall_us=float(bound_wall[i]),
            )
            for i, d in enumerate(ran.tolist())
        )
        step_wall = (s.end_ps - s.start_ps) / 1e6
        if len(ran):
            # The step ends with its last device: at the bound, with each device's own end
            # moved earlier by what it saves (time in the window after every device is kept).
            ends_now = (first - s.start_ps) / 1e6 + wall
            ends_at_bound = (first - s.start_ps) / 1e6 + bound_wall
            step_bound = step_wall - (float(ends_now.max()) - float(ends_at_bound.max()))
        else:
            step_bound = step_wall
        rows.append(
            StepRow(
                step=s.number,
                source=s.source,
                start_us=(s.start_ps - origin) / 1e6,
                wall_us=step_wall,
                devices=len(ran),
                busy_us=float(busy.sum()),
                measured_us=float(t.measured_ps[:, k].sum()) / 1e6,
                bound_us=float(t.bound_us[:, k].sum()),
                exposed_comm_us=sum(d.exposed_comm_us for d in per_device),
                exposed_host_us=sum(d.exposed_host_us for d in per_device),
                idle_us=sum(d.idle_us for d in per_device),
                device_wall_us=float(wall.sum()),
                skew_us=float(first.max() - first.min()) / 1e6 if len(ran) else 0.0,
                slowest_device=int(ran[int(np.argmax(wall))]) if len(ran) else None,
                bound_wall_us=max(step_bound, 0.0),
                flops=float(t.flops[:, k].sum()),
                per_device=per_device,
            )
        )
    return rows
