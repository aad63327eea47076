"""Op timings: per-op totals over the event columns, with numpy (no per-event Python)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hlogap.xplane import TraceData


@dataclass
class OpTimes:
    """Per op (indexed like `TraceData.ops`), over the selected devices."""

    measured_ps: np.ndarray  # float64: sum of the op's self time
    duration_ps: np.ndarray  # float64: sum of the op's event durations (incl. nested ops)
    events: np.ndarray  # int64: events (kernels on GPU)
    occurrences: np.ndarray  # int64: executions (GPU: consecutive kernels of one op are one)
    devices: int  # devices that ran at least one selected op


def time_ops(trace: TraceData, device: int | None = None) -> OpTimes:
    """Sum the events of every op; `device` keeps only events of devices with that ordinal."""
    n = len(trace.ops)
    keep = None
    if device is not None:
        ordinals = np.array([d.ordinal for d in trace.devices], dtype=np.int64)
        keep = ordinals[trace.device_index] == device if len(trace.devices) else None
    op_index = trace.op_index if keep is None else trace.op_index[keep]

    def total(values: np.ndarray) -> np.ndarray:
        v = values if keep is None else values[keep]
        return np.bincount(op_index, weights=v, minlength=n)

    dev_index = trace.device_index if keep is None else trace.device_index[keep]
    return OpTimes(
        measured_ps=total(trace.self_ps),
        duration_ps=total(trace.duration_ps),
        events=np.bincount(op_index, minlength=n).astype(np.int64),
        occurrences=total(trace.occurrence_start).astype(np.int64),
        devices=len(np.unique(dev_index)),
    )
