"""A timeline export's tracks (`audit --format perfetto`), worked out from the events the report
holds (`AuditReport.timeline`) so that the trace-event renderer only lays them out:

- each device's op events on one track per line of the profile (a GPU's `Stream #7(Compute)`,
  a TPU's `XLA Ops`, an XLA:CPU thread), with more tracks after a line's own only where its
  events overlap (a TPU while loop holds its body's ops): as few as keep them apart;
- each device's idle gaps, its exposed communication (a collective running while no compute
  op does) and its exposed host transfers (only host transfers running): the step pass's split
  (hlogap.trace.steps), inside the device's own steps (without steps: between its first and
  last op);
- the steps, on tracks of their own where skew makes them overlap.

Times are picoseconds from the instant the report's `start_us` figures count from.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from hlogap.report.model import AuditReport, OpRef, OpRow, StepRow
from hlogap.rows.steps import op_step_costs
from hlogap.trace.model import OpKey
from hlogap.trace.timing import merged_intervals

IDLE_TRACK, EXPOSED_TRACK, HOST_TRACK = "idle", "exposed communication", "exposed host transfers"


@dataclass(frozen=True)
class Spans:
    """A track of time spans (sorted, disjoint), in picoseconds from the report's origin."""

    title: str
    start_ps: np.ndarray  # int64
    end_ps: np.ndarray  # int64


@dataclass(frozen=True)
class DeviceTracks:
    """One device's op events on their tracks, sorted by start, then its spans' tracks."""

    name: str  # `host device`, as the run names them
    track_names: list[str]  # the op tracks', numbered from 0
    ops: list[OpRef]  # what `op` indexes: the host's ops
    rows: list[OpRow | None]  # each op's row, by `op` (None: an op the report does not list)
    op: np.ndarray  # int32, per event
    start_ps: np.ndarray  # int64, from the report's origin
    end_ps: np.ndarray  # int64
    self_ps: np.ndarray  # int64: the event's duration less the op events nested in it
    track: np.ndarray  # int64: the event's op track
    spans: tuple[Spans, Spans, Spans]  # idle, exposed communication, exposed host transfers


def lanes(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The fewest lanes (numbered from 0) that hold events sorted by start with no two of a
    lane overlapping: each event takes the free lane that ended first, as interval
    partitioning does."""
    lane = np.zeros(len(start), dtype=np.int64)
    if len(start) < 2 or bool(np.all(start[1:] >= np.maximum.accumulate(end)[:-1])):
        return lane  # nothing overlaps: one lane, no walk
    free: list[tuple[int, int]] = []  # (end, lane) of each lane's last event
    used = 0
    for k, (s, e) in enumerate(zip(start.tolist(), end.tolist())):
        if free and free[0][0] <= s:
            _, lane_k = heapq.heappop(free)
        else:
            lane_k, used = used, used + 1
        lane[k] = lane_k
        heapq.heappush(free, (e, lane_k))
    return lane


def tracks(
    line: np.ndarray, start: np.ndarray, end: np.ndarray, line_names: list[str]
) -> tuple[np.ndarray, list[str]]:
    """Each event's track (numbered from 0) and the tracks' names: one track per line of the
    profile, in its order and named as it names them (`Stream #7(Compute)`, `XLA Ops`), and
    more after a line's own where its events overlap (`XLA Ops (running at once 2)`: a while
    loop and its body's ops, XLA:CPU's thread pool), as few as keep them apart (`lanes`).
    Events sorted by start."""
    track = np.zeros(len(line), dtype=np.int64)
    names: list[str] = []
    for k in np.unique(line).tolist():
        mine = np.flatnonzero(line == k)
        lane = lanes(start[mine], end[mine])
        track[mine] = len(names) + lane
        title = line_names[k] or "ops"
        names += [
            title,
            *(f"{title} (running at once {n + 1})" for n in range(1, int(lane.max()) + 1)),
        ]
    return track, names


def step_tracks(steps: list[StepRow]) -> tuple[np.ndarray, list[str]]:
    """Steps sorted by start, each on a track: a step runs from its first device's start to
    its last device's end, so with skew steps overlap, and go on tracks of their own there."""
    start = np.array([s.start_us for s in steps], dtype=np.float64)
    end = start + np.array([s.wall_us for s in steps], dtype=np.float64)
    return tracks(np.zeros(len(steps), dtype=np.int32), start, end, ["steps"])


def device_tracks(report: AuditReport) -> Iterator[DeviceTracks]:
    """Every device's tracks, hosts in the run's order, each host's devices in its order."""
    timeline = report.timeline
    assert timeline is not None, "a timeline export needs the profile's events"
    by_key = {OpKey(r.module, r.program_id, r.name): r for r in report.ops}
    costs = op_step_costs(report.ops)
    windows = _device_windows(report)
    device = 0
    for host, events in zip(timeline.hosts, timeline.events, strict=True):
        refs = [OpRef(k.module, k.program_id, k.name) for k in events.ops]
        rows = [by_key.get(k) for k in events.ops]
        collective = np.array([k in costs.collective for k in events.ops], dtype=bool)
        transfer = np.array([k in costs.host for k in events.ops], dtype=bool)
        for local, device_name in enumerate(events.devices):
            mine = events.device == local
            op = events.op[mine]
            start = events.start_ps[mine]
            end = start + events.duration_ps[mine]
            track, names = tracks(events.line[mine], start, end, events.lines)
            origin = timeline.origin_ps
            spans = _spans(start, end, collective[op], transfer[op], windows.get(device), origin)
            yield DeviceTracks(
                f"{host} {device_name}",
                names,
                refs,
                rows,
                op,
                start - origin,
                end - origin,
                events.self_ps[mine],
                track,
                spans,
            )
            device += 1


def _spans(
    start: np.ndarray,
    end: np.ndarray,
    collective: np.ndarray,
    host: np.ndarray,
    windows: list[tuple[float, float]] | None,
    origin_ps: int,
) -> tuple[Spans, Spans, Spans]:
    """A device's idle gaps, exposed communication (a collective runs and no compute op does)
    and exposed host transfers (only host transfers run), inside its own steps where it has
    any; `collective` and `host` say which events are which."""
    busy_start, busy_end = merged_intervals(start, end)
    gap_start, gap_end = busy_end[:-1], busy_start[1:]
    lo = hi = None
    if windows is not None:
        lo = np.array([origin_ps + round(a * 1e6) for a, _ in windows], dtype=np.int64)
        hi = np.array([origin_ps + round(b * 1e6) for _, b in windows], dtype=np.int64)
        step_of = np.searchsorted(lo, gap_start, side="right") - 1
        inside = (step_of >= 0) & (gap_end <= hi[np.maximum(step_of, 0)])
        gap_start, gap_end = gap_start[inside], gap_end[inside]
    found = [Spans(IDLE_TRACK, gap_start - origin_ps, gap_end - origin_ps)]
    for title, alone, beside in (
        (EXPOSED_TRACK, collective, ~(collective | host)),
        (HOST_TRACK, host, ~host),
    ):
        span_start, span_end = _minus(
            *merged_intervals(start[alone], end[alone]),
            *merged_intervals(start[beside], end[beside]),
        )
        if lo is not None and hi is not None:
            span_start, span_end = _within(span_start, span_end, lo, hi)
        found.append(Spans(title, span_start - origin_ps, span_end - origin_ps))
    return found[0], found[1], found[2]


def _minus(
    a_start: np.ndarray, a_end: np.ndarray, b_start: np.ndarray, b_end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals `a` less disjoint sorted intervals `b`."""
    if not len(b_start) or not len(a_start):
        return a_start, a_end
    # `a` cut by the gaps of `b` (and what lies before and after `b`).
    gap_start = np.concatenate([[np.iinfo(np.int64).min], b_end])
    gap_end = np.concatenate([b_start, [np.iinfo(np.int64).max]])
    starts, ends = [], []
    first = np.searchsorted(gap_end, a_start, side="right")
    last = np.searchsorted(gap_start, a_end, side="left")
    for lo, hi, s, e in zip(first.tolist(), last.tolist(), a_start.tolist(), a_end.tolist()):
        for g in range(lo, hi):
            cut_start, cut_end = max(s, int(gap_start[g])), min(e, int(gap_end[g]))
            if cut_end > cut_start:
                starts.append(cut_start)
                ends.append(cut_end)
    return np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64)


def _within(
    start: np.ndarray, end: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals cut to the sorted disjoint windows `[lo, hi]`: less what lies
    between the windows (and before the first, after the last)."""
    big = np.iinfo(np.int64)
    return _minus(start, end, np.concatenate([[big.min], hi]), np.concatenate([lo, [big.max]]))


def _device_windows(report: AuditReport) -> dict[int, list[tuple[float, float]]]:
    """Per device of the run: its own (start_us, end_us) in each step, in step order."""
    windows: dict[int, list[tuple[float, float]]] = {}
    for step in report.steps:
        for part in step.per_device:
            windows.setdefault(part.device, []).append(
                (part.start_us, part.start_us + part.wall_us)
            )
    return {d: sorted(w) for d, w in windows.items()}
