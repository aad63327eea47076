"""The report's two optional sections, typed: `hosts` (several hosts: who is slowest, op by op
and step by step; built by hlogap.rows.hosts) and `cross_check` (`audit --cross-check`:
xprof's counts beside ours; built by hlogap.rows.crosscheck). Fields are in the order of
their JSON keys (docs/json.md)."""

from __future__ import annotations

from msgspec import Struct, field

from hlogap.report.codec import encode


class SlowHost(Struct, frozen=True):
    """A host of the slowest few, by its time in ops."""

    host: str
    measured_us: float  # device time in ops
    over_median_pct: float | None  # over the median host's (None: the median host ran none)
    step_median_us: float | None  # its own step's median wall (None: it ran no step)


class HostSpread(Struct, frozen=True):
    """Each host's own step (first op to last, median over the steps) across the hosts."""

    hosts: int  # hosts that ran steps
    median_us: float
    p90_us: float
    max_us: float
    max_host: str


class LastArrival(Struct, frozen=True):
    """A host that arrived last at a collective: how often, and how long the others waited."""

    host: str
    times_last: int
    median_wait_us: float


class CollectiveArrivals(Struct, frozen=True):
    """A collective's late hosts (on the first host's clock)."""

    module: str
    program_id: str
    name: str
    occurrences: int  # occurrences that two hosts or more ran
    median_wait_us: float  # the latest arrival minus the median one, median over occurrences
    last_hosts: list[LastArrival]


class StepSkew(Struct, frozen=True):
    """A step: the slowest and the median host by time in ops starting in it."""

    step: int
    hosts: int
    slowest_host: str
    slowest_us: float
    median_us: float
    over_median_pct: float | None


class OpSkew(Struct, frozen=True):
    """An op that ran on two hosts or more: its time on the slowest and on the median host."""

    module: str
    program_id: str
    name: str
    hosts: int
    slowest_host: str
    slowest_us: float
    median_us: float
    over_median_pct: float | None


class HostSkew(Struct, frozen=True):
    """The `hosts` section: the hosts' clocks, the slowest hosts, and per step and per op the
    slowest host against the median one (device time in ops)."""

    hosts: list[str]
    clock_offset_us: list[float | None]  # from the first host's clock (None: not known)
    clock_offset_from: list[str]  # what each offset was estimated from, or why not
    slowest_hosts: list[SlowHost]
    step_time: HostSpread | None  # None: no host ran steps
    collectives: list[CollectiveArrivals]  # the most waited-for first
    measured_us: dict[str, float]  # per host
    slowest_host: str
    slowest_us: float
    median_us: float
    over_median_pct: float | None
    steps: list[StepSkew]
    ops: list[OpSkew]  # the most skewed first


class CrossCheckRow(Struct):
    """One op's occurrences by hlogap and by xprof's hlo_stats."""

    module: str
    program_id: str
    name: str
    occurrences: int | None  # hlogap's (None: not in its report)
    xprof_occurrences: int | None  # None: not in xprof's hlo_stats
    self_us: float | None
    xprof_self_us: float | None
    agrees: bool  # same occurrences, self time within tolerance
    why: str  # what differs and, where known, why ("" when they agree)
    explained: bool = False  # the difference is one hlogap knows the reason for


class CrossCheck(Struct):
    """The `cross_check` section: each op of the report against xprof's row."""

    tool: str
    rows: list[CrossCheckRow] = field(default_factory=list)

    @property
    def agreeing(self) -> int:
        return sum(r.agrees for r in self.rows)

    @property
    def differing(self) -> list[CrossCheckRow]:
        return [r for r in self.rows if not r.agrees]

    @property
    def unexplained(self) -> list[CrossCheckRow]:
        return [r for r in self.differing if not r.explained]

    def summary(self) -> str:
        differ = len(self.differing)
        tail = ""
        if differ:
            unexplained = len(self.unexplained)
            tail = f"; {differ} differ, " + (
                "each for a known reason" if not unexplained else f"{unexplained} unexplained"
            )
        return (
            f"cross-check with {self.tool}: {self.agreeing} of {len(self.rows)} ops agree on "
            f"occurrences and self time{tail}"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "tool": self.tool,
            "summary": self.summary(),
            "ops": len(self.rows),
            "agree": self.agreeing,
            "rows": [encode(r) for r in self.rows],
        }
