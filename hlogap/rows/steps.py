"""Steps: where each step's time goes, device by device (docs/json.md, `steps`).

A step is an annotated step of the program (`StepTraceAnnotation`), else one execution of the
module that takes most device time (hlogap.trace.steps). Each device's part of a step runs from
its first op start to its last op end; in it the device is busy (at least one op runs) or idle.
Skew between devices (one starts later than another) is reported as skew, never as idle.
Exposed communication is busy time when a collective runs and no compute op does; exposed host
time, when only transfers to or from host memory run.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hlogap.hlo.opcodes import is_transfer
from hlogap.report.model import OpRow, StepRow
from hlogap.trace.model import OpKey, Step
from hlogap.trace.steps import FIRST_NONE, OpStepCosts, OpWaits, StepTotals
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


def attribute_waits(rows: list[OpRow], waits: OpWaits) -> None:
    """Each op row's idle before it (`idle_before_us`, `idle_gaps`), from the step pass."""
    for row in rows:
        key = OpKey(row.module, row.program_id, row.name)
        row.idle_before_us = waits.idle_before_ps.get(key, 0) / 1e6
        row.idle_gaps = waits.gaps.get(key, 0)


def step_rows(run: RunSummary, steps: list[Step], totals: list[StepTotals]) -> list[StepRow]:
    """One row per step from every host's `StepTotals` (stacked in host order: a row of the
    stack is a device of the run). Whole columns at a time: 40 k steps on 4 devices are 160 k
    device parts."""
    if not steps or not totals or run.origin_ps is None or not run.times.devices:
        return []
    parts = _DeviceParts.of(StepTotals.stacked(totals))
    origin = min(run.origin_ps, min(s.start_ps for s in steps))  # the profile's first event
    step_start = np.array([s.start_ps for s in steps], dtype=np.int64)
    step_wall = np.array([s.end_ps - s.start_ps for s in steps], dtype=np.float64) / 1e6
    rows, cut = parts.rows(origin)
    columns = zip(
        steps,
        step_wall.tolist(),
        parts.ran.sum(axis=0).tolist(),
        parts.busy.sum(axis=0).tolist(),
        (parts.measured_ps.sum(axis=0) / 1e6).tolist(),
        parts.bound.sum(axis=0).tolist(),
        parts.exposed_comm.sum(axis=0).tolist(),
        parts.exposed_host.sum(axis=0).tolist(),
        parts.idle.sum(axis=0).tolist(),
        parts.wall.sum(axis=0).tolist(),
        (parts.skew_ps() / 1e6).tolist(),
        parts.slowest().tolist(),
        np.maximum(step_wall - parts.shorter_at_bound(step_start), 0.0).tolist(),
        parts.flops.sum(axis=0).tolist(),
        parts.lost().sum(axis=0).tolist(),
        strict=True,
    )
    return [
        StepRow(
            step=s.number,
            source=s.source,
            start_us=(s.start_ps - origin) / 1e6,
            wall_us=step_wall_us,
            devices=n,
            busy_us=busy_us,
            measured_us=measured_us,
            bound_us=bound_us,
            exposed_comm_us=comm_us,
            exposed_host_us=host_us,
            idle_us=idle_us,
            device_wall_us=device_wall_us,
            skew_us=skew_us,
            slowest_device=device if device >= 0 else None,
            bound_wall_us=bound_wall_us,
            flops=flops,
            device_rows=tuple(rows[cut[k] : cut[k + 1]]),
            lost_us=lost_us,
        )
        for k, (
            s,
            step_wall_us,
            n,
            busy_us,
            measured_us,
            bound_us,
            comm_us,
            host_us,
            idle_us,
            device_wall_us,
            skew_us,
            device,
            bound_wall_us,
            flops,
            lost_us,
        ) in enumerate(columns)
    ]


class _DeviceParts(NamedTuple):
    """Each device's part of each step, as (devices, steps) arrays in us (0 where the device
    ran no op in the step)."""

    ran: np.ndarray  # the device ran an op in the step
    first_ps: np.ndarray  # its first op's start (0: none)
    wall: np.ndarray  # its first op start to its last op end
    busy: np.ndarray
    idle: np.ndarray
    exposed_comm: np.ndarray
    exposed_host: np.ndarray
    bound_wall: np.ndarray  # its wall with every op at its bound
    measured_ps: np.ndarray  # self time of its ops that started in the step
    bound: np.ndarray  # their bound
    flops: np.ndarray

    @classmethod
    def of(cls, t: StepTotals) -> _DeviceParts:
        ran = t.first_ps != FIRST_NONE
        first = np.where(ran, t.first_ps, 0)
        wall = np.where(ran, t.last_ps - first, 0) / 1e6
        busy = np.where(ran, t.busy_ps, 0.0) / 1e6
        no_host, compute = t.no_host_ps / 1e6, t.compute_ps / 1e6
        return cls(
            ran=ran,
            first_ps=first,
            wall=wall,
            busy=busy,
            idle=np.maximum(wall - busy, 0.0),
            exposed_comm=np.where(ran, no_host - compute, 0.0),
            exposed_host=np.where(ran, busy - no_host, 0.0),
            bound_wall=np.where(ran, np.maximum(wall - t.saving_ps / 1e6, 0.0), 0.0),
            measured_ps=t.measured_ps,
            bound=t.bound_us,
            flops=t.flops,
        )

    def shorter_at_bound(self, step_start: np.ndarray) -> np.ndarray:
        """How much earlier each step ends with every op at its bound: the step ends with its
        last device, and each device's own end moves earlier by what it saves (time in the
        window after every device is kept)."""
        offset = (self.first_ps - step_start) / 1e6
        none = np.where(self.ran, 0.0, -np.inf)
        ends_now = (offset + self.wall + none).max(axis=0)
        ends_at_bound = (offset + self.bound_wall + none).max(axis=0)
        any_ran = self.ran.any(axis=0)
        # A step no device ran an op in ends at -inf both ways: nothing is subtracted there.
        shorter = np.zeros(self.ran.shape[1])
        shorter[any_ran] = ends_now[any_ran] - ends_at_bound[any_ran]
        return shorter

    def skew_ps(self) -> np.ndarray:
        """Per step: the latest device's first op start minus the earliest's (0: none ran)."""
        big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
        latest = np.where(self.ran, self.first_ps, small).max(axis=0)
        earliest = np.where(self.ran, self.first_ps, big).min(axis=0)
        return np.where(self.ran.any(axis=0), latest - earliest, 0)

    def slowest(self) -> np.ndarray:
        """Per step: the device with the longest own wall (-1: none ran)."""
        slowest = np.where(self.ran, self.wall, -1.0).argmax(axis=0)
        return np.where(self.ran.any(axis=0), slowest, -1)

    def lost(self) -> np.ndarray:
        """Each device's part's wall beyond its wall at the bound (`lost_in_ops_us`)."""
        return np.where(self.ran, np.maximum(self.wall - self.bound_wall, 0.0), 0.0)

    def rows(self, origin_ps: int) -> tuple[list[tuple[float, ...]], list[int]]:
        """Each device part as one row of values (DEVICE_STEP_KEYS), steps in order, devices
        in order within a step (rows zipped from whole columns), and where each step's rows
        start (`cut[k]:cut[k + 1]` are step k's)."""
        step_of, device_of = np.nonzero(self.ran.T)
        columns = (
            self.wall,
            self.busy,
            self.idle,
            self.exposed_comm,
            self.exposed_host,
            self.measured_ps / 1e6,
            self.bound,
            self.bound_wall,
        )
        rows = list(
            zip(
                device_of.tolist(),
                ((self.first_ps[device_of, step_of] - origin_ps) / 1e6).tolist(),
                *(column[device_of, step_of].tolist() for column in columns),
                strict=True,
            )
        )
        cut = np.concatenate([[0], np.cumsum(self.ran.sum(axis=0))]).tolist()
        return rows, cut
