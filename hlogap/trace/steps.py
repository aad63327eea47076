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
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np
from msgspec import Struct, field
from msgspec.structs import fields, replace

from hlogap.trace.backends.base import platform_of
from hlogap.trace.model import ANNOTATED, ExecutionSpans, OpKey, Step, TraceData, devices_in
from hlogap.trace.summary import Selection
from hlogap.trace.timing import (
    BLOCK_ROWS,
    SortedSpans,
    blocks,
    merged_intervals,
    take,
)

try:
    from hlogap.trace import _windowsums
except ImportError:  # installed without its C extension: numpy sums the saving columns
    _windowsums = None  # type: ignore[assignment]


def module_spans(trace: TraceData, selection: Selection, module: str | None) -> ExecutionSpans:
    """Per device of the host: when each execution of `module` (None: of any module) began
    and ended, in order (found once per trace: `TraceData.spans`)."""
    found = trace.spans.get((selection, module))
    if found is None:
        found = trace.spans[(selection, module)] = _module_spans(trace, selection, module)
    return found


def _module_spans(trace: TraceData, selection: Selection, module: str | None) -> ExecutionSpans:
    in_module = np.array([module is None or o.key.module == module for o in trace.ops], dtype=bool)
    selected = selection.events(trace)
    if not trace.num_events or not in_module.any():
        return {}
    # Executions are dense per file: (device, execution) keys span a small table.
    executions = max(int(trace.execution.max()) + 1, 1)
    first = np.full(len(trace.devices) * executions, np.iinfo(np.int64).max)
    last = np.full(len(first), np.iinfo(np.int64).min)
    for part in blocks(trace.num_events):  # a block at a time: the post-read peak
        mine = selected[part] & (trace.execution[part] >= 0)
        if not in_module.all():
            mine &= in_module[trace.op_index[part]]
        device, execution, start, duration = (
            take(c[part], mine)
            for c in (trace.device_index, trace.execution, trace.start_ps, trace.duration_ps)
        )
        runs = _runs(device, execution)
        key = device[runs].astype(np.int64) * executions + execution[runs]
        _first_and_last(key, runs, start, start + duration, first, last)
    ran = np.flatnonzero(last > np.iinfo(np.int64).min)
    spans: ExecutionSpans = {}
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


class OpStepCosts(NamedTuple):
    """What the per-host step pass needs to know of each op (by key), from the costed rows."""

    bound_us: dict[OpKey, float]  # the op's roofline bound of one occurrence
    flops: dict[OpKey, float]  # FLOPs of one occurrence
    # The fraction of its measured time the op would take at its bound (bound / measured, at
    # most 1; 1 for an op hlogap cannot cost: its time is kept, never claimed as saved).
    at_bound: dict[OpKey, float]
    collective: frozenset[OpKey]  # data in flight between devices
    host: frozenset[OpKey]  # data in flight to or from host memory


class StepTotals(Struct):
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
    # device's concurrency, idle gaps and order kept (`_Segments.saving`).
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


class OpWaits(Struct, frozen=True):
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
        events = _DeviceEvents(
            take(op, mine), take(start, mine), take(duration, mine), take(self_ps, mine)
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


def _own_windows(
    executions: ExecutionSpans, device: int, steps: int
) -> tuple[np.ndarray, np.ndarray]:
    """A device's windows where step k is its own k-th execution of the module. Executions
    past the device's last are empty windows at the end: still sorted."""
    window_start = np.full(steps, np.iinfo(np.int64).max)
    window_end = window_start.copy()
    own_start, own_end = executions.get(device, (window_start[:0], window_end[:0]))
    window_start[: len(own_start)] = own_start[:steps]
    window_end[: len(own_end)] = own_end[:steps]
    return window_start, window_end


class _PerOp(NamedTuple):
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


class _DeviceEvents(Struct, frozen=True, dict=True):  # dict: by_start is cached
    """One device's selected events, in the columns' order (no column of their ends: each
    pass adds start and duration where it needs an end, a block or a few events at a time)."""

    op: np.ndarray
    start: np.ndarray
    duration: np.ndarray
    self_ps: np.ndarray

    @cached_property
    def by_start(self) -> SortedSpans:
        """The events in start order and their busy spans, found once for the busy time and
        the segments."""
        return SortedSpans.of(self.start, self.duration)


class _Table(Struct):
    """`StepTotals` being filled, a device at a time, and the ops' waits (per op index)."""

    first: np.ndarray
    last: np.ndarray
    sums: dict[str, np.ndarray]
    changed: np.ndarray
    # Per op of the host: idle device time before it, and in how many gaps (exact int64).
    idle_before: np.ndarray
    idle_gaps: np.ndarray
    # Per device: its longest gaps of each op (op index, start, end; `_keep_longest`).
    longest: list[tuple[np.ndarray, np.ndarray, np.ndarray]]

    @classmethod
    def empty(cls, devices: int, steps: int, changes: int, ops: int) -> _Table:
        return cls(
            np.full((devices, steps), FIRST_NONE, dtype=np.int64),
            np.full((devices, steps), FIRST_NONE, dtype=np.int64),
            {name: np.zeros((devices, steps)) for name in _SUMS},
            np.zeros((changes, devices, steps)),
            np.zeros(ops, dtype=np.int64),
            np.zeros(ops, dtype=np.int64),
            [],
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
                self.largest(keys),
            ),
        )

    def largest(self, keys: list[OpKey]) -> dict[OpKey, tuple[tuple[int, int], ...]]:
        """Each op's `LARGEST_GAPS` longest gaps of every device's (`_longest`'s order: the
        longest first, the earliest first on a tie), the ops in the order the devices first
        gave them: the devices' gaps in start order, picked as one device's are."""
        if not self.longest:
            return {}
        op, start, end = (np.concatenate(column) for column in zip(*self.longest))
        by_start = np.argsort(start, kind="stable")
        kept = by_start[_longest_per_op(op[by_start], (end - start)[by_start])]
        spans: dict[int, list[tuple[int, int]]] = {}
        for i, a, b in zip(op[kept].tolist(), start[kept].tolist(), end[kept].tolist()):
            spans.setdefault(i, []).append((a, b))
        _, first = np.unique(op, return_index=True)
        return {keys[i]: tuple(spans[i]) for i in op[np.sort(first)].tolist()}


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
    # start to the last to end, within the step's window. A block of events at a time: the
    # sums are exact int64, the first starts and last ends the same in any order.
    first = table.first[d]
    ends = np.full(steps, np.iinfo(np.int64).min)
    measured = np.zeros(steps, dtype=np.int64)  # one exact sum a run of the step's events
    for part in blocks(len(events.start)):
        start = events.start[part]
        step_of, inside = _step_of(start, window_start, window_end)
        k = take(step_of, inside)
        runs = _runs(k)
        if not len(runs):
            continue
        end = take(start + events.duration[part], inside)
        _first_and_last(k[runs], runs, take(start, inside), end, first, ends)
        np.add.at(measured, k[runs], np.add.reduceat(take(events.self_ps[part], inside), runs))
    sums = table.sums
    sums["measured_ps"][d] = measured
    ran = first != FIRST_NONE
    table.last[d] = np.where(ran, np.minimum(ends, window_end), FIRST_NONE)
    # A step the device did not run in is an empty span at its window's start: the
    # spans stay in window order for the searches below.
    lo = np.where(ran, first, window_start)
    hi = np.where(ran, table.last[d], window_start)
    covered = _busy_and_waits(table, events, lo, hi, waits_from)
    sums["busy_ps"][d] = sums["compute_ps"][d] = sums["no_host_ps"][d] = covered
    if per_op.collective.any() or per_op.host.any():  # else no event is either
        _split_busy(sums, d, events, per_op, lo, hi)
    segments = _Segments.of(events, lo, hi)
    sums["saving_ps"][d] = segments.saving(per_op.at_bound)
    for c, saving in enumerate(segments.savings(per_op.change_ratios)):
        table.changed[c, d] = saving


def _runs(*keys: np.ndarray) -> np.ndarray:
    """Where each run of rows with the same keys begins (none for no rows)."""
    if not len(keys[0]):
        return np.zeros(0, dtype=np.intp)
    change = np.zeros(len(keys[0]), dtype=bool)
    change[0] = True
    for key in keys:
        change[1:] |= key[1:] != key[:-1]
    return np.flatnonzero(change)


def _first_and_last(
    key: np.ndarray,
    runs: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    first: np.ndarray,
    last: np.ndarray,
) -> None:
    """Lower `first` and raise `last` (by key) to the first start and last end of each run of
    events (`runs`: where each begins, `key`: each one's). Events come in runs (a device's in
    start order by step, an execution's together): one reduction a run, the runs' results
    scattered, not a scatter per event (`ufunc.at` over 3 M events: 0.3 s)."""
    if not len(runs):
        return
    np.minimum.at(first, key, np.minimum.reduceat(start, runs))
    np.maximum.at(last, key, np.maximum.reduceat(end, runs))


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
    start = events.start[work]
    sums["compute_ps"][d] = _covered(
        *merged_intervals(start, start + events.duration[work]), lo, hi
    )
    if d_host.any():
        no_host = ~d_host
        start = events.start[no_host]
        sums["no_host_ps"][d] = _covered(
            *merged_intervals(start, start + events.duration[no_host]), lo, hi
        )


def _busy_and_waits(
    table: _Table, events: _DeviceEvents, lo: np.ndarray, hi: np.ndarray, waits_from: int
) -> np.ndarray:
    """The device's busy time in each of its spans [lo, hi); its idle gaps in the spans from
    `waits_from` on added to `table`'s waits, each to the op that opens the span it ends at."""
    busy_start, busy_end, opener = _busy_spans(events.by_start)
    # One device's gaps over a profile sum below 2**53 ps (2.5 hours): exact in float64.
    in_windows, gap_ps = _gaps_in(busy_start, busy_end, lo[waits_from:], hi[waits_from:])
    waited_for = events.op[opener[1:]]
    for total, weight in ((table.idle_before, gap_ps), (table.idle_gaps, in_windows)):
        total += np.bincount(waited_for, weights=weight, minlength=len(total)).astype(np.int64)
    _keep_longest(table.longest, busy_start, busy_end, in_windows, waited_for)
    return _covered(busy_start, busy_end, lo, hi)


def _keep_longest(
    longest: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
    busy_start: np.ndarray,
    busy_end: np.ndarray,
    in_windows: np.ndarray,
    waited_for: np.ndarray,
) -> None:
    """Add one device's `LARGEST_GAPS` longest gaps inside the windows of each op (by the op
    that ends them) to `longest` (`_Table.largest` keeps the longest of every device's)."""
    inside = np.flatnonzero(in_windows > 0)
    if not len(inside):
        return
    length = busy_start[1:][inside] - busy_end[:-1][inside]
    op = waited_for[inside]
    gap = inside[_longest_per_op(op, length)]
    longest.append((waited_for[gap], busy_end[gap], busy_start[gap + 1]))


def _longest_per_op(op: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Where each op's `LARGEST_GAPS` longest gaps are (a tie: the earlier first), ordered by
    op, then longest first: in one pass where the C extension is built."""
    if _windowsums is not None:
        out = np.empty((int(op.max()) + 1) * LARGEST_GAPS, dtype=np.int64)
        found = _windowsums.longest_per_op(
            op.astype(np.int32, copy=False), length.astype(np.int64, copy=False), out, LARGEST_GAPS
        )
        return out[:found]
    # Only the gaps as long as the shortest of the op's longest gap among its 1st, 4th, 7th...
    # gaps, its longest among the 2nd, 5th... and among the 3rd, 6th...: three gaps of the op,
    # so its third longest is no shorter (the sort below over millions of gaps: 40 ms). In
    # float64 (exact below 2**53 ps), where `ufunc.at` is fast (int64: 10x slower).
    longest_of_third = np.full((int(op.max()) + 1) * LARGEST_GAPS, -1.0)
    third = op.astype(np.int64) * LARGEST_GAPS + np.arange(len(op)) % LARGEST_GAPS
    np.maximum.at(longest_of_third, third, length.astype(np.float64))
    bar = longest_of_third.reshape(-1, LARGEST_GAPS).min(axis=1)
    near = np.flatnonzero(length >= bar[op])
    order = near[np.lexsort((-length[near], op[near]))]  # by op, the longest gap first
    op = op[order]
    group = np.flatnonzero(np.r_[True, op[1:] != op[:-1]])
    rank = np.arange(len(op)) - np.repeat(group, np.diff(np.r_[group, len(op)]))
    return order[rank < LARGEST_GAPS]


def _busy_spans(spans: SortedSpans) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`merged_intervals` of one device's events (`spans` of them), with the event that opens
    each span (index into the columns): of the events starting at the span's start, the one
    that ends last (an enclosing op, not the first op of its body), the first in the columns'
    order on a tie."""
    order, s, at, span_end = spans.order, spans.start, spans.at, spans.span_end
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
        member_end = s[members] + spans.duration[members]
        longest = np.maximum.reduceat(member_end, offsets)
        # The first member (in sorted, so column, order) that reaches the run's longest end.
        is_longest = np.flatnonzero(member_end == np.repeat(longest, count))
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


class _Segments(NamedTuple):
    """One device's leaf events (nothing nests inside them) cut into the segments a saving sums
    over, with the ops that run in each, found once: each ratio column (the fraction of its
    time each op would take: at its bound, or with one change's ops shortened and the others
    kept at 1) is then a gather, a maximum per segment where events overlap, and a sum per
    window (`saving`).

    The time is cut at every event edge; in each segment the ops running are each shortened to
    their ratio of its time, so the segment shrinks no further than its slowest op allows: it
    takes the largest ratio of its length. Time when only an enclosing op (a while loop's own
    time) runs is kept whole. Ratios are <= 1: no segment grows. The windows are the device's
    spans [lo, hi) of the steps; an instant lies in the last one to begin at or before it,
    where that one ends after it (`_step_of`): a saving counts in the window its time lies
    in, clipped to it, so it never exceeds the window's busy time."""

    windows: int
    # The leaf events in start order, each its own piece where it overlaps no other (`_alone`;
    # most of them: a GPU stream, a TPU op line): its op, its window (where it starts, 0
    # before the first) and its time there (0 outside, and for those that overlap another).
    # Then the parts of those that run on into later windows, the same three columns.
    piece_op: np.ndarray  # int32 (the op column's type)
    piece_window: np.ndarray  # int32
    piece_ps: np.ndarray  # float64 (int64 ps, exact)
    later: tuple[np.ndarray, np.ndarray, np.ndarray]
    # Where each block of `BLOCK_ROWS` alone pieces begins (their sums are taken a block at a
    # time, the blocks' sums added: the order the savings always had).
    block_starts: np.ndarray  # int64
    # The overlapping events' segments that lie in a window (cut at every edge of theirs and of
    # the windows), in time order, and the ops running in each: a (segment, op) pair per event
    # and segment, an event over more than `LONG_EVENT_SEGMENTS` as one run of segments.
    segment_window: np.ndarray
    segment_ps: np.ndarray  # float64
    member_segment: np.ndarray
    member_op: np.ndarray
    long_first: np.ndarray  # per long event: its first segment, one past its last, its op
    long_stop: np.ndarray
    long_op: np.ndarray
    together_ops: np.ndarray  # the ops of the overlapping events, each once

    @classmethod
    def of(cls, events: _DeviceEvents, lo: np.ndarray, hi: np.ndarray) -> _Segments:
        leaf = events.self_ps == events.duration
        if leaf.all():  # GPU kernels, TPU lines without loops: the busy spans' order serves
            spans, op = events.by_start, events.op
        else:
            spans, op = SortedSpans.of(events.start[leaf], events.duration[leaf]), events.op[leaf]
        if spans.order is not None:
            op = op[spans.order]
        start, duration, alone = spans.start, spans.duration, spans.alone
        overlap = np.flatnonzero(~alone)  # few: by position
        overlap_start = start[overlap]
        # The overlapping events' segments before the alone pieces: the temporaries of the one
        # never meet the columns of the other.
        together = _together_segments(
            overlap_start, overlap_start + duration[overlap], op[overlap], lo, hi
        )
        return cls(len(lo), *_alone_pieces(start, duration, op, alone, lo, hi), *together)

    def saving(self, ratio: np.ndarray) -> np.ndarray:
        """Per window: how much shorter the device's busy time in it would be with each op
        taking `ratio` (by op index) of its time, what ran at once, idle gaps and order kept."""
        found: np.ndarray = self._alone_savings([1.0 - ratio], self.block_starts)[0]
        found += self._together_saving(ratio)
        return found

    def savings(self, ratios: Sequence[np.ndarray]) -> list[np.ndarray]:
        """`saving` of each of `ratios`, changes that shorten a few ops each (ratio 1 for the
        others), each change's alone pieces summed in one block: the sums the re-timing of
        its own events always gave (they are fewer than a block; the others add zeros)."""
        if not ratios:
            return []
        whole = np.zeros(1, dtype=np.int64)
        alone = self._alone_savings([1.0 - ratio for ratio in ratios], whole)
        return [found + self._together_saving(ratio) for found, ratio in zip(alone, ratios)]

    def _alone_savings(self, kept: list[np.ndarray], block_starts: np.ndarray) -> np.ndarray:
        """The alone pieces' part of a saving per column of `kept` (the share of its time each
        op would save): a sum per window, piece by piece, over each block, the blocks' sums
        added, then the later parts' sums (the C extension's one pass for every column, or
        numpy's three a column)."""
        found = np.zeros((len(kept), self.windows))  # float64 even where no event falls
        if _windowsums is not None:
            columns, sums = np.array(kept), _windowsums.window_sums
            sums(
                self.piece_window,
                self.piece_ps,
                self.piece_op,
                columns,
                found,
                block_starts,
                len(kept),
            )
            op, window, ps = self.later
            sums(window, ps, op, columns, found, np.zeros(1, dtype=np.int64), len(kept))
            return found
        ends = [*block_starts[1:].tolist(), len(self.piece_op)]
        for row, share in zip(found, kept, strict=True):
            for low, high in zip(block_starts.tolist(), ends, strict=True):
                part = slice(low, high)  # temporaries of a few MB
                weight = self.piece_ps[part] * share[self.piece_op[part]]
                row += np.bincount(self.piece_window[part], weights=weight, minlength=self.windows)
            op, window, ps = self.later
            row += np.bincount(window, weights=ps * share[op], minlength=self.windows)
        return found

    def _together_saving(self, ratio: np.ndarray) -> np.ndarray:
        """The overlapping events' part of `saving`: their segments, each shrunk to the
        largest ratio of the ops running in it."""
        if not len(self.segment_ps) or not bool((ratio[self.together_ops] < 1.0).any()):
            return np.zeros(self.windows)
        slowest = np.full(len(self.segment_ps), -1.0)
        np.maximum.at(slowest, self.member_segment, ratio[self.member_op])
        for first, stop, op in zip(self.long_first, self.long_stop, self.long_op):
            view = slowest[first:stop]
            np.maximum(view, ratio[op], out=view)
        found: np.ndarray = np.bincount(
            self.segment_window, weights=self.segment_ps * (1.0 - slowest), minlength=self.windows
        )
        return found


def _alone_pieces(
    start: np.ndarray,
    duration: np.ndarray,
    op: np.ndarray,
    alone: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
) -> tuple[
    np.ndarray, np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray
]:
    """The pieces of the events (sorted by start; `alone`: those that overlap no other) inside
    the windows [lo, hi), as `_Segments` holds them, from `piece_op` to `block_starts`."""
    op = op.astype(np.int32, copy=False)
    if not len(start):
        nothing = (op, op.copy(), op.astype(np.float64))
        return (*nothing, nothing, np.zeros(1, dtype=np.int64))
    block_starts = _every_block_rows(alone)  # before the pieces' columns: its peak apart
    # Window k holds [lo[k], until[k]): its span, up to where the next one begins. Its events
    # are a run: from the first to start at lo[k], those starting before until[k] lie in it
    # (an alone one perhaps only in part: the last), the rest up to the next run in none.
    until = np.maximum(lo, np.minimum(hi, np.append(lo[1:], FIRST_NONE)))
    first = np.searchsorted(start, lo, side="left")
    stop = np.searchsorted(start, until, side="left")
    events = np.diff(first, append=len(start))
    events[0] += first[0]  # those before the first window: no time in it
    window = np.repeat(np.arange(len(lo), dtype=np.int32), events)
    runs = np.diff(np.column_stack([first, stop]).ravel(), prepend=0, append=len(start))
    counted = np.repeat(np.arange(len(runs)) % 2 == 1, runs)
    counted &= alone
    length = np.multiply(duration, counted, dtype=np.float64)  # int64 ps: exact
    last = stop - 1
    cut = (stop > first) & alone[last] & (start[last] + duration[last] > until)
    length[last[cut]] = (until - start[last])[cut]
    # The alone events that run on past a later window's start: each the last event before
    # that window's run (none where the windows tile the busy time).
    before = first - 1
    crossing = before[(first > 0) & alone[before] & (start[before] + duration[before] > lo)]
    crossing = crossing[np.r_[True, crossing[1:] != crossing[:-1]][: len(crossing)]]  # once
    crossing_end = start[crossing] + duration[crossing]
    after = np.searchsorted(lo, start[crossing], side="right")  # the first window past its own
    count = np.searchsorted(lo, crossing_end, side="left") - after
    later = np.repeat(after - np.cumsum(count) + count, count) + np.arange(int(count.sum()))
    later_ps = np.minimum(np.repeat(crossing_end, count), until[later]) - lo[later]
    return (
        op,
        window,
        length,
        (
            np.repeat(op[crossing], count),
            later.astype(np.int32),
            later_ps.astype(np.float64),
        ),
        block_starts,
    )


def _every_block_rows(alone: np.ndarray) -> np.ndarray:
    """Where each block of `BLOCK_ROWS` alone events begins (int64, the first at 0): the
    1st, the `BLOCK_ROWS + 1`-th... alone event, found a block of rows at a time."""
    found = []
    so_far = 0  # alone events before the block
    for part in blocks(len(alone)):
        at = np.flatnonzero(alone[part])
        found.append(at[-so_far % BLOCK_ROWS :: BLOCK_ROWS] + part.start)
        so_far += len(at)
    if not so_far:
        return np.zeros(1, dtype=np.int64)
    block_starts = np.concatenate(found).astype(np.int64)
    block_starts[0] = 0  # the events before the first alone one: in the first block
    return block_starts


def _together_segments(
    start: np.ndarray, end: np.ndarray, op: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, ...]:
    """The segments of overlapping events (some; sorted by start) as `_Segments` holds them,
    from `segment_window` to `together_ops`."""
    # Distinct edges by a sort (np.unique's hash path took 6.7 s on 3 M events).
    edges = np.concatenate([start, end, lo, hi])
    edges.sort(kind="stable")  # runs already in order (the starts, mostly the ends): merged
    edges = edges[np.concatenate(([True], edges[1:] != edges[:-1]))]
    first_seg = np.searchsorted(edges, start)
    last_seg = np.searchsorted(edges, end)  # segments first_seg .. last_seg - 1
    segments = max(len(edges) - 1, 0)
    # The segments some event runs in, and the windows they lie in.
    running = np.cumsum(
        np.bincount(first_seg, minlength=segments + 1)
        - np.bincount(last_seg, minlength=segments + 1)
    )[:-1]
    ran = np.flatnonzero(running > 0)
    step, inside = _step_of(edges[ran], lo, hi)
    kept = ran[inside]
    # Each event's segments among the kept ones: a run of them, as the kept are in order; the
    # kept before each segment, counted.
    kept_before = np.zeros(segments + 1, dtype=np.intp)
    kept_before[kept + 1] = 1
    np.cumsum(kept_before, out=kept_before)
    first_kept = kept_before[first_seg]
    count = kept_before[last_seg] - first_kept
    long_events = count > LONG_EVENT_SEGMENTS
    short = ~long_events
    count_short = count[short]
    offsets = np.repeat(np.cumsum(count_short) - count_short, count_short)
    member = np.repeat(first_kept[short], count_short) + (
        np.arange(int(count_short.sum())) - offsets
    )
    return (
        step[inside],
        (edges[kept + 1] - edges[kept]).astype(np.float64),
        member,
        np.repeat(op[short], count_short),
        first_kept[long_events],
        (first_kept + count)[long_events],
        op[long_events],
        np.flatnonzero(np.bincount(op)),
    )


def _step_of(
    start: np.ndarray, window_start: np.ndarray, window_end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The step each start falls in (-1: before the first), and whether it falls in one at
    all: the last window to begin at or before it, where that one ends after it."""
    if len(start) < 2 or bool((start[1:] < start[:-1]).any()):
        step = np.searchsorted(window_start, start, side="right") - 1
        inside = (step >= 0) & (start < window_end[np.maximum(step, 0)])
        return step, inside
    # In start order (a device's events mostly are) each window's starts are a run: from the
    # first at or after its start to the next window's run, those before its end inside.
    first = np.searchsorted(start, window_start, side="left")
    stop = np.maximum(
        np.minimum(np.searchsorted(start, window_end, side="left"), np.r_[first[1:], len(start)]),
        first,
    )
    step = np.repeat(np.arange(-1, len(window_start)), np.diff(first, prepend=0, append=len(start)))
    runs = np.diff(np.column_stack([first, stop]).ravel(), prepend=0, append=len(start))
    inside = np.repeat(np.arange(len(runs)) % 2 == 1, runs)
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


class CollectiveTimes(Struct):
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
