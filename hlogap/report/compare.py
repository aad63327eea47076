"""Run-to-run comparison: load two reports, pair their ops across recompiles, and diff them.

Either side is an AuditReport: a profile audited, or a saved ``audit --format json`` report loaded
(``hlogap.load_report``). Ops are paired
within one HLO module name, strongest evidence first, because XLA renames fusions between compiles
(``fusion.41`` becomes ``fusion.43`` when an unrelated op is added):

1. same name and same fingerprint            -> ``name+fingerprint``
2. fingerprint unique on both sides           -> ``fingerprint``
3. fingerprint several times on both sides    -> ``fingerprint (ordered)``, paired by measured time
4. same name and opcode among the rest        -> ``name``

What is left is ``appeared`` (only in NEW) or ``vanished`` (only in BASE).

Noise and run length: per-op figures are compared per occurrence, and totals of BASE are scaled by
the run-length ratio (the median over matched ops of NEW occurrences / BASE occurrences), so that a
profile of 6 steps compares fairly with a baseline of 3.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal, get_args

from hlogap._version import __version__
from hlogap.chips import Chip
from hlogap.memory.static import ModuleMemoryChange, memory_changes
from hlogap.report.codec import encode
from hlogap.report.model import Action, AuditReport
from hlogap.report.model import OpRow as Op

PairedBy = Literal["name+fingerprint", "fingerprint", "fingerprint (ordered)", "name"]
MATCH_METHODS: tuple[PairedBy, ...] = get_args(PairedBy)
MatchMethod = PairedBy | Literal["appeared", "vanished"]
DIFF_SCHEMA = "hlogap.diff/1"


# -------------------------------------------------------------------------------------- matching

RENAMED = " -> "  # between the two names of an op that XLA renamed


@dataclass(frozen=True)
class Pair:
    """An op of one report matched to an op of the other (or to none), and how."""

    module: str
    base: Op | None
    new: Op | None
    method: MatchMethod


def _by_time(ops: Iterable[Op]) -> list[Op]:
    return sorted(ops, key=lambda o: (-o.measured_us, o.name))


def _pair_groups(
    base: list[Op],
    new: list[Op],
    key: Callable[[Op], object],
    method: PairedBy,
    accept: Callable[[int, int], bool],
    pairs: list[Pair],
) -> tuple[list[Op], list[Op]]:
    """Pair ops of BASE and NEW sharing `key` (a None key never pairs) in order of measured time,
    for the groups whose sizes `accept`; return what stays unpaired."""
    groups_b: dict[object, list[Op]] = defaultdict(list)
    groups_n: dict[object, list[Op]] = defaultdict(list)
    for op in base:
        groups_b[key(op)].append(op)
    for op in new:
        groups_n[key(op)].append(op)
    paired: set[int] = set()
    for k, group_b in groups_b.items():
        group_n = groups_n.get(k)
        if k is None or not group_n or not accept(len(group_b), len(group_n)):
            continue
        for b, n in zip(_by_time(group_b), _by_time(group_n)):
            pairs.append(Pair(b.module, b, n, method))
            paired.update((id(b), id(n)))
    return (
        [o for o in base if id(o) not in paired],
        [o for o in new if id(o) not in paired],
    )


def _match_module(module: str, base: list[Op], new: list[Op]) -> list[Pair]:
    pairs: list[Pair] = []

    def fp(o: Op) -> str | None:
        return o.fingerprint or None

    def name_fp(o: Op) -> tuple[str, str] | None:
        return (o.name, o.fingerprint) if o.fingerprint else None

    def anything(nb: int, nn: int) -> bool:
        return True

    base, new = _pair_groups(base, new, name_fp, "name+fingerprint", anything, pairs)
    base, new = _pair_groups(
        base, new, fp, "fingerprint", lambda nb, nn: nb == 1 and nn == 1, pairs
    )
    base, new = _pair_groups(
        base, new, fp, "fingerprint (ordered)", lambda nb, nn: nb > 1 and nn > 1, pairs
    )
    base, new = _pair_groups(base, new, lambda o: (o.name, o.opcode), "name", anything, pairs)
    pairs += [Pair(module, b, None, "vanished") for b in _by_time(base)]
    pairs += [Pair(module, None, n, "appeared") for n in _by_time(new)]
    return pairs


def match_ops(base: Sequence[Op], new: Sequence[Op]) -> list[Pair]:
    """Pair the ops of two reports, module by module (see the module docstring)."""
    by_module_b: dict[str, list[Op]] = defaultdict(list)
    by_module_n: dict[str, list[Op]] = defaultdict(list)
    for op in base:
        by_module_b[op.module].append(op)
    for op in new:
        by_module_n[op.module].append(op)
    pairs: list[Pair] = []
    for module in sorted(set(by_module_b) | set(by_module_n)):
        pairs += _match_module(module, by_module_b.get(module, []), by_module_n.get(module, []))
    return pairs


# --------------------------------------------------------------------------------------- diffing


def _pct(delta: float, reference: float) -> float | None:
    return delta / reference * 100.0 if reference > 0 else None


@dataclass(frozen=True)
class DiffRow:
    """A pair of ops with its deltas; BASE totals are scaled by the run-length `ratio`."""

    pair: Pair
    ratio: float

    @property
    def base(self) -> Op | None:
        return self.pair.base

    @property
    def new(self) -> Op | None:
        return self.pair.new

    @property
    def op(self) -> Op:
        """NEW's op, or BASE's for a vanished op."""
        op = self.new or self.base
        assert op is not None, "a pair holds at least one op"
        return op

    @property
    def name(self) -> str:
        """`name`, or `old -> new` when XLA renamed the op."""
        b, n = self.base, self.new
        if b is not None and n is not None and b.name != n.name:
            return f"{b.name}{RENAMED}{n.name}"
        return self.op.name

    @property
    def status(self) -> str:
        if self.pair.method in ("appeared", "vanished"):
            return self.pair.method
        delta = self.measured_per_occ_delta_us
        if delta * self.measured_delta_us < 0:  # slower per occurrence, less in total, or back
            return "mixed"
        return "slower" if delta > 0 else "faster" if delta < 0 else "unchanged"

    def _per_occ(self, which: str, field_name: str) -> float | None:
        op = self.base if which == "base" else self.new
        if op is None:
            return None
        # The median execution is robust to a straggler or a warm-up step; the mean is the
        # fallback for reports that do not carry medians.
        if field_name == "measured_us" and self._medians:
            return op.median_us
        return op.per_occurrence(getattr(op, field_name))

    @property
    def _medians(self) -> bool:
        return (
            self.base is not None
            and self.new is not None
            and self.base.median_us is not None
            and self.new.median_us is not None
        )

    def _per_occ_delta(self, field_name: str) -> float:
        b = self._per_occ("base", field_name)
        n = self._per_occ("new", field_name)
        return (n or 0.0) - (b or 0.0)

    def _total_delta(self, field_name: str) -> float:
        b = getattr(self.base, field_name) if self.base is not None else 0.0
        n = getattr(self.new, field_name) if self.new is not None else 0.0
        return float(n) - self.ratio * float(b)

    @property
    def base_measured_per_occ_us(self) -> float | None:
        return self._per_occ("base", "measured_us")

    @property
    def new_measured_per_occ_us(self) -> float | None:
        return self._per_occ("new", "measured_us")

    @property
    def measured_per_occ_delta_us(self) -> float:
        return self._per_occ_delta("measured_us")

    @property
    def measured_per_occ_delta_pct(self) -> float | None:
        """Per-occurrence change in % of BASE; None unless the op is on both sides."""
        b = self.base_measured_per_occ_us
        if b is None or self.new is None:
            return None
        return _pct(self.measured_per_occ_delta_us, b)

    @property
    def measured_delta_us(self) -> float:
        return self._total_delta("measured_us")

    @property
    def bound_delta_us(self) -> float:
        return self._total_delta("bound_us")

    @property
    def gap_delta_us(self) -> float:
        return self._total_delta("gap_us")

    def to_dict(self) -> dict[str, object]:
        b, n = self.base, self.new
        return {
            "module": self.pair.module,
            "name": self.op.name,
            "base_name": b.name if b else None,
            "new_name": n.name if n else None,
            "opcode": self.op.opcode,
            "fingerprint": self.op.fingerprint,
            "match": self.pair.method,
            "status": self.status,
            "base_occurrences": b.occurrences if b else None,
            "new_occurrences": n.occurrences if n else None,
            "base_measured_us": b.measured_us if b else None,
            "new_measured_us": n.measured_us if n else None,
            "base_bound_us": b.bound_us if b else None,
            "new_bound_us": n.bound_us if n else None,
            "base_gap_us": b.gap_us if b else None,
            "new_gap_us": n.gap_us if n else None,
            "base_measured_per_occ_us": self.base_measured_per_occ_us,
            "new_measured_per_occ_us": self.new_measured_per_occ_us,
            "measured_per_occ_delta_us": self.measured_per_occ_delta_us,
            "measured_per_occ_delta_pct": self.measured_per_occ_delta_pct,
            "bound_per_occ_delta_us": self._per_occ_delta("bound_us"),
            "gap_per_occ_delta_us": self._per_occ_delta("gap_us"),
            "measured_delta_us": self.measured_delta_us,
            "bound_delta_us": self.bound_delta_us,
            "gap_delta_us": self.gap_delta_us,
        }


@dataclass
class Diff:
    """Two reports compared op by op (`hlogap diff`)."""

    base: AuditReport
    new: AuditReport
    ratio: float  # run-length ratio: median over matched ops of new / base occurrences
    rows: list[DiffRow]  # sorted by |measured_delta_us|, largest first
    warnings: list[str] = field(default_factory=list)

    @property
    def measured_delta_us(self) -> float:
        return self.new.measured_us - self.ratio * self.base.measured_us

    @property
    def measured_delta_pct(self) -> float | None:
        """Change of the total measured time per step, in % of BASE."""
        return _pct(self.measured_delta_us, self.ratio * self.base.measured_us)

    @property
    def bound_delta_us(self) -> float:
        return self.new.bound_us - self.ratio * self.base.bound_us

    @property
    def gap_delta_us(self) -> float:
        return self.new.gap_us - self.ratio * self.base.gap_us

    @property
    def gap_delta_pct(self) -> float | None:
        """Growth of the total gap, in % of BASE's total measured time (per step)."""
        return _pct(self.gap_delta_us, self.ratio * self.base.measured_us)

    @property
    def memory(self) -> list[ModuleMemoryChange]:
        """The static memory of the modules both runs have (hlogap.memory)."""
        return memory_changes(self.base.memory, self.new.memory)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys((*MATCH_METHODS, "appeared", "vanished"), 0)
        for row in self.rows:
            out[row.pair.method] += 1
        return out

    @property
    def steps(self) -> StepChange | None:
        """The steady median step of each side (None unless both have steps)."""
        base, new = median_step(self.base), median_step(self.new)
        if base is None or new is None:
            return None
        return StepChange(base, new)

    def actions_realized(self) -> list[Realized]:
        """For each action of BASE: its promise and how much its ops' time per step moved in
        NEW (their matched ops, a vanished op's time all gone), no more than the step moved."""
        if not self.base.actions:
            return []
        by_key = {(o.module, o.program_id, o.name): o for o in self.base.ops}
        matched = {id(r.base): r.new for r in self.rows if r.base is not None and r.pair.method}
        steps = self.steps
        per_base, per_new = _per_step(self.base), _per_step(self.new)
        out = []
        for rank, action in enumerate(self.base.actions, 1):
            realized = None
            if steps is not None and per_base and per_new:
                moved = 0.0
                for ref in action.ops:
                    op = by_key.get((ref.module, ref.program_id, ref.name))
                    if op is None:
                        continue
                    now = matched.get(id(op))
                    moved += _time(action, op) / per_base
                    moved -= (_time(action, now) / per_new) if now is not None else 0.0
                drop = steps.base_step_us - steps.new_step_us
                realized = max(min(moved, drop), min(moved, 0.0))
            out.append(Realized(rank, action, realized))
        return out

    def summary_dict(self) -> dict[str, object]:
        eff_b, eff_n = self.base.efficiency, self.new.efficiency
        return {
            "run_ratio": self.ratio,
            "measured_delta_us": self.measured_delta_us,
            "measured_delta_pct": self.measured_delta_pct,
            "bound_delta_us": self.bound_delta_us,
            "gap_delta_us": self.gap_delta_us,
            "gap_delta_pct": self.gap_delta_pct,
            "efficiency_delta": None if eff_b is None or eff_n is None else eff_n - eff_b,
            "matches": self.counts(),
        }

    def to_dict(self, top: int = 0) -> dict[str, object]:
        rows = self.rows if top <= 0 else self.rows[:top]
        return {
            "schema": DIFF_SCHEMA,
            "version": __version__,
            "base": side_dict(self.base),
            "new": side_dict(self.new),
            "summary": self.summary_dict(),
            "steps": None if self.steps is None else self.steps.to_dict(),
            "actions_realized": [a.to_dict() for a in self.actions_realized()],
            "ops": [r.to_dict() for r in rows],
            "memory": [m.to_dict() for m in self.memory],
            "warnings": self.warnings,
        }


@dataclass(frozen=True)
class StepChange:
    """The steady median step of BASE and NEW (wall time)."""

    JSON_EXTRA: ClassVar[dict[str, str | None]] = {"change": "new_step_us"}

    base_step_us: float
    new_step_us: float

    @property
    def change(self) -> float | None:
        """Relative change of the step (-0.6: 60% shorter)."""
        if self.base_step_us <= 0:
            return None
        return (self.new_step_us - self.base_step_us) / self.base_step_us

    @property
    def speedup(self) -> float | None:
        return self.base_step_us / self.new_step_us if self.new_step_us > 0 else None

    def to_dict(self) -> dict[str, object]:
        return encode(self)


@dataclass(frozen=True)
class Realized:
    """An action of BASE: what it promised a step and what NEW realized (None: no steps)."""

    rank: int
    action: Action
    realized_step_saving_us: float | None

    def to_dict(self) -> dict[str, object]:
        return {
            "rank": self.rank,
            "cause": self.action.cause,
            "ops": [encode(o) for o in self.action.ops],
            "promised_step_saving_us": self.action.step_saving_us,
            "realized_step_saving_us": self.realized_step_saving_us,
        }


def median_step(report: AuditReport) -> float | None:
    """The median wall of the report's steady steps (warm-up left out), None without steps."""
    return report.step_summary.step_us


def _per_step(report: AuditReport) -> float:
    """What turns an op's device time into its time a step on one device: the steps its op
    rows count (the steady ones in the steady frame) times the devices (0: no steps)."""
    if not report.steps:
        return 0.0
    counted = report.steady_steps if report.ops_frame != "all" else report.steps
    devices = max(max((s.devices for s in counted), default=1), 1)
    return float(len(counted) * devices)


def _time(action: Action, op: Op) -> float:
    """The op's time an action is about: the idle before it for a `device idle` action, its own
    time otherwise."""
    if action.cause == "device idle":
        return op.idle_before_us or 0.0
    return op.measured_us


def run_ratio(pairs: Iterable[Pair]) -> float:
    """Median over matched ops of NEW occurrences / BASE occurrences; 1 when nothing matched."""
    ratios = [
        p.new.occurrences / p.base.occurrences
        for p in pairs
        if p.base is not None
        and p.new is not None
        and p.base.occurrences > 0
        and p.new.occurrences > 0
    ]
    return float(statistics.median(ratios)) if ratios else 1.0


def _chip_key(chip: Chip) -> tuple[object, ...]:
    return (
        chip.name,
        json.dumps(chip.peak_flops, sort_keys=True),
        chip.hbm_bw,
        chip.interconnect_bw,
        chip.host_bw,
    )


def side_dict(report: AuditReport) -> dict[str, object]:
    """One side of a diff, in a diff's JSON."""
    return {
        "path": report.path,
        "kind": report.kind,
        "chip": report.chip.name if report.chip else None,
        "ops": report.total_ops,
        "ops_listed": len(report.ops),
        "measured_us": report.measured_us,
        "bound_us": report.bound_us,
        "gap_us": report.gap_us,
        "efficiency": report.efficiency,
    }


def compare(base: AuditReport, new: AuditReport) -> Diff:
    """Match the ops of BASE and NEW and compute every delta."""
    pairs = match_ops(base.ops, new.ops)
    ratio = run_ratio(pairs)
    rows = [DiffRow(p, ratio) for p in pairs]
    rows.sort(key=lambda r: (-abs(r.measured_delta_us), r.pair.module, r.name))
    warnings: list[str] = []
    if not any(p.base is not None and p.new is not None for p in pairs):
        warnings.append("no op of BASE matches an op of NEW: are these the same program?")
    elif not math.isclose(ratio, 1.0):
        warnings.append(
            f"NEW ran {ratio:.3g}x the occurrences of BASE (median over matched ops): "
            "BASE totals are scaled by that"
        )
    for side, report in (("BASE", base), ("NEW", new)):
        if report.truncated:
            warnings.append(
                f"{side} lists {len(report.ops)} of {report.total_ops} ops (saved with --top "
                "by an older hlogap): unlisted ops show as appeared/vanished; save it again with "
                "this version"
            )
    if base.chip and new.chip and _chip_key(base.chip) != _chip_key(new.chip):
        raised = [
            f"{side}: {', '.join(r.describe() for r in report.raised)}"
            for side, report in (("BASE", base), ("NEW", new))
            if report.raised
        ]
        warnings.append(
            f"the chips differ (BASE {base.chip.name}, NEW {new.chip.name}): bounds and gaps "
            "are not comparable; "
            + (
                # One calibrated chip, raised to what each profile's ops reached.
                f"the calibrated figures were raised ({'; '.join(raised)}): compare the "
                "measured times, or calibrate again on an idle machine"
                if raised
                else "pass the same --chip to both"
            )
        )
    return Diff(base=base, new=new, ratio=ratio, rows=rows, warnings=warnings)
