"""Events that name their op with per-event stats: GPU kernels and CPU thunks.

Both carry `hlo_op` and `hlo_module` (ref stats into the plane's stat metadata) and `program_id`;
CPU thunks also carry `device_ordinal`. A line's events are decoded together
(`hlogap.trace.columnar`); each distinct (op, module, program, ordinal) is resolved once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

import numpy as np
from google.protobuf.message import DecodeError

from hlogap.errors import InputError
from hlogap.proto import xplane_pb2
from hlogap.trace.columnar import ABSENT, READ_BLOCK, LineColumns, RawLine
from hlogap.trace.model import (
    UNKNOWN_EXECUTION,
    OpKey,
    TraceBuilder,
    devices_in,
    distinct_rows,
)
from hlogap.trace.timing import take
from hlogap.trace.xspace import Plane, plane_stats

# The stats that name an op's event (resolved once per distinct combination), then the ones
# that place it in time: its module execution (CPU `run_id`, GPU `correlation_id` of the host
# launch) and the context id an async CPU op shares with its `end:` marker (`_p` / `_c`).
KEY = ("hlo_op", "hlo_module", "program_id", "device_ordinal")
PLACE = ("run_id", "correlation_id", "_p", "_c")
END_MARKER = "end: "
ExecutionOf = Callable[[np.ndarray], np.ndarray]


def read_stat_events(
    plane: Plane,
    builder: TraceBuilder,
    lines: Iterable[RawLine],
    device: int | None,
    gpu: bool,
    execution_of: ExecutionOf | None = None,
) -> None:
    """Add every event of `lines` that has an `hlo_op` stat.

    `device` is the builder's device index for a device plane; None means the device comes from
    each event's `device_ordinal` stat (CPU: one host plane runs every device). An event's module
    execution is `execution_of(correlation ids)` when given (GPU), else its `run_id` (CPU).
    An op whose `end:` marker (same context id) ends after it lasts until the marker.
    """
    by_name = {v.name: k for k, v in plane.stat_metadata.items()}
    ids = [by_name.get(w, ABSENT) for w in (*KEY, *PLACE)]
    if ids[0] == ABSENT:
        return
    reader = _LineReader(plane, builder, ids, device, execution_of)
    for line in lines:
        if line.event_count:
            reader.read_line(line)
    extras = _run_on(plane, builder, reader.op_lines, reader.marker_parts)
    for part, extra in zip(reader.op_lines, extras, strict=True):
        for dev in part.devices:
            mine = part.device == dev if part.device is not None and len(part.devices) > 1 else None
            builder.add_line(
                dev,
                _picked(part.op, mine),
                _picked(part.start_ps, mine),
                _picked(part.duration_ps, mine),
                gpu,
                execution=_picked(part.execution, mine),
                extra_ps=_picked(extra, mine) if extra is not None else None,
                line=part.name,
            )


def _picked(column: np.ndarray, mine: np.ndarray | None) -> np.ndarray:
    """`column[mine]`; the column itself where `mine` is None (a line of one device: not a
    view, the builder keeps it as it is)."""
    return column if mine is None else column[mine]


class _OpLine(NamedTuple):
    """One line's ops, in builder indices, holding no view of the line's decoded columns."""

    op: np.ndarray  # int32
    device: np.ndarray | None  # int32; None where the plane is one device (`devices`)
    start_ps: np.ndarray
    duration_ps: np.ndarray
    execution: np.ndarray
    with_context: np.ndarray  # positions of the ops that carry a context id (async CPU ops)
    context: np.ndarray  # their context ids
    devices: list[int]  # the distinct devices of `device`
    name: str  # as the profile names the line (`Stream #7(Compute)`)

    def device_column(self) -> np.ndarray:
        """Each op's device."""
        if self.device is not None:
            return self.device
        return np.full(len(self.op), self.devices[0], dtype=np.int32)


class _LineOps:
    """A line's ops as its blocks of events are read (`RawLine.blocks`), written into columns
    as long as the line's events: a column's pages are taken only as far as ops fill it, and
    no block's ops are joined again at the end (a GPU stream's events are all ops). Each op is
    first its key's number in the line (`keys`), made its op and device once the line's keys
    are resolved (`op_line`)."""

    def __init__(self, events: int, one_device: bool) -> None:
        self.keys: dict[tuple[int, ...], int] = {}  # the line's distinct keys, first seen first
        self.op = np.empty(events, dtype=np.int32)
        self.device = None if one_device else np.empty(events, dtype=np.int32)
        self.start_ps = np.empty(events, dtype=np.int64)
        self.duration_ps = np.empty(events, dtype=np.int64)
        self.execution = np.empty(events, dtype=np.int64)
        self.with_context: list[np.ndarray] = []
        self.context: list[np.ndarray] = []
        self.count = 0

    def add(
        self,
        keys: list[tuple[int, ...]],
        inverse: np.ndarray,
        start_ps: np.ndarray,
        duration_ps: np.ndarray,
        execution: np.ndarray,
        context: np.ndarray,
    ) -> None:
        """A block's ops: their keys `keys[inverse]`, their times, executions and context ids
        (`ABSENT`: none)."""
        at = slice(self.count, self.count + len(inverse))
        number = np.array([self.keys.setdefault(k, len(self.keys)) for k in keys], dtype=np.int32)
        self.op[at] = number[inverse]
        self.start_ps[at] = start_ps
        self.duration_ps[at] = duration_ps
        self.execution[at] = np.where(execution == ABSENT, UNKNOWN_EXECUTION, execution)
        # Context ids only where an op has one (async CPU ops; GPU kernels have none).
        with_context = np.flatnonzero(context != ABSENT)
        if len(with_context):
            self.with_context.append(self.count + with_context)
            self.context.append(context[with_context])
        self.count = at.stop

    def op_line(self, pairs: np.ndarray, name: str) -> _OpLine:
        """The ops read, in columns as long as they are (a copy where the line had other events
        too); `pairs` is the (op, device) of each key's number."""

        def cut(column: np.ndarray) -> np.ndarray:
            return column if len(column) == self.count else column[: self.count].copy()

        op, device = cut(self.op), None if self.device is None else cut(self.device)
        for first in range(0, self.count, READ_BLOCK):  # in place, a block at a time
            number = op[first : first + READ_BLOCK]
            if device is not None:
                device[first : first + READ_BLOCK] = pairs[number, 1]
            number[:] = pairs[number, 0]
        empty = np.zeros(0, dtype=np.int64)
        return _OpLine(
            op=op,
            device=device,
            start_ps=cut(self.start_ps),
            duration_ps=cut(self.duration_ps),
            execution=cut(self.execution),
            with_context=np.concatenate(self.with_context) if self.with_context else empty,
            context=np.concatenate(self.context) if self.context else empty,
            devices=devices_in(pairs[:, 1]),  # every key occurs in the line
            name=name,
        )


class _LineReader:
    """Reads a plane's lines one at a time: each distinct (op, module, program, ordinal) key is
    resolved into the builder once, for the whole plane."""

    def __init__(
        self,
        plane: Plane,
        builder: TraceBuilder,
        ids: list[int],
        device: int | None,
        execution_of: ExecutionOf | None,
    ) -> None:
        self.plane = plane
        self.builder = builder
        self.ids = ids
        self.device = device
        self.execution_of = execution_of
        self.names: dict[int, str] = {k: v.name for k, v in plane.stat_metadata.items()}
        self.end_markers = np.array(
            [k for k, md in plane.event_metadata.items() if md.name.startswith(END_MARKER)],
            dtype=np.int64,
        )
        self.str_ids: dict[str, int] = {}  # op/module names given as strings: negative ids
        self.ordinal_device: dict[int, int] = {}
        self.resolved: dict[tuple[int, ...], tuple[int, int]] = {}
        self.op_lines: list[_OpLine] = []
        self.marker_parts: list[
            tuple[np.ndarray, np.ndarray, np.ndarray]
        ] = []  # context, start, end

    def resolve(self, key: tuple[int, ...]) -> tuple[int, int]:
        """(op index, device index) of an (op ref, module ref, program id, ordinal) key."""
        found = self.resolved.get(key)
        if found is None:
            op_ref, mod_ref, prog, ordinal = key
            program_id = str(prog if prog >= 0 else prog + (1 << 64)) if prog != ABSENT else ""
            module = self.names.get(mod_ref, "") or self.builder.module_names.get(program_id, "")
            op = self.builder.op(OpKey(module, program_id, self.names.get(op_ref, "")))
            found = self.resolved[key] = (op, self._device_of(ordinal))
        return found

    def _device_of(self, ordinal: int) -> int:
        if self.device is not None:
            return self.device
        ordinal = max(ordinal, 0)
        dev = self.ordinal_device.get(ordinal)
        if dev is None:
            dev = self.ordinal_device[ordinal] = self.builder.new_device(
                self.plane.name, ordinal, plane_stats(self.plane)
            )
        return dev

    def read_line(self, line: RawLine) -> None:
        """One line's ops into `op_lines`, its markers into `marker_parts`, a block of events at
        a time: what is kept holds no view of the decoded columns, and the line's columns are
        never all decoded at once (a 3 M-event line's are ~160 MB; a block's, ~3.5 MB)."""
        ops = _LineOps(line.event_count, one_device=self.device is not None)
        base_ps = line.timestamp_ns * 1000  # event offsets count from their line's timestamp
        for cols in line.blocks(self.ids):
            self._read_block(cols, base_ps, ops)
        if not ops.count:
            return
        # The line's keys resolved in their order (the order of its distinct rows, had it been
        # read whole): ops and devices new to the builder are numbered as ever.
        pairs = np.empty((len(ops.keys), 2), dtype=np.int32)
        for key in sorted(ops.keys):
            pairs[ops.keys[key]] = self.resolve(key)
        self.op_lines.append(ops.op_line(pairs, line.display_name or line.name))

    def _read_block(self, cols: LineColumns, base_ps: int, ops: _LineOps) -> None:
        """A block of a line's events: its ops into `ops`, its markers into `marker_parts`."""
        for i, raw in cols.irregular.items():
            _read_one(raw, self.ids, self.names, self.str_ids, cols, i, self.plane.name)
        start = base_ps + cols.offset_ps
        run_id, correlation, context, marker_context = cols.stats[len(KEY) :]
        is_marker = np.isin(cols.metadata_id, self.end_markers) & (marker_context != ABSENT)
        if is_marker.any():
            self.marker_parts.append(
                (
                    marker_context[is_marker],
                    start[is_marker],
                    start[is_marker] + cols.duration_ps[is_marker],
                )
            )
        is_op = cols.stats[0] != ABSENT
        if not is_op.any():
            return
        # Views where every event is an op (a GPU stream's kernels): `ops` copies what it keeps.
        unique, inverse = distinct_rows([take(c, is_op) for c in cols.stats[: len(KEY)]])
        execution = (
            self.execution_of(take(correlation, is_op))
            if self.execution_of
            else take(run_id, is_op)
        )
        ops.add(
            [tuple(k) for k in unique.tolist()],
            inverse,
            take(start, is_op),
            take(cols.duration_ps, is_op),
            execution,
            take(context, is_op),
        )


def _run_on(
    plane: Plane,
    builder: TraceBuilder,
    op_lines: list[_OpLine],
    marker_parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
) -> list[np.ndarray | None]:
    """Per line, how long each op runs on past its event (to its `end:` marker, cut at its
    module's next execution), or None where the plane has no markers. One pairing pass over
    every op of the plane: a marker may sit on any of its lines."""
    if not marker_parts or not op_lines:
        return [None] * len(op_lines)
    markers = [np.concatenate(part) for part in zip(*marker_parts)]
    start = np.concatenate([line.start_ps for line in op_lines])
    end = start + np.concatenate([line.duration_ps for line in op_lines])
    cuts = np.cumsum([len(line.op) for line in op_lines])[:-1]
    context = np.full(len(start), ABSENT, dtype=np.int64)
    for first, line in zip([0, *cuts.tolist()], op_lines, strict=True):
        context[first + line.with_context] = line.context
    run_on = _until_marker(context, start, end, markers)
    clipped = _clip_to_execution(
        builder,
        np.concatenate([line.op for line in op_lines]),
        np.concatenate([line.device_column() for line in op_lines]),
        np.concatenate([line.execution for line in op_lines]),
        start,
        end,
        run_on,
    )
    if clipped:
        builder.notes.append(
            f"{clipped} async op completion(s) on {plane.name} came after the next "
            "execution of their module had started (their `end:` markers): each is cut "
            "at that start, so an execution never runs into the next"
        )
    return list(np.split(run_on, cuts))


def _clip_to_execution(
    builder: TraceBuilder,
    op: np.ndarray,
    device: np.ndarray,
    execution: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    extra: np.ndarray,
) -> int:
    """Cut each op's run-on (`extra`, in place) at the start of the next execution of its
    module on its device; return how many were cut. XLA:CPU may mark an async op complete
    after the next execution began (an async dot of a scanned step, 8.3 ms late): counted to
    the marker, one step would overlap the next and the steps would add up past the trace."""
    late = (extra > 0) & (execution != UNKNOWN_EXECUTION)
    if not late.any():
        return 0
    codes: dict[str, int] = {}
    module_of = np.array(
        [codes.setdefault(info.key.module, len(codes)) for info in builder.ops], dtype=np.int64
    )
    rows, group = distinct_rows([device, module_of[op], execution])
    first = np.full(len(rows), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, group, start)
    order = np.lexsort((first, rows[:, 1], rows[:, 0]))  # by device, module, then time
    next_start = np.full(len(rows), np.iinfo(np.int64).max, dtype=np.int64)
    same = (rows[order[1:], 0] == rows[order[:-1], 0]) & (rows[order[1:], 1] == rows[order[:-1], 1])
    next_start[order[:-1][same]] = first[order[1:][same]]
    room = np.maximum(next_start[group] - end, 0)  # an op past the next start keeps no run-on
    cut = late & (extra > room)
    extra[cut] = room[cut]
    return int(cut.sum())


def _until_marker(
    context: np.ndarray, start: np.ndarray, end: np.ndarray, markers: list[np.ndarray]
) -> np.ndarray:
    """How long each op runs on after its event: to the end of the first `end:` marker with
    its context id that starts at or after the op (0 where none ends later than the op).

    XLA's thunk executor emits the marker when an async op completes, on whichever thread
    completed it; a synchronous op's marker lies inside its own event.
    """
    m_context, m_start, m_end = markers
    n_ops = len(context)
    # Ops and markers in one order: by context, then time, an op before a marker at its start.
    ctx = np.concatenate([context, m_context])
    when = np.concatenate([start, m_start])
    is_marker = np.concatenate([np.zeros(n_ops, dtype=bool), np.ones(len(m_context), dtype=bool)])
    order = np.lexsort((is_marker, when, ctx))
    # For every position, the next marker at or after it (len: none).
    position = np.where(is_marker[order], np.arange(len(order)), len(order))
    next_marker = np.minimum.accumulate(position[::-1])[::-1]
    extra = np.zeros(n_ops, dtype=np.int64)
    op_rows = np.flatnonzero(~is_marker[order])  # positions of ops in `order`
    ops = order[op_rows]
    nxt = next_marker[op_rows]
    found = nxt < len(order)
    marker = order[np.where(found, nxt, 0)] - n_ops
    same = found & (context[ops] != ABSENT) & (m_context[np.maximum(marker, 0)] == context[ops])
    later = np.where(same, m_end[np.maximum(marker, 0)] - end[ops], 0)
    extra[ops] = np.maximum(later, 0)
    return extra


def _read_one(
    raw: bytes,
    ids: list[int],
    names: dict[int, str],
    str_ids: dict[str, int],
    cols: LineColumns,
    i: int,
    plane_name: str,
) -> None:
    """An event the columnar decoder could not read: upb reads it into row `i` of `cols`."""
    try:
        event = xplane_pb2.XEvent.FromString(raw)
    except DecodeError as exc:
        raise InputError(f"corrupt event on {plane_name}") from exc
    cols.reset_row(i, event, ids)
    for stat in event.stats:
        if stat.metadata_id < 0 or stat.metadata_id not in ids:
            continue
        k = ids.index(stat.metadata_id)
        kind = stat.WhichOneof("value")
        if kind == "str_value" and k < 2:  # an op/module name as a string: an id of its own
            value = str_ids.get(stat.str_value, 0)
            if not value:
                value = str_ids[stat.str_value] = -2 - len(str_ids)
                names[value] = stat.str_value
        elif kind in ("ref_value", "int64_value", "uint64_value"):
            value = getattr(stat, kind)
            if value >= 1 << 63:  # kept in int64 columns two's-complement; `resolve` undoes it
                value -= 1 << 64
        else:
            value = 0
        cols.stats[k][i] = value
