"""Steps: where each step's time goes on the devices (docs/json.md, `steps`).

A step is an annotated step of the program (`StepTraceAnnotation`), else one execution of the
module that takes most device time. Per step and device, time is busy (at least one op runs)
or idle; busy time splits into time at the ops' roofline bound and time lost in them. Exposed
communication is busy time when only collectives or async transfers (copies, including host
offload, send/recv) run.
"""

from __future__ import annotations

import numpy as np

from hlogap.bounds.roofline import BoundBy
from hlogap.hlo.opcodes import is_transfer
from hlogap.report.model import OpRow, StepRow
from hlogap.trace.model import Step, TraceData
from hlogap.trace.timing import merged_intervals

# Ops whose time is data in flight between devices or to the host, not compute.
COMMUNICATION: frozenset[BoundBy] = frozenset({"communication", "host"})


def step_rows(trace: TraceData, selected: np.ndarray, rows: list[OpRow]) -> list[StepRow]:
    """One row per step, over the selected events; [] when the trace shows no step."""
    op_keys = {(o.key.module, o.key.program_id, o.key.name): i for i, o in enumerate(trace.ops)}
    n_ops = len(trace.ops)
    bound_per_occurrence = np.zeros(n_ops)
    is_comm = np.zeros(n_ops, dtype=bool)
    for row in rows:
        i = op_keys[(row.module, row.program_id, row.name)]
        bound_per_occurrence[i] = row.bound_us / row.occurrences if row.occurrences else 0.0
        is_comm[i] = row.bound_by in COMMUNICATION or is_transfer(row.opcode)
    index = np.flatnonzero(selected)
    if not len(index):
        return []
    op = trace.op_index[index]
    device = trace.device_index[index]
    start = trace.start_ps[index]
    end = start + trace.duration_ps[index]
    steps = trace.steps or _module_steps(trace, index)
    if not steps:
        return []
    window_start = np.array([s.start_ps for s in steps], dtype=np.int64)
    origin = min(int(trace.start_ps.min()), int(window_start.min()))  # the profile's first event
    window_end = np.array([s.end_ps for s in steps], dtype=np.int64)
    devices = np.unique(device)
    busy = np.zeros(len(steps))
    compute = np.zeros(len(steps))
    for d in devices.tolist():
        mine = device == d
        busy += _covered(*merged_intervals(start[mine], end[mine]), window_start, window_end)
        work = mine & ~is_comm[op]
        compute += _covered(*merged_intervals(start[work], end[work]), window_start, window_end)
    # Each event and occurrence counts in the step it starts in.
    step_of, inside = _step_of(start, window_start, window_end)
    measured = np.bincount(
        step_of[inside], weights=trace.self_ps[index][inside], minlength=len(steps)
    )
    first = trace.occurrence_first[selected[trace.occurrence_first]]
    first_step, first_inside = _step_of(trace.start_ps[first], window_start, window_end)
    bound = np.bincount(
        first_step[first_inside],
        weights=bound_per_occurrence[trace.op_index[first[first_inside]]],
        minlength=len(steps),
    )
    return [
        StepRow(
            step=s.number,
            source=s.source,
            start_us=(s.start_ps - origin) / 1e6,
            wall_us=(s.end_ps - s.start_ps) / 1e6,
            devices=len(devices),
            busy_us=float(busy[k]) / 1e6,
            measured_us=float(measured[k]) / 1e6,
            bound_us=float(bound[k]),
            exposed_comm_us=float(busy[k] - compute[k]) / 1e6,
        )
        for k, s in enumerate(steps)
    ]


def _step_of(
    start: np.ndarray, window_start: np.ndarray, window_end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The step each start falls in, and whether it falls in one at all."""
    step = np.searchsorted(window_start, start, side="right") - 1
    inside = (step >= 0) & (start < window_end[np.maximum(step, 0)])
    return step, inside


def _module_steps(trace: TraceData, index: np.ndarray) -> list[Step]:
    """Executions of the module that takes most device time: the k-th on every device is
    step k, from the first of them to start to the last to end."""
    known = index[trace.execution[index] >= 0]
    if not len(known):
        return []
    codes: dict[str, int] = {}
    module_code = np.array([codes.setdefault(o.key.module, len(codes)) for o in trace.ops])
    module_of = module_code[trace.op_index[known]]
    time = np.bincount(module_of, weights=trace.self_ps[known])
    mine = known[module_of == int(np.argmax(time))]
    device = trace.device_index[mine].astype(np.int64)
    execution = trace.execution[mine]  # dense per file: a small key space
    executions = int(execution.max()) + 1
    key = device * executions + execution
    size = (int(device.max()) + 1) * executions
    first = np.full(size, np.iinfo(np.int64).max)
    last = np.full(size, np.iinfo(np.int64).min)
    start = trace.start_ps[mine]
    np.minimum.at(first, key, start)
    np.maximum.at(last, key, start + trace.duration_ps[mine])
    ran = np.flatnonzero(last > np.iinfo(np.int64).min)
    spans: dict[int, list[tuple[int, int]]] = {}
    for k, a, b in zip(ran.tolist(), first[ran].tolist(), last[ran].tolist(), strict=True):
        spans.setdefault(k // executions, []).append((a, b))
    ordered = [sorted(v) for v in spans.values()]
    steps = []
    for k in range(max(len(v) for v in ordered)):
        kth = [v[k] for v in ordered if len(v) > k]
        steps.append(Step(k, "module", min(a for a, _ in kth), max(b for _, b in kth)))
    return steps


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
