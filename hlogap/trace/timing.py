"""Op timings over the event columns, with numpy (no per-event Python): which events an audit
covers, async pairs, interval unions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple, Protocol

import numpy as np
from msgspec import Struct

from hlogap.trace.model import TraceData, devices_in


class ModulePattern(Protocol):
    """What `--module` compiles to (an RE2 or `re` pattern): only its search is used."""

    def search(self, text: str, /) -> object: ...


class OpTimes(Struct):
    """Per op (indexed like the run's ops), over the selected events of every host."""

    measured_ps: np.ndarray  # float64: sum of the op's self time
    duration_ps: np.ndarray  # float64: sum of the op's event durations (incl. nested ops)
    events: np.ndarray  # int64: events (kernels on GPU)
    occurrences: np.ndarray  # int64: executions (GPU: consecutive kernels of one op are one)
    median_ps: np.ndarray  # float64: median self time of one execution (robust to stragglers)
    devices: int  # devices that ran at least one selected op


def select_events(
    trace: TraceData, device: int | None = None, module: ModulePattern | None = None
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


# Rows per block of a pass whose temporaries are per row: a few MB each instead of several
# copies of a column of millions of events (the peak after reading). At most 2**20: `sums_by`
# is exact up to that.
BLOCK_ROWS = 1 << 20


def blocks(rows: int) -> Iterator[slice]:
    """Consecutive slices of at most `BLOCK_ROWS` covering `rows` rows."""
    return (slice(low, min(low + BLOCK_ROWS, rows)) for low in range(0, rows, BLOCK_ROWS))


def sums_by(
    key: np.ndarray,
    selected: np.ndarray,
    length: int,
    weights: np.ndarray | None = None,
    code: np.ndarray | None = None,
) -> np.ndarray:
    """Per value of `key` (of `code[key]` when given), the exact int64 sum of the int64
    `weights` (without: the count) over the selected rows. `np.bincount` sums in float64,
    exact only below 2**53 (~2.5 hours in ps: an op's total over a long run is more), so a
    block whose sums could reach it has its weights split into their high and low 32 bits,
    whose sums over 2**20 rows are exact, joined in int64; a block at a time, the float copies
    stay small."""
    found = np.zeros(length, dtype=np.int64)
    for part in blocks(len(key)):
        keys = take(key[part], selected[part])
        if code is not None:
            keys = code[keys]
        if weights is None:
            found += np.bincount(keys, minlength=length)
            continue
        weight = take(weights[part], selected[part])
        if not len(weight):
            continue
        if max(-int(weight.min()), int(weight.max())) * len(weight) < 1 << 53:
            # No sum can reach 2**53 (short events): one float pass is exact.
            found += np.bincount(keys, weights=weight, minlength=length).astype(np.int64)
            continue
        high = np.bincount(keys, weights=weight >> 32, minlength=length).astype(np.int64)
        low = np.bincount(keys, weights=weight & 0xFFFFFFFF, minlength=length).astype(np.int64)
        found += (high << 32) + low
    return found


def take(values: np.ndarray, selected: np.ndarray) -> np.ndarray:
    """`values[selected]`, read-only; the array itself when every event is selected (an audit
    without --device or --module), not a copy of a column of millions of events."""
    picked = values if selected.all() else values[selected]
    view: np.ndarray = picked.view()
    view.flags.writeable = False
    return view


class AsyncPairs(NamedTuple):
    """The executions of an async start/done pair: one per done event that has a start before it
    on its device (the latest one)."""

    device: np.ndarray  # int32: index into `TraceData.devices`
    begin_ps: np.ndarray  # int64: the start's begin
    end_ps: np.ndarray  # int64: the done's end
    window_ps: np.ndarray  # int64: from the start's end to the done's begin (>= 0)
    wait_ps: np.ndarray  # int64: the done's own duration (the device waiting for the data)

    @property
    def span_ps(self) -> np.ndarray:
        """The whole transfer as the device saw it, start to done."""
        span: np.ndarray = self.end_ps - self.begin_ps
        return span


def async_pairs(trace: TraceData, selected: np.ndarray, start_op: int, done_op: int) -> AsyncPairs:
    """Pair each selected event of `done_op` with the latest event of `start_op` that began
    before it on the same device."""
    columns: list[tuple[np.ndarray, ...]] = []
    starts = np.flatnonzero(selected & (trace.op_index == start_op))
    dones = np.flatnonzero(selected & (trace.op_index == done_op))
    for dev in devices_in(trace.device_index[dones]):
        s = starts[trace.device_index[starts] == dev]
        d = dones[trace.device_index[dones] == dev]
        s = s[np.argsort(trace.start_ps[s], kind="stable")]
        at = np.searchsorted(trace.start_ps[s], trace.start_ps[d], side="right") - 1
        paired = at >= 0
        s, d = s[at[paired]], d[paired]
        s_end = trace.start_ps[s] + trace.duration_ps[s]
        columns.append(
            (
                trace.device_index[d],
                trace.start_ps[s],
                trace.start_ps[d] + trace.duration_ps[d],
                np.maximum(trace.start_ps[d] - s_end, 0),
                trace.duration_ps[d],
            )
        )
    if not columns:
        empty = np.zeros(0, dtype=np.int64)
        return AsyncPairs(empty.astype(np.int32), empty, empty, empty, empty)
    device, begin, end, window, wait = (np.concatenate(c) for c in zip(*columns, strict=True))
    return AsyncPairs(device, begin, end, window, wait)


class SortedSpans(NamedTuple):
    """Events in start order, the disjoint spans of their union, and which events overlap no
    other: found a block at a time, no running maximum of the ends kept per event."""

    # The order by start (stable: a tie keeps the columns' order); None where they are in
    # order already, as a device's events mostly are: then `start` and `duration` are the
    # columns themselves, no copies.
    order: np.ndarray | None
    start: np.ndarray
    duration: np.ndarray
    at: np.ndarray  # where each span begins
    span_end: np.ndarray  # where each span ends: the latest end of its events
    # Bool per event: it overlaps no other (the step pass's `_Segments`): it starts at or
    # after every earlier one ends, and the next starts at or after it ends.
    alone: np.ndarray

    @classmethod
    def of(cls, start: np.ndarray, duration: np.ndarray) -> SortedSpans:
        order = None
        if bool((start[1:] < start[:-1]).any()):
            order = np.argsort(start, kind="stable")
            start, duration = start[order], duration[order]
        # opens[i]: event i starts at or after every earlier one ends (i == len: past the last).
        opens = np.ones(len(start) + 1, dtype=bool)
        at, ends = [np.zeros(0, dtype=np.intp)], [np.zeros(0, dtype=np.int64)]
        reach = np.iinfo(np.int64).min  # the latest end before the block
        for part in blocks(len(start)):
            block_start = start[part]
            # Per event of the block, the latest end of the events before it.
            before = np.empty(len(block_start), dtype=np.int64)
            before[0] = reach
            running = np.add(block_start[:-1], duration[part][:-1])
            np.maximum.accumulate(running, out=before[1:])
            np.maximum(before, reach, out=before)
            opens[part] = block_start >= before
            new = block_start > before
            new[0] |= part.start == 0
            at.append(np.flatnonzero(new) + part.start)
            ends.append(before[new])  # the end of the span before each new one
            reach = max(int(before[-1]), int(block_start[-1] + duration[part][-1]))
        span_starts = np.concatenate(at)
        # Each span ends where the next begins (the latest end before it), the last at the end.
        span_end = np.append(np.concatenate(ends)[1:], reach)[: len(span_starts)]
        return cls(order, start, duration, span_starts, span_end, opens[:-1] & opens[1:])


def merged_intervals(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals [start, end) as sorted disjoint intervals."""
    if not len(start):
        return start, end
    spans = SortedSpans.of(start, end - start)
    return spans.start[spans.at], spans.span_end
