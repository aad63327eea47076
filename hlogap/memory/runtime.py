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
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from hlogap.trace.model import AllocatorEvents, TraceData
from hlogap.trace.summary import Selection

# A GPU's BFC allocator is named after its device (`GPU_0_bfc`); a TPU's is its `index_on_host`.
_DEVICE_ALLOCATOR = re.compile(r"^(?:GPU_(\d+)_\w+|(\d+))$")


@dataclass(frozen=True)
class AllocatorPeak:
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
    return AllocatorPeak(
        host="",
        name=name,
        device=local,
        peak_bytes=int(marks[reached]),
        peak_us=peak_us,
        in_use_peak_bytes=int(in_use[top]),
        in_use_peak_us=(at - origin_ps) / 1e6,
        in_use_stack_bytes=int(events.stack_bytes[mine][top]),
        step=next((n for n, start, end in windows if start <= at < end), None),
        capacity_bytes=int(in_use[top] + events.available_bytes[mine][top]),
        fragmentation=None if math.isnan(fragmentation) else fragmentation,
        events=len(mine),
    )
