"""The timeline: op events of one or more files, one row per event, in numpy columns.

A backend reader (hlogap.trace.backends) walks the lines that hold op events and feeds a
`TraceBuilder`; `TraceData` is what the later stages read. Nothing per event lives in Python
objects: pod profiles hold millions of events.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Literal, NamedTuple

import numpy as np
from msgspec import Struct, field
from msgspec.structs import fields, force_setattr

from hlogap.errors import InputError
from hlogap.files import available_memory
from hlogap.units import printable

# An event whose module execution the trace does not tell (`TraceBuilder.add_line`).
UNKNOWN_EXECUTION = np.iinfo(np.int64).min
# Memory an event costs at the peak of reading and timing it (columns and their temporaries).
PEAK_BYTES_PER_EVENT = 400
EVENTS_PER_MEMORY_CHECK = 1_000_000
# No time a profile holds (a line's timestamp, an event's offset, start or duration) reaches
# 2**61 ps, 27 days: a capture lasts minutes. Below it a start plus a duration plus an async
# op's run-on cannot wrap int64; a value past it is corruption, refused before any arithmetic.
MAX_TIME_PS = 1 << 61
# A host's event time summed, and a run's: below this no int64 sum of picoseconds can wrap
# (53 days of device time; every per-op, per-module and per-step sum is a part of it).
MAX_TOTAL_PS = 1 << 62
# Ends the warning that events were left out as corrupt: `check` fails closed on it.
CORRUPT_TRACE = "(a corrupt trace)"


def check_times(values: np.ndarray, what: str, where: str) -> None:
    """Refuse (exit 3) int64 picoseconds of which one is past +-`MAX_TIME_PS`: two reductions,
    no per-event Python."""
    if len(values) and (int(values.max()) > MAX_TIME_PS or int(values.min()) < -MAX_TIME_PS):
        raise InputError(f"corrupt profile: {what} on {where} beyond 27 days (2**61 ps)")


def check_time(value: int, what: str, where: str) -> None:
    """`check_times` of one value (a Python int: any size)."""
    if abs(value) > MAX_TIME_PS:
        raise InputError(f"corrupt profile: {what} on {where} beyond 27 days (2**61 ps)")


Backend = Literal["cpu", "gpu", "tpu", "none"]
"""Where a trace's op events come from; "none" when a file holds no op events."""


class OpKey(Struct, frozen=True):
    """An op is identified by its HLO module (name + program id) and instruction name. Names
    come from the trace: what no output may print (control characters) is left out here."""

    module: str
    program_id: str
    name: str

    def __post_init__(self) -> None:
        for name in ("module", "program_id", "name"):
            value = getattr(self, name)
            if not value.isprintable():
                force_setattr(self, name, printable(value))


class OpInfo(Struct):
    """One op of the trace: its key and what its event metadata say about it."""

    key: OpKey
    # From TPU event metadata, when the trace carries them.
    hlo_text: str | None = None
    category: str | None = None
    xla_flops: float | None = None
    xla_bytes: float | None = None
    # Hardware counters (hlogap.trace.counters), per unit: (util x ps, ps the counters cover)
    # summed over the op's events; None without counters.
    counters: dict[str, tuple[float, float]] | None = None

    def utilisation(self) -> dict[str, float] | None:
        """Each unit's time-weighted utilisation (0-1) over the op's events, or None."""
        if not self.counters:
            return None
        return {unit: busy / covered for unit, (busy, covered) in self.counters.items()}

    def add_counters(self, other: OpInfo) -> None:
        """Add another host's counters of the same op."""
        for unit, (busy, covered) in (other.counters or {}).items():
            if self.counters is None:
                self.counters = {}
            was_busy, was_covered = self.counters.get(unit, (0.0, 0.0))
            self.counters[unit] = (was_busy + busy, was_covered + covered)


class Device(NamedTuple):
    """One device of the trace: its host, plane and ordinal, its stats and its clock."""

    host: str
    plane: str
    ordinal: int
    stats: dict[str, object]
    # The device clock as a linear function of the host's: device_ps = scale * host_ps + offset.
    # The identity where both are one clock (GPU and CPU events are on the host's); a TPU's is
    # fitted to its ops' (host, device) start pairs.
    host_clock: tuple[float, float] = (1.0, 0.0)

    def on_device_clock(self, host_ps: np.ndarray) -> np.ndarray:
        scale, offset = self.host_clock
        if (scale, offset) == (1.0, 0.0):
            return host_ps
        return np.rint(scale * host_ps.astype(np.float64) + offset).astype(np.int64)


class AllocatorEvents(Struct):
    """A host's device-memory allocator events (`MemoryAllocation`/`MemoryDeallocation` on the
    host plane), one row per event, in the order of `time_ps` within each allocator. Each event
    carries the allocator's state just after it: what is in use, what is free, and the
    allocator's own peak since it was created (which may predate the profile)."""

    names: list[str]  # per allocator: `allocator_name` (`GPU_0_bfc`), else `index_on_host`
    allocator: np.ndarray  # int32, into `names`
    time_ps: np.ndarray  # int64, host clock
    heap_bytes: np.ndarray  # int64: `bytes_allocated`
    stack_bytes: np.ndarray  # int64: `bytes_reserved` (a TPU's reserved program stack)
    available_bytes: np.ndarray  # int64: `bytes_available`
    lifetime_peak_bytes: np.ndarray  # int64: `peak_bytes_in_use`
    fragmentation: np.ndarray  # float64, 0-1; NaN where not given


class Step(NamedTuple):
    """A step of the program, on the devices' clock: from an annotation, a TPU `Steps` line or
    one execution of the dominant module."""

    number: int
    source: StepSource
    start_ps: int
    end_ps: int


# "annotation+device": an annotated step stretched to the end of the device work launched in
# it (hlogap.trace.steps.launched_steps).
StepSource = Literal["annotation", "annotation+device", "tpu-steps", "module"]
ANNOTATED: tuple[StepSource, ...] = ("annotation", "annotation+device")
# Per device of a host (its index): sorted (first start, last end) arrays of its executions.
ExecutionSpans = dict[int, tuple[np.ndarray, np.ndarray]]


class TraceData(Struct):
    """Op events of one or more files, one row per event, plus what describes ops and modules."""

    backend: Backend
    devices: list[Device]
    ops: list[OpInfo]
    # Serialized xla.HloProto per (module name, program id), from `/host:metadata`.
    modules: dict[tuple[str, str], bytes]
    op_index: np.ndarray  # int32, into `ops`
    device_index: np.ndarray  # int32, into `devices`
    start_ps: np.ndarray  # int64: when the event began, on its device's clock
    duration_ps: np.ndarray  # int64 (an async CPU op: until its `end:` marker)
    # int64: duration minus nested op events on the same line (`duration_ps` itself where no
    # event of the file nests: GPU kernels)
    self_ps: np.ndarray
    # int32: the module execution the event belongs to (CPU run_id, GPU host launch, TPU `XLA
    # Modules` event), numbered densely from 0 per file and told apart by device;
    # negative where the trace does not say.
    execution: np.ndarray
    # int32: dense id of the event's occurrence, one execution of its op inside one execution
    # of its module on one device (docs/json.md); its events share it.
    occurrence: np.ndarray
    # int32 per occurrence: the index of its first event (all of an occurrence's events share
    # its device and op, so any device or module selection keeps or drops them together).
    occurrence_first: np.ndarray
    steps: list[Step] = field(default_factory=list)  # annotated steps, when the trace has some
    warnings: list[str] = field(default_factory=list)
    allocations: AllocatorEvents | None = None  # None: the trace has no allocator events
    # The events in column order as runs of one line of the profile each (a GPU stream, a
    # thread, a TPU's `XLA Ops`): the line's name and the run's length (the timeline export's
    # tracks).
    lines: list[tuple[str, int]] = field(default_factory=list)
    # Modules whose events are XLA's autotuner measuring candidates while it compiles (a GEMM
    # fusion extracted into a module of its own, named after the fusion, and run inside an
    # `XlaAutotunerMeasurement` range): every event of such a module is autotuning work, not
    # the program's. Filled by the nsys-jax reader; empty for other traces.
    autotuning_modules: set[str] = field(default_factory=set)
    # Whether each run of an op leaves one event (an XLA:CPU thunk, a TPU op, an nsys-jax thunk
    # range): then an occurrence's events are its runs. Not so for GPU kernels in an xplane (one
    # op run may launch several).
    events_are_runs: bool = False
    # The .xplane.pb it was read from ("" where none: an nsys-jax archive, a test's table):
    # `hlogap.trace.host_activity` reads its host plane again for what the host did in a gap.
    path: str = ""
    # Bool per event for each selection already made (`hlogap.trace.summary.Selection`), and
    # each step frame's kind per occurrence (`StepFrame.where`): the per-host tasks of one
    # audit all ask for the same ones.
    selected: dict[Hashable, np.ndarray] = field(default_factory=dict)
    # A module's executions per device under a selection (`hlogap.trace.steps.module_spans`):
    # the step search finds them, the step pass asks again.
    spans: dict[Hashable, ExecutionSpans] = field(default_factory=dict)

    @property
    def num_events(self) -> int:
        return len(self.op_index)


# The fields of `TraceData` that only cache what its tasks find: never spilled, made again.
CACHES = ("selected", "spans")


class _Block(Struct):
    """One line's events of one device, in the columns of `TraceData`."""

    op: np.ndarray
    device: np.ndarray
    start_ps: np.ndarray
    duration_ps: np.ndarray
    self_ps: np.ndarray
    execution: np.ndarray


class TraceBuilder:
    """Accumulates events of one file; ops and devices are interned."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.devices: list[Device] = []
        self.ops: list[OpInfo] = []
        self.op_ids: dict[OpKey, int] = {}
        self.modules: dict[tuple[str, str], bytes] = {}
        self.module_names: dict[str, str] = {}  # program id -> module name
        self.blocks: list[_Block] = []
        self.block_lines: list[str] = []  # the profile's line of each block
        self.steps: list[Step] = []
        self.allocations: AllocatorEvents | None = None
        self.autotuning_modules: set[str] = set()  # `TraceData.autotuning_modules`
        # `TraceData.events_are_runs`: set from the backend's platform, or by a reader (nsys).
        self.events_are_runs = False
        self._unknown = 0  # negative execution ids handed out where the trace gives none
        self._negative = 0  # events with a negative duration, left out
        self.notes: list[str] = []  # what a reader changed in the events, said as warnings
        self._events = 0
        self._next_memory_check = EVENTS_PER_MEMORY_CHECK
        # The trace's execution ids seen so far, sorted, and the dense id of each.
        self._execution_ids = np.zeros(0, dtype=np.int64)
        self._execution_dense = np.zeros(0, dtype=np.int64)

    def new_device(self, plane: str, ordinal: int, stats: dict[str, object]) -> int:
        self.devices.append(Device(self.host, plane, ordinal, stats))
        return len(self.devices) - 1

    def op(self, key: OpKey) -> int:
        idx = self.op_ids.get(key)
        if idx is None:
            idx = self.op_ids[key] = len(self.ops)
            self.ops.append(OpInfo(key))
        return idx

    def add_line(
        self,
        device: int,
        op: Sequence[int] | np.ndarray,
        start: Sequence[int] | np.ndarray,
        dur: Sequence[int] | np.ndarray,
        gpu: bool,
        execution: np.ndarray | None = None,
        extra_ps: np.ndarray | None = None,
        line: str = "",
    ) -> None:
        """One line's events of one device (`line`: the line's name in the profile, its track
        in a timeline export). GPU kernels never nest (overlaps on a stream are clock jitter,
        and xprof charges each kernel its whole duration); CPU thunks and TPU ops nest inside
        while/call/conditional events, which then get self time.

        `execution` is each event's module execution (any int64 id; `UNKNOWN_EXECUTION` where
        unknown); without it, GPU
        kernels of one op launched back to back are one occurrence and other events one each.
        `extra_ps` is time an event runs on after its own span (an async CPU op, until its
        `end:` marker): added to its duration and self time, not to what it encloses.
        The builder keeps the int32/int64 arrays it is given (a file of one line is not
        copied into its columns): the caller does not write them afterwards.
        """
        if len(op) == 0:
            return
        op_arr = np.asarray(op, dtype=np.int32)
        start_arr = np.asarray(start, dtype=np.int64)
        dur_arr = np.asarray(dur, dtype=np.int64)
        where = f"host {self.host}"
        check_times(start_arr, "event start times", where)
        check_times(dur_arr, "event durations", where)
        valid = dur_arr >= 0  # a negative duration is corruption: the event is left out
        if not valid.all():
            self._negative += int((~valid).sum())
            op_arr, start_arr, dur_arr = op_arr[valid], start_arr[valid], dur_arr[valid]
            execution = None if execution is None else np.asarray(execution)[valid]
            extra_ps = None if extra_ps is None else np.asarray(extra_ps)[valid]
            if not len(op_arr):
                return
        # A line's events are in time order but for rare exceptions: sort only then.
        order: slice | np.ndarray = slice(None)
        if (start_arr[1:] < start_arr[:-1]).any():
            order = np.argsort(start_arr, kind="stable")
            op_arr, start_arr, dur_arr = op_arr[order], start_arr[order], dur_arr[order]
        # Where nothing nests, self time is the duration: the same array, not a copy (columns
        # are never written once built).
        self_arr = dur_arr if gpu else self_times(start_arr, dur_arr)
        if extra_ps is not None:
            extra = np.asarray(extra_ps, dtype=np.int64)[order]
            check_times(extra, "async op run-on times", where)
            dur_arr = dur_arr + extra
            self_arr = self_arr + extra
        if execution is not None:
            exec_arr = self._dense(np.asarray(execution, dtype=np.int64)[order])
        else:
            exec_arr = np.full(len(op_arr), -1, dtype=np.int64)
        unknown = exec_arr < 0
        if unknown.any():
            # Each unknown event is an occurrence of its own, except consecutive GPU kernels
            # of one op (kernels of one op execution are launched back to back on a stream).
            new = np.ones(len(op_arr), dtype=bool)
            if gpu:
                new[1:] = op_arr[1:] != op_arr[:-1]
            run = self._unknown + np.cumsum(new)
            self._unknown = int(run[-1])
            exec_arr = np.where(unknown, -run, exec_arr)
        self._guard_memory(len(op_arr))
        dev_arr = np.full(len(op_arr), device, dtype=np.int32)
        # Ids (dense per file, or numbered down per event) and indices of a file's events are
        # fewer than its events: int32, 4 bytes an event less each than int64.
        self.blocks.append(
            _Block(
                op_arr, dev_arr, start_arr, dur_arr, self_arr, exec_arr.astype(np.int32, copy=False)
            )
        )
        self.block_lines.append(line)

    def _guard_memory(self, events: int) -> None:
        """Stop before memory runs out, however small a file's events are on disk (a 6-byte
        event costs ~60 times that once decoded and timed): every million events, the next
        million must fit twice in what is left."""
        self._events += events
        if self._events < self._next_memory_check:
            return
        self._next_memory_check = self._events + EVENTS_PER_MEMORY_CHECK
        free = available_memory()
        if free is not None and free < 2 * EVENTS_PER_MEMORY_CHECK * PEAK_BYTES_PER_EVENT:
            raise InputError(
                f"out of memory reading the profile: {self._events:,} events read on host "
                f"{self.host}, {free >> 20} MiB left (audit one host at a time with --host)"
            )

    def _dense(self, execution: np.ndarray) -> np.ndarray:
        """The trace's execution ids (run ids, correlation-derived numbers) as small dense ones,
        the same across lines; unknown ones become negative."""
        known = execution != UNKNOWN_EXECUTION
        if not known.any():
            return execution
        every = bool(known.all())  # then no copy of the known ones, no scatter back
        values, inverse = dense_codes(execution if every else execution[known])
        # Ids seen on earlier lines keep theirs; new ones are numbered on, in value order.
        seen = self._execution_ids
        at = np.searchsorted(seen, values)
        found = at < len(seen)
        found[found] = seen[at[found]] == values[found]
        ids = np.empty(len(values), dtype=np.int64)
        ids[found] = self._execution_dense[at[found]]
        fresh = ~found
        ids[fresh] = len(seen) + np.arange(int(fresh.sum()))
        merged = np.concatenate([seen, values[fresh]])
        order = np.argsort(merged, kind="stable")
        self._execution_ids = merged[order]
        self._execution_dense = np.concatenate([self._execution_dense, ids[fresh]])[order]
        # int32, as `TraceData.execution` keeps them: the events' ids are gathered once.
        ids32 = ids.astype(np.int32)
        dense: np.ndarray
        if every:
            dense = ids32[inverse]
            return dense
        dense = np.full(len(execution), -1, dtype=np.int32)
        dense[known] = ids32[inverse]
        return dense

    def finish(self, backend: Backend, warnings: list[str]) -> TraceData:
        for step in self.steps:
            check_time(step.start_ps, "a step's start", f"host {self.host}")
            check_time(step.end_ps, "a step's end", f"host {self.host}")
        # Every sum of durations or self times is a part of this one (durations are >= 0).
        if sum(float(b.duration_ps.sum(dtype=np.float64)) for b in self.blocks) >= MAX_TOTAL_PS:
            raise InputError(
                f"corrupt profile: the events of host {self.host} add up to over 53 days"
            )
        if self._negative:
            warnings = [
                *warnings,
                f"{self._negative} events with a negative duration left out {CORRUPT_TRACE}",
            ]
        warnings = [*warnings, *self.notes]
        lines = [(name, len(b.op)) for name, b in zip(self.block_lines, self.blocks, strict=True)]
        trace = _trace(
            backend, self.devices, self.ops, self.modules, self.blocks, self.steps, warnings
        )
        trace.allocations = self.allocations
        trace.lines = lines
        trace.autotuning_modules = set(self.autotuning_modules)
        trace.events_are_runs = self.events_are_runs
        return trace


def devices_in(device_index: np.ndarray) -> list[int]:
    """The distinct device indices in `device_index`, ascending: a count per device (they are
    few; `np.unique` would also import numpy.ma on its first call, 18 ms)."""
    found: list[int] = np.flatnonzero(np.bincount(device_index)).tolist()
    return found


def distinct_rows(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of equal-length int64 columns and each row's index among them.

    Columns are folded in one at a time: the row code so far times the column's distinct count
    plus the column's code, renumbered densely only when the product would overflow; then the
    row codes are renumbered once (`dense_codes` of each column and of the rows: a table where
    the values span a small range, as op and module refs, ordinals and an absent stat do).
    `np.unique(axis=0)` sorts row views and is ~20x slower.
    """
    code = np.zeros(len(columns[0]), dtype=np.int64)
    span = 1  # distinct values `code` can take
    varying = 0  # columns of more than one value
    for column in columns:
        distinct, codes = dense_codes(column)
        if len(distinct) == 1:
            continue
        varying += 1
        if varying == 1:
            code, span = codes, len(distinct)
            continue
        if span * len(distinct) >= 1 << 62:
            code = dense_codes(code)[1]
            span = int(code.max()) + 1
        code = code * len(distinct) + codes
        span *= len(distinct)
    if varying < 2:  # one column's codes are dense already (a GPU stream's: only ops differ)
        count, inverse = span, code
    else:
        distinct, inverse = dense_codes(code)
        count = len(distinct)
    # Any row of a code stands for it (its rows are equal): whichever the assignment keeps.
    row_of = np.empty(count, dtype=np.int64)
    row_of[inverse] = np.arange(len(code))
    rows = np.stack([column[row_of] for column in columns], axis=1)
    return rows, inverse


def dense_codes(column: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A column's distinct values, sorted, and each row's index among them: by a table of the
    values' range when that is small (no sort: 3 M refs over a 4 k range 0.016 s against
    `np.unique`'s 0.60 s; 3 M sorted ids over 40 k, 0.018 against 0.042 s), else by
    `np.unique`."""
    low, high = int(column.min()), int(column.max())
    if low == high:  # one value (a stat absent on the plane): codes that take no memory
        return column[:1].copy(), np.broadcast_to(np.int64(0), column.shape)
    if high - low <= 4 * len(column) + 1024:
        offset = column - low  # in range: no overflow even near int64's ends
        present = np.zeros(high - low + 1, dtype=bool)
        present[offset] = True
        index = np.cumsum(present) - 1
        distinct: np.ndarray = np.flatnonzero(present) + low
        return distinct, index[offset]
    values, codes = np.unique(column, return_inverse=True)
    return values, codes.ravel()


def occurrence_ids(
    op: np.ndarray, device: np.ndarray, execution: np.ndarray, devices: int
) -> tuple[np.ndarray, np.ndarray]:
    """Dense ids (int32) of the distinct (op, device, execution) of each event, and each id's
    first event (int32). One 1-D key where the ranges fit in int64 (always, in practice);
    where the keys span at most twice the events (executions known: each op runs in most
    executions on every device), a table of the keys instead of a sort."""
    low, high = int(execution.min()), int(execution.max())
    span = high - low + 1
    slots = (int(op.max()) + 1) * max(devices, 1)
    if slots * span < 1 << 62:
        key = (op.astype(np.int64) * max(devices, 1) + device) * span + (
            execution.astype(np.int64) - low
        )
        if slots * span <= 2 * len(op):
            present = np.zeros(slots * span, dtype=bool)
            present[key] = True
            ids = (np.cumsum(present, dtype=np.int32) - 1)[key]
            first_of = np.full(slots * span, len(op), dtype=np.int32)
            np.minimum.at(first_of, key, np.arange(len(op), dtype=np.int32))
            return ids, first_of[present]
        _, first, unique_ids = np.unique(key, return_index=True, return_inverse=True)
        return unique_ids.ravel().astype(np.int32), first.astype(np.int32)
    rows = distinct_rows(
        [op.astype(np.int64), device.astype(np.int64), execution.astype(np.int64)]
    )[1]
    _, first = np.unique(rows, return_index=True)
    return rows.astype(np.int32), first.astype(np.int32)


def _trace(
    backend: Backend,
    devices: list[Device],
    ops: list[OpInfo],
    modules: dict[tuple[str, str], bytes],
    blocks: list[_Block],
    steps: list[Step],
    warnings: list[str],
) -> TraceData:
    """TraceData from per-line column blocks (emptied: their arrays are this function's now);
    backend "none" when there are none."""
    if blocks:
        # Each column's parts are freed once joined: the peak holds one column twice, not all.
        parts = {f.name: [getattr(b, f.name) for b in blocks] for f in fields(_Block)}
        nothing_nests = all(b.self_ps is b.duration_ps for b in blocks)
        blocks.clear()

        def column(name: str) -> np.ndarray:
            # One line's column as it is where it owns its memory (a reader's own array, not a
            # view into a line's decoded columns): not copied (24 MB at 3 M events).
            found: list[np.ndarray] = parts.pop(name)
            if len(found) == 1 and found[0].base is None:
                return found[0]
            return np.concatenate(found)

        op_index, device_index = column("op"), column("device")
        start, dur = column("start_ps"), column("duration_ps")
        self_parts = parts.pop("self_ps")
        self_ps = dur if nothing_nests else np.concatenate(self_parts)
        del self_parts
        execution = column("execution")
        occurrence, first = occurrence_ids(op_index, device_index, execution, len(devices))
    else:
        backend = "none"
        op_index = device_index = execution = occurrence = first = np.zeros(0, dtype=np.int32)
        start = dur = self_ps = np.zeros(0, dtype=np.int64)
    return TraceData(
        backend=backend,
        devices=devices,
        ops=ops,
        modules=modules,
        op_index=op_index,
        device_index=device_index,
        start_ps=start,
        duration_ps=dur,
        self_ps=self_ps,
        execution=execution,
        occurrence=occurrence,
        occurrence_first=first,
        steps=steps,
        warnings=warnings,
    )


def self_times(start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Duration minus the durations of directly nested events (events sorted by start).

    An event is nested when it lies wholly inside another; partial overlaps are not nesting.

    Lines without nesting are one vectorised check (and their self times are `dur` itself);
    lines whose events nest cleanly (TPU call/while bodies, CPU while thunks) are worked out in
    numpy (`_nested_self_times`); only a line with partial overlaps walks a stack in Python.
    """
    end = start + dur
    if len(start) < 2 or bool(np.all(start[1:] >= np.maximum.accumulate(end)[:-1])):
        return dur
    nested = _nested_self_times(start, dur)
    return nested if nested is not None else _stack_self_times(start, dur)


def _nested_self_times(start: np.ndarray, dur: np.ndarray) -> np.ndarray | None:
    """`self_times` without a Python loop, or None when some events overlap partially.

    The stack walk pops an event when a later one starts at or after its end, so the events
    open when event j starts (its level) are the j events before it less those ended by then:
    ends <= start_j, an empty event counting as ended once any later event starts. The parent
    (the stack's top) is the last event before j one level up. When every event ends within
    its parent, the open events always form a chain and this is what the walk computes;
    otherwise (a partial overlap) None.
    """
    n = len(start)
    end = start + dur
    empty = dur == 0
    ended = np.searchsorted(np.sort(end[~empty]), start, side="right")
    empty_before = np.cumsum(empty) - empty
    level = np.arange(n, dtype=np.int64) - ended - empty_before
    # The last event before j one level up: search (level, index) keys, sorted by level.
    small = level.astype(np.int16) if int(level.max()) < 1 << 15 else level  # radix sort
    by_level = np.argsort(small, kind="stable")
    key = level[by_level] * n + by_level
    inner = np.flatnonzero(level > 0)
    found = np.searchsorted(key, (level[inner] - 1) * n + inner) - 1
    parent = by_level[np.maximum(found, 0)]
    if len(inner) and (
        bool(np.any(found < 0))
        or bool(np.any(level[parent] != level[inner] - 1))
        or bool(np.any(end[inner] > end[parent]))
    ):
        return None
    own: np.ndarray = dur - np.bincount(parent, weights=dur[inner], minlength=n).astype(np.int64)
    return own


def _stack_self_times(start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """`self_times` by walking a stack of open events (any overlap)."""
    end = start + dur
    # Python lists, not numpy scalars, inside the loop: one element access costs ~10x less.
    stack: list[int] = []
    ends = end.tolist()
    starts = start.tolist()
    durs = dur.tolist()
    own = list(durs)
    for i in range(len(starts)):
        while stack and starts[i] >= ends[stack[-1]]:
            stack.pop()
        if stack and ends[i] <= ends[stack[-1]]:
            own[stack[-1]] -= durs[i]
            stack.append(i)
        elif not stack:
            stack.append(i)
    return np.asarray(own, dtype=np.int64)


def merge_steps(steps: list[Step]) -> list[Step]:
    """Steps of several devices, readers or hosts as one list: annotated steps win over the
    others; one step number is one step, from its first start to its last end."""
    best = [s for s in steps if s.source in ANNOTATED] or steps
    spans: dict[int, Step] = {}
    for s in best:
        seen = spans.get(s.number)
        if seen is not None:
            # A step stretched to its device work on any host is stretched in all.
            source = (
                "annotation+device" if "annotation+device" in (s.source, seen.source) else s.source
            )
            s = Step(s.number, source, min(s.start_ps, seen.start_ps), max(s.end_ps, seen.end_ps))
        spans[s.number] = s
    return sorted(spans.values(), key=lambda s: (s.start_ps, s.number))
