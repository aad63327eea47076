"""Hardware counters: each op's time-weighted unit utilisation from a TPU `_counters_` line.

TPU profiles taken with kernel profiling on (`--xla_enable_custom_call_region_trace`, as on the
v6e Pallas profile) carry a `_counters_` line on each `/device:TPU:N` plane: one event per
sample and unit, named after the unit (`MXU`, `Vector ALU`, `Vector Load`, `Vector Store`,
`Scalar ALU`, `XLU`, `Vector EUP`), with the stat `% util` (0-100); `Vector Fills`/`Vector
Spills` count instead and are not read. Samples sit on the `Tensor Core` line's bundle
boundaries, on the plane's host clock (`offset_ps`, as the ops' own).

A sample's `% util` covers the interval that ends at the sample, since the unit's previous
sample; the event's own duration runs on to the next sample. Read that other way, the v6e
Pallas kernel's `ep_run_kernel` scopes (its blocks' matmuls) would have used the MXU 0.1% of
their time. The figures are the compiled code's slot occupancy per unit laid over time, not
busy time (the DMA waits read like the compute): docs/counters.md has the evidence.

An op's figure for a unit is the unit's `% util` integrated over the op's event spans, over the
time the intervals cover there, whatever the op computes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import numpy as np
from google.protobuf.message import DecodeError

from hlogap.errors import InputError
from hlogap.proto import xplane_pb2
from hlogap.trace.columnar import RawLine
from hlogap.trace.model import OpInfo
from hlogap.trace.xspace import Plane

COUNTER_LINE = "_counters_"
UTIL_STAT = "% util"


class UnitSamples(NamedTuple):
    """One unit's intervals between samples, sorted, and running sums over them."""

    start_ps: np.ndarray  # int64, host clock: a sample
    end_ps: np.ndarray  # int64: the next sample
    util: np.ndarray  # float64, 0-1
    busy_before: np.ndarray  # float64: sum of util x length of the intervals before each
    covered_before: np.ndarray  # float64: sum of the lengths of the intervals before each

    @classmethod
    def of(cls, at_ps: np.ndarray, util: np.ndarray) -> UnitSamples:
        """From samples (time, utilisation since the previous sample)."""
        order = np.argsort(at_ps, kind="stable")
        at_ps, util = at_ps[order], util[order]
        start, end, util = at_ps[:-1], at_ps[1:], util[1:]  # the first sample closes nothing
        span = (end - start).astype(np.float64)
        busy = np.concatenate(([0.0], np.cumsum(util * span)[:-1]))
        covered = np.concatenate(([0.0], np.cumsum(span)[:-1]))
        return cls(start, end, util, busy, covered)

    def integrals(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(util x time, time covered) from the first interval up to each time in `t`."""
        k = np.searchsorted(self.start_ps, t, side="right") - 1
        before = k < 0
        k = np.maximum(k, 0)
        inside = np.clip(t - self.start_ps[k], 0, self.end_ps[k] - self.start_ps[k])
        inside = inside.astype(np.float64)
        busy = np.where(before, 0.0, self.busy_before[k] + self.util[k] * inside)
        covered = np.where(before, 0.0, self.covered_before[k] + inside)
        return busy, covered


def read_counters(plane: Plane, lines: Iterable[RawLine]) -> dict[str, UnitSamples]:
    """Each unit's `% util` intervals on the plane's `_counters_` lines (host clock)."""
    util_id = next((k for k, v in plane.stat_metadata.items() if v.name == UTIL_STAT), None)
    found: dict[str, list[tuple[int, float]]] = {}
    for line in lines:
        base = line.timestamp_ns * 1000
        for raw in line.events:
            event = _decode(raw, plane.name)
            md = plane.event_metadata.get(event.metadata_id)
            if md is None:
                continue
            for stat in event.stats:
                if stat.metadata_id != util_id:
                    continue
                value = stat.double_value if stat.HasField("double_value") else None
                if value is None:
                    value = float(stat.int64_value or stat.uint64_value)
                if 0.0 <= value <= 100.0:  # a NaN or a share past 100% is no reading
                    sample = (base + event.offset_ps, value / 100.0)
                    found.setdefault(md.name, []).append(sample)
    return {
        unit: UnitSamples.of(
            np.array([s[0] for s in samples], dtype=np.int64),
            np.array([s[1] for s in samples], dtype=np.float64),
        )
        for unit, samples in found.items()
        if len(samples) > 1  # one sample closes no interval
    }


def add_op_counters(
    ops: list[OpInfo],
    counters: dict[str, UnitSamples],
    op: np.ndarray,
    start_ps: np.ndarray,
    duration_ps: np.ndarray,
) -> None:
    """Add each event's util x time and time covered, per unit, to its op (`op`: indices into
    `ops`, -1 for none; times on the counters' clock)."""
    keep = op >= 0
    if not counters or not keep.any():
        return
    op, start = op[keep], start_ps[keep]
    end = start + duration_ps[keep]
    n = len(ops)
    for unit, samples in counters.items():
        busy_end, covered_end = samples.integrals(end)
        busy_start, covered_start = samples.integrals(start)
        busy = np.bincount(op, weights=busy_end - busy_start, minlength=n)
        covered = np.bincount(op, weights=covered_end - covered_start, minlength=n)
        for i in np.flatnonzero(covered > 0).tolist():
            info = ops[i]
            if info.counters is None:
                info.counters = {}
            was_busy, was_covered = info.counters.get(unit, (0.0, 0.0))
            info.counters[unit] = (was_busy + float(busy[i]), was_covered + float(covered[i]))


def _decode(raw: bytes, plane: str) -> xplane_pb2.XEvent:
    try:
        return xplane_pb2.XEvent.FromString(raw)
    except DecodeError as exc:
        raise InputError(f"corrupt counter event on {plane}") from exc
