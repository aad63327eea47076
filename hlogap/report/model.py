"""The report: the one model that audit, check and diff read, and the JSON contract
(hlogap.audit/1, docs/json.md) it writes and loads back."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import ClassVar, Literal, TypeVar, get_args

from msgspec import Struct

from hlogap._version import __version__
from hlogap.bounds.measured import RaisedFigure
from hlogap.bounds.roofline import BoundBy
from hlogap.chips import Chip
from hlogap.errors import InputError
from hlogap.hlo.mesh import Mesh
from hlogap.memory.static import MemorySection
from hlogap.report.codec import count, decode, encode, meta, number, optional_number, text
from hlogap.report.sections import CrossCheck, HostSkew
from hlogap.report.summary import StepSummary
from hlogap.report.summary import step_ratio as step_ratio
from hlogap.report.summary import warmup_steps as warmup_steps
from hlogap.source import is_url, read_remote, regular_file
from hlogap.trace.model import Backend, StepSource
from hlogap.trace.timeline import Timeline

SCHEMA = "hlogap.audit/4"
# Version 2 added the timeline (steps, op paths); 3 puts steps per device, in wall time.
READABLE_SCHEMAS = ("hlogap.audit/1", "hlogap.audit/2", "hlogap.audit/3", SCHEMA)
SortKey = Literal["gap", "measured", "efficiency", "idle"]
SORT_KEYS: tuple[SortKey, ...] = get_args(SortKey)
ChipSource = Literal["detected", "user", "calibrated", "report"]
ReportKind = Literal["profile", "report"]


# JSON keys a ranked row of `Totals` writes beyond its fields (hlogap.report.codec), each after
# the key named: the derived gap and efficiency, and the writer's rank, share and cum_share
# (the row's place in the report).
RANKED_EXTRA: dict[str, str | None] = {
    "rank": None,
    "gap_us": "bound_us",
    "efficiency": "gap_us",
    "share": "efficiency",
    "cum_share": "share",
}


class Totals:
    """What a row of measured and bound time derives: its gap and its efficiency."""

    measured_us: float
    bound_us: float

    @property
    def gap_us(self) -> float:
        return self.measured_us - self.bound_us

    @property
    def efficiency(self) -> float | None:
        return self.bound_us / self.measured_us if self.measured_us > 0 else None


def _axis_sizes(value: object, what: str) -> dict[str, int] | None:
    """`sharding`: each mesh axis's count of ways (null: the mesh does not say)."""
    if value is not None and not (
        isinstance(value, dict)
        and all(
            isinstance(k, str) and isinstance(n, int) and not isinstance(n, bool)
            for k, n in value.items()
        )
    ):
        raise ValueError(f"{what} is not an object of axis sizes")
    return value


def _command_buffer_ops(value: object, what: str) -> list[OpRow]:
    if not isinstance(value, list):
        raise ValueError(f"{what} is not a list")
    if any(isinstance(r, dict) and r.get("command_buffer_ops") for r in value):
        # XLA nests no command buffer in another's rows: refused before recursing.
        raise ValueError(f"{what} holds an op with command buffer ops of its own")
    return [decode(OpRow, r, f"{what}[{k}]") for k, r in enumerate(value)]


@dataclass(kw_only=True)
class OpRow(Totals):
    """One op of the report: its times, its cost and bound, and why it misses its bound."""

    JSON_EXTRA: ClassVar[dict[str, str | None]] = {**RANKED_EXTRA, "intensity": "comm_bytes"}

    module: str
    program_id: str = ""
    name: str
    opcode: str = "unknown"
    category: str = ""
    occurrences: int = field(default=0, metadata=meta(required=True))
    # Runs of the op in one occurrence: a while body's trips (per-occurrence counts cover all).
    runs_per_occurrence: int = 1
    events: int = 0
    # Total over occurrences and devices (self time).
    measured_us: float = field(default=0.0, metadata=meta(required=True))
    total_us: float = 0.0  # the same with nested ops included (xprof's "total time")
    # Median time of one occurrence: what `check` compares, robust to noise (None: a report
    # saved before medians existed).
    median_us: float | None = None
    bound_us: float = 0.0  # total lower bound
    bound_by: BoundBy = "unmodeled"
    flops: float = 0.0  # per occurrence
    # The element type whose peak bounds the op's FLOPs (its matrix work's, else its vector
    # work's); "" when it does none.
    dtype: str = ""
    bytes: float = 0.0  # HBM bytes per occurrence
    comm_bytes: float = 0.0  # per occurrence
    transcendentals: float = 0.0
    t_compute_us: float = 0.0  # per occurrence
    t_memory_us: float = 0.0
    t_comm_us: float = 0.0
    upper_bound_us: float = 0.0  # total sum-of-times bound
    hlo: str = ""
    fingerprint: str = ""  # stable across recompiles (hlogap.hlo.fingerprint); "" without HLO
    op_name: str = ""  # the framework op path from the HLO metadata (`jit(f)/.../dot_general`)
    source: str = ""  # `file:line` of the user's code, from the HLO metadata
    hints: list[str] = field(default_factory=list)
    # A partitioned program's (hlogap.hlo.mesh): a collective's mesh axes; a dot's or
    # convolution's global shapes (operands then result; `?` where a split is unknown) and the
    # ways each mesh axis splits it. None where the mesh does not say.
    mesh_axes: list[str] | None = None
    global_shapes: list[str] | None = None
    sharding: dict[str, int] | None = field(default=None, metadata=meta(read=_axis_sizes))
    # `--what-if CHIP`: the op's bound on each other chip (total, like `bound_us`); a chip
    # that cannot bound it is left out.
    what_if_us: dict[str, float] | None = None
    # TPU `_counters_`: each unit's time-weighted slot occupancy (of the code, not busy time),
    # 0-1, over the op's occurrences; None where the profile has none.
    counters: dict[str, float] | None = None
    # True when `measured_us` is an estimate: an op of a command buffer (a CUDA graph) whose
    # own time the profile does not have (hlogap.rows.command_buffers).
    estimated: bool = False
    # A command buffer's call: the ops it runs, each with its bound and an estimated share of
    # the call's time (they add up to it). Not rows of the report: totals count the call once.
    command_buffer_ops: list[OpRow] = field(
        default_factory=list, metadata=meta(read=_command_buffer_ops, ranked=True)
    )
    # Device time (summed over devices and steps) the devices sat idle inside their steps
    # waiting to start this op: each idle gap in a device's part of a step goes to the op
    # that ends it (hlogap.trace.steps.OpWaits). None: no steps (or a report saved before).
    idle_before_us: float | None = None
    idle_gaps: int = 0  # how many such gaps

    @property
    def intensity(self) -> float | None:
        return self.flops / self.bytes if self.bytes > 0 else None

    def per_occurrence(self, total_us: float) -> float:
        return total_us / self.occurrences if self.occurrences > 0 else total_us

    def to_dict(
        self, rank: int, share: float | None = None, cum_share: float | None = None
    ) -> dict[str, object]:
        return encode(self, rank=rank, share=share, cum_share=cum_share)


# 160 k of them for a 40 k-step pod profile: small, quick to make; a dataclass, which orjson
# writes itself (render/json.py), where it would ask for a Struct's dict
@dataclass(slots=True)
class DeviceStep:
    """One device's part of a step (wall time on that device unless said otherwise)."""

    device: int  # index into the run's devices (hosts in order, each host's devices in order)
    start_us: float  # its first op start, from the profile's first op event
    wall_us: float  # its first op start to its last op end in the step
    busy_us: float  # time when at least one of its ops ran
    idle_us: float  # wall_us - busy_us: waiting inside its own step
    exposed_comm_us: float  # time when a collective ran and no compute op did
    exposed_host_us: float  # time when only host transfers ran
    measured_us: float  # self time of its op events that started in the step (device time)
    bound_us: float  # the roofline bound of its occurrences that started in the step
    bound_wall_us: float  # its wall with every op at its bound (concurrency and gaps kept)


# A device's part of a step as the report keeps it: a tuple of these values (40 k steps on 4
# devices are 160 k parts: objects and dicts are made only when asked for).
DEVICE_STEP_KEYS = tuple(f.name for f in fields(DeviceStep))
DeviceRow = tuple[float, ...]


def _device_rows(raw: object, where: str) -> tuple[DeviceRow, ...]:
    """`per_device`: each device's part as the values of DEVICE_STEP_KEYS."""
    if not isinstance(raw, list):
        raise ValueError(f"{where} is not a list")
    return tuple(_device_row(d, f"{where}[{i}]") for i, d in enumerate(raw))


def _device_row(raw: object, where: str) -> DeviceRow:
    if not isinstance(raw, dict):
        raise ValueError(f"{where} is not an object")
    return tuple(
        count(raw[k], f"{where}.{k}") if k == "device" else number(raw[k], f"{where}.{k}")
        for k in DEVICE_STEP_KEYS
    )


def _device_steps(rows: object) -> list[DeviceStep]:
    assert isinstance(rows, tuple)
    return [DeviceStep(*r) for r in rows]


STEP_SOURCES: tuple[StepSource, ...] = get_args(StepSource)


def _step_source(value: object, what: str) -> StepSource:
    source = next((k for k in STEP_SOURCES if k == value), None)
    if source is None:
        raise ValueError(f"{what} is {value!r}")
    return source


@dataclass(slots=True, kw_only=True)  # not frozen: its init sets 18 fields, for each of 40 k steps
class StepRow:
    """A step: `wall_us`, `skew_us`, `bound_wall_us` are wall time; the other times are summed
    over the step's devices (device time)."""

    JSON_EXTRA: ClassVar[dict[str, str | None]] = {"gap_us": "bound_us"}

    step: int
    source: StepSource = field(metadata=meta(read=_step_source, absent=None))
    start_us: float  # from the profile's first op event
    wall_us: float  # earliest device start to latest device end (the step's window)
    skew_us: float = 0.0  # latest device start - earliest
    slowest_device: int | None = None  # the device with the longest own wall
    # The step's wall if every op ran at its bound, each device keeping its start, its idle
    # gaps and what ran at once (None: a report saved before it existed).
    bound_wall_us: float | None = None
    devices: int
    # The devices' own walls summed (busy + idle); see `json_older` for a report without it.
    device_wall_us: float = 0.0
    busy_us: float  # device time: when at least one op ran on the device
    # Device time: each device's own idle (its wall - busy); skew between devices is not idle.
    idle_us: float = 0.0
    exposed_comm_us: float = 0.0  # device time: a collective ran and no compute op did
    exposed_host_us: float = 0.0  # device time: only host transfers ran
    measured_us: float  # the op executions that started in the step, as in `ops`
    bound_us: float
    flops: float = 0.0  # device time: FLOPs of the occurrences that started in the step
    # Per device: the values of DEVICE_STEP_KEYS (in JSON, an object of them per device).
    device_rows: tuple[DeviceRow, ...] = field(
        default=(), metadata=meta(key="per_device", read=_device_rows, write=_device_steps)
    )
    # `lost_in_ops_us` as the step's builder summed it (None: summed from the rows on use).
    lost_us: float | None = field(default=None, compare=False, metadata=meta(written="never"))

    @staticmethod
    def json_older(values: dict[str, object]) -> None:
        """A report of version 2 lacks the per-device keys: its devices spanned the whole
        step."""
        wall, devices, busy = values["wall_us"], values["devices"], values["busy_us"]
        assert isinstance(wall, float) and isinstance(devices, int) and isinstance(busy, float)
        values.setdefault("device_wall_us", wall * devices)
        values.setdefault("idle_us", max(wall * devices - busy, 0.0))

    @property
    def per_device(self) -> list[DeviceStep]:
        return [DeviceStep(*r) for r in self.device_rows]  # type: ignore[arg-type]

    @property
    def gap_us(self) -> float:
        return self.measured_us - self.bound_us

    @property
    def lost_in_ops_us(self) -> float:
        """Device time the ops lose against their bounds on each device's critical path: what
        its own step would shrink by (`wall_us - bound_wall_us` per device). A report of
        version 2 (no device parts): the busy time beyond the ops' summed bound."""
        if self.lost_us is not None:
            return self.lost_us
        if self.device_rows:
            wall, bound_wall = (
                DEVICE_STEP_KEYS.index("wall_us"),
                DEVICE_STEP_KEYS.index("bound_wall_us"),
            )
            return sum(max(r[wall] - r[bound_wall], 0.0) for r in self.device_rows)
        return max(self.busy_us - self.bound_us, 0.0)

    def first_op_delays_us(self) -> Iterator[float]:
        """Each device's wait from the step's start to its first op (wall time)."""
        start = DEVICE_STEP_KEYS.index("start_us")
        return (r[start] - self.start_us for r in self.device_rows)

    @property
    def at_bound_us(self) -> float:
        """Busy time that would remain with every op at its bound (unmodeled ops keep theirs)."""
        return max(self.busy_us - self.lost_in_ops_us, 0.0)

    def to_dict(self, plain: bool = True) -> dict[str, object]:
        """The step as JSON data. `plain=False` gives each device's part as a `DeviceStep`
        (orjson writes a dataclass as the object of its fields): a 40 k-step profile's 160 k
        parts cost 16 MB that way, 144 MB as dicts."""
        data = encode(self)
        if plain:
            data["per_device"] = [dict(zip(DEVICE_STEP_KEYS, r)) for r in self.device_rows]
        return data


class GroupRow(Struct, Totals, frozen=True):
    """Ops rolled up (`--group-by`): their totals summed."""

    JSON_EXTRA: ClassVar[dict[str, str | None]] = {
        **RANKED_EXTRA,
        "bus_bw": "comm_bytes",
        "modeled_gap_us": "unmodeled_us",
        "modeled_efficiency": "modeled_gap_us",
    }

    name: str
    ops: int
    occurrences: int
    measured_us: float
    bound_us: float
    # Bytes its collectives sent per device, summed over their occurrences (ring model).
    comm_bytes: float = 0.0
    # `--group-by axis`: device time its collectives ran alone, with no compute or other op
    # beside them, summed over devices and steps (None: not an axis group, or no steps).
    exposed_us: float | None = None
    # Device time the devices sat idle waiting to start its ops (None: no steps).
    idle_before_us: float | None = None
    # Measured time of its `unmodeled` ops (no bound): in `measured_us` and, whole, in `gap_us`
    # (the contract's sums), kept out of the `modeled_*` figures.
    unmodeled_us: float = 0.0

    @property
    def modeled_us(self) -> float:
        """Measured time of its ops that have a bound (unmodeled ops add no bound)."""
        return self.measured_us - self.unmodeled_us

    @property
    def modeled_gap_us(self) -> float | None:
        """The gap of its modeled ops; None where all its time is unmodeled."""
        return self.modeled_us - self.bound_us if self.modeled_us > 0 else None

    @property
    def modeled_efficiency(self) -> float | None:
        """The efficiency of its modeled ops; None where all its time is unmodeled."""
        return self.bound_us / self.modeled_us if self.modeled_us > 0 else None

    @property
    def bus_bw(self) -> float | None:
        """Achieved bus bandwidth per device (B/s): the ring bytes over the time, nccl-tests'
        `busbw` (algbw x 2(n-1)/n for all-reduce, x (n-1)/n for all-gather and reduce-scatter)."""
        if not self.comm_bytes or self.measured_us <= 0:
            return None
        return self.comm_bytes / (self.measured_us / 1e6)

    def to_dict(
        self, rank: int, share: float | None = None, cum_share: float | None = None
    ) -> dict[str, object]:
        return encode(self, rank=rank, share=share, cum_share=cum_share)


# An open set (contract version 4): the causes are those registered in hlogap.advice.causes,
# and a newer hlogap's cause in a saved report is kept as written.
ActionCause = str
# Where a `device idle` action's gaps sit (contract version 4).
IDLE_PLACES: tuple[str, ...] = ("between steps", "between programs", "inside an execution")
SavingFrame = Literal["wall", "device-time"]
FRAMES: tuple[SavingFrame, ...] = get_args(SavingFrame)


class OpRef(Struct, frozen=True):
    """An op named by its module, program id and instruction name."""

    module: str
    program_id: str
    name: str


def _op_refs(raw: object, where: str) -> tuple[OpRef, ...]:
    """An action's ops: each object's module, program id and name ("" where absent)."""
    assert isinstance(raw, list)  # Action.json_check
    return tuple(
        OpRef(*(text(o.get(k, ""), where) for k in ("module", "program_id", "name")))
        for o in raw
        if isinstance(o, dict)
    )


def _layers(raw: object, where: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise ValueError(f"{where} is {raw!r}, not a count of 1 or more")
    return raw


@dataclass(kw_only=True)
class Action:
    """One change to make (hlogap.advice), with the time it would save.

    `saving_us` is wall time of the steps saved, summed over the steps (each step re-timed with
    the change's ops shortened on each device's critical path: an op hidden behind another saves
    nothing); without steps it is device time (`frame`). `op_saving_us` is the device time the
    ops would lose, never more than their gap. `step_saving_us` and `step_speedup` are in the
    summary's frame: the median over the steady steps of each step's wall saved, and of each
    step's wall over its wall with the change (None: no steps)."""

    JSON_EXTRA: ClassVar[dict[str, str | None]] = {"rank": None}

    # Any cause is kept (a newer hlogap's too): `json_check` checks only its type.
    cause: ActionCause
    ops: tuple[OpRef, ...] = field(metadata=meta(read=_op_refs))
    saving_us: float = field(metadata=meta(absent=None))
    frame: SavingFrame = field(metadata=meta(absent="wall"))
    op_saving_us: float = field(metadata=meta(absent=0.0))
    step_saving_us: float | None = None
    step_speedup: float | None = None
    # Repeated layers the action covers (the same cause and change on each).
    layers: int = field(default=1, metadata=meta(read=_layers))
    where: str | None = None  # a `device idle` action's place (IDLE_PLACES), else None
    evidence: str = field(metadata=meta(absent=""))
    change: str = field(metadata=meta(absent=""))

    @staticmethod
    def json_check(raw: object, where: str) -> None:
        """What a saved action must have before its fields are read."""
        if not isinstance(raw, dict) or not isinstance(raw.get("ops"), list):
            raise ValueError(f"{where} is not an action with an 'ops' list")
        cause = raw.get("cause")
        if not isinstance(cause, str) or not cause or raw.get("frame", "wall") not in FRAMES:
            raise ValueError(f"{where}: cause {cause!r} or its frame is not known")


class WhatIf(Struct, kw_only=True):
    """`--what-if CHIP`: the same ops bounded on another chip (hlogap.advice.what_if)."""

    chip: str
    speedup: float | None  # op time now / op time at the other chip's bounds (device time)
    step_speedup: float | None  # median step wall now / with every op at the other's bound
    step_unavailable: str | None = None  # why `step_speedup` is null (None when it is not)
    new_top_ops: list[str]  # the ops that take longest at the other chip's bounds
    capped_by: list[str]  # ops that gain least: at or near this chip's roof already
    unmodeled_us: float  # device time of ops neither chip bounds, kept as measured


class OutsideSteps(Struct, frozen=True):
    """Device time (us, summed over devices) of op events outside the steady steps, kept out
    of the op rows in the steady frame (`summary.outside_steps`, contract version 4)."""

    warmup_us: float = 0.0  # in the warm-up steps
    autotuning_us: float = 0.0  # compile-time autotuning candidates (nsys-jax's measurements)
    # Compilation runs no device op in the traces hlogap reads: kept for the contract's key.
    compile_us: float = 0.0
    other_us: float = 0.0  # in no step: before the first, between steps, after the last

    @property
    def total_us(self) -> float:
        return self.warmup_us + self.autotuning_us + self.compile_us + self.other_us


OpsFrame = Literal["steady steps", "all"]


class Unlisted(Struct, frozen=True):
    """What a report an older hlogap saved with `--top N` left out of `ops`: its summary still
    counts it (this version's JSON lists every op; `check` and `diff` refuse such a report)."""

    ops: int = 0
    measured_us: float = 0.0
    bound_us: float = 0.0


@dataclass(kw_only=True)
class AuditReport:
    """An audit: every section `hlogap audit` prints and saves (docs/contract.md)."""

    path: str
    run: str | None = None
    files: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    backend: Backend = "none"
    chip: Chip | None  # None: a saved report whose chip is not known
    chip_source: ChipSource = "report"
    chip_reason: str = ""  # how it was chosen, in words
    # A calibrated chip's figures that ops of this profile beat, raised to their rates
    # (hlogap.bounds.measured): `chip` holds the raised figures.
    raised: list[RaisedFigure] = field(default_factory=list)
    devices: int = 0
    events: int = 0
    ops: list[OpRow]  # every op (or the first N of a saved report), sorted by `sort`
    sort: SortKey = "gap"
    warnings: list[str] = field(default_factory=list)
    kind: ReportKind = "profile"  # audited here, or loaded from a saved report
    unlisted: Unlisted = field(default_factory=Unlisted)
    steps: list[StepRow] = field(default_factory=list)
    # The op rows' frame: the steady steps' events only, or every event (`--all-steps`, or no
    # work outside the steady steps); what the steady frame left out; the share of the
    # devices' op time inside the steps (None: no steps).
    ops_frame: OpsFrame = "all"
    outside_steps: OutsideSteps | None = None
    steps_cover_fraction: float | None = None
    group_by: str | None = None  # `--group-by` (scope, category, source, module), when asked
    groups: list[GroupRow] = field(default_factory=list)
    # `--cross-check`: xprof's counts beside ours (hlogap.rows.crosscheck).
    cross_check: CrossCheck | None = None
    # Several hosts: the slowest against the median, in all and op by op (hlogap.rows.hosts).
    host_skew: HostSkew | None = None
    # `--model-flops`: the model's FLOPs per step, whole program (for `summary.mfu`).
    model_flops: float | None = None
    # Each module's static memory (its buffer assignment) and the headroom (hlogap.memory).
    memory: MemorySection | None = None
    # The device mesh of the module that took the most time, where it ran partitioned.
    mesh: Mesh | None = None
    # Per `--group-by axis` group: device time its collectives ran alone (the step pass).
    exposed_by_axis: dict[str, float] | None = None
    # What to change, ranked by the step time it saves (hlogap.advice); None: not analysed.
    actions: list[Action] | None = None
    what_if: list[WhatIf] | None = None
    # The selected events themselves, only where a timeline export asked for them (audit
    # --format perfetto); never written to JSON.
    timeline: Timeline | None = field(default=None, repr=False, compare=False)
    # `step_summary` and the list of steps it was made from.
    _summarised: tuple[list[StepRow], StepSummary] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def step_summary(self) -> StepSummary:
        """The steps' summary (hlogap.report.summary): warm-up, steady steps, median step,
        idle; made once for each list of steps the report holds."""
        if self._summarised is None or self._summarised[0] is not self.steps:
            self._summarised = (self.steps, StepSummary.of_steps(self.steps))
        return self._summarised[1]

    @property
    def steady_steps(self) -> list[StepRow]:
        """The steps after the warm-up ones (`step_summary.warmup_steps`)."""
        return self.steps[self.step_summary.warmup_steps :]

    @property
    def total_ops(self) -> int:
        return len(self.ops) + self.unlisted.ops

    @property
    def truncated(self) -> bool:
        return self.unlisted.ops > 0

    @property
    def measured_us(self) -> float:
        return sum(r.measured_us for r in self.ops) + self.unlisted.measured_us

    @property
    def bound_us(self) -> float:
        return sum(r.bound_us for r in self.ops) + self.unlisted.bound_us

    @property
    def gap_us(self) -> float:
        return self.measured_us - self.bound_us

    @property
    def efficiency(self) -> float | None:
        measured = self.measured_us
        return self.bound_us / measured if measured > 0 else None

    @property
    def modeled_fraction(self) -> float | None:
        measured = self.measured_us
        if measured <= 0:
            return None
        return sum(r.measured_us for r in self.ops if r.bound_by != "unmodeled") / measured

    @property
    def _floor_us(self) -> float:
        """The ops' time with every modeled op at its bound (unmodeled ops keep theirs)."""
        return sum(r.bound_us if r.bound_by != "unmodeled" else r.measured_us for r in self.ops)

    @property
    def beats_bounds(self) -> bool:
        """The ops took less time in all than their bounds: the chip's figures are too low
        for this profile (a user's chip file, or --chip naming a slower chip)."""
        return self._floor_us > self.measured_us * (1 + 1e-9)

    @property
    def speedup(self) -> float | None:
        """Possible speedup if every modeled op met its bound (unmodeled ops keep their time);
        None where the ops beat their bounds in all (no speedup below 1x is claimed)."""
        floor = self._floor_us
        return self.measured_us / floor if floor > 0 and not self.beats_bounds else None

    @property
    def step_speedup(self) -> float | None:
        """The steady steps' median of each step's wall now over its wall with every op at its
        bound (idle, skew and what runs at once kept). Never more than the op-time `speedup`:
        a step cannot gain more than its ops' time can (the two differ only where ops
        overlap)."""
        ratio = self.step_summary.bound_ratio
        if ratio is None:
            return None
        if self.beats_bounds:  # the chip's figures are too low: nothing to claim from them
            return None
        op_time = self.speedup
        return min(ratio, op_time) if op_time is not None else ratio

    @property
    def flops_per_s(self) -> float | None:
        """FLOP/s per device over the steady steps: the FLOPs of the ops that ran in them, over
        the steps' wall time and devices."""
        summary = self.step_summary
        seconds, flops = summary.device_seconds, summary.flops
        return flops / seconds if seconds > 0 and flops > 0 else None

    @property
    def flops_dtype(self) -> str | None:
        """The element type that carries most of the ops' FLOPs."""
        by_dtype: dict[str, float] = {}
        for r in self.ops:
            if r.dtype and r.flops:
                by_dtype[r.dtype] = by_dtype.get(r.dtype, 0.0) + r.flops * r.occurrences
        return max(by_dtype, key=lambda d: by_dtype[d]) if by_dtype else None

    def _of_peak(self, flops_per_s: float | None) -> float | None:
        dtype = self.flops_dtype
        if flops_per_s is None or dtype is None or self.chip is None:
            return None
        return flops_per_s / self.chip.matrix_peak(dtype)

    @property
    def hfu(self) -> float | None:
        """Hardware FLOPs utilisation: `flops_per_s` over the peak of `flops_dtype`."""
        return self._of_peak(self.flops_per_s)

    @property
    def mfu(self) -> float | None:
        """Model FLOPs utilisation: `--model-flops` per step (whole program) over the steady
        steps' wall time and devices, over the peak: the frame of `hfu` (equal to it where the
        model's FLOPs are the hardware's)."""
        summary = self.step_summary
        if not self.model_flops or summary.device_seconds <= 0:
            return None
        return self._of_peak(self.model_flops * summary.steps / summary.device_seconds)

    def shares(self, rows: Sequence[Totals]) -> list[tuple[float | None, float | None]]:
        """(share, cum_share) of each row's measured time in the report's, in the rows' order,
        to 12 decimals: sums taken in another order than the total's end at exactly 1, not
        0.9999999999999999."""
        total = self.measured_us
        if total <= 0:
            return [(None, None)] * len(rows)
        out: list[tuple[float | None, float | None]] = []
        running = 0.0
        for r in rows:
            running += r.measured_us
            out.append((round(r.measured_us / total, 12), round(running / total, 12)))
        return out

    def summary_dict(self) -> dict[str, object]:
        return {
            "devices": self.devices,
            "ops": self.total_ops,
            "events": self.events,
            "measured_us": self.measured_us,
            # Every op event's duration summed: counts a loop body inside its while too.
            "event_us": sum(r.total_us for r in self.ops),
            "bound_us": self.bound_us,
            "gap_us": self.gap_us,
            "efficiency": self.efficiency,
            "modeled_fraction": self.modeled_fraction,
            "upper_bound_us": sum(r.upper_bound_us for r in self.ops),
            "speedup": self.speedup,
            **encode(self.step_summary),
            "ops_frame": self.ops_frame,
            "outside_steps": None if self.outside_steps is None else encode(self.outside_steps),
            "steps_cover_fraction": self.steps_cover_fraction,
            "step_speedup": self.step_speedup,
            "flops_per_s": self.flops_per_s,
            "flops_dtype": self.flops_dtype,
            "hfu": self.hfu,
            "model_flops": self.model_flops,
            "mfu": self.mfu,
        }

    def chip_dict(self) -> dict[str, object]:
        c = self.chip
        if c is None:
            return {}
        return {
            "name": c.name,
            "display": c.display,
            "vendor": c.vendor,
            "source": self.chip_source,
            "reason": self.chip_reason,
            "peak_flops": dict(c.peak_flops),
            "hbm_bw": c.hbm_bw,
            "interconnect_bw": c.interconnect_bw,
            "host_bw": c.host_bw,
            **({"raised": [r.to_dict() for r in self.raised]} if self.raised else {}),
        }

    def to_dict(
        self, top: int = 0, plain: bool = True, with_steps: bool = True
    ) -> dict[str, object]:
        """The report as JSON data (plain dicts and lists; `plain=False`: steps' device parts as
        dataclasses, for orjson, `StepRow.to_dict`; `with_steps=False`: `steps` empty, for a
        writer that adds them a block at a time)."""
        rows = self.ops if top <= 0 else self.ops[:top]
        return {
            "schema": SCHEMA,
            "version": __version__,
            "source": {
                "path": self.path,
                "run": self.run,
                "files": self.files,
                "hosts": self.hosts,
                "backend": self.backend,
            },
            "chip": self.chip_dict(),
            "summary": self.summary_dict(),
            "sort": self.sort,
            "ops": [
                r.to_dict(i + 1, *share)
                for i, (r, share) in enumerate(zip(rows, self.shares(rows), strict=True))
            ],
            "steps": [s.to_dict(plain) for s in self.steps] if with_steps else [],
            **(
                {
                    "group_by": self.group_by,
                    "groups": [
                        g.to_dict(i + 1, *share)
                        for i, (g, share) in enumerate(
                            zip(self.groups, self.shares(self.groups), strict=True)
                        )
                    ],
                }
                if self.group_by
                else {}
            ),
            "memory": self.memory.to_dict() if self.memory else None,
            "mesh": self.mesh.to_dict() if self.mesh else None,
            "actions": None
            if self.actions is None
            else [encode(a, rank=k) for k, a in enumerate(self.actions, 1)],
            "what_if": None if self.what_if is None else [encode(w) for w in self.what_if],
            **({"hosts": encode(self.host_skew)} if self.host_skew else {}),
            **({"cross_check": self.cross_check.to_dict()} if self.cross_check else {}),
            "warnings": self.warnings,
        }

    @classmethod
    def from_dict(cls, data: dict[str, object], path: str) -> AuditReport:
        """A report from its JSON document (ValueError, KeyError or TypeError when corrupt)."""
        raw_ops, summary = data["ops"], data["summary"]
        if not isinstance(raw_ops, list) or not isinstance(summary, dict):
            raise ValueError("'ops' is not a list or 'summary' not an object")
        ops = [decode(OpRow, o, f"ops[{i}]") for i, o in enumerate(raw_ops)]
        source = data.get("source")
        source = source if isinstance(source, dict) else {}
        backend = source.get("backend", "none")
        sort = data.get("sort", "gap")
        listed_measured = sum(o.measured_us for o in ops)
        listed_bound = sum(o.bound_us for o in ops)
        total_ops = count(summary.get("ops", len(ops)), "summary.ops")
        unlisted = Unlisted(
            ops=max(total_ops - len(ops), 0),
            measured_us=number(summary["measured_us"], "summary.measured_us") - listed_measured,
            bound_us=number(summary["bound_us"], "summary.bound_us") - listed_bound,
        )
        warnings = data.get("warnings", [])
        raw_steps = data.get("steps", [])  # version 1 reports have none
        if not isinstance(raw_steps, list):
            raise ValueError("'steps' is not a list")
        return cls(
            path=path,
            run=source.get("run") if isinstance(source.get("run"), str) else None,
            files=[str(f) for f in source.get("files", [])],
            hosts=[str(h) for h in source.get("hosts", [])],
            backend=backend if backend in get_args(Backend) else "none",
            chip=_chip(data.get("chip")),
            chip_reason=f"from the report {path}",
            raised=_raised(data.get("chip")),
            devices=count(summary.get("devices", 0), "summary.devices"),
            events=count(summary.get("events", 0), "summary.events"),
            ops=ops,
            sort=sort if sort in SORT_KEYS else "gap",
            warnings=[str(w) for w in warnings] if isinstance(warnings, list) else [],
            kind="report",
            unlisted=unlisted if unlisted.ops else Unlisted(),
            steps=[decode(StepRow, r, f"steps[{i}]") for i, r in enumerate(raw_steps)],
            model_flops=optional_number(summary.get("model_flops"), "summary.model_flops"),
            ops_frame="steady steps" if summary.get("ops_frame") == "steady steps" else "all",
            outside_steps=_outside_steps(summary.get("outside_steps")),
            steps_cover_fraction=optional_number(
                summary.get("steps_cover_fraction"), "summary.steps_cover_fraction"
            ),
            memory=MemorySection.from_dict(data.get("memory")),
            mesh=Mesh.from_dict(data.get("mesh")),
            actions=_actions(data.get("actions")),
        )

    def only_modules(self, keep: list[OpRow]) -> AuditReport:
        """The same report holding only `keep` (a module filter on a saved report: what the
        summary counted of other modules is not known, so it is dropped)."""
        report = AuditReport(**{f.name: getattr(self, f.name) for f in fields(self) if f.init})
        report.ops = keep
        report.unlisted = Unlisted()
        return report


def load_json(path: str | Path, role: str) -> AuditReport:
    """A saved `audit --format json` report, a local file or a URL (read through fsspec);
    `role` ("baseline", "BASE"...) names it in errors."""
    try:
        if is_url(path):
            document = read_remote(str(path)).decode("utf-8")
        else:
            document = regular_file(Path(path), role).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise InputError(f"cannot read {role} {path}: {reason}") from exc
    try:
        data = json.loads(document)
    except (json.JSONDecodeError, RecursionError) as exc:
        detail = (
            f"line {exc.lineno}: {exc.msg}"
            if isinstance(exc, json.JSONDecodeError)
            else "nested too deeply"
        )
        raise InputError(
            f"{role} {path} is not JSON ({detail}); "
            "save it with `hlogap audit PATH --format json -o FILE`"
        ) from exc
    if not isinstance(data, dict) or data.get("schema") not in READABLE_SCHEMAS:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise InputError(
            f"{role} {path} is not an hlogap audit report (schema {found!r}, expected one of "
            f"{', '.join(READABLE_SCHEMAS)})"
        )
    try:
        return AuditReport.from_dict(data, str(path))
    except (KeyError, ValueError, TypeError, OverflowError) as exc:
        detail = f"missing key {exc}" if isinstance(exc, KeyError) else str(exc)
        raise InputError(f"{role} {path} is a corrupt hlogap report: {detail}") from exc


def refuse_truncated(report: AuditReport, role: str) -> None:
    """`check` and `diff` compare every op: a report an older hlogap saved with `--top N` (its
    summary counts ops its `ops` does not list) cannot be matched op by op, and its totals no
    longer add up under `--module`, so it is refused (exit 3) with how to save it again."""
    listed = len(report.ops)
    if not report.truncated or not listed:  # none listed: no --top wrote it (a corrupt report)
        return
    raise InputError(
        f"{role} {report.path} lists {listed:,} of {report.total_ops:,} ops (saved with --top "
        f"{listed} by an older hlogap): save it again with this version "
        "(`hlogap audit PATH --format json -o FILE`)"
    )


def _chip(raw: object) -> Chip | None:
    """The chip a saved report names (its peaks as written); None when it gives none."""
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        return None
    peaks = raw.get("peak_flops")
    hbm_bw = raw.get("hbm_bw")
    link = raw.get("interconnect_bw")
    host = raw.get("host_bw")
    if not isinstance(peaks, dict) or not isinstance(hbm_bw, (int, float)):
        return None
    name = raw["name"]
    return Chip(
        name=name,
        vendor=str(raw.get("vendor", "")),
        display=str(raw.get("display", name)),
        peak_flops={str(k): float(v) for k, v in peaks.items() if isinstance(v, (int, float))},
        vector_flops={},
        hbm_bw=float(hbm_bw),
        hbm_bytes=None,
        interconnect_bw=float(link) if isinstance(link, (int, float)) else None,
        sources={},
        detect={},
        path=None,
        host_bw=float(host) if isinstance(host, (int, float)) else None,
    )


def _raised(raw: object) -> list[RaisedFigure]:
    """The figures a saved report's chip had raised (`chip.raised`)."""
    found = raw.get("raised") if isinstance(raw, dict) else None
    if not isinstance(found, list):
        return []
    return [
        RaisedFigure(
            text(r.get("figure"), f"chip.raised[{i}].figure"),
            number(r.get("calibrated"), f"chip.raised[{i}].calibrated"),
            number(r.get("raised"), f"chip.raised[{i}].raised"),
            text(r.get("module"), f"chip.raised[{i}].module"),
            text(r.get("op"), f"chip.raised[{i}].op"),
        )
        for i, r in enumerate(found)
        if isinstance(r, dict)
    ]


Ranked = TypeVar("Ranked", OpRow, GroupRow)


def sort_rows(rows: list[Ranked], key: SortKey) -> list[Ranked]:
    """Largest gap, measured time or idle before them first; for efficiency the least
    efficient first (the ops furthest from their bound); unmeasured rows go last."""
    if key == "idle":
        return sorted(rows, key=lambda r: (-(r.idle_before_us or 0.0), -r.gap_us, r.name))
    if key == "gap":
        return sorted(rows, key=lambda r: (-r.gap_us, -r.measured_us, r.name))
    if key == "measured":
        return sorted(rows, key=lambda r: (-r.measured_us, r.name))
    return sorted(
        rows,
        key=lambda r: (
            r.efficiency is None,
            r.efficiency if r.efficiency is not None else 0.0,
            -r.measured_us,
            r.name,
        ),
    )


def _actions(raw: object) -> list[Action] | None:
    """A saved report's actions (None when absent); ValueError when malformed."""
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise ValueError("'actions' is not a list")
    return [decode(Action, a, f"actions[{k}]") for k, a in enumerate(raw)]


def _outside_steps(raw: object) -> OutsideSteps | None:
    """`summary.outside_steps` (None: a report saved before it existed)."""
    return decode(OutsideSteps, raw, "summary.outside_steps") if isinstance(raw, dict) else None
