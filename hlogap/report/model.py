"""The audit report: what every renderer and the JSON contract (hlogap.audit/1) read."""

from __future__ import annotations

from dataclasses import dataclass, field

from hlogap import __version__
from hlogap.chips import Chip

SCHEMA = "hlogap.audit/1"
SORT_KEYS = ("gap", "measured", "efficiency")


@dataclass
class OpRow:
    module: str
    program_id: str
    name: str
    opcode: str
    category: str
    occurrences: int
    events: int
    measured_us: float  # total over occurrences and devices (self time)
    total_us: float  # the same with nested ops included (xprof's "total time")
    median_us: float  # median time of one occurrence: what `check` compares, robust to noise
    bound_us: float  # total lower bound
    upper_bound_us: float  # total sum-of-times bound
    bound_by: str
    flops: float  # per occurrence
    bytes: float  # HBM bytes per occurrence
    comm_bytes: float  # per occurrence
    transcendentals: float
    t_compute_us: float  # per occurrence
    t_memory_us: float
    t_comm_us: float
    hlo: str
    fingerprint: str  # stable across recompiles (hlogap.hlo.fingerprint); "" without HLO
    hints: list[str] = field(default_factory=list)

    @property
    def gap_us(self) -> float:
        return self.measured_us - self.bound_us

    @property
    def efficiency(self) -> float | None:
        return self.bound_us / self.measured_us if self.measured_us > 0 else None

    @property
    def intensity(self) -> float | None:
        return self.flops / self.bytes if self.bytes > 0 else None

    def to_dict(self, rank: int) -> dict[str, object]:
        return {
            "rank": rank,
            "module": self.module,
            "program_id": self.program_id,
            "name": self.name,
            "opcode": self.opcode,
            "category": self.category,
            "occurrences": self.occurrences,
            "events": self.events,
            "measured_us": self.measured_us,
            "total_us": self.total_us,
            "median_us": self.median_us,
            "bound_us": self.bound_us,
            "gap_us": self.gap_us,
            "efficiency": self.efficiency,
            "bound_by": self.bound_by,
            "flops": self.flops,
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
            "hints": self.hints,
        }


@dataclass
class AuditReport:
    path: str
    run: str | None
    files: list[str]
    hosts: list[str]
    backend: str
    chip: Chip
    chip_source: str  # "detected", "user", "calibrated"
    chip_reason: str  # how it was chosen, in words
    devices: int
    events: int
    ops: list[OpRow]  # every op, sorted by `sort`
    sort: str = "gap"
    warnings: list[str] = field(default_factory=list)

    @property
    def measured_us(self) -> float:
        return sum(r.measured_us for r in self.ops)

    @property
    def bound_us(self) -> float:
        return sum(r.bound_us for r in self.ops)

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
    def speedup(self) -> float | None:
        """Possible speedup if every modeled op met its bound (unmodeled ops keep their time)."""
        floor = sum(r.bound_us if r.bound_by != "unmodeled" else r.measured_us for r in self.ops)
        return self.measured_us / floor if floor > 0 else None

    def summary_dict(self) -> dict[str, object]:
        return {
            "devices": self.devices,
            "ops": len(self.ops),
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
        }

    def chip_dict(self) -> dict[str, object]:
        c = self.chip
        return {
            "name": c.name,
            "display": c.display,
            "vendor": c.vendor,
            "source": self.chip_source,
            "reason": self.chip_reason,
            "peak_flops": dict(c.peak_flops),
            "hbm_bw": c.hbm_bw,
            "interconnect_bw": c.interconnect_bw,
        }

    def to_dict(self, top: int = 0) -> dict[str, object]:
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
            "ops": [r.to_dict(i + 1) for i, r in enumerate(rows)],
            "warnings": self.warnings,
        }


def sort_rows(rows: list[OpRow], key: str) -> list[OpRow]:
    """Largest first for every key, as the contract says; unmeasured ops go last."""
    if key == "gap":
        return sorted(rows, key=lambda r: (-r.gap_us, -r.measured_us, r.name))
    if key == "measured":
        return sorted(rows, key=lambda r: (-r.measured_us, r.name))
    if key == "efficiency":
        return sorted(
            rows,
            key=lambda r: (
                -(r.efficiency if r.efficiency is not None else -1.0),
                -r.measured_us,
                r.name,
            ),
        )
    raise ValueError(key)
