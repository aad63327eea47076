"""Steps: where each step's time goes on the devices (docs/json.md, `steps`).

A step is an annotated step of the program (`StepTraceAnnotation`), else one execution of the
module that takes most device time. Per step and device, time is busy (at least one op runs)
or idle; busy time splits into time at the ops' roofline bound and time lost in them. Exposed
communication is busy time when only collectives or host transfers run.
"""

from __future__ import annotations

import numpy as np

from hlogap.bounds.roofline import BoundBy
from hlogap.hlo.opcodes import COLLECTIVE_OPCODES
from hlogap.report.model import OpRow, StepRow
from hlogap.trace.model import Step, TraceData

# Ops whose time is data in flight between devices or to the host, not compute.
COMMUNICATION: frozenset[BoundBy] = frozenset({"communication"})


def step_rows(trace: TraceData, selected: np.ndarray, rows: list[OpRow]) -> list[StepRow]:
    """One row per step, over the selected events; [] when the trace shows no step."""
    op_keys = {(o.key.module, o.key.program_id, o.key.name): i for i, o in enumerate(trace.ops)}
    n_ops = len(trace.ops)
    bound_per_occurrence = np.zeros(n_ops)
    is_comm = np.zeros(n_ops, dtype=bool)
    for row in rows:
        i = op_keys[(row.module, row.program_id, row.name)]
        bound_per_occurrence[i] = row.bound_us / row.occurrences if row.occurrences else 0.0
        base = row.opcode.removesuffix("-start").removesuffix("-done")
        is_comm[i] = row.bound_by in COMMUNICATION or base in COLLECTIVE_OPCODES
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
        busy += _covered(*_merged(start[mine], end[mine]), window_start, window_end)
        work = mine & ~is_comm[op]
        compute += _covered(*_merged(start[work], end[work]), window_start, window_end)
    # Each event and occurrence counts in the step it starts in.
    step_of = np.searchsorted(window_start, start, side="right") - 1
    inside = (step_of >= 0) & (start < window_end[np.maximum(step_of, 0)])
    measured = np.bincount(
        step_of[inside], weights=trace.self_ps[index][inside], minlength=len(steps)
    )
    occurrence = trace.occurrence[index]
    _, first = np.unique(occurrence, return_index=True)
    first = first[inside[first]]
    bound = np.bincount(
        step_of[first], weights=bound_per_occurrence[op[first]], minlength=len(steps)
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


def _module_steps(trace: TraceData, index: np.ndarray) -> list[Step]:
    """Executions of the module that takes most device time: the k-th on every device is
    step k, from the first of them to start to the last to end."""
    known = index[trace.execution[index] >= 0]
    if not len(known):
        return []
    modules = np.array([o.key.module for o in trace.ops])
    module_of = modules[trace.op_index[known]]
    _, inverse = np.unique(module_of, return_inverse=True)
    time = np.bincount(inverse.ravel(), weights=trace.self_ps[known])
    mine = known[inverse.ravel() == int(np.argmax(time))]
    device = trace.device_index[mine].astype(np.int64)
    execution = trace.execution[mine]
    start = trace.start_ps[mine]
    end = start + trace.duration_ps[mine]
    spans: dict[int, list[tuple[int, int]]] = {}
    keys = np.stack([device, execution], axis=1)
    unique, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    first = np.full(len(unique), np.iinfo(np.int64).max)
    last = np.full(len(unique), np.iinfo(np.int64).min)
    np.minimum.at(first, inverse, start)
    np.maximum.at(last, inverse, end)
    for (d, _), a, b in zip(unique.tolist(), first.tolist(), last.tolist(), strict=True):
        spans.setdefault(d, []).append((a, b))
    ordered = [sorted(v) for v in spans.values()]
    steps = []
    for k in range(max(len(v) for v in ordered)):
        kth = [v[k] for v in ordered if len(v) > k]
        steps.append(Step(k, "module", min(a for a, _ in kth), max(b for _, b in kth)))
    return steps


def _merged(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as sorted disjoint intervals."""
    if not len(start):
        return start, end
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    at = np.flatnonzero(new)
    return s[at], np.maximum.reduceat(e, at)


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
