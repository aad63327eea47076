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
the report's `start_us`. The tracks and spans are worked out before (hlogap.rows.tracks): this
module lays them out as events.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import orjson

from hlogap.errors import UsageError
from hlogap.render.base import Document, DocumentKind, RenderOptions, register

if TYPE_CHECKING:
    from hlogap.report.model import AuditReport, OpRef, OpRow
    from hlogap.rows.tracks import DeviceTracks, Spans

# chrome://tracing's reserved colour names, an event's `cname` (and its args' `band`, which
# Perfetto shows and filters on): efficiency at or above each floor.
EFFICIENCY_COLOURS = ((0.6, "good"), (0.3, "yellow"), (0.1, "bad"), (0.0, "terrible"))
UNMODELED_COLOUR = "grey"
STEPS_PID = 0
# A host done whose bound is within this fraction of its measured time is bounded by its waits
# (sums of per-execution bounds equal to the waits differ from their sum by rounding only).
AT_MEASURED = 1e-9
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
        from hlogap.report.model import AuditReport

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
        from hlogap.rows.tracks import device_tracks

        yield _steps(report)
        for pid, device in enumerate(device_tracks(report), STEPS_PID + 1):
            yield from _device(device, pid)


def _steps(report: AuditReport) -> list[dict[str, Any]]:
    """The steps' process: each step from its first device's start to its last device's end,
    on tracks of their own where skew makes them overlap."""
    from hlogap.rows.tracks import step_tracks

    events: list[dict[str, Any]] = [
        _name("process_name", STEPS_PID, 0, "steps"),
        _process_sort_index(STEPS_PID),
    ]
    warmup = {s.step for s in report.steps[: report.step_summary.warmup_steps]}
    steps = sorted(report.steps, key=lambda s: s.start_us)
    track, names = step_tracks(steps)
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
    return events


def _device(device: DeviceTracks, pid: int) -> Iterator[list[dict[str, Any]]]:
    """A device's process: its op events on their tracks (`BATCH_EVENTS` at a time), then its
    idle, exposed communication and exposed host transfer tracks."""
    names = device.track_names
    out = [_name("process_name", pid, 0, device.name), _process_sort_index(pid)]
    for k, title in enumerate(names):
        out += [_name("thread_name", pid, k, title), _sort_index(pid, k)]
    described = [_describe(ref, row) for ref, row in zip(device.ops, device.rows, strict=True)]
    # Perfetto filters by category: every op event is `op`, then what bounds it
    # (`op,memory`, `op,unmodeled`); the colour is `cname`.
    categories = [
        ",".join(["op", *([a["bound_by"]] if "bound_by" in a else [])]) for _, a, _ in described
    ]
    for o, s, e, own, k in zip(
        device.op.tolist(),
        device.start_ps.tolist(),
        device.end_ps.tolist(),
        device.self_ps.tolist(),
        device.track.tolist(),
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
                "ts": s / 1e6,
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
    for tid, spans in enumerate(device.spans, len(names)):
        out += [_name("thread_name", pid, tid, spans.title), _sort_index(pid, tid)]
    for tid, spans in enumerate(device.spans, len(names)):
        out += _spans(pid, tid, spans)
    yield out


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


def _spans(pid: int, tid: int, spans: Spans) -> list[dict[str, Any]]:
    return [
        {
            "name": spans.title,
            "cat": spans.title,
            "ph": "X",
            "pid": pid,
            "tid": tid,
            "ts": s / 1e6,
            "dur": (e - s) / 1e6,
        }
        for s, e in zip(spans.start_ps.tolist(), spans.end_ps.tolist())
    ]


def _describe(key: OpRef, row: OpRow | None) -> tuple[str, dict[str, Any], OpRow | None]:
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


register(TraceEventRenderer())
