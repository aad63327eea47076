"""Steps on the devices' clock, host by host: the events of each host stay where they were read.

A step is an annotated step of the program (`StepTraceAnnotation`), else one execution of the
module that takes most device time: the k-th execution on every device of every host is step k,
from the first of them to start to the last to end (`module_spans`, `module_steps`). Given the
run's step windows, each host sums what its devices did in each (`step_totals`): busy time (at
least one op runs), busy time outside communication, self time and roofline bound of the events
and occurrences that start in the step, and what the devices waited for: each idle gap inside
a device's part of a step goes to the op that ends it (`StepTotals.idle_before_ps`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from hlogap.trace.backends.base import platform_of
from hlogap.trace.model import ANNOTATED, OpKey, Step, TraceData, devices_in
from hlogap.trace.summary import Selection
from hlogap.trace.timing import BLOCK_ROWS, blocks, merged_intervals, sorted_spans, take

# Per device of a host (its index): sorted (first start, last end) arrays of its executions.
Spans = dict[int, tuple[np.ndarray, np.ndarray]]


def module_spans(trace: TraceData, selection: Selection, module: str | None) -> Spans:
    """Per device of the host: when each execution of `module` (None: of any module) began
    and ended, in order."""
    in_module = np.array([module is None or o.key.module == module for o in trace.ops], dtype=bool)
    selected = selection.events(trace)
    if not trace.num_events or not in_module.any():
        return {}
    # Executions are dense per file: (device, execution) keys span a small table.
    executions = max(int(trace.execution.max()) + 1, 1)
    first = np.full(len(trace.devices) * executions, np.iinfo(np.int64).max)
    last = np.full(len(first), np.iinfo(np.int64).min)
    for part in blocks(trace.num_events):  # a block at a time: the post-read peak
        execution = trace.execution[part]
        mine = selected[part] & (execution >= 0) & in_module[trace.op_index[part]]
        device, start, duration = (
            take(c[part], mine) for c in (trace.device_index, trace.start_ps, trace.duration_ps)
        )
        key = device.astype(np.int64) * executions + take(execution, mine)
        np.minimum.at(first, key, start)
        np.maximum.at(last, key, start + duration)
    ran = np.flatnonzero(last > np.iinfo(np.int64).min)
    spans: Spans = {}
    for d in devices_in(ran // executions):
        at = ran[ran // executions == d]
        order = np.lexsort((last[at], first[at]))
        spans[d] = (first[at][order], last[at][order])
    return spans


# The median step's device work past its annotation's end, over the annotation's length,
# beyond which the annotations cover only the dispatch (`launched_steps`).
STRETCH_AFTER = 0.05


def launched_steps(trace: TraceData) -> list[Step]:
    """The trace's annotated steps, each stretched to the end of the device work launched in
    it (source "annotation+device" where that ends after the annotation).

    JAX's documented step pattern wraps only the jitted call in the annotation and blocks
    after it: the annotation covers the host's dispatch, the device work runs after it ends.
    A module execution belongs to the last step that began before the execution's first op
    (and before the next step began): the device runs what the host launched in order, and a
    step's work cannot start before the step launched it. Only where the devices' clock is
    the host's (CPU, GPU): a TPU's ops are on its own clock and have the `Steps` line."""
    annotated = sorted(
        (s for s in trace.steps if s.source in ANNOTATED), key=lambda s: (s.start_ps, s.number)
    )
    if not annotated or not platform_of(trace.backend).ops_on_host_clock or not trace.num_events:
        return trace.steps
    spans = list(module_spans(trace, Selection(), None).values())
    if not spans:
        return trace.steps
    first = np.concatenate([f for f, _ in spans])
    last = np.concatenate([e for _, e in spans])
    starts = np.array([s.start_ps for s in annotated], dtype=np.int64)
    ends = np.array([s.end_ps for s in annotated], dtype=np.int64)
    reach = ends.copy()
    following = np.append(starts[1:], np.iinfo(np.int64).max)
    step = np.searchsorted(starts, first, side="right") - 1
    launched = (step >= 0) & (first < following[np.maximum(step, 0)])
    np.maximum.at(reach, step[launched], last[launched])
    # A step that blocks inside its annotation ends there, its last ops' completion markers
    # a few us later (under 1% of the step on every committed fixture): kept as annotated.
    # Stretched only where the annotations hold little of the work: its median step runs on
    # past its annotation by more than `STRETCH_AFTER` of the annotation's length.
    annotation = np.maximum(ends - starts, 1).astype(np.float64)
    if float(np.median((reach - ends) / annotation)) <= STRETCH_AFTER:
        return trace.steps
    return [
        Step(
            s.number,
            "annotation+device" if int(end) > s.end_ps else s.source,
            s.start_ps,
            max(int(end), s.end_ps),
        )
        for s, end in zip(annotated, reach.tolist(), strict=True)
    ]


def module_steps(spans: list[tuple[np.ndarray, np.ndarray]]) -> list[Step]:
    """Step k from the k-th execution of every device (all hosts' `module_spans`)."""
    if not spans:
        return []
    # Devices by steps, padded where a device ran fewer executions (40 k steps: one pass).
    count = max(len(first) for first, _ in spans)
    begin = np.full((len(spans), count), np.iinfo(np.int64).max)
    end = np.full((len(spans), count), np.iinfo(np.int64).min)
    for d, (first, last) in enumerate(spans):
        begin[d, : len(first)] = first
        end[d, : len(last)] = last
    return [
        Step(k, "module", a, b)
        for k, (a, b) in enumerate(zip(begin.min(axis=0).tolist(), end.max(axis=0).tolist()))
    ]


@dataclass(frozen=True)
class OpStepCosts:
    """What the per-host step pass needs to know of each op (by key), from the costed rows."""

    bound_us: dict[OpKey, float]  # the op's roofline bound of one occurrence
    flops: dict[OpKey, float]  # FLOPs of one occurrence
    # The fraction of its measured time the op would take at its bound (bound / measured, at
    # most 1; 1 for an op hlogap cannot cost: its time is kept, never claimed as saved).
    at_bound: dict[OpKey, float]
    collective: frozenset[OpKey]  # data in flight between devices
    host: frozenset[OpKey]  # data in flight to or from host memory


@dataclass
class StepTotals:
    """Per device of one host (rows: the host's devices in order) and step (columns, the run's
    windows), what that device did. Hosts' tables stack in host order: a row is a device of the
    run."""

    first_ps: np.ndarray  # int64: the device's first op start in the step (FIRST_NONE: none)
    last_ps: np.ndarray  # int64: its last op end (clipped to the step's window)
    busy_ps: np.ndarray  # float64: time in [first, last) when at least one op ran
    compute_ps: np.ndarray  # float64: ... when an op other than a collective or transfer ran
    no_host_ps: np.ndarray  # float64: ... when a compute op or a collective ran
    measured_ps: np.ndarray  # float64: self time of events starting in the step
    bound_us: np.ndarray  # float64: bound of occurrences starting in the step
    flops: np.ndarray  # float64: FLOPs of occurrences starting in the step
    # float64: how much shorter [first, last) would be with every op at its bound, the
    # device's concurrency, idle gaps and order kept (`_saving`).
    saving_ps: np.ndarray
    # float64 (changes, devices, steps): the same with only one change's ops shortened, for
    # each change asked for (`step_totals(..., changes=...)`: hlogap.advice's actions).
    change_saving_ps: np.ndarray
    # What the devices waited for in their parts of the steps (`OpWaits`).
    waits: OpWaits

    @property
    def ran(self) -> np.ndarray:
        """Bool per (device, step): the device ran an op that started in the step."""
        ran: np.ndarray = self.first_ps != FIRST_NONE
        return ran

    def on_clock(self, offset_ps: int) -> StepTotals:
        """The same table with its times moved onto a clock `offset_ps` behind the host's (the
        first host's clock, `offset_ps` the host's offset from it)."""
        if not offset_ps:
            return self
        first, last = (
            np.where(times != FIRST_NONE, times - offset_ps, FIRST_NONE)
            for times in (self.first_ps, self.last_ps)
        )
        return replace(self, first_ps=first, last_ps=last)

    @classmethod
    def stacked(cls, hosts: list[StepTotals]) -> StepTotals:
        """Every host's table, one under the other in host order (one copy, however many); the
        ops' waits summed over the hosts."""
        columns: dict[str, Any] = {
            f.name: np.concatenate([getattr(h, f.name) for h in hosts], axis=1 if changes else 0)
            for f in fields(cls)
            if f.name != "waits"
            for changes in [f.name == "change_saving_ps"]
        }
        return cls(**columns, waits=OpWaits.summed([h.waits for h in hosts]))


@dataclass(frozen=True)
class OpWaits:
    """Per op that a device waited for (device time, summed over devices and steps): the idle
    gaps inside the devices' parts of the steps that the op ended (it was the next to start on
    the device: the device was waiting to launch it), and how many. Summed over every op they
    are the parts' idle time (`last - first - busy`), exactly."""

    idle_before_ps: dict[OpKey, int]
    gaps: dict[OpKey, int]
    # The op's longest gaps (`LARGEST_GAPS` at most), longest first: (start, end) on the
    # host's own clock (where its host plane's events are: `hlogap.trace.host_activity`).
    largest: dict[OpKey, tuple[tuple[int, int], ...]] = field(default_factory=dict)

    @classmethod
    def summed(cls, parts: Sequence[OpWaits]) -> OpWaits:
        """The hosts' waits summed (the longest gaps of every host, each on its own clock)."""
        idle: dict[OpKey, int] = {}
        gaps: dict[OpKey, int] = {}
        largest: dict[OpKey, list[tuple[int, int]]] = {}
        for part in parts:
            for key, ps in part.idle_before_ps.items():
                idle[key] = idle.get(key, 0) + ps
                gaps[key] = gaps.get(key, 0) + part.gaps[key]
            for key, spans in part.largest.items():
                largest.setdefault(key, []).extend(spans)
        return cls(idle, gaps, {k: _longest(v) for k, v in largest.items()})


LARGEST_GAPS = 3  # of each op waited for, the longest gaps kept with their place


def _longest(spans: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    return tuple(sorted(spans, key=lambda s: (s[0] - s[1], s[0]))[:LARGEST_GAPS])


FIRST_NONE = np.iinfo(np.int64).max


def step_totals(
    trace: TraceData,
    selection: Selection,
    windows: list[tuple[int, int]],
    costs: OpStepCosts,
    module: str | None = None,
    changes: Sequence[Mapping[OpKey, float]] = (),
    waits_from: int = 0,
) -> StepTotals:
    """One host's `StepTotals` over the selected events, a device at a time. With `module`
    (steps that are executions of that module), a device's step k is its own k-th execution
    of it: devices that run apart (skew) never share a window. Each of `changes` (the fraction
    of its time each of some ops would take) gets its own saving, the other ops kept. The ops'
    waits count the idle of the steps from `waits_from` on (the warm-up ones before it are
    left out, as the summary leaves them)."""
    table = _Table.empty(len(trace.devices), len(windows), len(changes), len(trace.ops))
    selected = selection.events(trace)
    if not windows or not selected.any():
        return table.totals([])
    per_op = _PerOp.of(trace, costs, changes)
    # Views of the trace's columns where everything is selected (`take`), and one device's
    # events at a time: the temporaries of a pass over every event were the post-read peak.
    op, device, start, duration, self_ps = (
        take(c, selected)
        for c in (
            trace.op_index,
            trace.device_index,
            trace.start_ps,
            trace.duration_ps,
            trace.self_ps,
        )
    )
    executions = module_spans(trace, selection, module) if module else {}
    occurrences = trace.occurrence_first[selected[trace.occurrence_first]]
    occurrence_device = trace.device_index[occurrences]
    window_start = np.array([a for a, _ in windows], dtype=np.int64)
    window_end = np.array([b for _, b in windows], dtype=np.int64)
    for d in devices_in(device):
        if module:
            window_start, window_end = _own_windows(executions, d, len(windows))
        mine = device == d
        d_start, d_duration = take(start, mine), take(duration, mine)
        events = _DeviceEvents(
            take(op, mine), d_start, d_start + d_duration, d_duration, take(self_ps, mine)
        )
        _device_totals(table, d, events, window_start, window_end, per_op, waits_from)
        at = occurrences[occurrence_device == d]
        step, inside = _step_of(trace.start_ps[at], window_start, window_end)
        # Each occurrence counts in the step its first event starts in.
        at_op = trace.op_index[at[inside]]
        for name, per in (("bound_us", per_op.bound_us), ("flops", per_op.flops)):
            table.sums[name][d] = np.bincount(
                step[inside], weights=per[at_op], minlength=len(windows)
            )
    return table.totals(per_op.keys)


def _own_windows(executions: Spans, device: int, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """A device's windows where step k is its own k-th execution of the module. Executions
    past the device's last are empty windows at the end: still sorted."""
    window_start = np.full(steps, np.iinfo(np.int64).max)
    window_end = window_start.copy()
    own_start, own_end = executions.get(device, (window_start[:0], window_end[:0]))
    window_start[: len(own_start)] = own_start[:steps]
    window_end[: len(own_end)] = own_end[:steps]
    return window_start, window_end


@dataclass(frozen=True)
class _PerOp:
    """What the step pass reads of each op of the host (arrays by `trace.ops` index)."""

    keys: list[OpKey]
    at_bound: np.ndarray  # float64 in [0, 1]: `OpStepCosts.at_bound`, clipped
    change_ratios: list[np.ndarray]  # per change: the fraction of its time the op would take
    collective: np.ndarray  # bool
    host: np.ndarray  # bool
    bound_us: np.ndarray  # float64, per occurrence
    flops: np.ndarray  # float64, per occurrence

    @classmethod
    def of(
        cls, trace: TraceData, costs: OpStepCosts, changes: Sequence[Mapping[OpKey, float]]
    ) -> _PerOp:
        keys = [o.key for o in trace.ops]
        return cls(
            keys,
            np.array([min(max(costs.at_bound.get(k, 1.0), 0.0), 1.0) for k in keys]),
            [np.array([min(max(c.get(k, 1.0), 0.0), 1.0) for k in keys]) for c in changes],
            np.array([k in costs.collective for k in keys], dtype=bool),
            np.array([k in costs.host for k in keys], dtype=bool),
            np.array([costs.bound_us.get(k, 0.0) for k in keys]),
            np.array([costs.flops.get(k, 0.0) for k in keys]),
        )


@dataclass(frozen=True)
class _DeviceEvents:
    """One device's selected events, in the columns' order."""

    op: np.ndarray
    start: np.ndarray
    end: np.ndarray
    duration: np.ndarray
    self_ps: np.ndarray


@dataclass
class _Table:
    """`StepTotals` being filled, a device at a time, and the ops' waits (per op index)."""

    first: np.ndarray
    last: np.ndarray
    sums: dict[str, np.ndarray]
    changed: np.ndarray
    # Per op of the host: idle device time before it, and in how many gaps (exact int64).
    idle_before: np.ndarray
    idle_gaps: np.ndarray
    longest: dict[int, list[tuple[int, int]]]  # per op index: its longest gaps

    @classmethod
    def empty(cls, devices: int, steps: int, changes: int, ops: int) -> _Table:
        return cls(
            np.full((devices, steps), FIRST_NONE, dtype=np.int64),
            np.full((devices, steps), FIRST_NONE, dtype=np.int64),
            {name: np.zeros((devices, steps)) for name in _SUMS},
            np.zeros((changes, devices, steps)),
            np.zeros(ops, dtype=np.int64),
            np.zeros(ops, dtype=np.int64),
            {},
        )

    def totals(self, keys: list[OpKey]) -> StepTotals:
        waited = np.flatnonzero(self.idle_gaps)
        return StepTotals(
            self.first,
            self.last,
            **self.sums,
            change_saving_ps=self.changed,
            waits=OpWaits(
                {keys[i]: int(self.idle_before[i]) for i in waited},
                {keys[i]: int(self.idle_gaps[i]) for i in waited},
                {keys[i]: _longest(spans) for i, spans in self.longest.items()},
            ),
        )


def _device_totals(
    table: _Table,
    d: int,
    events: _DeviceEvents,
    window_start: np.ndarray,
    window_end: np.ndarray,
    per_op: _PerOp,
    waits_from: int,
) -> None:
    """Fill device `d`'s row of `table` but for the occurrences' bounds and FLOPs."""
    steps = len(window_start)
    # Each event counts in the step it starts in (sums of int64 ps below 2**53: exact in
    # float64 in any order); the device's span in a step runs from the first of them to
    # start to the last to end, within the step's window.
    step_of, inside = _step_of(events.start, window_start, window_end)
    k = take(step_of, inside)
    first = table.first[d]
    ends = np.full(steps, np.iinfo(np.int64).min)
    _first_and_last(k, take(events.start, inside), take(events.end, inside), first, ends)
    ran = first != FIRST_NONE
    table.last[d] = np.where(ran, np.minimum(ends, window_end), FIRST_NONE)
    # A step the device did not run in is an empty span at its window's start: the
    # spans stay in window order for the searches below.
    lo = np.where(ran, first, window_start)
    hi = np.where(ran, table.last[d], window_start)
    covered = _busy_and_waits(table, events, lo, hi, waits_from)
    sums = table.sums
    sums["busy_ps"][d] = sums["compute_ps"][d] = sums["no_host_ps"][d] = covered
    if per_op.collective.any() or per_op.host.any():  # else no event is either
        _split_busy(sums, d, events, per_op, lo, hi)
    sums["measured_ps"][d] = np.bincount(k, weights=take(events.self_ps, inside), minlength=steps)
    leaves = _Leaves.of(events, step_of)
    sums["saving_ps"][d] = _saving(
        leaves.start, leaves.end, per_op.at_bound[leaves.op], lo, hi, leaves.step, leaves.alone
    )
    for c, saving in enumerate(_change_savings(leaves, per_op.change_ratios, lo, hi)):
        table.changed[c, d] = saving


def _first_and_last(
    step: np.ndarray, start: np.ndarray, end: np.ndarray, first: np.ndarray, last: np.ndarray
) -> None:
    """Lower `first` and raise `last` (per step) to each step's first start and last end of
    the events (`step` each). Where the steps run in order, as they do for events in start
    order (mostly), one reduction over each step's run of events, not a scatter per event."""
    if not len(step):
        return
    if bool((step[1:] < step[:-1]).any()):
        np.minimum.at(first, step, start)
        np.maximum.at(last, step, end)
        return
    runs = np.flatnonzero(np.r_[True, step[1:] != step[:-1]])
    at = step[runs]
    first[at] = np.minimum(first[at], np.minimum.reduceat(start, runs))
    last[at] = np.maximum(last[at], np.maximum.reduceat(end, runs))


def _split_busy(
    sums: dict[str, np.ndarray],
    d: int,
    events: _DeviceEvents,
    per_op: _PerOp,
    lo: np.ndarray,
    hi: np.ndarray,
) -> None:
    """Device `d`'s busy time outside collectives and transfers (`compute_ps`) and outside
    transfers (`no_host_ps`) in its spans [lo, hi), where it ran any (else its busy time)."""
    d_collective, d_host = per_op.collective[events.op], per_op.host[events.op]
    if not (d_collective.any() or d_host.any()):
        return
    work = ~(d_collective | d_host)
    sums["compute_ps"][d] = _covered(
        *merged_intervals(events.start[work], events.end[work]), lo, hi
    )
    if d_host.any():
        no_host = ~d_host
        sums["no_host_ps"][d] = _covered(
            *merged_intervals(events.start[no_host], events.end[no_host]), lo, hi
        )


def _busy_and_waits(
    table: _Table, events: _DeviceEvents, lo: np.ndarray, hi: np.ndarray, waits_from: int
) -> np.ndarray:
    """The device's busy time in each of its spans [lo, hi); its idle gaps in the spans from
    `waits_from` on added to `table`'s waits, each to the op that opens the span it ends at."""
    busy_start, busy_end, opener = _busy_spans(events.start, events.end)
    # One device's gaps over a profile sum below 2**53 ps (2.5 hours): exact in float64.
    in_windows, gap_ps = _gaps_in(busy_start, busy_end, lo[waits_from:], hi[waits_from:])
    waited_for = events.op[opener[1:]]
    for total, weight in ((table.idle_before, gap_ps), (table.idle_gaps, in_windows)):
        total += np.bincount(waited_for, weights=weight, minlength=len(total)).astype(np.int64)
    _keep_longest(table.longest, busy_start, busy_end, in_windows, waited_for)
    return _covered(busy_start, busy_end, lo, hi)


def _keep_longest(
    longest: dict[int, list[tuple[int, int]]],
    busy_start: np.ndarray,
    busy_end: np.ndarray,
    in_windows: np.ndarray,
    waited_for: np.ndarray,
) -> None:
    """Add one device's `LARGEST_GAPS` longest gaps inside the windows of each op (by the op
    that ends them) to `longest` (`_longest` keeps the longest of every device's)."""
    inside = np.flatnonzero(in_windows > 0)
    if not len(inside):
        return
    length = busy_start[1:][inside] - busy_end[:-1][inside]
    op = waited_for[inside]
    order = np.lexsort((-length, op))  # by op, the longest gap first
    op = op[order]
    group = np.flatnonzero(np.r_[True, op[1:] != op[:-1]])
    rank = np.arange(len(op)) - np.repeat(group, np.diff(np.r_[group, len(op)]))
    for k in np.flatnonzero(rank < LARGEST_GAPS).tolist():
        g = int(inside[order[k]])
        longest.setdefault(int(op[k]), []).append((int(busy_end[g]), int(busy_start[g + 1])))


def _busy_spans(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`merged_intervals` of one device's events, with the event that opens each span (index
    into `start`): of the events starting at the span's start, the one that ends last (an
    enclosing op, not the first op of its body), the first in the columns' order on a tie."""
    if not len(start):
        return start, end, np.zeros(0, dtype=np.intp)
    order, s, e, at = sorted_spans(start, end)
    span_end = np.maximum.reduceat(e, at)
    # Where several events start at a span's start (the next in order starts with it), the
    # opener is the longest of them.
    opener = at.copy()
    tied = np.flatnonzero(s[np.minimum(at + 1, len(s) - 1)] == s[at])
    tied = tied[at[tied] + 1 < len(s)]
    if len(tied):
        count = np.searchsorted(s, s[at[tied]], side="right") - at[tied]
        offsets = np.cumsum(count) - count
        members = np.repeat(at[tied], count) + (
            np.arange(int(count.sum())) - np.repeat(offsets, count)
        )
        longest = np.maximum.reduceat(e[members], offsets)
        # The first member (in sorted, so column, order) that reaches the run's longest end.
        is_longest = np.flatnonzero(e[members] == np.repeat(longest, count))
        opener[tied] = members[is_longest[np.searchsorted(is_longest, offsets)]]
    return s[at], span_end, opener if order is None else order[opener]


def _gaps_in(
    busy_start: np.ndarray, busy_end: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per idle gap (between consecutive busy spans): how many of the windows [lo, hi) it lies
    in, and its length times that. A window starts and ends inside busy spans (at an op start,
    and at an op end or inside an op running past it), so a gap lies wholly inside a window or
    wholly outside: summed, these are the windows' lengths minus what `_covered` finds."""
    gap_start, gap_end = busy_end[:-1], busy_start[1:]
    # Each window holds a run of consecutive gaps: +1 where its run starts, -1 past its end.
    first_gap = np.searchsorted(gap_start, lo, side="left")
    past_gap = np.maximum(np.searchsorted(gap_end, hi, side="right"), first_gap)
    edges = np.bincount(first_gap, minlength=len(gap_start) + 1)
    edges -= np.bincount(past_gap, minlength=len(gap_start) + 1)
    windows = np.cumsum(edges[:-1])
    return windows, (gap_end - gap_start) * windows


@dataclass(frozen=True)
class _Leaves:
    """One device's leaf events (nothing nests inside them: the events the savings cut into
    segments) by start: views of the device's columns where they already are in order."""

    start: np.ndarray
    end: np.ndarray
    op: np.ndarray
    step: np.ndarray | None  # each one's window by `_step_of`, where found already
    alone: np.ndarray  # bool: overlaps no other leaf event (`_alone`)

    @classmethod
    def of(cls, events: _DeviceEvents, step_of: np.ndarray) -> _Leaves:
        leaf = events.self_ps == events.duration
        if leaf.all():  # GPU kernels, TPU lines without loops: the steps found serve
            start, end, op, step = events.start, events.end, events.op, step_of
        else:
            start, end, op, step = events.start[leaf], events.end[leaf], events.op[leaf], None
        if len(start) > 1 and bool((start[1:] < start[:-1]).any()):
            by_start = np.argsort(start, kind="stable")
            start, end, op = start[by_start], end[by_start], op[by_start]
            step = None if step is None else step[by_start]
        return cls(start, end, op, step, _alone(start, end))

    def lonely(self) -> np.ndarray:
        """Bool per leaf: it overlaps no other leaf, has a length and starts after the one
        before it (no other leaf starts with it): a change of such ops meets no other event,
        its re-timing is over its own events (`_split_saving`)."""
        lonely = self.alone & (self.end > self.start)
        lonely[1:] &= self.start[1:] > self.start[:-1]
        return lonely


def _change_savings(
    leaves: _Leaves, ratios: Sequence[np.ndarray], lo: np.ndarray, hi: np.ndarray
) -> list[np.ndarray]:
    """Per change (the fraction of its time each op would take: `ratios`, by op index),
    `_saving` with only that change's ops shortened, the others kept (ratio 1): each exactly
    `_met_saving` of the change's events (`_split_saving`). The events of every change's ops
    are found in one pass over the device's."""
    if not ratios:
        return []
    shortened = [ratio < 1.0 for ratio in ratios]  # per change, per op
    touched = np.logical_or.reduce(shortened)
    candidates = np.flatnonzero(touched[leaves.op])
    candidate_op = leaves.op[candidates]
    lonely = leaves.lonely()[candidates]
    found = []
    for ratio, ops in zip(ratios, shortened, strict=True):
        mine = ops[candidate_op]
        if not mine.any():
            found.append(np.zeros(len(lo)))
            continue
        at = candidates[mine]
        found.append(_split_saving(leaves, at, ratio[candidate_op[mine]], lonely[mine], lo, hi))
    return found


def _split_saving(
    leaves: _Leaves,
    at: np.ndarray,
    ratio: np.ndarray,
    lonely: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
) -> np.ndarray:
    """`_met_saving` of a change of the leaves at positions `at` (`ratio` each; `lonely`: each
    overlaps no other leaf, `_Leaves.lonely`), summed in the same order, over less.

    A lonely event is its own segment in the change's sub-problem and changes no other's
    segments (nothing it could meet starts inside it or runs across its start): the
    sub-problem is the others' (`_met_events`) with the lonely events added as events that
    overlap nothing. The alone events' savings are one sum per window in start order (one
    block of `_saving_alone`, where the sub-problem's alone events fit in one: else the whole
    sub-problem is built), the overlapping ones' segments are the others' sub-problem's."""
    start, end = leaves.start, leaves.end
    if lonely.all():  # the sub-problem is these events, each alone
        return _saving(start[at], end[at], ratio, lo, hi)
    rest = ~lonely
    sub_start, sub_end, sub_ratio, changed = _met_events(start, end, at[rest], ratio[rest])
    alone = _alone(sub_start, sub_end)
    if int(lonely.sum()) + int(alone.sum()) > BLOCK_ROWS:
        return _met_saving(start, end, at, ratio, lo, hi)
    # The changed events alone in the sub-problem, by position (so by start): the lonely ones
    # and those of the others' sub-problem (its kept and spanning events add nothing).
    alone_changed = alone & (changed >= 0)
    position = np.concatenate([at[lonely], changed[alone_changed]])
    by_start = np.argsort(position)
    position = position[by_start]
    alone_ratio = np.concatenate([ratio[lonely], sub_ratio[alone_changed]])[by_start]
    saving = np.zeros(len(lo))
    saving += _saving_alone(start[position], end[position], alone_ratio, lo, hi)
    if not alone.all():
        together = ~alone
        saving += _saving_together(
            sub_start[together], sub_end[together], sub_ratio[together], lo, hi
        )
    return saving


def _met_saving(
    start: np.ndarray,
    end: np.ndarray,
    changed_at: np.ndarray,
    ratio: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
) -> np.ndarray:
    """`_saving` for a change of the events at positions `changed_at` (sorted by start, as
    `start` is; `ratio` each), the others kept, over only what it needs (`_met_events`).
    Exactly `_saving`'s result, over about as many events as the change's ops have."""
    sub_start, sub_end, sub_ratio, _ = _met_events(start, end, changed_at, ratio)
    return _saving(sub_start, sub_end, sub_ratio, lo, hi)


def _met_events(
    start: np.ndarray, end: np.ndarray, changed_at: np.ndarray, ratio: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A change's sub-problem, by start: (start, end, ratio, and the position of each changed
    event: -1 for the others). A segment shrinks only where nothing but changed ops run, so of
    the other events only those that meet a changed op's span count: those starting inside
    it, and the ones running at its start, as the one span they cover from there (all of them
    hold that instant)."""
    changed = np.zeros(len(start), dtype=bool)
    changed[changed_at] = True
    span_start, span_end = merged_intervals(start[changed_at], end[changed_at])
    # The reach of the kept events so far, index by index (a changed one reaches nothing): no
    # copies of the kept events' columns (a 3 M-event host's step pass held three of them).
    reach = np.maximum.accumulate(np.where(changed, np.iinfo(np.int64).min, end))
    # Per span: the events starting inside it (a run of indices; the kept ones among them),
    # and the reach of the kept ones that started before it.
    first = np.searchsorted(start, span_start, side="left")
    counts = np.searchsorted(start, span_end, side="left") - first
    inside = np.arange(int(counts.sum())) + np.repeat(first - (np.cumsum(counts) - counts), counts)
    inside = inside[~changed[inside]]
    held = reach[np.maximum(first - 1, 0)]
    running = (first > 0) & (held > span_start)
    kept = len(inside) + int(running.sum())
    sub_start = np.concatenate([start[changed_at], start[inside], span_start[running]])
    sub_end = np.concatenate([end[changed_at], end[inside], held[running]])
    sub_ratio = np.concatenate([ratio, np.ones(kept)])
    position = np.concatenate([changed_at, np.full(kept, -1, dtype=changed_at.dtype)])
    order = np.argsort(sub_start, kind="stable")
    return sub_start[order], sub_end[order], sub_ratio[order], position[order]


_SUMS = (
    "busy_ps",
    "compute_ps",
    "no_host_ps",
    "measured_ps",
    "bound_us",
    "flops",
    "saving_ps",
)
# An event spanning more elementary segments than this is folded in with a slice of its own
# (a long async op on XLA:CPU): the index expansion below would grow with its length.
LONG_EVENT_SEGMENTS = 64


def _saving(
    start: np.ndarray,
    end: np.ndarray,
    at_bound: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    step: np.ndarray | None = None,
    alone: np.ndarray | None = None,
) -> np.ndarray:
    """Per window [lo, hi) of one device: how much shorter the device's busy time in it would
    be if every op ran at its bound, keeping what ran at once, idle gaps and order.

    The time is cut at every event edge into segments; in each, the ops running are each
    shortened to `at_bound` of their time, so the segment can shrink no further than its
    slowest op allows: it takes `max(at_bound)` of its length. Time when only an enclosing op
    (a while loop's own time) runs is kept whole. `at_bound` <= 1, so no segment grows.
    `step`, where given, is each event's window by `_step_of` (found already); `alone`, where
    given, is `_alone` of the events, which are then in start order.
    """
    saving = np.zeros(len(lo))  # float64 even where no event falls in a window
    if not len(start):
        return saving
    if alone is None:
        if (start[1:] < start[:-1]).any():
            order = np.argsort(start, kind="stable")
            start, end, at_bound = start[order], end[order], at_bound[order]
            step = None if step is None else step[order]
        alone = _alone(start, end)
    if alone.all():
        saving += _saving_alone(start, end, at_bound, lo, hi, step)
        return saving
    together = ~alone
    saving += _saving_alone(
        start[alone], end[alone], at_bound[alone], lo, hi, None if step is None else step[alone]
    )
    saving += _saving_together(start[together], end[together], at_bound[together], lo, hi)
    return saving


def _alone(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Bool per event (sorted by start): it overlaps no other. Events that overlap no other
    (most of them: a GPU stream, a TPU op line) are each their own segment; only the clusters
    of overlapping events need cutting. Event i overlaps no earlier one when it starts after
    all of them end, and no later one when the next starts after it ends."""
    opens = np.ones(len(start) + 1, dtype=bool)
    opens[1:-1] = start[1:] >= np.maximum.accumulate(end)[:-1]
    alone: np.ndarray = opens[:-1] & opens[1:]
    return alone


def _saving_alone(
    start: np.ndarray,
    end: np.ndarray,
    at_bound: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    step: np.ndarray | None = None,
) -> np.ndarray:
    """`_saving` of events that overlap no other: each is one segment, cut at its window's end.
    A block of events at a time, no compaction: the temporaries stay a few MB."""
    found = np.zeros(len(lo))
    for part in blocks(len(start)):
        first = start[part]
        step_of = np.searchsorted(lo, first, side="right") - 1 if step is None else step[part]
        window = np.maximum(step_of, 0)
        end_of = hi[window]
        weight = (np.minimum(end[part], end_of) - first) * (1.0 - at_bound[part])
        weight[(step_of < 0) | (first >= end_of)] = 0.0
        found += np.bincount(window, weights=weight, minlength=len(lo))
    return found


def _saving_together(
    start: np.ndarray, end: np.ndarray, at_bound: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:
    """`_saving` of overlapping events (sorted by start), segment by segment."""
    # Distinct edges by a sort (np.unique's hash path took 6.7 s on 3 M events).
    edges = np.concatenate([start, end, lo, hi])
    edges.sort()
    edges = edges[np.concatenate(([True], edges[1:] != edges[:-1]))]
    first_seg = np.searchsorted(edges, start)
    last_seg = np.searchsorted(edges, end)  # segments first_seg .. last_seg - 1
    span = last_seg - first_seg
    slowest = np.full(max(len(edges) - 1, 0), -1.0)  # -1: no leaf event runs in the segment
    long_events = span > LONG_EVENT_SEGMENTS
    for i in np.flatnonzero(long_events):
        view = slowest[first_seg[i] : last_seg[i]]
        np.maximum(view, at_bound[i], out=view)
    short = ~long_events
    count = span[short]
    offsets = np.repeat(np.cumsum(count) - count, count)
    segment = np.repeat(first_seg[short], count) + (np.arange(int(count.sum())) - offsets)
    np.maximum.at(slowest, segment, np.repeat(at_bound[short], count))
    ran = slowest >= 0
    seg_start = edges[:-1][ran]
    length = (edges[1:] - edges[:-1])[ran]
    step, inside = _step_of(seg_start, lo, hi)
    found: np.ndarray = np.bincount(
        step[inside], weights=(length * (1.0 - slowest[ran]))[inside], minlength=len(lo)
    )
    return found


def _step_of(
    start: np.ndarray, window_start: np.ndarray, window_end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The step each start falls in, and whether it falls in one at all."""
    step = np.searchsorted(window_start, start, side="right") - 1
    inside = (step >= 0) & (start < window_end[np.maximum(step, 0)])
    return step, inside


def _covered(s: np.ndarray, e: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For each window [a, b): how much of it the disjoint sorted intervals [s, e) cover."""
    if not len(s):
        return np.zeros(len(a))
    total = np.concatenate([[0], np.cumsum(e - s)])
    lo = np.searchsorted(e, a, side="right")  # first interval ending after a
    hi = np.searchsorted(s, b, side="left")  # intervals starting before b end at hi
    some = hi > lo
    covered = np.where(some, total[hi] - total[lo], 0).astype(np.float64)
    left = np.where(some, np.maximum(a - s[np.minimum(lo, len(s) - 1)], 0), 0)
    right = np.where(some, np.maximum(e[np.maximum(hi - 1, 0)] - b, 0), 0)
    result: np.ndarray = np.maximum(covered - left - right, 0.0)
    return result


# A host's collective occurrence that it did not run (fewer than asked).
NOT_RUN = np.iinfo(np.int64).min


@dataclass
class CollectiveTimes:
    """Per collective asked for (rows, in that order) and occurrence (columns: the first ones
    on each device, in start order; the k-th on every device is the k-th of the host): when the
    host's last device entered it and when its last device left it, on the host's clock;
    `NOT_RUN` where the host ran fewer."""

    start_ps: np.ndarray  # int64 (collectives, occurrences)
    end_ps: np.ndarray  # int64 (collectives, occurrences)


def collective_times(
    trace: TraceData, selection: Selection, collectives: Sequence[OpKey], occurrences: int
) -> CollectiveTimes:
    """The host's `CollectiveTimes` of the first `occurrences` of each of `collectives`. Every
    host of a pod enters a collective at its own time and leaves it with the others: the ends
    are events the hosts share (their clock offsets), the starts tell who arrived last."""
    start = np.full((len(collectives), occurrences), NOT_RUN, dtype=np.int64)
    end = start.copy()
    op_ids = {o.key: i for i, o in enumerate(trace.ops)}
    wanted = np.full(len(trace.ops), -1, dtype=np.int64)
    for row, key in enumerate(collectives):
        if key in op_ids:
            wanted[op_ids[key]] = row
    selected = selection.events(trace)
    if not trace.num_events or (wanted < 0).all():
        return CollectiveTimes(start, end)
    # An occurrence lasts from its first event's start to the last end of its events (several
    # kernels on a GPU); only the collectives' events are looked at, a block at a time.
    occurrence_end = np.full(len(trace.occurrence_first), NOT_RUN, dtype=np.int64)
    for part in blocks(trace.num_events):
        mine = selected[part] & (wanted[trace.op_index[part]] >= 0)
        np.maximum.at(
            occurrence_end,
            trace.occurrence[part][mine],
            trace.start_ps[part][mine] + trace.duration_ps[part][mine],
        )
    first = trace.occurrence_first
    ran = np.flatnonzero(occurrence_end != NOT_RUN)
    row_of = wanted[trace.op_index[first[ran]]]
    device_of = trace.device_index[first[ran]]
    began = trace.start_ps[first[ran]]
    for row in devices_in(row_of):
        for device in devices_in(device_of[row_of == row]):
            at = np.flatnonzero((row_of == row) & (device_of == device))
            at = at[np.argsort(began[at], kind="stable")][:occurrences]
            n = len(at)
            start[row, :n] = np.maximum(start[row, :n], began[at])
            end[row, :n] = np.maximum(end[row, :n], occurrence_end[ran[at]])
    return CollectiveTimes(start, end)
