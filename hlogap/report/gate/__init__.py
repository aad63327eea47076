"""`hlogap check`: thresholds (flags, config file, defaults) and the pass/fail verdict on a Diff.

Three checks always run, one more on request (docs/ci.md explains the defaults):

- total measured time per step grows by more than `max_regression` % (BASE scaled by the
  run-length ratio, see hlogap.report.compare);
- total gap grows by more than `max_gap_regression` % of BASE's total measured time;
- some op's measured time per occurrence grows by more than `max_op_regression` %, among ops that
  are not tiny: at least `min_op_share` % of the total measured time and at least MIN_OP_US per
  occurrence, on either side;
- the overall efficiency (bound / measured) of NEW is below `min_efficiency` (off by default);
- the median step time grows by more than `max_step_regression` % (off by default);
- the devices' idle share of step time grows by more than `max_idle_regression` percentage
  points (off by default).
Asked for, a step check fails when either side has no steps: the gate fails closed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Literal

from hlogap._version import __version__
from hlogap.errors import InputError, UsageError
from hlogap.report.codec import encode
from hlogap.report.compare import Diff, DiffRow
from hlogap.report.gate.noise import CONFIDENCE, MEDIAN_SE, Estimate, Spread, log_spread, welch
from hlogap.report.model import AuditReport, StepRow
from hlogap.source import read_toml
from hlogap.trace.model import CORRUPT_TRACE, MAX_TOTAL_PS
from hlogap.units import fmt_si, fmt_us

CHECK_SCHEMA = "hlogap.check/1"
EXIT_INCONCLUSIVE = 3  # the interval straddles a limit: more steps would decide (docs/cli.md)
# % run-to-run noise allowed for by default (docs/ci.md): XLA:CPU profiles come from shared CI
# runners (identical runs' medians moved 11.3 ms to 24.1 ms on the 2-core development VM),
# accelerators' from dedicated chips.
RUN_NOISE = {"cpu": 25.0, "gpu": 5.0, "tpu": 5.0}
MIN_OP_US = 1.0  # ops faster than this per occurrence (on both sides) are launch noise


@dataclass(frozen=True)
class Thresholds:
    """The limits a `check` holds the new report to."""

    max_regression: float = 5.0  # % of BASE's total measured time per step
    max_gap_regression: float = 5.0  # gap growth, % of BASE's total measured time per step
    max_op_regression: float = 20.0  # % of the op's BASE time per occurrence
    min_efficiency: float | None = None  # fraction, 0..1
    min_hfu: float | None = None  # fraction, 0..1: NEW's summary.hfu at least this
    min_op_share: float = 1.0  # % of the total measured time below which an op is not gated
    max_step_regression: float | None = None  # % of BASE's median step time
    max_idle_regression: float | None = None  # percentage points of the idle share of step time
    # % a run's times may move from one run to the next that no step of one run shows (the
    # runner's load, clocks, thread placement): added to each interval (docs/ci.md).
    run_noise: float | None = None  # None: by the backend (RUN_NOISE)
    # `--max-peak-hbm`: NEW's static memory peak (its largest module) at most this many bytes,
    # or growing at most this % over BASE's.
    max_peak_bytes: float | None = None
    max_peak_regression: float | None = None
    config: str | None = field(default=None, compare=False)  # the file that set some values

    def to_dict(self) -> dict[str, object]:
        return encode(self)

    def describe(self) -> str:
        """Every threshold in force, as the options that set it (`max-regression 5%, ...`)."""
        text = (
            f"max-regression {self.max_regression:g}%, "
            f"max-gap-regression {self.max_gap_regression:g}%, "
            f"max-op-regression {self.max_op_regression:g}%, min-op-share {self.min_op_share:g}%"
        )
        if self.run_noise is not None:
            text += f", run-noise {self.run_noise:g}%"
        if self.min_efficiency is not None:
            text += f", min-efficiency {self.min_efficiency:g}"
        if self.min_hfu is not None:
            text += f", min-hfu {self.min_hfu:g}"
        if self.max_step_regression is not None:
            text += f", max-step-regression {self.max_step_regression:g}%"
        if self.max_idle_regression is not None:
            text += f", max-idle-regression {self.max_idle_regression:g} points"
        if self.max_peak_bytes is not None:
            text += f", max-peak-hbm {fmt_si(self.max_peak_bytes, 'B')}"
        if self.max_peak_regression is not None:
            text += f", max-peak-hbm {self.max_peak_regression:g}%"
        return text


KEYS = tuple(f.name for f in fields(Thresholds) if f.name != "config")


def find_config(directory: Path) -> tuple[Path, dict[str, object]] | None:
    """`hlogap.toml` (top-level keys) if present, else `pyproject.toml`'s `[tool.hlogap]`;
    only `directory` is searched, and the first file found is the only one read."""
    for name in ("hlogap.toml", "pyproject.toml"):
        path = directory / name
        if not path.exists():
            continue

        def invalid(why: str, at: Path = path) -> UsageError:
            return UsageError(f"{at} is not valid TOML: {why}")

        data = read_toml(path, "config file", invalid)
        if name == "pyproject.toml":
            tool = data.get("tool", {})
            section = tool.get("hlogap") if isinstance(tool, dict) else None
            if section is None:
                return None
            if not isinstance(section, dict):
                raise UsageError(f"{path}: [tool.hlogap] is not a table")
            data = section
        return path, data
    return None


def _validate(key: str, value: object, label: str) -> float:
    """A threshold's value as a float; `label` is how the user wrote it (flag or file: key)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{label} must be a number, not {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an integer past float's range (10**400)
        number = math.inf
    if not math.isfinite(number) or not number >= 0:  # also rejects NaN
        raise UsageError(f"{label} must be a finite number >= 0, not {number:g}")
    if key in ("min_efficiency", "min_hfu") and number > 1:
        raise UsageError(f"{label} is a fraction between 0 and 1, not {number:g}")
    return number


def resolve_thresholds(flags: dict[str, float | None], directory: Path) -> Thresholds:
    """Each threshold from its flag if given, else the config file in `directory`, else the
    default. `flags` maps the keys of Thresholds to the command line's values (None: not given)."""
    values: dict[str, float] = {}
    found = find_config(directory)
    config: str | None = None
    if found is not None:
        path, data = found
        unknown = sorted(set(data) - set(KEYS))
        if unknown:
            raise UsageError(
                f"{path}: unknown hlogap setting {', '.join(unknown)} (known: {', '.join(KEYS)})"
            )
        for key, value in data.items():
            values[key] = _validate(key, value, f"{path}: {key}")
        config = str(path) if data else None
    for key, value in flags.items():
        if value is not None:
            values[key] = _validate(key, value, "--" + key.replace("_", "-"))
    return Thresholds(**values, config=config)


Verdict = Literal["pass", "fail", "inconclusive"]


@dataclass(frozen=True)
class Check:
    """One check of a `check`: its figure, its limit and the verdict."""

    name: str  # "measured", "gap", "ops", "efficiency", "hfu", "step", "idle", "peak", ...
    value: float | None  # % for measured/gap/step, ops over the limit for ops, a fraction...
    limit: float
    failed: bool
    text: str  # the check in words, one line
    # "pass", "fail" or "inconclusive" (None: from `failed`); the plausible range of the
    # change (in the value's unit), None where there is no noise estimate or no baseline.
    verdict: Verdict | None = None
    interval: tuple[float, float] | None = None
    # Inconclusive: one line saying so and how many steps would decide it.
    undecided: str = ""

    def __post_init__(self) -> None:
        if self.verdict is None:
            object.__setattr__(self, "verdict", "fail" if self.failed else "pass")
        elif self.failed != (self.verdict == "fail"):
            object.__setattr__(self, "failed", self.verdict == "fail")

    @property
    def mark(self) -> str:
        """The check's word in the table: FAIL, ok, or ??? (inconclusive)."""
        return {"fail": "FAIL", "inconclusive": "??? "}.get(str(self.verdict), "ok  ")

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "value": self.value,
            "limit": self.limit,
            "failed": self.failed,
            "verdict": self.verdict,
            "interval": None if self.interval is None else list(self.interval),
            "text": self.text,
        }


@dataclass
class CheckResult:
    """A `check`'s verdict: its checks over the diff of the baseline and the new report."""

    diff: Diff
    thresholds: Thresholds
    checks: list[Check]
    gated: list[DiffRow]  # matched ops the per-op check looked at
    regressed: list[DiffRow]  # gated ops that failed the per-op check, largest total delta first
    appeared: list[DiffRow]  # new ops that would not be tiny (they count in the totals only)
    vanished: list[DiffRow] = field(default_factory=list)  # baseline ops gone, not tiny
    op_checks: list[OpCheck] = field(default_factory=list)  # each gated op's verdict
    notes: list[str] = field(default_factory=list)  # lines under the checks (history, waits)

    @property
    def passed(self) -> bool:
        return not any(c.failed for c in self.checks)

    @property
    def change(self) -> float | None:
        """The run's change, relative (0.031 = +3.1%): the steady median step's where both
        sides have steps, else the measured time's (what `--update-baseline` records)."""
        step = step_change(self.diff)
        if step is not None:
            return step.new_us / step.base_us - 1.0
        pct = next((c.value for c in self.checks if c.name == "measured"), None)
        return None if pct is None else pct / 100.0

    @property
    def outcome(self) -> Verdict:
        """fail if a check failed, else inconclusive if one could not tell, else pass."""
        verdicts = {c.verdict for c in self.checks}
        if "fail" in verdicts:
            return "fail"
        return "inconclusive" if "inconclusive" in verdicts else "pass"

    def undecided_line(self) -> str:
        """Inconclusive: the one line for stderr (the first undecided check's)."""
        first = next((c for c in self.checks if c.verdict == "inconclusive"), None)
        return f"hlogap check: inconclusive: {first.undecided}" if first else ""

    def verdict(self) -> str:
        """The first line of every output format: PASS, FAIL or INCONCLUSIVE and the checks
        that decided it."""
        outcome = self.outcome
        if outcome == "pass":
            return "hlogap check: PASS: " + "; ".join(_short(c) for c in self.checks)
        chosen = [c for c in self.checks if c.verdict == outcome]
        return f"hlogap check: {outcome.upper()}: " + "; ".join(_short(c) for c in chosen)

    def to_dict(self) -> dict[str, object]:
        return {
            "schema": CHECK_SCHEMA,
            "version": __version__,
            "verdict": self.outcome,
            "line": self.verdict(),
            "thresholds": self.thresholds.to_dict(),
            "checks": [c.to_dict() for c in self.checks],
            "op_checks": [o.to_dict() for o in self.op_checks],
            "regressed_ops": [r.to_dict() for r in self.regressed],
            "appeared_ops": [r.to_dict() for r in self.appeared],
            "vanished_ops": [r.to_dict() for r in self.vanished],
            "gated_ops": len(self.gated),
            "notes": self.notes,
            # The step before -> after and what each action of the baseline promised and NEW
            # realized, as `diff` has them (also under "diff").
            "steps": None if self.diff.steps is None else self.diff.steps.to_dict(),
            "actions_realized": [a.to_dict() for a in self.diff.actions_realized()],
            "diff": self.diff.to_dict(0),
        }


def _short(check: Check) -> str:
    if check.name == "ops":
        if check.verdict == "inconclusive":
            return f"ops within the noise of +{check.limit:g}%"
        return f"{check.value:.0f} op{'' if check.value == 1 else 's'} over +{check.limit:g}%"
    if check.name == "step":
        value = "unknown" if check.value is None else _pct(check.value)
        return f"step {value}{_range(check)} (limit +{check.limit:g}%)"
    if check.name == "idle":
        value = "unknown" if check.value is None else f"{check.value:+.1f} pt"
        return f"idle {value} (limit +{check.limit:g} pt)"
    if check.name == "peak":
        value = "unknown" if check.value is None else _bytes(check.value)
        return f"peak {value} (max {_bytes(check.limit)})"
    if check.name == "peak-growth":
        return f"peak {_pct(check.value, check.limit)} (limit +{check.limit:g}%)"
    if check.name in ("efficiency", "hfu"):
        value = "unknown" if check.value is None else f"{check.value:.2f}"
        label = "HFU" if check.name == "hfu" else "efficiency"
        return f"{label} {value} (min {check.limit:g})"
    if check.name == "work":
        return f"work {_pct(check.value)} (limit +{check.limit:g}%)"
    label = "measured" if check.name == "measured" else "gap"
    return f"{label} {_pct(check.value)}{_range(check)} (limit +{check.limit:g}%)"


def _range(check: Check) -> str:
    """` (lo..hi)`: the check's plausible range, where it has one (not a single point)."""
    if check.interval is None or check.interval[0] == check.interval[1]:
        return ""
    return f" ({_fmt_interval(*check.interval)})"


def _bytes(value: float) -> str:
    from hlogap.units import fmt_si

    return fmt_si(value, "B")


def _peak(report: AuditReport) -> tuple[str, float] | None:
    """The report's largest static memory peak: (module, bytes); None without memory."""
    peak = report.memory.peak if report.memory else None
    return (peak.module, float(peak.peak_bytes)) if peak is not None else None


def _memory_checks(diff: Diff, t: Thresholds) -> list[Check]:
    """The peak-memory checks asked for; each fails closed when a side has no memory section."""
    checks: list[Check] = []
    base, new = _peak(diff.base), _peak(diff.new)
    if t.max_peak_bytes is not None:
        if new is None:
            checks.append(
                Check(
                    "peak",
                    None,
                    t.max_peak_bytes,
                    True,
                    "peak memory: none in NEW (no buffer assignment)",
                )
            )
        else:
            checks.append(
                Check(
                    "peak",
                    new[1],
                    t.max_peak_bytes,
                    _over(new[1], t.max_peak_bytes),
                    f"static memory peak {_bytes(new[1])} ({new[0]}), "
                    f"max {_bytes(t.max_peak_bytes)}",
                )
            )
    if t.max_peak_regression is not None:
        if base is None or new is None or base[1] <= 0:
            side = " and ".join(s for s, r in (("BASE", base), ("NEW", new)) if r is None) or "BASE"
            checks.append(
                Check(
                    "peak-growth", None, t.max_peak_regression, True, f"peak memory: none in {side}"
                )
            )
        else:
            growth = (new[1] - base[1]) / base[1] * 100
            checks.append(
                Check(
                    "peak-growth",
                    growth,
                    t.max_peak_regression,
                    _over(growth, t.max_peak_regression),
                    f"static memory peak {_bytes(base[1])} -> {_bytes(new[1])}: "
                    f"{_pct(growth, t.max_peak_regression)} "
                    f"(limit +{t.max_peak_regression:g}%)",
                )
            )
    return checks


def parse_peak_limit(text: str) -> tuple[float | None, float | None]:
    """`--max-peak-hbm`: `PCT%` (growth over the baseline) or a byte count, plain or with a
    unit (`16GB`, `15.5GiB`, `800MB`): (max bytes, max growth %)."""
    import re

    found = re.fullmatch(
        r"\s*((?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\s*(%|[kKMGT]i?B|B)?\s*", text
    )
    # `''` (an unset CI variable), `.`, `1e999`: no limit at all, never the gate turned off.
    if found is None or not math.isfinite(float(found.group(1))):
        raise UsageError(f"--max-peak-hbm takes BYTES (16GB, 15.5GiB, 8e9) or PCT%, not {text!r}")
    number, unit = float(found.group(1)), found.group(2) or "B"
    if unit == "%":
        return None, number
    scale = {
        "B": 1,
        "kB": 1e3,
        "KB": 1e3,
        "MB": 1e6,
        "GB": 1e9,
        "TB": 1e12,
        "KiB": 2**10,
        "kiB": 2**10,
        "MiB": 2**20,
        "GiB": 2**30,
        "TiB": 2**40,
    }.get(unit)
    if scale is None:
        raise UsageError(f"--max-peak-hbm: unknown unit {unit!r}")
    if not math.isfinite(number * scale):
        raise UsageError(f"--max-peak-hbm takes BYTES (16GB, 15.5GiB, 8e9) or PCT%, not {text!r}")
    return number * scale, None


def _over(value: float, limit: float) -> bool:
    """Past the limit, failing closed: a NaN (which compares false with everything) is over."""
    return not value <= limit


def _pct(value: float | None, limit: float | None = None) -> str:
    """A change in %: one decimal, more where the limit it is read against has more (+0.04%
    against a 0.01% limit, not +0.0%)."""
    if value is None:
        return "-"
    digits = 1
    if limit is not None and 0 < limit < 0.1:
        digits = math.ceil(-math.log10(limit)) + 1
    return f"{value:+.{digits}f}%"


def _share(row: DiffRow, diff: Diff) -> float:
    """The op's largest share of its side's total measured time, in %."""
    shares = [0.0]
    for op, report in ((row.base, diff.base), (row.new, diff.new)):
        if op is not None and report.measured_us > 0:
            shares.append(op.measured_us / report.measured_us * 100.0)
    return max(shares)


def is_tiny(row: DiffRow, diff: Diff, min_op_share: float) -> bool:
    """Too small to gate on its own: under `min_op_share` % of the time or MIN_OP_US per
    occurrence on both sides (its time still counts in the totals)."""
    per_occ = max(row.base_measured_per_occ_us or 0.0, row.new_measured_per_occ_us or 0.0)
    return _share(row, diff) < min_op_share or per_occ < MIN_OP_US


# Total bound over total measured above which a report cannot be real. A user's chip file with
# figures set low is beaten by a little (hints say so); by this much, nothing is.
IMPOSSIBLY_FAST = 3.0


def _refuse_degenerate(diff: Diff) -> None:
    """The gate fails closed: a side with nothing measured, or a time that is not a finite
    number >= 0, or two sides with no op in common, is an input error, never a pass."""
    checked = "report" if diff.new.kind == "report" else "profile"  # what PATH was
    for role, report in (("baseline", diff.base), (checked, diff.new)):
        if not report.ops:
            raise InputError(f"{role} {report.path} has no ops: nothing to check")
        bad = [
            o.name
            for o in report.ops
            if not (math.isfinite(o.measured_us) and o.measured_us >= 0)
            or not (math.isfinite(o.bound_us) and o.bound_us >= 0)
        ]
        if bad:
            raise InputError(
                f"{role} {report.path} has ops whose time is not a finite number >= 0: "
                + ", ".join(bad[:3])
            )
        # Each op's time in range, and their sums too: no run adds up to 2**62 ps (53 days),
        # and past it a sum, a gap or a per-step scaling reaches inf and its % NaN, which
        # compares as no regression.
        if not (report.measured_us < MAX_TOTAL_PS / 1e6 and math.isfinite(report.bound_us)):
            raise InputError(
                f"{role} {report.path} is corrupt: its ops add up to {report.measured_us:.3g} us "
                f"measured and {report.bound_us:.3g} us bound, past the 2**62 ps (53 days) no "
                "profile holds"
            )
        if report.measured_us <= 0:
            raise InputError(f"{role} {report.path} measured no time: nothing to check")
        # Its numbers miss what the corrupt events took: no verdict can rest on them.
        corrupt = next((w for w in report.warnings if CORRUPT_TRACE in w), None)
        if corrupt is not None:
            raise InputError(f"{role} {report.path}: {corrupt}")
        # The roofline is a floor: a report whose ops took far less than their bounds in all
        # (every op at 1 ps, say) holds impossible times, not a speed-up to pass.
        if report.bound_us > IMPOSSIBLY_FAST * report.measured_us:
            raise InputError(
                f"{role} {report.path} is {report.bound_us / report.measured_us:.3g}x faster "
                "than its own roofline bound: its times are not real (or the chip is wrong)"
            )
        # FLOPs per second past the chip's peak: the chip (or the steps' FLOPs) is wrong, a
        # misconfigured gate, never a verdict on the program.
        for label, figure in (("HFU", report.hfu), ("MFU", report.mfu)):
            if figure is not None and not figure <= 1.0 + 1e-9:
                chip = report.chip.name if report.chip else "unknown"
                raise InputError(
                    f"{role} {report.path} is misconfigured: its {label} is {figure:.3g}, past "
                    f"the chip's peak (chip {chip}): pass the chip it ran on (--chip) or check "
                    "--model-flops"
                )

    def modules(report: AuditReport) -> str:
        return ", ".join(sorted({o.module for o in report.ops})[:4])

    if not any(row.base is not None and row.new is not None for row in diff.rows):
        raise InputError(
            f"no op of {diff.new.path} (modules {modules(diff.new)}) matches the baseline "
            f"{diff.base.path} (modules {modules(diff.base)}): nothing was compared"
        )
    gone = _vanished_share(diff)
    if gone > VANISHED_LIMIT:
        kept = {o.module for o in diff.new.ops}
        lost = sorted({r.op.module for r in diff.rows if r.new is None} - kept)
        which = f" (modules {', '.join(lost[:4])} vanished)" if lost else ""
        raise InputError(
            f"ops that took {gone:.0%} of the baseline {diff.base.path}'s time are not in "
            f"{diff.new.path}{which}: not the same program, its totals cannot be compared "
            "(--module gates the part both run)"
        )


# The share of the baseline's measured time in ops the profile lacks above which the two are
# not one program: the totals would compare what is left with all of it (an audit filtered to
# one module passed at -89%).
VANISHED_LIMIT = 0.5


def _vanished_share(diff: Diff) -> float:
    """The share of the baseline's measured time in ops the profile does not have."""
    total = diff.base.measured_us
    gone = sum(r.base.measured_us for r in diff.rows if r.new is None and r.base is not None)
    return gone / total if total > 0 else 0.0


# ------------------------------------------------------------------------- noise-aware checks


def _frame_steps(report: AuditReport) -> list[StepRow]:
    """The steps the report's op rows count: its steady steps in the steady frame; every step
    where the rows count every event (no warm-up to leave out, or `--all-steps`)."""
    return report.steady_steps if report.ops_frame == "steady steps" else report.steps


@dataclass(frozen=True)
class PerStep:
    """A side's measured and gap time per steady step, and the steps' own figures (their
    spread is the noise)."""

    measured_us: float
    gap_us: float
    measured: list[float]  # each steady step's measured time (device time)
    gaps: list[float]  # each steady step's gap (measured - bound)
    recomputed: bool  # from the steps (an older report whose rows count its warm-up too)


def per_step(report: AuditReport) -> PerStep | None:
    """The ops' time per steady step: the rows' totals over the steps they count where the
    rows are in the steady frame (or there is no warm-up), else (an older report that counts
    the warm-up in its rows) the steady steps' own figures. None without steps."""
    steady = report.steady_steps
    if not steady:
        return None
    measured = [s.measured_us for s in steady]
    gaps = [s.measured_us - s.bound_us for s in steady]
    frame = _frame_steps(report)
    if report.ops_frame == "steady steps" or len(frame) == len(steady):
        n = len(frame)
        return PerStep(report.measured_us / n, report.gap_us / n, measured, gaps, False)
    return PerStep(
        math.fsum(measured) / len(steady), math.fsum(gaps) / len(steady), measured, gaps, True
    )


def _fmt_interval(lo: float, hi: float, unit: str = "%") -> str:
    if unit == "%":
        return f"{lo:+.1f}%..{hi:+.1f}%"
    return f"{lo:+.1f}..{hi:+.1f} {unit}"


def _steps_said(est: Estimate) -> str:
    return f"{est.n_base} and {est.n_new} steady steps"


@dataclass(frozen=True)
class Scale:
    """The scale a check's noise is estimated on, and the unit its value is in: `to_value` maps
    the scale to the unit, `from_value` back."""

    to_value: Callable[[float], float]
    from_value: Callable[[float], float]
    unit: str = "%"


def _decide(
    point: float,
    est: Estimate,
    limit: float,
    scale: Scale,
    what: str,
    confidence: float = CONFIDENCE,
    between: float = 0.0,
    exact: bool = False,
) -> tuple[Verdict, tuple[float, float] | None, str, str]:
    """The verdict on a change `point` (in the check's unit) whose noise is `est` (on its own
    `scale`): pass when none of the
    steps' interval is past `limit`; fail when all of it is, even widened by `between` (on the
    scale: the run-to-run noise no step shows, added to the steps' half-width in quadrature);
    else inconclusive. The allowance only keeps noise from failing a run: an unchanged run
    whose steps agree passes (with it in the pass rule too, a change of 0 would never pass a
    limit as small as the allowance). Without a spread on either side, the fixed limit
    decides; `exact` (both sides one run: a report against itself or an edited copy) has no
    noise at all. Returns (verdict, the steps' interval, the interval in words, the
    inconclusive line)."""
    if exact:
        said = "one run on both sides: no noise"
        return ("fail" if _over(point, limit) else "pass"), (point, point), said, ""
    steps_half = est.half(confidence)
    if steps_half is None or not math.isfinite(steps_half):
        said = f"no noise estimate ({_steps_said(est)}): the fixed limit decides"
        return ("fail" if _over(point, limit) else "pass"), None, said, ""
    lo, hi = scale.to_value(est.center - steps_half), scale.to_value(est.center + steps_half)
    widened = scale.to_value(est.center - math.hypot(steps_half, between))
    said = f"{_fmt_interval(lo, hi, scale.unit)}, {_steps_said(est)}"
    if not lo <= hi or not widened <= lo:  # NaN: fail closed
        return "fail", None, said, ""
    if _over(widened, limit):
        return "fail", (lo, hi), said, ""
    if hi <= limit:
        return "pass", (lo, hi), said, ""
    margin = abs(est.center - scale.from_value(limit))
    # Below the limit more steps narrow the interval under it; above, a fail also needs the
    # change past the run-to-run allowance.
    below = est.center < scale.from_value(limit)
    room = (
        margin
        if below
        else math.sqrt(margin * margin - between * between)
        if margin > between
        else 0.0
    )
    steps = est.steps_to_decide(room, confidence)
    about = (
        f"about {steps} steps a side would decide it"
        if steps is not None and steps <= 100_000
        else "more steps would not decide it: the change sits on the limit"
        if not between or margin <= 0 or below
        else "more steps would not decide it: the change is within the run-to-run allowance "
        "(--run-noise) of the limit"
    )
    change = f"{point:+.1f}%" if scale.unit == "%" else f"{point:+.1f} {scale.unit}"
    line = f"{what} changed {change} ({said}): within run-to-run noise; {about}"
    return "inconclusive", (lo, hi), said, line


def _rel(x: float) -> float:
    """A log ratio as a change in %."""
    return math.expm1(x) * 100.0


def _log(pct: float) -> float:
    """A change in % as a log ratio (-inf at -100%)."""
    return math.log1p(pct / 100.0) if pct > -100.0 else -math.inf


# A relative change in %, its noise estimated on the log scale.
RELATIVE = Scale(_rel, _log)


def _gated(
    name: str,
    value: float,
    limit: float,
    est: Estimate,
    scale: Scale,
    what: str,
    text: Callable[[str], str],
    between: float = 0.0,
    exact: bool = False,
) -> Check:
    """The check `name` of a change `value` (`what` changed) against `limit`, decided on its
    noise `est` (`_decide`); `text` words it, given the interval in words."""
    verdict, interval, said, line = _decide(
        value, est, limit, scale, what, between=between, exact=exact
    )
    return Check(name, value, limit, verdict == "fail", text(said), verdict, interval, line)


def _ratio_estimate(
    base: list[float], new: list[float], center: float, median: bool = False
) -> Estimate:
    """A relative change's noise: the spread of the logs of each side's per-step figures."""
    return welch(log_spread(base), log_spread(new), center, MEDIAN_SE if median else 1.0)


def _totals_checks(diff: Diff, t: Thresholds) -> tuple[list[Check], list[str]]:
    """The measured and gap checks, per steady step where both sides have steps (the spread
    of their steps is the noise), else on the totals scaled by the run-length ratio against
    the fixed limits (a report without steps: no noise estimate)."""
    base, new = per_step(diff.base), per_step(diff.new)
    if base is None or new is None or base.measured_us <= 0:
        return _fixed_totals_checks(diff, t, base, new), []
    notes: list[str] = []
    recomputed = [s for s, p in (("BASE", base), ("NEW", new)) if p.recomputed]
    if recomputed:
        notes.append(
            f"{' and '.join(recomputed)} counts its warm-up steps in its op rows (saved before "
            "hlogap.audit/4): its measured and gap per step are recomputed from its steady steps"
        )
    exact = _same_run(diff)
    # Measured time per steady step: a ratio, its noise the spread of the steps' logs.
    delta = (new.measured_us / base.measured_us - 1.0) * 100.0
    measured = _gated(
        "measured",
        delta,
        t.max_regression,
        _ratio_estimate(base.measured, new.measured, _log(delta)),
        RELATIVE,
        "the measured time per step",
        lambda said: (
            f"measured per steady step {fmt_us(base.measured_us)} -> "
            f"{fmt_us(new.measured_us)}: {_pct(delta)} ({said}; limit +{t.max_regression:g}%)"
        ),
        between=_log(_noise(t)),
        exact=exact,
    )
    # The gap's growth, in % of the baseline's measured time per step: a difference.
    scale = 100.0 / base.measured_us
    gap_delta = (new.gap_us - base.gap_us) * scale
    gap = _gated(
        "gap",
        gap_delta,
        t.max_gap_regression,
        welch(Spread.of(base.gaps), Spread.of(new.gaps), gap_delta / scale),
        Scale(lambda x: x * scale, lambda v: v / scale),
        "the gap per step (in % of the baseline's measured time)",
        lambda said: (
            f"gap per steady step {fmt_us(base.gap_us)} -> {fmt_us(new.gap_us)}: "
            f"{_pct(gap_delta)} of the baseline's measured time ({said}; "
            f"limit +{t.max_gap_regression:g}%)"
        ),
        between=_noise(t) / scale,
        exact=exact,
    )
    return [measured, gap], notes


def _fixed_totals_checks(
    diff: Diff, t: Thresholds, base: PerStep | None, new: PerStep | None
) -> list[Check]:
    """The measured and gap checks on the totals (scaled by the run-length ratio) against the
    fixed limits: a side without steps has no noise estimate."""
    missing = " and ".join(s for s, p in (("BASE", base), ("NEW", new)) if p is None)
    why = f"; no steps in {missing}: no noise estimate, the fixed limits decide" if missing else ""
    r = diff.ratio
    scaled = "" if r == 1 else f" (x{r:.3g} run length)"
    return [
        Check(
            "measured",
            diff.measured_delta_pct,
            t.max_regression,
            _over(diff.measured_delta_pct or 0.0, t.max_regression),
            f"total measured {fmt_us(r * diff.base.measured_us)}{scaled} -> "
            f"{fmt_us(diff.new.measured_us)}: {_pct(diff.measured_delta_pct)} "
            f"(limit +{t.max_regression:g}%){why}",
        ),
        Check(
            "gap",
            diff.gap_delta_pct,
            t.max_gap_regression,
            _over(diff.gap_delta_pct or 0.0, t.max_gap_regression),
            f"total gap {fmt_us(r * diff.base.gap_us)}{scaled} -> {fmt_us(diff.new.gap_us)}: "
            f"{_pct(diff.gap_delta_pct)} of the baseline's measured time "
            f"(limit +{t.max_gap_regression:g}%){why}",
        ),
    ]


@dataclass(frozen=True)
class StepChange:
    """The steady median step's change: its estimate on the log scale and the medians."""

    base_us: float
    new_us: float
    est: Estimate
    devices: int

    def growth_hi_us(self, t: Thresholds) -> float:
        """Device time the step plausibly grew by at most: the interval's top (the point
        without a spread), times the devices."""
        half = math.hypot(self.est.half() or 0.0, _log(_noise(t)))
        return math.expm1(self.est.center + half) * self.base_us * max(self.devices, 1)

    def growth_lo_us(self, t: Thresholds) -> float:
        """Device time the step surely grew by: the bottom of its interval widened by the
        run-to-run noise (negative where the step may not have grown at all)."""
        half = math.hypot(self.est.half() or 0.0, _log(_noise(t)))
        return math.expm1(self.est.center - half) * self.base_us * max(self.devices, 1)


def step_change(diff: Diff) -> StepChange | None:
    """The steady median step before -> after and its noise; None unless both sides have
    steps."""
    sides = [r.steady_steps for r in (diff.base, diff.new)]
    if not all(sides):
        return None
    base, new = (statistics.median([s.wall_us for s in side]) for side in sides)
    if not base > 0 or not new > 0:
        return None
    est = _ratio_estimate(
        [s.wall_us for s in sides[0]], [s.wall_us for s in sides[1]], math.log(new / base), True
    )
    return StepChange(base, new, est, max(s.devices for s in sides[1]))


@dataclass(frozen=True)
class OpCheck:
    """One gated op's per-occurrence change, its plausible range and verdict."""

    row: DiffRow
    change: float  # % per occurrence
    verdict: Verdict
    interval: tuple[float, float] | None
    # Its time grew by more than the whole step plausibly did: the growth is waiting (an
    # async op timed to its completion marker) or overlapped work, not a cost to the step.
    waiting: bool = False
    undecided: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "module": self.row.pair.module,
            "name": self.row.name,
            "change": self.change,
            "verdict": self.verdict,
            "interval": None if self.interval is None else list(self.interval),
            "waiting": self.waiting,
        }


def _op_checks(diff: Diff, gated: list[DiffRow], t: Thresholds) -> list[OpCheck]:
    """Each gated op's verdict on its change per occurrence. Its noise: a report holds no op's
    time step by step, so an op's time is taken to vary, relatively, as much as the steps'
    measured time does (the spread of its logs); the confidence is shared among the ops
    (Bonferroni). An op whose time per step grew by more than the whole step plausibly did
    never fails: the growth cost the step nothing (waiting for an async op's completion marker,
    or work beside the critical path). Without steps on both sides: the fixed limit."""
    base, new = per_step(diff.base), per_step(diff.new)
    step = step_change(diff)
    frames = [len(_frame_steps(r)) for r in (diff.base, diff.new)]
    spreads = (log_spread(base.measured), log_spread(new.measured)) if base and new else None
    confidence = 1.0 - (1.0 - CONFIDENCE) / max(len(gated), 1)
    between = _log(_noise(t))
    exact = _same_run(diff)  # one run: its steps say nothing of what was edited
    out: list[OpCheck] = []
    for row in gated:
        change = row.measured_per_occ_delta_pct
        b_occ, n_occ = row.base_measured_per_occ_us, row.new_measured_per_occ_us
        if change is None or b_occ is None or n_occ is None or row.base is None or row.new is None:
            continue
        fixed: Verdict = "fail" if _over(change, t.max_op_regression) else "pass"
        if spreads is None or not all(frames) or not b_occ > 0:
            out.append(OpCheck(row, change, fixed, None))
            continue
        # The op's time per step on each side (occurrences per frame step x one occurrence).
        grew = n_occ * row.new.occurrences / frames[1] - b_occ * row.base.occurrences / frames[0]
        if (
            step is not None
            and not exact
            and change > t.max_op_regression
            and grew > step.growth_hi_us(t)
        ):
            out.append(OpCheck(row, change, "pass", None, waiting=True))
            continue
        verdict, interval, _, line = _decide(
            change,
            welch(*spreads, _log(change)),
            t.max_op_regression,
            RELATIVE,
            f"{row.name} (per occurrence)",
            confidence=confidence,
            between=between,
            exact=exact,
        )
        # A fail also needs the step to show it: the step surely grew by at least the op's
        # allowed growth (its time per step times the limit). On a shared CPU an op's time
        # moves 2-10x between processes (a loop fusion waiting on a busy core in one run, not
        # in the next) while the step does not: that is the run, not the program.
        allowed = b_occ * row.base.occurrences / frames[0] * t.max_op_regression / 100.0
        if verdict == "fail" and step is not None and not exact and interval is not None:
            surely = step.growth_lo_us(t)
            if not surely > allowed:
                verdict = "inconclusive"
                line = (
                    f"{row.name} (per occurrence) changed {change:+.1f}% "
                    f"({_fmt_interval(*interval)}, {_steps_said(step.est)}): within run-to-run "
                    "noise; more steps would not decide it: the step did not surely grow with "
                    f"it (by {fmt_us(max(surely, 0.0))} a step at least, {fmt_us(allowed)} "
                    "needed: the op's time may be waiting or another run's scheduling)"
                )
        out.append(OpCheck(row, change, verdict, interval, undecided=line))
    return out


def _same_run(diff: Diff) -> bool:
    """Both sides hold one run's steps (a report checked against itself, or an edited copy):
    nothing moved between them but what was edited."""
    a, b = diff.base.steady_steps, diff.new.steady_steps
    return (
        bool(a)
        and len(a) == len(b)
        and all(
            x.start_us == y.start_us and x.wall_us == y.wall_us for x, y in zip(a, b, strict=True)
        )
    )


def _noise(t: Thresholds) -> float:
    """The run-to-run noise in force (run_check resolves it first)."""
    return t.run_noise or 0.0


def run_noise(diff: Diff, t: Thresholds) -> float:
    """The run-to-run noise (%) the intervals allow for: `--run-noise`, else by where the runs
    ran (the larger of the two sides': an unknown backend counts as a CPU)."""
    if t.run_noise is not None:
        return t.run_noise
    return max(RUN_NOISE.get(r.backend, RUN_NOISE["cpu"]) for r in (diff.base, diff.new))


def _work_check(diff: Diff, t: Thresholds) -> list[Check]:
    """The work per steady step: the ops' roofline bound (what the program asks of the chip,
    from its HLO and the chip's peaks). Runs of one program ask the same: it has no noise, and
    its interval is the change itself. Only where both sides have steps and a bound."""
    base, new = per_step(diff.base), per_step(diff.new)
    if base is None or new is None:
        return []
    b_bound, n_bound = base.measured_us - base.gap_us, new.measured_us - new.gap_us
    if not b_bound > 0:
        return []
    change = (n_bound / b_bound - 1.0) * 100.0
    failed = _over(change, t.max_regression)
    return [
        Check(
            "work",
            change,
            t.max_regression,
            failed,
            f"work (roofline bound) per steady step {fmt_us(b_bound)} -> {fmt_us(n_bound)}: "
            f"{_pct(change)} (exact: no noise; limit +{t.max_regression:g}%)",
            "fail" if failed else "pass",
            (change, change),
        )
    ]


def run_check(diff: Diff, t: Thresholds) -> CheckResult:
    """Apply the thresholds to a BASE (the baseline) -> NEW diff."""
    _refuse_degenerate(diff)
    t = replace(t, run_noise=run_noise(diff, t))
    checks, notes = _totals_checks(diff, t)
    checks += _work_check(diff, t)
    matched = [row for row in diff.rows if row.base is not None and row.new is not None]
    gated = [row for row in matched if not is_tiny(row, diff, t.min_op_share)]
    op_checks = _op_checks(diff, gated, t)
    failing = [o.row for o in op_checks if o.verdict == "fail"]
    failing.sort(key=lambda row: -row.measured_delta_us)
    undecided = [o for o in op_checks if o.verdict == "inconclusive"]
    waiting = [o for o in op_checks if o.waiting]
    worst = max(
        (o for o in op_checks if o.interval is not None),
        key=lambda o: o.interval[0] if o.interval else 0.0,
        default=None,
    )
    ops_verdict: Verdict = "fail" if failing else "inconclusive" if undecided else "pass"
    checks.append(
        Check(
            "ops",
            float(len(failing)),
            t.max_op_regression,
            bool(failing),
            f"ops: {len(failing)} of {len(gated)} compared ops slower than "
            f"+{t.max_op_regression:g}% per occurrence"
            + (f", {len(undecided)} within the noise" if undecided else "")
            + (f", {len(waiting)} waiting" if waiting else "")
            + f" ({len(matched) - len(gated)} tiny ops under {t.min_op_share:g}% of the time "
            f"or {MIN_OP_US:g} us not gated)",
            ops_verdict,
            worst.interval if worst is not None else None,
            undecided[0].undecided if undecided else "",
        )
    )
    if waiting:
        names = ", ".join(f"{o.row.name} ({o.change:+.0f}%)" for o in waiting[:4])
        more = f" and {len(waiting) - 4} more" if len(waiting) > 4 else ""
        notes.append(
            f"not gated as waits: {names}{more}: each grew by more than the whole step did "
            "(its time is waiting, an async op timed to its completion marker, or overlapped "
            "work: no cost to the step)"
        )
    if t.min_efficiency is not None:
        eff = diff.new.efficiency
        checks.append(
            Check(
                "efficiency",
                eff,
                t.min_efficiency,
                eff is None or not eff >= t.min_efficiency,
                "efficiency "
                + ("unknown" if eff is None else f"{eff:.3f}")
                + f" (bound / measured; min {t.min_efficiency:g})",
            )
        )
    if t.min_hfu is not None:
        hfu = diff.new.hfu
        checks.append(
            Check(
                "hfu",
                hfu,
                t.min_hfu,
                hfu is None or not hfu >= t.min_hfu,
                "HFU "
                + ("unknown (no steps or no FLOPs)" if hfu is None else f"{hfu:.3f}")
                + f" (the steady steps' FLOP/s over the chip's peak; min {t.min_hfu:g})",
            )
        )
    checks += _step_checks(diff, t)
    checks += _memory_checks(diff, t)
    appeared = [
        row for row in diff.rows if row.base is None and not is_tiny(row, diff, t.min_op_share)
    ]
    vanished = [
        row for row in diff.rows if row.new is None and not is_tiny(row, diff, t.min_op_share)
    ]
    return CheckResult(diff, t, checks, gated, failing, appeared, vanished, op_checks, notes)


def _idle_share(report: AuditReport) -> float | None:
    """Percent of the devices' own step time spent idle over the steady steps (the summary's
    frame: warm-up left out; skew between devices is not idle)."""
    fraction = report.step_summary.idle_fraction
    return fraction * 100 if fraction is not None else None


def _idle_shares(report: AuditReport) -> list[float]:
    """Each steady step's idle share of its devices' own time, in %."""
    return [
        s.idle_us / s.device_wall_us * 100.0 for s in report.steady_steps if s.device_wall_us > 0
    ]


def _warmup(diff: Diff) -> str:
    """Which warm-up steps the step figures leave out, per side ('' where none)."""
    left = [
        f"{count} in {side}"
        for side, r in (("BASE", diff.base), ("NEW", diff.new))
        for count in [r.step_summary.warmup_steps]
        if count
    ]
    return f"; warm-up steps left out: {', '.join(left)}" if left else ""


def _step_checks(diff: Diff, t: Thresholds) -> list[Check]:
    """The step checks asked for, over each side's steady steps (the summary's frame); each
    fails when a side has no steps to compare."""
    missing = [side for side, r in (("BASE", diff.base), ("NEW", diff.new)) if not r.steps]
    why = f"no steps in {' and '.join(missing)}" if missing else ""
    checks: list[Check] = []
    if t.max_step_regression is not None:
        checks.append(_step_check(diff, t, t.max_step_regression, why))
    if t.max_idle_regression is not None:
        checks.append(_idle_check(diff, t, t.max_idle_regression, why))
    return checks


def _step_check(diff: Diff, t: Thresholds, limit: float, why: str) -> Check:
    """The steady median step's change (`why`: a side has no steps)."""
    step = None if why else step_change(diff)
    if step is None:
        return Check("step", None, limit, True, f"step time: {why or 'none'}")
    delta = (step.new_us / step.base_us - 1.0) * 100.0
    return _gated(
        "step",
        delta,
        limit,
        step.est,
        RELATIVE,
        "the step",
        lambda said: (
            f"median step {fmt_us(step.base_us)} -> {fmt_us(step.new_us)}: "
            f"{_pct(delta)} ({said}; limit +{limit:g}%){_warmup(diff)}"
        ),
        between=_log(_noise(t)),
        exact=_same_run(diff),
    )


def _idle_check(diff: Diff, t: Thresholds, limit: float, why: str) -> Check:
    """The change of the devices' idle share of their steps, in points (`why`: a side has no
    steps)."""
    # A version-2 report counted the skew between devices as idle (version 3 does not): its
    # idle is not the same figure, and no verdict can compare the two.
    older = [
        side
        for side, r in (("BASE", diff.base), ("NEW", diff.new))
        if r.steps and not all(s.device_rows for s in r.steps)
    ]
    base_idle, new_idle = _idle_share(diff.base), _idle_share(diff.new)
    if why or older or base_idle is None or new_idle is None:
        reason = why or (
            f"{' and '.join(older)} saved before hlogap.audit/3 (its idle counts the skew "
            "between devices): save it again with this hlogap"
            if older
            else "no step time"
        )
        return Check("idle", None, limit, True, f"idle: {reason}")
    change = new_idle - base_idle
    return _gated(
        "idle",
        change,
        limit,
        welch(Spread.of(_idle_shares(diff.base)), Spread.of(_idle_shares(diff.new)), change),
        Scale(lambda x: x, lambda v: v, "pt"),
        "the devices' idle share",
        lambda said: (
            f"devices idle {base_idle:.1f}% -> {new_idle:.1f}% of step time: "
            f"{change:+.1f} pt ({said}; limit +{limit:g} pt){_warmup(diff)}"
        ),
        exact=_same_run(diff),
    )
