"""`--format perfetto` (`-o trace.json.gz`): the profile's timeline as Chrome trace-event JSON.

Perfetto (ui.perfetto.dev) and chrome://tracing open it. Each device is a process of the trace;
its ops are complete ("X") events on one thread per line of the profile they sit on, named as
the profile names it (a GPU's `Stream #7(Compute)` and NCCL stream, a TPU's `XLA Ops`, an
XLA:CPU worker thread), with more threads after a line's own only as its events overlap (a TPU
while loop holds its body's ops); each event has the op's bound, gap, efficiency and first hint
as args and a colour by efficiency. Beside the lanes,
each device has a track of its idle gaps (inside its own step, or between its first and last op
without steps), one of exposed communication (a collective running while no compute op does)
and one of exposed host transfers (only host transfers running), the report's split inside the
device's own steps; a process of its own holds the steps. Times count from the same instant as
the report's `start_us`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson

from hlogap.errors import UsageError
from hlogap.render.base import Document, DocumentKind, RenderOptions, register
from hlogap.report.model import AuditReport, OpRow, warmup_of
from hlogap.report.steps import op_step_costs
from hlogap.trace.model import OpKey
from hlogap.trace.timeline import HostEvents
from hlogap.trace.timing import merged_intervals

# chrome://tracing's reserved colour names, an event's `cname` (and its args' `band`, which
# Perfetto shows and filters on): efficiency at or above each floor.
EFFICIENCY_COLOURS = ((0.6, "good"), (0.3, "yellow"), (0.1, "bad"), (0.0, "terrible"))
UNMODELED_COLOUR = "grey"
STEPS_PID = 0
# A host done whose bound is within this fraction of its measured time is bounded by its waits
# (sums of per-execution bounds equal to the waits differ from their sum by rounding only).
AT_MEASURED = 1e-9
IDLE_TRACK, EXPOSED_TRACK, HOST_TRACK = "idle", "exposed communication", "exposed host transfers"
# Events made Python objects at a time before they are written out as JSON: tens of MB.
BATCH_EVENTS = 1 << 16


def colour_of(efficiency: float | None, bound_us: float | None = None) -> str:
    """The efficiency band's colour; grey where there is no bound to be efficient against: an
    unmodeled op, and an event whose bound is 0 (a `none` op, an async start whose transfer's
    wait shows on its done), as the op's row is read."""
    if efficiency is None or bound_us == 0:
        return UNMODELED_COLOUR
    for floor, name in EFFICIENCY_COLOURS:  # a loop, not next(generator): once per event
        if efficiency >= floor:
            return name
    return EFFICIENCY_COLOURS[-1][1]  # below every floor: a negative efficiency


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


def _gaps(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The gaps between sorted disjoint intervals."""
    return end[:-1], start[1:]


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


class TraceEventRenderer:
    name = "perfetto"
    # `.json.gz` is how Perfetto and chrome://tracing traces travel; a plain `.json` stays the
    # JSON report.
    extensions: tuple[str, ...] = (".trace.json", ".trace.json.gz", ".json.gz")
    kinds: frozenset[DocumentKind] = frozenset({"audit"})
    needs_timeline = True

    def render(self, document: Document, options: RenderOptions) -> str:
        return b"".join(self.render_chunks(document, options)).decode()

    def render_chunks(self, document: Document, options: RenderOptions) -> Iterator[bytes]:
        """The trace as UTF-8 JSON, a batch of events at a time: a profile's millions of
        events are never all Python objects at once."""
        if not isinstance(document, AuditReport) or document.timeline is None:
            raise UsageError(
                "--format perfetto needs the profile's events: audit a profile, not a saved report"
            )
        yield b'{"displayTimeUnit":"ns","traceEvents":['
        first = True
        for batch in self.batches(document):
            if batch:
                body = orjson.dumps(batch)[1:-1]  # the list's items, without its brackets
                yield body if first else b"," + body
                first = False
        yield b"]}\n"

    def batches(self, report: AuditReport) -> Iterator[list[dict[str, Any]]]:
        """The trace's events in batches: the steps, then each device's, in the run's order."""
        timeline = report.timeline
        assert timeline is not None
        events: list[dict[str, Any]] = [
            _name("process_name", STEPS_PID, 0, "steps"),
            _process_sort_index(STEPS_PID),
        ]
        # A step runs from its first device's start to its last device's end: with skew, steps
        # overlap, and go on tracks of their own there.
        warmup = {s.step for s in report.steps[: warmup_of(report.steps)]}
        steps = sorted(report.steps, key=lambda s: s.start_us)
        start = np.array([s.start_us for s in steps], dtype=np.float64)
        end = start + np.array([s.wall_us for s in steps], dtype=np.float64)
        track, names = tracks(np.zeros(len(steps), dtype=np.int32), start, end, ["steps"])
        for k, title in enumerate(names):
            events += [_name("thread_name", STEPS_PID, k, title), _sort_index(STEPS_PID, k)]
        for step, tid in zip(steps, track.tolist(), strict=True):
            events.append(
                {
                    "name": f"step {step.step}",
                    "cat": "step",
                    "ph": "X",
                    "pid": STEPS_PID,
                    "tid": tid,
                    "ts": step.start_us,
                    "dur": step.wall_us,
                    "args": {
                        "source": step.source,
                        # Left out of the summary's steps (and the actions' step figures).
                        "warmup": step.step in warmup,
                        "devices": step.devices,
                        "idle_us": step.idle_us,
                        "exposed_comm_us": step.exposed_comm_us,
                        "exposed_host_us": step.exposed_host_us,
                        "measured_us": step.measured_us,
                        "bound_us": step.bound_us,
                    },
                }
            )
        yield events
        rows = {OpKey(r.module, r.program_id, r.name): r for r in report.ops}
        costs = op_step_costs(report.ops)
        windows = _device_windows(report)
        pid = STEPS_PID
        for host, host_events in zip(timeline.hosts, timeline.events):
            for local, device_name in enumerate(host_events.devices):
                pid += 1
                yield from self._device(
                    host_events,
                    local,
                    pid,
                    f"{host} {device_name}",
                    rows,
                    (costs.collective, costs.host),
                    timeline.origin_ps,
                    windows.get(pid - 1),
                )

    def _device(
        self,
        host_events: HostEvents,
        local: int,
        pid: int,
        name: str,
        rows: dict[OpKey, OpRow],
        exposed: tuple[frozenset[OpKey], frozenset[OpKey]],
        origin_ps: int,
        windows: list[tuple[float, float]] | None,
    ) -> Iterator[list[dict[str, Any]]]:
        mine = host_events.device == local
        op = host_events.op[mine]
        start = host_events.start_ps[mine]
        end = start + host_events.duration_ps[mine]
        self_ps = host_events.self_ps[mine]
        line = host_events.line[mine]
        track, names = tracks(line, start, end, host_events.lines)
        out = [_name("process_name", pid, 0, name), _process_sort_index(pid)]
        for k, title in enumerate(names):
            out += [_name("thread_name", pid, k, title), _sort_index(pid, k)]
        described = [_describe(key, rows.get(key)) for key in host_events.ops]
        # Perfetto filters by category: every op event is `op`, then what bounds it
        # (`op,memory`, `op,unmodeled`); the colour is `cname`.
        categories = [
            ",".join(["op", *([a["bound_by"]] if "bound_by" in a else [])]) for _, a, _ in described
        ]
        for o, s, e, own, k in zip(
            op.tolist(), start.tolist(), end.tolist(), self_ps.tolist(), track.tolist()
        ):
            title, args, row = described[o]
            efficiency, gap_us = _occurrence_figures(row, own)
            band = colour_of(efficiency, args.get("bound_us"))
            out.append(
                {
                    "name": title,
                    "cat": categories[o],
                    "ph": "X",
                    "pid": pid,
                    "tid": k,
                    "ts": (s - origin_ps) / 1e6,
                    "dur": (e - s) / 1e6,
                    "cname": band,
                    "args": {
                        **args,
                        "self_us": own / 1e6,
                        "efficiency": efficiency,
                        "gap_us": gap_us,
                        "band": band,
                    },
                }
            )
            if len(out) >= BATCH_EVENTS:
                yield out
                out = []
        idle_tid, exposed_tid, host_tid = len(names), len(names) + 1, len(names) + 2
        for tid, title in (
            (idle_tid, IDLE_TRACK),
            (exposed_tid, EXPOSED_TRACK),
            (host_tid, HOST_TRACK),
        ):
            out += [_name("thread_name", pid, tid, title), _sort_index(pid, tid)]
        busy_start, busy_end = merged_intervals(start, end)
        gap_start, gap_end = _gaps(busy_start, busy_end)
        lo = hi = None
        if windows is not None:  # idle and exposed time only inside the device's own steps
            lo = np.array([origin_ps + round(a * 1e6) for a, _ in windows], dtype=np.int64)
            hi = np.array([origin_ps + round(b * 1e6) for _, b in windows], dtype=np.int64)
            step_of = np.searchsorted(lo, gap_start, side="right") - 1
            inside = (step_of >= 0) & (gap_end <= hi[np.maximum(step_of, 0)])
            gap_start, gap_end = gap_start[inside], gap_end[inside]
        out += _spans(pid, idle_tid, IDLE_TRACK, gap_start, gap_end, origin_ps)
        # The report's split (hlogap.trace.steps): exposed communication while a collective
        # runs and no compute op does; exposed host transfers while only host transfers run.
        collective_ops, host_ops = exposed
        is_collective = np.array([key in collective_ops for key in host_events.ops], dtype=bool)
        is_host = np.array([key in host_ops for key in host_events.ops], dtype=bool)
        collective, host = is_collective[op], is_host[op]
        for tid, title, alone, beside in (
            (exposed_tid, EXPOSED_TRACK, collective, ~(collective | host)),
            (host_tid, HOST_TRACK, host, ~host),
        ):
            if alone.any():
                spans = _minus(
                    *merged_intervals(start[alone], end[alone]),
                    *merged_intervals(start[beside], end[beside]),
                )
                if lo is not None and hi is not None:
                    spans = _within(*spans, lo, hi)
                out += _spans(pid, tid, title, *spans, origin_ps)
        yield out


def _within(
    start: np.ndarray, end: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals cut to the sorted disjoint windows `[lo, hi]`: less what lies
    between the windows (and before the first, after the last)."""
    big = np.iinfo(np.int64)
    return _minus(start, end, np.concatenate([[big.min], hi]), np.concatenate([lo, [big.max]]))


def _name(kind: str, pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}


def _process_sort_index(pid: int) -> dict[str, Any]:
    """Processes shown in the run's device order (the steps first), not by name or pid hash."""
    return {"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}}


def _sort_index(pid: int, tid: int) -> dict[str, Any]:
    """Tracks shown in the order of their ids (the profile's line order), not by name."""
    return {
        "name": "thread_sort_index",
        "ph": "M",
        "pid": pid,
        "tid": tid,
        "args": {"sort_index": tid},
    }


def _spans(
    pid: int, tid: int, title: str, start: np.ndarray, end: np.ndarray, origin_ps: int
) -> list[dict[str, Any]]:
    return [
        {
            "name": title,
            "cat": title,
            "ph": "X",
            "pid": pid,
            "tid": tid,
            "ts": (s - origin_ps) / 1e6,
            "dur": (e - s) / 1e6,
        }
        for s, e in zip(start.tolist(), end.tolist())
    ]


def _describe(key: OpKey, row: OpRow | None) -> tuple[str, dict[str, Any], OpRow | None]:
    """An op's event title and the args every one of its events carries."""
    args: dict[str, Any] = {"module": key.module, "program_id": key.program_id}
    if row is None:  # an op the report does not list
        return key.name, args, None
    # An unmodeled op has no bound: no bound, gap or efficiency (null), not 0, its whole time, 0.
    modeled = row.bound_by != "unmodeled"
    per_occurrence = row.bound_us / row.occurrences if row.occurrences else 0.0
    args |= {
        "opcode": row.opcode,
        "bound_by": row.bound_by,
        "bound_us": per_occurrence if modeled else None,
        "op_measured_us": row.measured_us,
        "op_gap_us": row.gap_us if modeled else None,
        "op_efficiency": row.efficiency if modeled else None,
        "occurrences": row.occurrences,
        "hint": row.hints[0] if row.hints else "",
        "op_name": row.op_name,
        "source": row.source,
    }
    return key.name, args, row


def _occurrence_figures(row: OpRow | None, self_ps: int) -> tuple[float | None, float | None]:
    """(efficiency, gap_us) of this event: its occurrence's bound against its self time where
    one event is one occurrence; the op's efficiency and no gap where an occurrence has several
    events (GPU kernels), one of them alone being only part of it."""
    if row is None or row.bound_by == "unmodeled":
        return None, None
    if row.events != row.occurrences or self_ps <= 0:
        return row.efficiency, None
    if row.bound_by == "host" and row.bound_us >= row.measured_us * (1 - AT_MEASURED) > 0:
        # A host transfer's done whose every wait was shorter than the transfer: each wait is
        # its own bound (the row's bound is its measured time), so each event is at its bound,
        # where the mean per occurrence would read above or below it.
        return 1.0, 0.0
    # Never more than the event's own time (an efficiency above 1, a negative gap).
    self_us = self_ps / 1e6
    bound_us = min(row.bound_us / row.occurrences, self_us)
    return bound_us / self_us, self_us - bound_us


def _device_windows(report: AuditReport) -> dict[int, list[tuple[float, float]]]:
    """Per device of the run: its own (start_us, end_us) in each step, in step order."""
    windows: dict[int, list[tuple[float, float]]] = {}
    for step in report.steps:
        for part in step.per_device:
            windows.setdefault(part.device, []).append(
                (part.start_us, part.start_us + part.wall_us)
            )
    return {d: sorted(w) for d, w in windows.items()}


register(TraceEventRenderer())
