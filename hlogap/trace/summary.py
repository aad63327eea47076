"""What one host's events reduce to, and the run's view merged from its hosts.

Every audit reads its hosts through an executor (hlogap.executors: forked local readers or a
Dask cluster) that keeps each host's `TraceData` where it was read and runs the functions of
this module and of `hlogap.trace.steps` on it; only their small results travel. The client
merges them in host order, so an audit's numbers do not depend on where hosts were read:
sums are of int64 picoseconds (exact in any order) and medians come from the exact multiset
of occurrence times, kept as distinct (op, time, count).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import numpy as np
from msgspec import Struct, field

from hlogap.errors import InputError, UsageError
from hlogap.trace.model import (
    MAX_TOTAL_PS,
    Backend,
    Device,
    OpInfo,
    OpKey,
    Step,
    TraceData,
    devices_in,
    merge_steps,
)
from hlogap.trace.timing import (
    AsyncPairs,
    ModulePattern,
    OpTimes,
    async_pairs,
    blocks,
    select_events,
    sums_by,
    take,
)

# Per host (its name): sorted, disjoint (start, end) windows on the host's own clock.
HostWindows = tuple[tuple[str, tuple[tuple[int, int], ...]], ...]


class StepFrame(NamedTuple):
    """Where the run's steps lie, host by host: the steady steps' windows and the warm-up
    steps' (each on the host's own clock), and the modules whose every event is work outside
    the steps (compile-time autotuning candidates). An occurrence belongs to the window its
    first event starts in, so a frame keeps or drops occurrences whole."""

    steady: HostWindows
    warmup: HostWindows = ()
    outside_modules: frozenset[str] = frozenset()

    def where(self, trace: TraceData) -> np.ndarray:
        """Per occurrence of `trace`: STEADY, WARMUP, AUTOTUNING or OTHER (int8; read-only:
        made once per trace, for the outside-steps sums and the framed selection alike)."""
        cached = trace.selected.get(self)
        if cached is not None:
            return cached
        host = trace.devices[0].host if trace.devices else ""
        first = trace.occurrence_first
        starts = trace.start_ps[first]
        found = np.full(len(first), OTHER, dtype=np.int8)
        for windows, kind in ((self.warmup, WARMUP), (self.steady, STEADY)):
            found[_inside(starts, dict(windows).get(host, ()))] = kind
        if self.outside_modules:
            tuned = np.array([o.key.module in self.outside_modules for o in trace.ops], bool)
            found[tuned[trace.op_index[first]]] = AUTOTUNING
        found.flags.writeable = False
        trace.selected[self] = found
        return found


STEADY, WARMUP, AUTOTUNING, OTHER = 0, 1, 2, 3


def _inside(times: np.ndarray, windows: tuple[tuple[int, int], ...]) -> np.ndarray:
    """Bool per time: inside one of the sorted, disjoint windows [start, end)."""
    if not windows:
        return np.zeros(len(times), dtype=bool)
    start = np.array([a for a, _ in windows], dtype=np.int64)
    end = np.array([b for _, b in windows], dtype=np.int64)
    at = np.searchsorted(start, times, side="right") - 1
    found: np.ndarray = (at >= 0) & (times < end[np.maximum(at, 0)])
    return found


class Selection(NamedTuple):
    """The events an audit covers (`--device`, `--module`, and with `frame` the steady steps'
    only), as plain data a worker can take."""

    device: int | None = None
    module: str | None = None  # an RE2 pattern, searched in each op's module name
    frame: StepFrame | None = None

    def events(self, trace: TraceData) -> np.ndarray:
        """Bool per event of `trace`: selected or not (read-only: made once per trace)."""
        found = trace.selected.get(self)
        if found is None:
            found = select_events(trace, self.device, module_pattern(self.module))
            if self.frame is not None:
                found &= (self.frame.where(trace) == STEADY)[trace.occurrence]
            found.flags.writeable = False
            trace.selected[self] = found
        return found

    @property
    def unframed(self) -> Selection:
        """The same devices and modules, every step and the work outside them."""
        return Selection(self.device, self.module)


def module_pattern(module: str | None) -> ModulePattern | None:
    """RE2 (linear time, no backtracking): a pattern such as `(a+)+$` cannot hang an audit."""
    if not module:
        return None
    import re2

    options = re2.Options()
    options.log_errors = False  # the error is ours to report, in one line
    try:
        pattern: ModulePattern = re2.compile(module, options)
    except UnicodeEncodeError:  # bytes that are not UTF-8 in argv (surrogate escapes)
        raise UsageError(f"bad --module regex '{module}': not UTF-8 text") from None
    except re2.error as exc:
        why = exc.args[0] if exc.args else exc
        why = why.decode(errors="replace") if isinstance(why, bytes) else str(why)
        raise UsageError(f"bad --module regex '{module}': {why} (RE2 syntax)") from exc
    return pattern


class HostSummary(Struct):
    """One host's selected events reduced per op (indexed like `ops`), never per event."""

    host: str
    backend: Backend
    devices: list[Device]
    ops: list[OpInfo]
    module_keys: list[tuple[str, str]]  # the HLO modules the host's metadata holds
    measured_ps: np.ndarray  # int64: self time
    duration_ps: np.ndarray  # int64
    events: np.ndarray  # int64
    occurrences: np.ndarray  # int64
    # The distinct (op, occurrence time) of the host's occurrences and how many have each.
    occurrence_op: np.ndarray  # int64
    occurrence_ps: np.ndarray  # int64
    occurrence_count: np.ndarray  # int64
    devices_ran: int  # devices with a selected event
    # Self time of events whose module execution is known, per module that has such events.
    module_ps: dict[str, int]
    origin_ps: int | None  # the host's first event, selected or not
    steps: list[Step]
    warnings: list[str]
    # `TraceData.autotuning_modules`: modules whose events are the autotuner's candidates.
    autotuning_modules: set[str] = field(default_factory=set)
    events_are_runs: bool = False  # `TraceData.events_are_runs`


def summarize(trace: TraceData, selection: Selection, host: str) -> HostSummary:
    """Per-op totals and occurrence times of the selected events of one host."""
    n = len(trace.ops)
    keep = selection.events(trace)
    # A selection keeps or drops an occurrence whole: its first event tells.
    first = trace.occurrence_first
    kept = keep[first]
    occurrence_op = trace.op_index[first[kept]].astype(np.int64)
    occurrences = np.bincount(occurrence_op, minlength=n).astype(np.int64)
    # Sums of int64 picoseconds below 2**53 are exact in float64, in any order (an occurrence
    # is one execution of one op: far below): summed a block of events at a time (the float
    # copies of a whole column were the post-read peak). Not `sums_by`: its int64 sums cost
    # an occurrence-long temporary per block more (3 M TPU events: peak 223 -> 277 MB).
    occurrence_sum = np.zeros(len(first))
    for part in blocks(trace.num_events):
        occurrence_sum += np.bincount(
            take(trace.occurrence[part], keep[part]),
            weights=take(trace.self_ps[part], keep[part]),
            minlength=len(first),
        )
    occurrence_ps = occurrence_sum[kept].astype(np.int64)
    del occurrence_sum
    ops, values, counts = distinct_counts(occurrence_op, occurrence_ps)
    del occurrence_op, occurrence_ps
    known = keep & (trace.execution >= 0)
    codes: dict[str, int] = {}
    module_code = np.array([codes.setdefault(o.key.module, len(codes)) for o in trace.ops])
    module_ps = sums_by(trace.op_index, known, len(codes), trace.self_ps, module_code)
    module_events = sums_by(trace.op_index, known, len(codes), code=module_code)
    del known
    return HostSummary(
        host=host,
        backend=trace.backend,
        devices=trace.devices,
        ops=trace.ops,
        module_keys=list(trace.modules),
        measured_ps=sums_by(trace.op_index, keep, n, trace.self_ps),
        duration_ps=sums_by(trace.op_index, keep, n, trace.duration_ps),
        events=np.bincount(take(trace.op_index, keep), minlength=n).astype(np.int64),
        occurrences=occurrences,
        occurrence_op=ops,
        occurrence_ps=values,
        occurrence_count=counts,
        devices_ran=len(devices_in(take(trace.device_index, keep))),
        module_ps={m: int(module_ps[c]) for m, c in codes.items() if module_events[c]},
        origin_ps=int(trace.start_ps.min()) if trace.num_events else None,
        steps=trace.steps,
        warnings=trace.warnings,
        autotuning_modules=set(trace.autotuning_modules),
        events_are_runs=trace.events_are_runs,
    )


def summarize_framed(trace: TraceData, selection: Selection) -> HostSummary:
    """`summarize` of a host already read (its name from its devices)."""
    return summarize(trace, selection, trace.devices[0].host if trace.devices else "")


def outside_steps(trace: TraceData, selection: Selection) -> np.ndarray:
    """Self time (ps, summed over the host's devices) of the events of `selection.unframed`
    by where `selection.frame` puts their occurrences: int64 [steady, warm-up, autotuning,
    other]."""
    assert selection.frame is not None
    keep = selection.unframed.events(trace)
    kind = selection.frame.where(trace)
    totals = np.zeros(4, dtype=np.int64)
    for part in blocks(trace.num_events):  # views where every event is kept (`take`)
        mine = keep[part]
        totals += np.bincount(
            kind[take(trace.occurrence[part], mine)],
            weights=take(trace.self_ps[part], mine),
            minlength=4,
        ).astype(np.int64)
    return totals


def modules_of(trace: TraceData, keys: list[tuple[str, str]]) -> dict[tuple[str, str], bytes]:
    """The serialized HLO modules `keys` of one host (fetched from one host each)."""
    return {key: trace.modules[key] for key in keys if key in trace.modules}


def transfer_pairs(
    trace: TraceData, selection: Selection, pairs: list[tuple[OpKey, OpKey]]
) -> list[AsyncPairs]:
    """`async_pairs` of each (start, done) pair of op keys, over one host's selected events;
    device indices are the host's own."""
    op_ids = {o.key: i for i, o in enumerate(trace.ops)}
    selected = selection.events(trace)
    empty = np.zeros(0, dtype=np.int64)
    return [
        async_pairs(trace, selected, op_ids[start], op_ids[done])
        if start in op_ids and done in op_ids
        else AsyncPairs(empty.astype(np.int32), empty, empty, empty, empty)
        for start, done in pairs
    ]


def distinct_counts(
    op: np.ndarray, value: np.ndarray, count: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Equal (op, value) rows folded into one with their counts summed (`count` None: one
    each); sorted by op, value. The rows are sorted as one int64 key (op, value offset), not
    by `np.lexsort`: without counts a plain sort of the keys is all it takes (2.4 M random
    rows: 0.04 s against lexsort's 0.59 s)."""
    if not len(op):
        return op, value, np.zeros(0, dtype=np.int64) if count is None else count
    low, high = int(value.min()), int(value.max())
    ranked: np.ndarray | None = None  # the distinct values, where keys hold their ranks
    if (int(op.max()) + 1) * (high - low + 1) >= 1 << 62:
        ranked, codes = np.unique(value, return_inverse=True)
        value, low, high = codes.ravel(), 0, len(ranked) - 1
    span = high - low + 1
    key = op.astype(np.int64) * span + (value - low)
    if count is None:
        key = np.sort(key)
    else:
        order = np.argsort(key, kind="stable")
        key, count = key[order], count[order]
    new = np.ones(len(key), dtype=bool)
    new[1:] = key[1:] != key[:-1]
    at = np.flatnonzero(new)
    counts = np.diff(at, append=len(key)) if count is None else np.add.reduceat(count, at)
    distinct_op, code = np.divmod(key[at], span)
    return distinct_op, code + low if ranked is None else ranked[code], counts


def weighted_medians(op: np.ndarray, value: np.ndarray, count: np.ndarray, n: int) -> np.ndarray:
    """Per op, the median of the multiset its (value, count) rows describe (rows sorted by op,
    value): the mean of the two middle values when there is an even number."""
    median = np.zeros(n)
    if not len(op):
        return median
    per_op = np.bincount(op, weights=count, minlength=n).astype(np.int64)
    before = np.cumsum(per_op) - per_op  # values of the ops before each op
    ends = np.cumsum(count)  # one past the last position each row covers
    ran = np.flatnonzero(per_op)

    def at(position: np.ndarray) -> np.ndarray:
        found: np.ndarray = value[np.searchsorted(ends, position, side="right")]
        return found

    low = at(before[ran] + (per_op[ran] - 1) // 2)
    high = at(before[ran] + per_op[ran] // 2)
    median[ran] = (low + high) / 2
    return median


class RunSummary(Struct):
    """The hosts' summaries merged: ops of every host, one per key, in the order hosts first
    show them (hosts in the run's order)."""

    backend: Backend
    hosts: list[str]
    devices: list[Device]
    ops: list[OpInfo]
    times: OpTimes
    module_hosts: dict[tuple[str, str], int]  # each HLO module and the first host that has it
    module_ps: dict[str, int]  # modules with known executions, in the order ops show them
    origin_ps: int | None
    steps: list[Step]
    warnings: list[str]
    # Per host (in `hosts` order): where its devices start in `devices`; the op's self time
    # and events, by merged op index.
    device_offsets: list[int] = field(default_factory=list)
    host_measured_ps: list[np.ndarray] = field(default_factory=list)
    host_events: list[np.ndarray] = field(default_factory=list)
    # Per host: its own steps, on its clock: every host has them, and they are laid on one
    # clock once the hosts' clock offsets are known (hlogap.rows.hosts).
    host_steps: list[list[Step]] = field(default_factory=list)
    # The hosts' `autotuning_modules`, together.
    autotuning_modules: set[str] = field(default_factory=set)
    # Whether every host's trace leaves one event per run of an op (`TraceData.events_are_runs`):
    # runs per occurrence are then the events' count, never a guess from the HLO.
    events_are_runs: bool = False


class RunMerger:
    """Merges host summaries one at a time, in host order, keeping only what the run needs
    (no host's summary is kept): the client's memory grows with distinct ops and occurrence
    times, not with hosts."""

    def __init__(self) -> None:
        self.summary = RunSummary(
            backend="none",
            hosts=[],
            devices=[],
            ops=[],
            times=OpTimes(*(np.zeros(0, dtype=np.int64),) * 4, np.zeros(0), 0),
            module_hosts={},
            module_ps={},
            origin_ps=None,
            steps=[],
            warnings=[],
        )
        self._op_ids: dict[OpKey, int] = {}
        self._occurrences = (np.zeros(0, dtype=np.int64),) * 3
        self._steps: list[Step] = []
        self._total_ps = 0  # the hosts' event time, a Python int: the bound of every sum

    def add(self, host: HostSummary) -> None:
        run = self.summary
        self._total_ps += int(host.duration_ps.sum())  # each host's is below MAX_TOTAL_PS
        if self._total_ps >= MAX_TOTAL_PS:
            raise InputError(
                f"corrupt profile: the hosts' events add up to over 53 days at {host.host}"
            )
        if host.backend != "none":
            if run.backend not in ("none", host.backend):
                raise InputError(f"hosts of one run mix backends: {run.backend}, {host.backend}")
            # Every host with events must leave one per run (the first one sets it).
            first = run.backend == "none"
            run.events_are_runs = host.events_are_runs and (first or run.events_are_runs)
            run.backend = host.backend
        remap = np.empty(len(host.ops), dtype=np.int64)
        for i, info in enumerate(host.ops):
            j = self._op_ids.get(info.key)
            if j is None:
                j = self._op_ids[info.key] = len(run.ops)
                run.ops.append(info)
            else:
                run.ops[j].add_counters(info)
            remap[i] = j
        n = len(run.ops)
        index = len(run.hosts)
        run.hosts.append(host.host)
        run.device_offsets.append(len(run.devices))
        run.devices.extend(host.devices)
        for key in host.module_keys:
            run.module_hosts.setdefault(key, index)
        for module, ps in host.module_ps.items():
            run.module_ps[module] = run.module_ps.get(module, 0) + ps
        if host.origin_ps is not None:
            run.origin_ps = min(host.origin_ps, run.origin_ps or host.origin_ps)
        self._steps += host.steps
        run.host_steps.append(merge_steps(host.steps))
        run.warnings += host.warnings
        run.autotuning_modules |= host.autotuning_modules

        def spread(values: np.ndarray) -> np.ndarray:
            merged = np.zeros(n, dtype=np.int64)
            merged[remap] = values  # a host's ops have distinct keys
            return merged

        def grow(old: np.ndarray, new: np.ndarray) -> np.ndarray:
            grown: np.ndarray = _padded(old, n) + spread(new)
            return grown

        t = run.times
        run.times = OpTimes(
            measured_ps=grow(t.measured_ps, host.measured_ps),
            duration_ps=grow(t.duration_ps, host.duration_ps),
            events=grow(t.events, host.events),
            occurrences=grow(t.occurrences, host.occurrences),
            median_ps=t.median_ps,  # from all hosts' occurrence times, when finished
            devices=t.devices + host.devices_ran,
        )
        run.host_measured_ps.append(spread(host.measured_ps))
        run.host_events.append(spread(host.events))
        self._occurrences = distinct_counts(
            *(
                np.concatenate([old, new])
                for old, new in zip(
                    self._occurrences,
                    (remap[host.occurrence_op], host.occurrence_ps, host.occurrence_count),
                    strict=True,
                )
            )
        )

    def finish(self) -> RunSummary:
        run = self.summary
        n = len(run.ops)
        t = run.times
        run.times = OpTimes(
            t.measured_ps.astype(np.float64),
            t.duration_ps.astype(np.float64),
            t.events,
            t.occurrences,
            weighted_medians(*self._occurrences, n),
            t.devices,
        )
        run.host_measured_ps = [_padded(a, n) for a in run.host_measured_ps]
        run.host_events = [_padded(a, n) for a in run.host_events]
        run.steps = merge_steps(self._steps)
        first_op: dict[str, int] = {}
        for info in run.ops:
            first_op.setdefault(info.key.module, len(first_op))
        run.module_ps = dict(sorted(run.module_ps.items(), key=lambda m: first_op[m[0]]))
        return run


def _padded(values: np.ndarray, n: int) -> np.ndarray:
    padded: np.ndarray = np.concatenate([values, np.zeros(n - len(values), dtype=values.dtype)])
    return padded


def merge_summaries(hosts: Iterable[HostSummary]) -> RunSummary:
    merger = RunMerger()
    for host in hosts:
        merger.add(host)
    return merger.finish()


def time_ops(trace: TraceData, device: int | None = None, module: str | None = None) -> OpTimes:
    """Per-op totals of one trace's selected events (a run of one host)."""
    return merge_summaries([summarize(trace, Selection(device, module), "")]).times
