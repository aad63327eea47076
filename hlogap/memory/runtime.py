"""What the devices' memory allocators held while the profile ran (the host plane's
`MemoryAllocation`/`MemoryDeallocation` events, the ones xprof's memory profile reads).

Each event carries its allocator's state just after it: bytes allocated from the heap, bytes
reserved (a TPU's program stack), bytes still free, and `peak_bytes_in_use`, the heap's own
high-water mark since the allocator was created (xprof's `peakBytesUsageLifetime`). Two peaks,
two things: the heap's lifetime mark counts no stack (and may predate the profile); the in-use
peak is the most the events show of heap + stack together, with its time, step, its stack part
and the capacity then (in use + free). On a TPU, whose program temporaries live in the stack,
the in-use peak can be far above the heap's mark (v6e: 21.5 GB in use, of it 21.5 GB stack,
beside a heap mark of 10.7 GB reached at another time).

The events also give the bytes in use over time: each allocator's curve (heap, and heap +
stack, after each event) is cut into `TIMELINE_POINTS` buckets of equal time, each holding the
most in use at any moment in it, so a chart of hundreds of allocators stays small and never
loses a peak. A host task returns only these buckets, never its events.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
from msgspec import Struct
from msgspec.structs import replace

from hlogap.trace.model import AllocatorEvents, TraceData
from hlogap.trace.summary import Selection

# Buckets in an allocator's timeline: a chart's width in points (an 80-column sparkline takes
# the most of every few), and 2 x 200 numbers per allocator keep a report of a pod small.
TIMELINE_POINTS = 200

# A GPU's BFC allocator is named after its device (`GPU_0_bfc`); a TPU's is its `index_on_host`.
_DEVICE_ALLOCATOR = re.compile(r"^(?:GPU_(\d+)_\w+|(\d+))$")


class AllocatorTimeline(Struct, frozen=True):
    """An allocator's bytes in use over time, from its first event to its last (microseconds
    from the profile's first op, on the devices' clock), in buckets of equal width: each
    holds the most in use at any moment inside it (what the events in it left, and what the
    last event before it left while that lasted), so the curve's maximum is the peak."""

    start_us: float
    end_us: float
    heap_bytes: tuple[int, ...]  # the heap alone (`bytes_allocated`)
    in_use_bytes: tuple[int, ...]  # heap + reserved stack, as `in_use_peak_bytes` counts

    def to_dict(self) -> dict[str, object]:
        return {
            "start_us": self.start_us,
            "end_us": self.end_us,
            "heap_bytes": list(self.heap_bytes),
            "in_use_bytes": list(self.in_use_bytes),
        }

    @classmethod
    def from_dict(cls, raw: object, where: str) -> AllocatorTimeline | None:
        if raw is None:
            return None
        if not isinstance(raw, dict):
            raise ValueError(f"{where} is not an object")
        start, end = raw.get("start_us"), raw.get("end_us")
        if not isinstance(start, (int, float)) or not isinstance(end, (int, float)):
            raise ValueError(f"{where}.start_us or end_us is not a number")
        if not math.isfinite(start) or not math.isfinite(end):
            raise ValueError(f"{where}.start_us or end_us is not finite")

        def counts(key: str) -> tuple[int, ...]:
            values = raw.get(key)
            if not isinstance(values, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values
            ):
                raise ValueError(f"{where}.{key} is not a list of byte counts")
            return tuple(values)

        heap, in_use = counts("heap_bytes"), counts("in_use_bytes")
        if len(heap) != len(in_use) or not in_use:
            raise ValueError(f"{where}: heap_bytes and in_use_bytes differ in length or are empty")
        return cls(float(start), float(end), heap, in_use)


class AllocatorPeak(Struct, frozen=True):
    """One allocator's peaks on one host; times are microseconds from the profile's start."""

    host: str
    name: str
    device: int | None  # the run's device index the allocator serves; None: not a device's
    peak_bytes: int  # the heap's own lifetime high-water mark (`peak_bytes_in_use`): no stack
    peak_us: float | None  # when the mark was reached; None: before the profile began
    in_use_peak_bytes: int  # the most in use (heap + reserved stack) at any of its events
    in_use_peak_us: float
    # Of the in-use peak, the reserved stack; None in a report saved before it was kept.
    in_use_stack_bytes: int | None
    step: int | None  # the step the in-use peak fell in; None: between steps, or no steps
    capacity_bytes: int  # in use + free at the in-use peak
    fragmentation: float | None  # the allocator's own figure at the in-use peak
    events: int
    # The bytes in use over time; None in a report saved before it was kept.
    timeline: AllocatorTimeline | None = None
    # Where the in-use peak fell between steps: the most in use while a step ran, and the
    # first step that held it (a peak 256 B above what every step held read "outside the
    # steps"). None: the peak is in a step, there are no steps, or an older report.
    steps_peak_bytes: int | None = None
    steps_peak_step: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "host": self.host,
            "device": self.device,
            "peak_bytes": self.peak_bytes,
            "peak_us": self.peak_us,
            "in_use_peak_bytes": self.in_use_peak_bytes,
            "in_use_peak_us": self.in_use_peak_us,
            "in_use_stack_bytes": self.in_use_stack_bytes,
            "step": self.step,
            "capacity_bytes": self.capacity_bytes,
            "fragmentation": self.fragmentation,
            "events": self.events,
            "timeline": None if self.timeline is None else self.timeline.to_dict(),
            "steps_peak_bytes": self.steps_peak_bytes,
            "steps_peak_step": self.steps_peak_step,
        }

    @classmethod
    def from_dict(cls, raw: object, where: str) -> AllocatorPeak:
        if not isinstance(raw, dict):
            raise ValueError(f"{where} is not an object")

        def count(key: str) -> int:
            value = raw.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{where}.{key} is {value!r}, not a byte count")
            return value

        def maybe(key: str, kind: type[int] | type[float]) -> float | None:
            value = raw.get(key)
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{where}.{key} is {value!r}, not a number")
            if not math.isfinite(value):
                raise ValueError(f"{where}.{key} is not finite")
            return kind(value)

        device, step = maybe("device", int), maybe("step", int)
        steps_peak, steps_peak_step = maybe("steps_peak_bytes", int), maybe("steps_peak_step", int)
        in_use_us, stack = maybe("in_use_peak_us", float), maybe("in_use_stack_bytes", int)
        return cls(
            host=str(raw.get("host", "")),
            name=str(raw.get("name", "")),
            device=None if device is None else int(device),
            peak_bytes=count("peak_bytes"),
            peak_us=maybe("peak_us", float),
            in_use_peak_bytes=count("in_use_peak_bytes"),
            in_use_peak_us=0.0 if in_use_us is None else in_use_us,
            in_use_stack_bytes=None if stack is None else int(stack),
            step=None if step is None else int(step),
            capacity_bytes=count("capacity_bytes"),
            fragmentation=maybe("fragmentation", float),
            events=count("events"),
            timeline=AllocatorTimeline.from_dict(raw.get("timeline"), f"{where}.timeline"),
            steps_peak_bytes=None if steps_peak is None else int(steps_peak),
            steps_peak_step=None if steps_peak_step is None else int(steps_peak_step),
        )


def allocator_peaks(
    trace: TraceData,
    selection: Selection,
    origin_ps: int,
    windows: Sequence[tuple[int, int, int]],
) -> list[AllocatorPeak]:
    """Each allocator's peaks on this host (a host task; `host` is left empty and `device` is
    the index into this host's devices: `on_run` places them in the run). `windows` are the
    run's steps (number, start, end) on the devices' clock; an allocator's host-clock times
    are moved onto its device's clock (a TPU's is fitted to its ops), then measured from
    `origin_ps`. With `--device`, only that device's allocators."""
    events = trace.allocations
    if events is None:
        return []
    by_ordinal = {d.ordinal: k for k, d in enumerate(trace.devices)}
    peaks: list[AllocatorPeak] = []
    for code, name in enumerate(events.names):
        m = _DEVICE_ALLOCATOR.match(name)
        local = by_ordinal.get(int(m.group(1) or m.group(2))) if m else None
        if selection.device is not None and (
            local is None or trace.devices[local].ordinal != selection.device
        ):
            continue
        mine = np.flatnonzero(events.allocator == code)
        time_ps = events.time_ps[mine]
        if local is not None:
            time_ps = trace.devices[local].on_device_clock(time_ps)
        peaks.append(_peak(name, local, events, mine, time_ps, origin_ps, windows))
    return peaks


def bucket_maxima(
    time_ps: np.ndarray, series: Sequence[np.ndarray], buckets: int
) -> tuple[np.ndarray, list[np.ndarray]]:
    """A step curve (each value holds from its time to the next one's; `time_ps` ascending)
    cut into at most `buckets` of equal time from its first time to its last: the buckets'
    edges (one more than the buckets) and, per series, the most it held in each bucket. A
    bucket's most counts every value set inside it (even one that held for no time, as at a
    peak that a free undoes at once) and the value carried in from before it, unless a new one
    was set at its very start. So each series' maximum is its buckets' maximum. O(values)."""
    start, end = int(time_ps[0]), int(time_ps[-1])
    count = max(1, min(buckets, end - start))  # every bucket at least 1 ps wide
    edges = np.array([start + (end - start) * k // count for k in range(count + 1)], np.int64)
    bucket = np.searchsorted(edges[1:-1], time_ps, side="right")  # an edge opens its bucket
    firsts = np.flatnonzero(np.diff(bucket, prepend=-1))  # each bucket's first value, if any
    last_before = np.searchsorted(time_ps, edges[:-1], side="left") - 1
    # The value before a bucket lasts into it unless the next one is set at its start edge.
    next_time = time_ps[np.minimum(last_before + 1, len(time_ps) - 1)]
    carried = (last_before >= 0) & (next_time > edges[:-1])
    maxima = []
    for values in series:
        most = np.zeros(count, dtype=np.int64)
        most[bucket[firsts]] = np.maximum.reduceat(values, firsts)
        maxima.append(np.where(carried, np.maximum(most, values[last_before]), most))
    return edges, maxima


def on_run(peaks: AllocatorPeak, host: str, device_offset: int) -> AllocatorPeak:
    """A host task's peak placed in the run: its host's name, its device's index in the run."""
    device = None if peaks.device is None else peaks.device + device_offset
    return replace(peaks, host=host, device=device)


def _peak(
    name: str,
    local: int | None,
    events: AllocatorEvents,
    mine: np.ndarray,
    time_ps: np.ndarray,
    origin_ps: int,
    windows: Sequence[tuple[int, int, int]],
) -> AllocatorPeak:
    marks = events.lifetime_peak_bytes[mine]
    reached = int(np.argmax(marks))  # the first event that shows the highest mark
    # The mark already stood at the allocator's first event: it was reached before the trace.
    peak_us = None if reached == 0 else (int(time_ps[reached]) - origin_ps) / 1e6
    in_use = events.heap_bytes[mine] + events.stack_bytes[mine]
    top = int(np.argmax(in_use))
    at = int(time_ps[top])
    fragmentation = float(events.fragmentation[mine][top])
    heap = events.heap_bytes[mine]
    edges, (heap_most, in_use_most) = bucket_maxima(time_ps, (heap, in_use), TIMELINE_POINTS)
    step = next((n for n, start, end in windows if start <= at < end), None)
    in_steps = _steps_peak(time_ps, in_use, windows) if step is None else None
    return AllocatorPeak(
        host="",
        name=name,
        device=local,
        peak_bytes=int(marks[reached]),
        peak_us=peak_us,
        in_use_peak_bytes=int(in_use[top]),
        in_use_peak_us=(at - origin_ps) / 1e6,
        in_use_stack_bytes=int(events.stack_bytes[mine][top]),
        step=step,
        capacity_bytes=int(in_use[top] + events.available_bytes[mine][top]),
        fragmentation=None if math.isnan(fragmentation) else fragmentation,
        events=len(mine),
        timeline=AllocatorTimeline(
            start_us=(int(edges[0]) - origin_ps) / 1e6,
            end_us=(int(edges[-1]) - origin_ps) / 1e6,
            heap_bytes=tuple(heap_most.tolist()),
            in_use_bytes=tuple(in_use_most.tolist()),
        ),
        steps_peak_bytes=None if in_steps is None else in_steps[0],
        steps_peak_step=None if in_steps is None else in_steps[1],
    )


def _steps_peak(
    time_ps: np.ndarray, in_use: np.ndarray, windows: Sequence[tuple[int, int, int]]
) -> tuple[int, int] | None:
    """(the most in use while a step ran, the first step that held it); None without steps
    the events reach. A value holds from its event to the next: a step holds the value in
    force at its start and those of the events inside it."""
    if not windows:
        return None
    numbers, starts, ends = (np.array(column, dtype=np.int64) for column in zip(*windows))
    first = np.maximum(np.searchsorted(time_ps, starts, side="right") - 1, 0)
    last = np.searchsorted(time_ps, ends, side="left")
    held = (last > first) & (time_ps[first] < ends)
    if not held.any():
        return None
    # Each held step's [first, last) slice, its maximum by one reduceat (a closing value after
    # the curve keeps the slice ending at its last event in bounds).
    bounds = np.stack([first[held], last[held]], axis=1).ravel()
    most = np.maximum.reduceat(np.append(in_use, 0), bounds)[0::2]
    k = int(np.argmax(most))  # the first step that held the most
    return int(most[k]), int(numbers[held][k])
