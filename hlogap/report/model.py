"""The report: the one model that audit, check and diff read, and the JSON contract
(hlogap.audit/1, docs/json.md) it writes and loads back."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Literal, TypeVar, get_args

from hlogap._version import __version__
from hlogap.bounds.measured import RaisedFigure
from hlogap.bounds.roofline import BoundBy
from hlogap.chips import Chip
from hlogap.errors import InputError
from hlogap.hlo.mesh import Mesh
from hlogap.memory.static import MemorySection
from hlogap.report.sections import CrossCheck, HostSkew
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


@dataclass(kw_only=True)
class OpRow(Totals):
    module: str
    program_id: str = ""
    name: str
    opcode: str = "unknown"
    category: str = ""
    occurrences: int = 0
    # Runs of the op in one occurrence: a while body's trips (per-occurrence counts cover all).
    runs_per_occurrence: int = 1
    events: int = 0
    measured_us: float = 0.0  # total over occurrences and devices (self time)
    total_us: float = 0.0  # the same with nested ops included (xprof's "total time")
    # Median time of one occurrence: what `check` compares, robust to noise (None: a report
    # saved before medians existed).
    median_us: float | None = None
    bound_us: float = 0.0  # total lower bound
    upper_bound_us: float = 0.0  # total sum-of-times bound
    bound_by: BoundBy = "unmodeled"
    flops: float = 0.0  # per occurrence
    bytes: float = 0.0  # HBM bytes per occurrence
    comm_bytes: float = 0.0  # per occurrence
    transcendentals: float = 0.0
    # The element type whose peak bounds the op's FLOPs (its matrix work's, else its vector
    # work's); "" when it does none.
    dtype: str = ""
    t_compute_us: float = 0.0  # per occurrence
    t_memory_us: float = 0.0
    t_comm_us: float = 0.0
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
    sharding: dict[str, int] | None = None
    # `--what-if CHIP`: the op's bound on each other chip (total, like `bound_us`); a chip
    # that cannot bound it is left out.
    what_if_us: dict[str, float] | None = None
    # TPU `_counters_`: each unit's time-weighted slot occupancy (of the code, not busy time),
    # 0-1, over the op's occurrences; None where the profile has none.
    counters: dict[str, float] | None = None
    # True when `measured_us` is an estimate: an op of a command buffer (a CUDA graph) whose
    # own time the profile does not have (hlogap.report.command_buffers).
    estimated: bool = False
    # A command buffer's call: the ops it runs, each with its bound and an estimated share of
    # the call's time (they add up to it). Not rows of the report: totals count the call once.
    command_buffer_ops: list[OpRow] = field(default_factory=list)
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
        return {
            "rank": rank,
            "module": self.module,
            "program_id": self.program_id,
            "name": self.name,
            "opcode": self.opcode,
            "category": self.category,
            "occurrences": self.occurrences,
            "runs_per_occurrence": self.runs_per_occurrence,
            "events": self.events,
            "measured_us": self.measured_us,
            "total_us": self.total_us,
            "median_us": self.median_us,
            "bound_us": self.bound_us,
            "gap_us": self.gap_us,
            "efficiency": self.efficiency,
            "share": share,
            "cum_share": cum_share,
            "bound_by": self.bound_by,
            "flops": self.flops,
            "dtype": self.dtype,
            "bytes": self.bytes,
            "comm_bytes": self.comm_bytes,
            "intensity": self.intensity,
            "transcendentals": self.transcendentals,
            "t_compute_us": self.t_compute_us,
            "t_memory_us": self.t_memory_us,
            "t_comm_us": self.t_comm_us,
            "upper_bound_us": self.upper_bound_us,
            "hlo": self.hlo,
            "fingerprint": self.fingerprint,
            "op_name": self.op_name,
            "source": self.source,
            "hints": self.hints,
            "mesh_axes": self.mesh_axes,
            "global_shapes": self.global_shapes,
            "sharding": self.sharding,
            "what_if_us": self.what_if_us,
            "counters": self.counters,
            "estimated": self.estimated,
            "command_buffer_ops": [r.to_dict(k) for k, r in enumerate(self.command_buffer_ops, 1)],
            "idle_before_us": self.idle_before_us,
            "idle_gaps": self.idle_gaps,
        }

    @classmethod
    def from_dict(cls, raw: object, where: str) -> OpRow:
        """An op of a saved report; keys a report of an older hlogap lacks keep their defaults."""
        if not isinstance(raw, dict):
            raise ValueError(f"{where} is not an object")
        values: dict[str, object] = {}
        for f in fields(cls):
            if f.name not in raw:
                continue
            value, what = raw[f.name], f"{where}.{f.name}"
            if f.name in ("hints", "mesh_axes", "global_shapes"):
                if value is None and f.name != "hints":
                    pass
                elif not isinstance(value, list) or not all(isinstance(h, str) for h in value):
                    raise ValueError(f"{what} is not a list of strings")
            elif f.name == "sharding":
                if value is not None and not (
                    isinstance(value, dict)
                    and all(
                        isinstance(k, str) and isinstance(n, int) and not isinstance(n, bool)
                        for k, n in value.items()
                    )
                ):
                    raise ValueError(f"{what} is not an object of axis sizes")
            elif f.name in ("counters", "what_if_us"):
                if value is not None:
                    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
                        raise ValueError(f"{what} is not an object of numbers")
                    value = {k: _number(u, f"{what}.{k}") for k, u in value.items()}
            elif f.name == "estimated":
                if not isinstance(value, bool):
                    raise ValueError(f"{what} is {value!r}, not true or false")
            elif f.name == "command_buffer_ops":
                if not isinstance(value, list):
                    raise ValueError(f"{what} is not a list")
                if any(isinstance(r, dict) and r.get("command_buffer_ops") for r in value):
                    # XLA nests no command buffer in another's rows: refused before recursing.
                    raise ValueError(f"{what} holds an op with command buffer ops of its own")
                value = [OpRow.from_dict(r, f"{what}[{k}]") for k, r in enumerate(value)]
            elif f.name == "bound_by":
                if value not in get_args(BoundBy):
                    raise ValueError(f"{what} is {value!r}, not one of {get_args(BoundBy)}")
            elif f.name in ("occurrences", "events", "runs_per_occurrence", "idle_gaps"):
                value = int(_number(value, what))
            elif f.name in ("median_us", "idle_before_us"):
                value = None if value is None else _number(value, what)
            elif f.type in ("float", float):
                value = _number(value, what)
            else:
                value = _text(value, what)
            values[f.name] = value
        for required in ("module", "name", "occurrences", "measured_us"):
            if required not in raw:
                raise KeyError(f"{where}.{required}")
        return cls(**values)  # type: ignore[arg-type]


@dataclass(slots=True)  # 160 k of them for a 40 k-step pod profile: small, quick to make
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


def _device_row(raw: object, where: str) -> DeviceRow:
    if not isinstance(raw, dict):
        raise ValueError(f"{where} is not an object")
    return tuple(
        int(_number(raw[k], f"{where}.{k}")) if k == "device" else _number(raw[k], f"{where}.{k}")
        for k in DEVICE_STEP_KEYS
    )


@dataclass(slots=True)  # not frozen: its init sets 18 fields, for each of 40 k steps
class StepRow:
    """A step: `wall_us`, `skew_us`, `bound_wall_us` are wall time; the other times are summed
    over the step's devices (device time)."""

    step: int
    source: StepSource
    start_us: float  # from the profile's first op event
    wall_us: float  # earliest device start to latest device end (the step's window)
    devices: int
    busy_us: float  # device time: when at least one op ran on the device
    measured_us: float  # the op executions that started in the step, as in `ops`
    bound_us: float
    exposed_comm_us: float  # device time: a collective ran and no compute op did
    exposed_host_us: float = 0.0  # device time: only host transfers ran
    # Device time: each device's own idle (its wall - busy); skew between devices is not idle.
    idle_us: float = 0.0
    device_wall_us: float = 0.0  # the devices' own walls summed (busy + idle)
    skew_us: float = 0.0  # latest device start - earliest
    slowest_device: int | None = None  # the device with the longest own wall
    # The step's wall if every op ran at its bound, each device keeping its start, its idle
    # gaps and what ran at once (None: a report saved before it existed).
    bound_wall_us: float | None = None
    flops: float = 0.0  # device time: FLOPs of the occurrences that started in the step
    device_rows: tuple[DeviceRow, ...] = ()  # per device: the values of DEVICE_STEP_KEYS
    # `lost_in_ops_us` as the step's builder summed it (None: summed from the rows on use).
    lost_us: float | None = field(default=None, compare=False)

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

    @property
    def at_bound_us(self) -> float:
        """Busy time that would remain with every op at its bound (unmodeled ops keep theirs)."""
        return max(self.busy_us - self.lost_in_ops_us, 0.0)

    @classmethod
    def from_dict(cls, raw: object, where: str) -> StepRow:
        if not isinstance(raw, dict):
            raise ValueError(f"{where} is not an object")
        source = next((k for k in get_args(StepSource) if k == raw.get("source")), None)
        if source is None:
            raise ValueError(f"{where}.source is {raw.get('source')!r}")
        values = {
            k: _number(raw[k], f"{where}.{k}")
            for k in ("start_us", "wall_us", "busy_us", "measured_us", "bound_us")
        }
        devices = int(_number(raw["devices"], f"{where}.devices"))
        # Reports of version 2 lack the per-device keys: their devices spanned the whole step.
        device_wall = raw.get("device_wall_us", values["wall_us"] * devices)
        idle = raw.get("idle_us", max(values["wall_us"] * devices - values["busy_us"], 0.0))
        slowest = raw.get("slowest_device")
        bound_wall = raw.get("bound_wall_us")
        per_device = raw.get("per_device", [])
        if not isinstance(per_device, list):
            raise ValueError(f"{where}.per_device is not a list")
        return cls(
            step=int(_number(raw["step"], f"{where}.step")),
            source=source,
            devices=devices,
            exposed_comm_us=_number(raw.get("exposed_comm_us", 0.0), f"{where}.exposed_comm_us"),
            exposed_host_us=_number(raw.get("exposed_host_us", 0.0), f"{where}.exposed_host_us"),
            idle_us=_number(idle, f"{where}.idle_us"),
            device_wall_us=_number(device_wall, f"{where}.device_wall_us"),
            skew_us=_number(raw.get("skew_us", 0.0), f"{where}.skew_us"),
            slowest_device=None
            if slowest is None
            else int(_number(slowest, f"{where}.slowest_device")),
            bound_wall_us=None
            if bound_wall is None
            else _number(bound_wall, f"{where}.bound_wall_us"),
            flops=_number(raw.get("flops", 0.0), f"{where}.flops"),
            device_rows=tuple(
                _device_row(d, f"{where}.per_device[{i}]") for i, d in enumerate(per_device)
            ),
            **values,
        )

    def to_dict(self, plain: bool = True) -> dict[str, object]:
        """The step as JSON data. `plain=False` gives each device's part as a `DeviceStep`
        (orjson writes a dataclass as the object of its fields): a 40 k-step profile's 160 k
        parts cost 16 MB that way, 144 MB as dicts."""
        return {
            "step": self.step,
            "source": self.source,
            "start_us": self.start_us,
            "wall_us": self.wall_us,
            "skew_us": self.skew_us,
            "slowest_device": self.slowest_device,
            "bound_wall_us": self.bound_wall_us,
            "devices": self.devices,
            "device_wall_us": self.device_wall_us,
            "busy_us": self.busy_us,
            "idle_us": self.idle_us,
            "exposed_comm_us": self.exposed_comm_us,
            "exposed_host_us": self.exposed_host_us,
            "measured_us": self.measured_us,
            "bound_us": self.bound_us,
            "gap_us": self.gap_us,
            "flops": self.flops,
            "per_device": (
                [dict(zip(DEVICE_STEP_KEYS, r)) for r in self.device_rows]
                if plain
                else self.per_device
            ),
        }


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


# A leading step this many times the median step's wall is warm-up (compilation, autotuning,
# the first input): the summary's figures leave it out and say which (a 2.5 s first step beside
# 125 ms ones made a run read 79% idle where its steady steps sit 1% idle).
WARMUP_FACTOR = 1.5


def warmup_steps(walls: Sequence[float]) -> int:
    """How many leading steps (in order) are warm-up: each over `WARMUP_FACTOR` times the
    median wall of all steps. One step at least is kept steady."""
    if len(walls) < 2:
        return 0
    limit = WARMUP_FACTOR * statistics.median(walls)
    count = 0
    while count < len(walls) - 1 and walls[count] > limit:
        count += 1
    return count


def warmup_of(steps: Sequence[StepRow]) -> int:
    """How many of the steps lead as warm-up (`warmup_steps` of their walls)."""
    return warmup_steps([s.wall_us for s in steps])


def steady_steps(steps: Sequence[StepRow]) -> list[StepRow]:
    """The steps after the warm-up ones (`warmup_of`)."""
    return list(steps[warmup_of(steps) :])


def step_ratio(walls: Sequence[float], shorter: Sequence[float]) -> float | None:
    """The median over steps of each step's wall over its wall after a change (each step
    against itself: the medians of the two lists may come from different steps)."""
    ratios = [w / t for w, t in zip(walls, shorter, strict=True) if t > 0]
    return statistics.median(ratios) if ratios and len(ratios) == len(walls) else None


def steps_summary(steps: list[StepRow]) -> dict[str, object]:
    """The summary's step keys (docs/json.md) over the steady steps (the first `warmup_steps`
    steps left out): the median step (wall time), and the devices' own step time
    (device time) split into time at the roofline bound, time lost inside ops and idle time
    (they add up to `device_wall_us`)."""
    warmup = warmup_of(steps)
    steps = steady_steps(steps)
    busy = sum(s.busy_us for s in steps)
    at_bound = sum(s.at_bound_us for s in steps)
    device_wall = sum(s.device_wall_us for s in steps)
    window = sum(s.wall_us * s.devices for s in steps)
    idle = sum(s.idle_us for s in steps)
    # The rest of the steps' wall on every device, on each side of the device's own part.
    start = DEVICE_STEP_KEYS.index("start_us")
    before_first = sum(r[start] - s.start_us for s in steps for r in s.device_rows)
    parted = bool(steps) and all(s.device_rows for s in steps)
    step_us = _median([s.wall_us for s in steps])
    bound_walls = [s.bound_wall_us for s in steps if s.bound_wall_us is not None]
    ratio = (
        step_ratio([s.wall_us for s in steps], bound_walls)
        if len(bound_walls) == len(steps)
        else None
    )
    return {
        "steps": len(steps),
        "warmup_steps": warmup,
        "step_us": step_us,
        "skew_us": _median([s.skew_us for s in steps]),
        # The median step at the median step's own ratio of wall to wall at the bound.
        "step_bound_us": step_us / ratio if ratio and step_us is not None else None,
        "device_wall_us": device_wall,
        # The devices' own steps over the steps' wall on every device: the rest is before a
        # device's first op or after its last (skew, host work, input, launch).
        "device_span_fraction": device_wall / window if window > 0 else None,
        # Device time: from the step's start to each device's first op, and from each device's
        # last op to the step's end (None: a report without the devices' parts).
        "before_first_op_us": before_first if parted else None,
        "after_last_op_us": window - device_wall - before_first if parted else None,
        "busy_us": busy,
        "idle_us": idle,
        "idle_fraction": idle / device_wall if device_wall > 0 else None,
        "exposed_comm_us": sum(s.exposed_comm_us for s in steps),
        "exposed_host_us": sum(s.exposed_host_us for s in steps),
        "at_bound_us": at_bound,
        "lost_in_ops_us": sum(s.lost_in_ops_us for s in steps),
    }


@dataclass(frozen=True)
class GroupRow(Totals):
    """Ops rolled up (`--group-by`): their totals summed."""

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
        return {
            "rank": rank,
            "name": self.name,
            "ops": self.ops,
            "occurrences": self.occurrences,
            "measured_us": self.measured_us,
            "bound_us": self.bound_us,
            "gap_us": self.gap_us,
            "efficiency": self.efficiency,
            "share": share,
            "cum_share": cum_share,
            "comm_bytes": self.comm_bytes,
            "bus_bw": self.bus_bw,
            "exposed_us": self.exposed_us,
            "idle_before_us": self.idle_before_us,
            "unmodeled_us": self.unmodeled_us,
            "modeled_gap_us": self.modeled_gap_us,
            "modeled_efficiency": self.modeled_efficiency,
        }


# An open set (contract version 4): a newer hlogap's cause is kept as written. The causes this
# version knows, for the docs and the renderers.
ActionCause = str
KNOWN_CAUSES: tuple[str, ...] = (
    "unfused attention",
    "materialized logits",
    "per-example loop",
    "below the ridge",
    "activation-bound",
    "layout copy",
    "dtype",
    "launch-bound",
    "exposed collective",
    "host offload wait",
    "slow kernel",
    "tile padding",
    "slow scatter",
    "device idle",
)
# Where a `device idle` action's gaps sit (contract version 4).
IDLE_PLACES: tuple[str, ...] = ("between steps", "between programs", "inside an execution")
SavingFrame = Literal["wall", "device-time"]


@dataclass(frozen=True)
class OpRef:
    module: str
    program_id: str
    name: str


@dataclass
class Action:
    """One change to make (hlogap.advice), with the time it would save.

    `saving_us` is wall time of the steps saved, summed over the steps (each step re-timed with
    the change's ops shortened on each device's critical path: an op hidden behind another saves
    nothing); without steps it is device time (`frame`). `op_saving_us` is the device time the
    ops would lose, never more than their gap. `step_saving_us` and `step_speedup` are in the
    summary's frame: the median over the steady steps of each step's wall saved, and of each
    step's wall over its wall with the change (None: no steps)."""

    cause: ActionCause
    ops: tuple[OpRef, ...]
    saving_us: float
    frame: SavingFrame
    op_saving_us: float
    evidence: str
    change: str
    step_saving_us: float | None = None
    step_speedup: float | None = None
    layers: int = 1  # repeated layers the action covers (the same cause and change on each)
    where: str | None = None  # a `device idle` action's place (IDLE_PLACES), else None

    def to_dict(self, rank: int) -> dict[str, object]:
        return {
            "rank": rank,
            "cause": self.cause,
            "ops": [
                {"module": o.module, "program_id": o.program_id, "name": o.name} for o in self.ops
            ],
            "saving_us": self.saving_us,
            "frame": self.frame,
            "op_saving_us": self.op_saving_us,
            "step_saving_us": self.step_saving_us,
            "step_speedup": self.step_speedup,
            "layers": self.layers,
            "where": self.where,
            "evidence": self.evidence,
            "change": self.change,
        }

    @classmethod
    def from_dict(cls, raw: object, where: str) -> Action:
        if not isinstance(raw, dict) or not isinstance(raw.get("ops"), list):
            raise ValueError(f"{where} is not an action with an 'ops' list")
        # Any cause is kept (a newer hlogap's too): only its type is checked.
        cause = raw.get("cause")
        frame = next((f for f in get_args(SavingFrame) if f == raw.get("frame", "wall")), None)
        if not isinstance(cause, str) or not cause or frame is None:
            raise ValueError(f"{where}: cause {cause!r} or its frame is not known")
        layers = raw.get("layers", 1)
        if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
            raise ValueError(f"{where}.layers is {layers!r}, not a count of 1 or more")
        place = raw.get("where")
        if place is not None and not isinstance(place, str):
            raise ValueError(f"{where}.where is {place!r}, not a string")
        ops = tuple(
            OpRef(*(_text(o.get(k, ""), f"{where}.ops") for k in ("module", "program_id", "name")))
            for o in raw["ops"]
            if isinstance(o, dict)
        )
        return cls(
            cause=cause,
            ops=ops,
            saving_us=_number(raw.get("saving_us"), f"{where}.saving_us"),
            frame=frame,
            op_saving_us=_number(raw.get("op_saving_us", 0.0), f"{where}.op_saving_us"),
            evidence=_text(raw.get("evidence", ""), f"{where}.evidence"),
            change=_text(raw.get("change", ""), f"{where}.change"),
            step_saving_us=_optional_number(raw.get("step_saving_us"), f"{where}.step_saving_us"),
            step_speedup=_optional_number(raw.get("step_speedup"), f"{where}.step_speedup"),
            layers=layers,
            where=place,
        )


@dataclass
class WhatIf:
    """`--what-if CHIP`: the same ops bounded on another chip (hlogap.advice.what_if)."""

    chip: str
    speedup: float | None  # op time now / op time at the other chip's bounds (device time)
    step_speedup: float | None  # median step wall now / with every op at the other's bound
    new_top_ops: list[str]  # the ops that take longest at the other chip's bounds
    capped_by: list[str]  # ops that gain least: at or near this chip's roof already
    unmodeled_us: float  # device time of ops neither chip bounds, kept as measured
    step_unavailable: str | None = None  # why `step_speedup` is null (None when it is not)

    def to_dict(self) -> dict[str, object]:
        return {
            "chip": self.chip,
            "speedup": self.speedup,
            "step_speedup": self.step_speedup,
            "step_unavailable": self.step_unavailable,
            "new_top_ops": self.new_top_ops,
            "capped_by": self.capped_by,
            "unmodeled_us": self.unmodeled_us,
        }


@dataclass(frozen=True)
class OutsideSteps:
    """Device time (us, summed over devices) of op events outside the steady steps, kept out
    of the op rows in the steady frame (`summary.outside_steps`, contract version 4)."""

    warmup_us: float = 0.0  # in the warm-up steps
    autotuning_us: float = 0.0  # compile-time autotuning candidates (nsys-jax's measurements)
    # Compilation runs no device op in the traces hlogap reads: kept for the contract's key.
    compile_us: float = 0.0
    other_us: float = 0.0  # in no step: before the first, between steps, after the last

    @property
    def total_us(self) -> float:
        return sum(self.to_dict().values())

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: object) -> OutsideSteps | None:
        if not isinstance(data, dict):
            return None
        return cls(
            **{
                f.name: _number(data.get(f.name, 0.0), f"summary.outside_steps.{f.name}")
                for f in fields(cls)
            }
        )


OpsFrame = Literal["steady steps", "all"]


@dataclass(frozen=True)
class Unlisted:
    """What a report an older hlogap saved with `--top N` left out of `ops`: its summary still
    counts it (this version's JSON lists every op; `check` and `diff` refuse such a report)."""

    ops: int = 0
    measured_us: float = 0.0
    bound_us: float = 0.0


@dataclass(kw_only=True)
class AuditReport:
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
    # `--cross-check`: xprof's counts beside ours (hlogap.report.crosscheck).
    cross_check: CrossCheck | None = None
    # Several hosts: the slowest against the median, in all and op by op (hlogap.report.hosts).
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
        steps = steady_steps(self.steps)
        bound_walls = [s.bound_wall_us for s in steps if s.bound_wall_us is not None]
        if not steps or len(bound_walls) < len(steps):
            return None
        ratio = step_ratio([s.wall_us for s in steps], bound_walls)
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
        steps = steady_steps(self.steps)
        device_seconds = sum(s.wall_us * s.devices for s in steps) * 1e-6
        flops = sum(s.flops for s in steps)
        return flops / device_seconds if device_seconds > 0 and flops > 0 else None

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
        steps = steady_steps(self.steps)
        device_seconds = sum(s.wall_us * s.devices for s in steps) * 1e-6
        if not self.model_flops or device_seconds <= 0:
            return None
        return self._of_peak(self.model_flops * len(steps) / device_seconds)

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
            **steps_summary(self.steps),
            "ops_frame": self.ops_frame,
            "outside_steps": None if self.outside_steps is None else self.outside_steps.to_dict(),
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
            else [a.to_dict(k) for k, a in enumerate(self.actions, 1)],
            "what_if": None if self.what_if is None else [w.to_dict() for w in self.what_if],
            **({"hosts": asdict(self.host_skew)} if self.host_skew else {}),
            **({"cross_check": self.cross_check.to_dict()} if self.cross_check else {}),
            "warnings": self.warnings,
        }

    @classmethod
    def from_dict(cls, data: dict[str, object], path: str) -> AuditReport:
        """A report from its JSON document (ValueError, KeyError or TypeError when corrupt)."""
        raw_ops, summary = data["ops"], data["summary"]
        if not isinstance(raw_ops, list) or not isinstance(summary, dict):
            raise ValueError("'ops' is not a list or 'summary' not an object")
        ops = [OpRow.from_dict(o, f"ops[{i}]") for i, o in enumerate(raw_ops)]
        source = data.get("source")
        source = source if isinstance(source, dict) else {}
        backend = source.get("backend", "none")
        sort = data.get("sort", "gap")
        listed_measured = sum(o.measured_us for o in ops)
        listed_bound = sum(o.bound_us for o in ops)
        total_ops = int(_number(summary.get("ops", len(ops)), "summary.ops"))
        unlisted = Unlisted(
            ops=max(total_ops - len(ops), 0),
            measured_us=_number(summary["measured_us"], "summary.measured_us") - listed_measured,
            bound_us=_number(summary["bound_us"], "summary.bound_us") - listed_bound,
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
            devices=int(_number(summary.get("devices", 0), "summary.devices")),
            events=int(_number(summary.get("events", 0), "summary.events")),
            ops=ops,
            sort=sort if sort in SORT_KEYS else "gap",
            warnings=[str(w) for w in warnings] if isinstance(warnings, list) else [],
            kind="report",
            unlisted=unlisted if unlisted.ops else Unlisted(),
            steps=[StepRow.from_dict(r, f"steps[{i}]") for i, r in enumerate(raw_steps)],
            model_flops=_optional_number(summary.get("model_flops"), "summary.model_flops"),
            ops_frame="steady steps" if summary.get("ops_frame") == "steady steps" else "all",
            outside_steps=OutsideSteps.from_dict(summary.get("outside_steps")),
            steps_cover_fraction=_optional_number(
                summary.get("steps_cover_fraction"), "summary.steps_cover_fraction"
            ),
            memory=MemorySection.from_dict(data.get("memory")),
            mesh=Mesh.from_dict(data.get("mesh")),
            actions=_actions(data.get("actions")),
        )

    def only_modules(self, keep: list[OpRow]) -> AuditReport:
        """The same report holding only `keep` (a module filter on a saved report: what the
        summary counted of other modules is not known, so it is dropped)."""
        report = AuditReport(**{f.name: getattr(self, f.name) for f in fields(self)})
        report.ops = keep
        report.unlisted = Unlisted()
        return report


def load_json(path: str | Path, role: str) -> AuditReport:
    """A saved `audit --format json` report, a local file or a URL (read through fsspec);
    `role` ("baseline", "BASE"...) names it in errors."""
    try:
        if is_url(path):
            text = read_remote(str(path)).decode("utf-8")
        else:
            text = regular_file(Path(path), role).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise InputError(f"cannot read {role} {path}: {reason}") from exc
    try:
        data = json.loads(text)
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


def _number(value: object, what: str) -> float:
    """A count or a time of a saved report: a finite number, never negative. The JSON writer
    turns non-finite numbers into null, so null here means a degenerate report."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} is {value!r}, not a number")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{what} is {value!r}, not a finite number >= 0")
    return number


def _optional_number(value: object, what: str) -> float | None:
    return None if value is None else _number(value, what)


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} is {value!r}, not a string")
    return value


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
            _text(r.get("figure"), f"chip.raised[{i}].figure"),
            _number(r.get("calibrated"), f"chip.raised[{i}].calibrated"),
            _number(r.get("raised"), f"chip.raised[{i}].raised"),
            _text(r.get("module"), f"chip.raised[{i}].module"),
            _text(r.get("op"), f"chip.raised[{i}].op"),
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
    return [Action.from_dict(a, f"actions[{k}]") for k, a in enumerate(raw)]
