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
from dataclasses import dataclass, field, fields
from pathlib import Path

from hlogap._version import __version__
from hlogap.errors import InputError, UsageError
from hlogap.report.compare import Diff, DiffRow
from hlogap.report.model import AuditReport, steps_summary, warmup_of
from hlogap.source import read_toml
from hlogap.trace.model import CORRUPT_TRACE, MAX_TOTAL_PS
from hlogap.units import fmt_si, fmt_us

CHECK_SCHEMA = "hlogap.check/1"
MIN_OP_US = 1.0  # ops faster than this per occurrence (on both sides) are launch noise


@dataclass(frozen=True)
class Thresholds:
    max_regression: float = 5.0  # % of BASE's total measured time per step
    max_gap_regression: float = 5.0  # gap growth, % of BASE's total measured time per step
    max_op_regression: float = 20.0  # % of the op's BASE time per occurrence
    min_efficiency: float | None = None  # fraction, 0..1
    min_op_share: float = 1.0  # % of the total measured time below which an op is not gated
    max_step_regression: float | None = None  # % of BASE's median step time
    max_idle_regression: float | None = None  # percentage points of the idle share of step time
    # `--max-peak-hbm`: NEW's static memory peak (its largest module) at most this many bytes,
    # or growing at most this % over BASE's.
    max_peak_bytes: float | None = None
    max_peak_regression: float | None = None
    config: str | None = field(default=None, compare=False)  # the file that set some values

    def to_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def describe(self) -> str:
        """Every threshold in force, as the options that set it (`max-regression 5%, ...`)."""
        text = (
            f"max-regression {self.max_regression:g}%, "
            f"max-gap-regression {self.max_gap_regression:g}%, "
            f"max-op-regression {self.max_op_regression:g}%, min-op-share {self.min_op_share:g}%"
        )
        if self.min_efficiency is not None:
            text += f", min-efficiency {self.min_efficiency:g}"
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
    if key == "min_efficiency" and number > 1:
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


@dataclass(frozen=True)
class Check:
    name: str  # "measured", "gap", "ops", "efficiency"
    value: float | None  # % for measured/gap, ops over the limit for ops, a fraction for efficiency
    limit: float
    failed: bool
    text: str  # the check in words, one line

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "value": self.value,
            "limit": self.limit,
            "failed": self.failed,
            "text": self.text,
        }


@dataclass
class CheckResult:
    diff: Diff
    thresholds: Thresholds
    checks: list[Check]
    gated: list[DiffRow]  # matched ops the per-op check looked at
    regressed: list[DiffRow]  # gated ops over the per-op limit, largest total delta first
    appeared: list[DiffRow]  # new ops that would not be tiny (they count in the totals only)
    vanished: list[DiffRow] = field(default_factory=list)  # baseline ops gone, not tiny

    @property
    def passed(self) -> bool:
        return not any(c.failed for c in self.checks)

    def verdict(self) -> str:
        """The first line of every output format: PASS or FAIL and the checks that failed."""
        failed = [c for c in self.checks if c.failed]
        if not failed:
            return "hlogap check: PASS: " + "; ".join(_short(c) for c in self.checks)
        return "hlogap check: FAIL: " + "; ".join(_short(c) for c in failed)

    def to_dict(self) -> dict[str, object]:
        return {
            "schema": CHECK_SCHEMA,
            "version": __version__,
            "verdict": "pass" if self.passed else "fail",
            "line": self.verdict(),
            "thresholds": self.thresholds.to_dict(),
            "checks": [c.to_dict() for c in self.checks],
            "regressed_ops": [r.to_dict() for r in self.regressed],
            "appeared_ops": [r.to_dict() for r in self.appeared],
            "vanished_ops": [r.to_dict() for r in self.vanished],
            "gated_ops": len(self.gated),
            "diff": self.diff.to_dict(0),
        }


def _short(check: Check) -> str:
    if check.name == "ops":
        return f"{check.value:.0f} op{'' if check.value == 1 else 's'} over +{check.limit:g}%"
    if check.name == "step":
        value = "unknown" if check.value is None else _pct(check.value)
        return f"step {value} (limit +{check.limit:g}%)"
    if check.name == "idle":
        value = "unknown" if check.value is None else f"{check.value:+.1f} pt"
        return f"idle {value} (limit +{check.limit:g} pt)"
    if check.name == "peak":
        value = "unknown" if check.value is None else _bytes(check.value)
        return f"peak {value} (max {_bytes(check.limit)})"
    if check.name == "peak-growth":
        return f"peak {_pct(check.value, check.limit)} (limit +{check.limit:g}%)"
    if check.name == "efficiency":
        value = "unknown" if check.value is None else f"{check.value:.2f}"
        return f"efficiency {value} (min {check.limit:g})"
    label = "measured" if check.name == "measured" else "gap"
    return f"{label} {_pct(check.value)} (limit +{check.limit:g}%)"


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


def run_check(diff: Diff, t: Thresholds) -> CheckResult:
    """Apply the thresholds to a BASE (the baseline) -> NEW diff."""
    _refuse_degenerate(diff)
    r = diff.ratio
    scaled = "" if r == 1 else f" (x{r:.3g} run length)"
    checks = [
        Check(
            "measured",
            diff.measured_delta_pct,
            t.max_regression,
            _over(diff.measured_delta_pct or 0.0, t.max_regression),
            f"total measured {fmt_us(r * diff.base.measured_us)}{scaled} -> "
            f"{fmt_us(diff.new.measured_us)}: {_pct(diff.measured_delta_pct)} "
            f"(limit +{t.max_regression:g}%)",
        ),
        Check(
            "gap",
            diff.gap_delta_pct,
            t.max_gap_regression,
            _over(diff.gap_delta_pct or 0.0, t.max_gap_regression),
            f"total gap {fmt_us(r * diff.base.gap_us)}{scaled} -> {fmt_us(diff.new.gap_us)}: "
            f"{_pct(diff.gap_delta_pct)} of the baseline's measured time "
            f"(limit +{t.max_gap_regression:g}%)",
        ),
    ]
    matched = [row for row in diff.rows if row.base is not None and row.new is not None]
    gated = [row for row in matched if not is_tiny(row, diff, t.min_op_share)]
    regressed = [
        row for row in gated if _over(row.measured_per_occ_delta_pct or 0.0, t.max_op_regression)
    ]
    regressed.sort(key=lambda row: -row.measured_delta_us)
    checks.append(
        Check(
            "ops",
            float(len(regressed)),
            t.max_op_regression,
            bool(regressed),
            f"ops: {len(regressed)} of {len(gated)} compared ops slower than "
            f"+{t.max_op_regression:g}% per occurrence ({len(matched) - len(gated)} tiny ops "
            f"under {t.min_op_share:g}% of the time or {MIN_OP_US:g} us not gated)",
        )
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
    checks += _step_checks(diff, t)
    checks += _memory_checks(diff, t)
    appeared = [
        row for row in diff.rows if row.base is None and not is_tiny(row, diff, t.min_op_share)
    ]
    vanished = [
        row for row in diff.rows if row.new is None and not is_tiny(row, diff, t.min_op_share)
    ]
    return CheckResult(diff, t, checks, gated, regressed, appeared, vanished)


def _float(value: object) -> float:
    assert isinstance(value, float), value  # a report with steps has a median step
    return value


def _idle_share(report: AuditReport) -> float | None:
    """Percent of the devices' own step time spent idle over the steady steps (the summary's
    frame: warm-up left out; skew between devices is not idle)."""
    fraction = steps_summary(report.steps)["idle_fraction"]
    return fraction * 100 if isinstance(fraction, float) else None


def _warmup(diff: Diff) -> str:
    """Which warm-up steps the step figures leave out, per side ('' where none)."""
    left = [
        f"{count} in {side}"
        for side, r in (("BASE", diff.base), ("NEW", diff.new))
        for count in [warmup_of(r.steps)]
        if count
    ]
    return f"; warm-up steps left out: {', '.join(left)}" if left else ""


def _step_checks(diff: Diff, t: Thresholds) -> list[Check]:
    """The step checks asked for, over each side's steady steps (the summary's frame); each
    fails when a side has no steps to compare."""
    checks: list[Check] = []
    missing = [side for side, r in (("BASE", diff.base), ("NEW", diff.new)) if not r.steps]
    why = f"no steps in {' and '.join(missing)}" if missing else ""
    if t.max_step_regression is not None:
        if missing:
            checks.append(Check("step", None, t.max_step_regression, True, f"step time: {why}"))
        else:
            # The summary's median step: its steady steps'.
            base, new = (_float(steps_summary(r.steps)["step_us"]) for r in (diff.base, diff.new))
            delta = (new - base) / base * 100 if base > 0 else None
            checks.append(
                Check(
                    "step",
                    delta,
                    t.max_step_regression,
                    delta is None or _over(delta, t.max_step_regression),
                    f"median step {fmt_us(base)} -> {fmt_us(new)}: {_pct(delta)} "
                    f"(limit +{t.max_step_regression:g}%){_warmup(diff)}",
                )
            )
    if t.max_idle_regression is not None:
        # A version-2 report counted the skew between devices as idle (version 3 does not):
        # its idle is not the same figure, and no verdict can compare the two.
        older = [
            side
            for side, r in (("BASE", diff.base), ("NEW", diff.new))
            if r.steps and not all(s.device_rows for s in r.steps)
        ]
        base_idle, new_idle = _idle_share(diff.base), _idle_share(diff.new)
        if missing or older or base_idle is None or new_idle is None:
            reason = why or (
                f"{' and '.join(older)} saved before hlogap.audit/3 (its idle counts the skew "
                "between devices): save it again with this hlogap"
                if older
                else "no step time"
            )
            checks.append(Check("idle", None, t.max_idle_regression, True, f"idle: {reason}"))
        else:
            change = new_idle - base_idle
            checks.append(
                Check(
                    "idle",
                    change,
                    t.max_idle_regression,
                    _over(change, t.max_idle_regression),
                    f"devices idle {base_idle:.1f}% -> {new_idle:.1f}% of step time: "
                    f"{change:+.1f} pt (limit +{t.max_idle_regression:g} pt){_warmup(diff)}",
                )
            )
    return checks
