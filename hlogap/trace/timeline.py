"""The selected events themselves, one host at a time, for a timeline export.

Every other per-host task reduces a host's events to per-op or per-step sums; a timeline export
(`audit -o trace.json.gz`) needs each event's time, so this task hands the selected events back
as columns. The audit runs it only when such an export is asked for.
"""

from __future__ import annotations

import numpy as np
from msgspec import Struct

from hlogap.trace.model import OpKey, TraceData
from hlogap.trace.summary import Selection
from hlogap.trace.timing import take


class HostEvents(Struct, frozen=True):
    """One host's selected op events, sorted by device then start; `op` indexes `ops`,
    `device` indexes `devices` (the host's own, in the order the run numbers them) and `line`
    indexes `lines` (the profile's lines, in its order)."""

    devices: list[str]  # each device's plane, with its ordinal where the plane name lacks it
    ops: list[OpKey]
    lines: list[str]  # as the profile names them: `Stream #7(Compute)`, `XLA Ops`, a thread
    device: np.ndarray  # int32
    op: np.ndarray  # int32
    line: np.ndarray  # int32
    start_ps: np.ndarray  # int64, on the device's clock
    duration_ps: np.ndarray  # int64
    self_ps: np.ndarray  # int64: the duration less the op events nested in it


class Timeline(Struct, frozen=True):
    """Every host's events (hosts in the run's order), and the instant the report's `start_us`
    figures count from."""

    hosts: list[str]
    events: list[HostEvents]
    origin_ps: int


def host_events(trace: TraceData, selection: Selection) -> HostEvents:
    """The host's events that the audit covers (`selection`), as `HostEvents`."""
    selected = selection.events(trace)
    device = take(trace.device_index, selected)
    start = take(trace.start_ps, selected)
    order = np.lexsort((start, device))
    names = [
        d.plane if d.plane.endswith(f":{d.ordinal}") else f"{d.plane} device {d.ordinal}"
        for d in trace.devices
    ]
    # Each event's line: the runs of `trace.lines` laid over the columns, lines in the
    # profile's order.
    lines: dict[str, int] = {}
    run_line = np.array([lines.setdefault(name, len(lines)) for name, _ in trace.lines])
    line = np.repeat(run_line.astype(np.int32), [count for _, count in trace.lines])
    return HostEvents(
        devices=names,
        ops=[o.key for o in trace.ops],
        lines=list(lines),
        device=device[order].astype(np.int32),
        op=take(trace.op_index, selected)[order].astype(np.int32),
        line=take(line, selected)[order].astype(np.int32),
        start_ps=start[order],
        duration_ps=take(trace.duration_ps, selected)[order],
        self_ps=take(trace.self_ps, selected)[order],
    )
