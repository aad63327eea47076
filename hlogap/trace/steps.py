"""Steps on the devices' clock, host by host: the events of each host stay where they were read.

A step is an annotated step of the program (`StepTraceAnnotation`), else one execution of the
module that takes most device time: the k-th execution on every device of every host is step k,
from the first of them to start to the last to end (`module_spans`, `module_steps`). Given the
run's step windows, each host sums what its devices did in each (`step_totals`): busy time (at
least one op runs), busy time outside communication, self time and roofline bound of the events
and occurrences that start in the step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hlogap.trace.model import OpKey, Step, TraceData, devices_in
from hlogap.trace.summary import Selection
from hlogap.trace.timing import blocks, merged_intervals, take

Spans = list[tuple[np.ndarray, np.ndarray]]  # per device: sorted (first start, last end) arrays


def module_spans(trace: TraceData, selection: Selection, module: str) -> Spans:
    """Per device of the host: when each execution of `module` began and ended, in order."""
    in_module = np.array([o.key.module == module for o in trace.ops], dtype=bool)
    selected = selection.events(trace)
    if not trace.num_events or not in_module.any():
        return []
    # Executions are dense per file: (device, execution) keys span a small table.
    executions = max(int(trace.execution.max()) + 1, 1)
    first = np.full(len(trace.devices) * executions, np.iinfo(np.int64).max)
    last = np.full(len(first), np.iinfo(np.int64).min)
    for part in blocks(trace.num_events):  # a block at a time: the post-read peak
        execution = trace.execution[part]
        mine = selected[part] & (execution >= 0) & in_module[trace.op_index[part]]
        key = trace.device_index[part][mine].astype(np.int64) * executions + execution[mine]
        start = trace.start_ps[part][mine]
        np.minimum.at(first, key, start)
        np.maximum.at(last, key, start + trace.duration_ps[part][mine])
    ran = np.flatnonzero(last > np.iinfo(np.int64).min)
    spans: Spans = []
    for d in devices_in(ran // executions):
        at = ran[ran // executions == d]
        order = np.lexsort((last[at], first[at]))
        spans.append((first[at][order], last[at][order]))
    return spans


def module_steps(spans: Spans) -> list[Step]:
    """Step k from the k-th execution of every device (all hosts' `module_spans`)."""
    if not spans:
        return []
    # Devices by steps, padded where a device ran fewer executions (40 k steps: one pass).
    count = max(len(first) for first, _ in spans)
    begin = np.full((len(spans), count), np.iinfo(np.int64).max)
    end = np.full((len(spans), count), np.iinfo(np.int64).min)
    for d, (first, last) in enumerate(spans):
        begin[d, : len(first)] = first
        end[d, : len(last)] = last
    return [
        Step(k, "module", a, b)
        for k, (a, b) in enumerate(zip(begin.min(axis=0).tolist(), end.max(axis=0).tolist()))
    ]


@dataclass
class StepTotals:
    """Per step (the run's windows), what one host's devices did; hosts' totals add up."""

    busy_ps: np.ndarray  # float64: summed over devices
    compute_ps: np.ndarray  # float64: busy outside communication, summed over devices
    measured_ps: np.ndarray  # float64: self time of events starting in the step
    bound_us: np.ndarray  # float64: bound of occurrences starting in the step

    def __add__(self, other: StepTotals) -> StepTotals:
        return StepTotals(
            self.busy_ps + other.busy_ps,
            self.compute_ps + other.compute_ps,
            self.measured_ps + other.measured_ps,
            self.bound_us + other.bound_us,
        )


def step_totals(
    trace: TraceData,
    selection: Selection,
    windows: list[tuple[int, int]],
    bound_per_occurrence: dict[OpKey, float],
    communication: frozenset[OpKey],
) -> StepTotals:
    """One host's `StepTotals` over the selected events. `bound_per_occurrence` (us) and
    `communication` (ops whose time is data in flight) are the run's, by op key."""
    steps = len(windows)
    selected = selection.events(trace)
    busy, compute = np.zeros(steps), np.zeros(steps)
    if not steps or not selected.any():
        return StepTotals(busy, compute, np.zeros(steps), np.zeros(steps))
    window_start = np.array([a for a, _ in windows], dtype=np.int64)
    window_end = np.array([b for _, b in windows], dtype=np.int64)
    per_occurrence = np.array([bound_per_occurrence.get(o.key, 0.0) for o in trace.ops])
    is_comm = np.array([o.key in communication for o in trace.ops], dtype=bool)
    # Views of the trace's columns where everything is selected (`take`), and one device's
    # events at a time: the temporaries of a pass over every event were the post-read peak.
    op = take(trace.op_index, selected)
    device = take(trace.device_index, selected)
    start = take(trace.start_ps, selected)
    duration = take(trace.duration_ps, selected)
    self_ps = take(trace.self_ps, selected)
    any_communicating = bool(is_comm.any()) and bool(is_comm[op].any())
    measured = np.zeros(steps)
    for d in devices_in(device):
        mine = device == d
        mine_start = start[mine]
        mine_end = mine_start + duration[mine]
        covered = _covered(*merged_intervals(mine_start, mine_end), window_start, window_end)
        busy += covered
        if any_communicating:
            work = ~is_comm[op[mine]]
            covered = _covered(
                *merged_intervals(mine_start[work], mine_end[work]), window_start, window_end
            )
        compute += covered  # without communication, the busy time is all compute
        del mine_end
        # Each event counts in the step it starts in (sums of int64 ps below 2**53: exact in
        # float64 in any order).
        step_of, inside = _step_of(mine_start, window_start, window_end)
        measured += np.bincount(step_of[inside], weights=self_ps[mine][inside], minlength=steps)
    # Each occurrence counts in the step its first event starts in.
    bound = np.zeros(steps)
    for part in blocks(len(trace.occurrence_first)):
        first = trace.occurrence_first[part]
        first = first[selected[first]]
        first_step, first_inside = _step_of(trace.start_ps[first], window_start, window_end)
        bound += np.bincount(
            first_step[first_inside],
            weights=per_occurrence[trace.op_index[first[first_inside]]],
            minlength=steps,
        )
    return StepTotals(busy, compute, measured, bound)


def _step_of(
    start: np.ndarray, window_start: np.ndarray, window_end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The step each start falls in, and whether it falls in one at all."""
    step = np.searchsorted(window_start, start, side="right") - 1
    inside = (step >= 0) & (start < window_end[np.maximum(step, 0)])
    return step, inside


def _covered(s: np.ndarray, e: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For each window [a, b): how much of it the disjoint sorted intervals [s, e) cover."""
    if not len(s):
        return np.zeros(len(a))
    total = np.concatenate([[0], np.cumsum(e - s)])
    lo = np.searchsorted(e, a, side="right")  # first interval ending after a
    hi = np.searchsorted(s, b, side="left")  # intervals starting before b end at hi
    some = hi > lo
    covered = np.where(some, total[hi] - total[lo], 0).astype(np.float64)
    left = np.where(some, np.maximum(a - s[np.minimum(lo, len(s) - 1)], 0), 0)
    right = np.where(some, np.maximum(e[np.maximum(hi - 1, 0)] - b, 0), 0)
    result: np.ndarray = np.maximum(covered - left - right, 0.0)
    return result
