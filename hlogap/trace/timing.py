"""Op timings: per-op totals over the event columns, with numpy (no per-event Python)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from hlogap.trace.model import TraceData


@dataclass
class OpTimes:
    """Per op (indexed like `TraceData.ops`), over the selected devices."""

    measured_ps: np.ndarray  # float64: sum of the op's self time
    duration_ps: np.ndarray  # float64: sum of the op's event durations (incl. nested ops)
    events: np.ndarray  # int64: events (kernels on GPU)
    occurrences: np.ndarray  # int64: executions (GPU: consecutive kernels of one op are one)
    median_ps: np.ndarray  # float64: median self time of one execution (robust to stragglers)
    devices: int  # devices that ran at least one selected op
    selected: np.ndarray  # bool per event of the trace: the events these totals cover


def select_events(
    trace: TraceData, device: int | None = None, module: re.Pattern[str] | None = None
) -> np.ndarray:
    """Which events an audit covers: `device` keeps only events of devices with that ordinal,
    `module` only events of ops in the modules it matches (everything after counts only them)."""
    keep = np.ones(trace.num_events, dtype=bool)
    if device is not None and len(trace.devices):
        ordinals = np.array([d.ordinal for d in trace.devices], dtype=np.int64)
        keep &= ordinals[trace.device_index] == device
    if module is not None and trace.ops:
        selected = np.array([bool(module.search(o.key.module)) for o in trace.ops], dtype=bool)
        keep &= selected[trace.op_index]
    return keep


def time_ops(
    trace: TraceData, device: int | None = None, module: re.Pattern[str] | None = None
) -> OpTimes:
    """Sum the selected events (`select_events`) of every op."""
    n = len(trace.ops)
    keep = select_events(trace, device, module)
    op_index = trace.op_index[keep]

    def total(values: np.ndarray) -> np.ndarray:
        return np.bincount(op_index, weights=values[keep], minlength=n)

    dev_index = trace.device_index[keep]
    # The kept occurrences (a selection keeps or drops an occurrence whole): op and time of each.
    first = trace.occurrence_first
    kept = keep[first]
    occurrence_op = trace.op_index[first[kept]]
    occurrence_ps = np.bincount(
        trace.occurrence[keep], weights=trace.self_ps[keep], minlength=len(first)
    )[kept]
    return OpTimes(
        measured_ps=total(trace.self_ps),
        duration_ps=total(trace.duration_ps),
        events=np.bincount(op_index, minlength=n).astype(np.int64),
        occurrences=np.bincount(occurrence_op, minlength=n).astype(np.int64),
        median_ps=_medians(occurrence_op, occurrence_ps, n),
        devices=len(np.unique(dev_index)),
        selected=keep,
    )


def _medians(op: np.ndarray, time: np.ndarray, n: int) -> np.ndarray:
    """Median over each op's occurrences of the occurrence's time (the sum of its events)."""
    if not len(op):
        return np.zeros(n)
    order = np.lexsort((time, op))
    sorted_time = time[order]
    counts = np.bincount(op, minlength=n)
    first = np.cumsum(counts) - counts
    last = len(sorted_time) - 1
    low = sorted_time[np.minimum(first + (counts - 1) // 2, last)]
    high = sorted_time[np.minimum(first + counts // 2, last)]
    median: np.ndarray = np.where(counts > 0, (low + high) / 2, 0.0)
    return median
