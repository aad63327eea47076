"""What `hlogap check` does once its arguments are read: its options (`CheckOptions`), the
verdict, GitHub's step summary and the new baseline. Imported by the command as it runs, so
that other commands (an audit) never create these records."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from hlogap.cli.comparison import Selection, load_both
from hlogap.cli.output import OutputChoice, escaped, write_document, wrote
from hlogap.errors import EXIT_INPUT, HlogapError

if TYPE_CHECKING:
    from hlogap.report.gate import CheckResult, Thresholds
    from hlogap.report.gate.history import HistoryEntry
    from hlogap.report.model import AuditReport


@dataclass(frozen=True, kw_only=True)
class CheckOptions:
    """What `hlogap check` is asked beside the profile: the baseline, each threshold flag as
    given (None: hlogap.toml's, else the default; `report.gate.resolve_thresholds`), and the
    baseline to write after the verdict. A threshold flag is named as its `Thresholds` key."""

    baseline: str
    selection: Selection
    max_regression: float | None = None
    max_gap_regression: float | None = None
    max_op_regression: float | None = None
    min_efficiency: float | None = None
    min_op_share: float | None = None
    max_step_regression: float | None = None
    max_idle_regression: float | None = None
    run_noise: float | None = None
    min_hfu: float | None = None
    max_peak_hbm: str | None = None  # BYTES or PCT%: max_peak_bytes or max_peak_regression
    update_baseline: str | None = None  # where to write PATH's report as the new baseline
    reason: str | None = None  # why, in the new baseline's history

    def thresholds(self) -> Thresholds:
        """The thresholds: each flag given, else hlogap.toml's (here or above), else the default."""
        from hlogap.report.gate import KEYS, parse_peak_limit, resolve_thresholds

        peak = self.max_peak_hbm
        peak_bytes, peak_growth = parse_peak_limit(peak) if peak is not None else (None, None)
        flags: dict[str, float | None] = {
            f.name: getattr(self, f.name) for f in fields(self) if f.name in KEYS
        }
        flags.update(max_peak_bytes=peak_bytes, max_peak_regression=peak_growth)
        return resolve_thresholds(flags, Path.cwd())


def gate(path: str, options: CheckOptions, choice: OutputChoice) -> None:
    """Check `path` against the baseline, write the verdict (and GitHub's step summary), write
    the new baseline if asked, and exit with the verdict's code."""
    from hlogap.errors import EXIT_REGRESSION
    from hlogap.report.gate import EXIT_INCONCLUSIVE
    from hlogap.report.gate.history import check_reason

    check_reason(options.update_baseline, options.reason)
    new_baseline = None if options.update_baseline is None else Path(options.update_baseline)
    if new_baseline is not None:
        from hlogap.files import check_output
        from hlogap.source import refuse_to_overwrite

        check_output(new_baseline)
        refuse_to_overwrite(new_baseline, [options.baseline, path])  # before a minute of reading
    checked = _verdict(path, options, options.thresholds(), new_baseline)
    result = checked.result
    write_document(result, "check", choice)
    _step_summary(result, checked.read)
    if new_baseline is not None:
        _write_baseline(new_baseline, checked, options)
    if result.outcome == "inconclusive":
        print(escaped(result.undecided_line()), file=sys.stderr)
        raise typer.Exit(EXIT_INCONCLUSIVE)
    if result.outcome == "fail":
        raise typer.Exit(EXIT_REGRESSION)


@dataclass(frozen=True)
class _Checked:
    """A `check`'s verdict with what it was made from."""

    result: CheckResult
    new: AuditReport  # PATH's report: the new baseline with --update-baseline
    history: list[HistoryEntry]  # the baseline's accepted changes
    read: list[str]  # every file either side was read from


def _verdict(
    path: str, options: CheckOptions, thresholds: Thresholds, new_baseline: Path | None
) -> _Checked:
    """The check of `path` against the baseline. An input error (no verdict) goes to GitHub's
    step summary too, then up."""
    import contextlib

    from hlogap.report.compare import compare
    from hlogap.report.gate import run_check
    from hlogap.report.gate.history import last_accepted, read_history
    from hlogap.source import refuse_to_overwrite

    sides = ((options.baseline, "baseline"), (path, "profile"))
    try:
        base, new = load_both(*sides, options.selection)
        read = [*base.files, *new.files, options.baseline, path]
        if new_baseline is not None:
            refuse_to_overwrite(new_baseline, read)
        history = read_history(base)
        result = run_check(compare(base, new), thresholds)
    except HlogapError as exc:
        if exc.exit_code == EXIT_INPUT:  # CI's summary says why there is no verdict too
            with contextlib.suppress(HlogapError):  # the input error is what to say
                _step_summary(f"error: {exc}", [options.baseline, path])
        raise
    if history:
        result.notes.append(last_accepted(history))
    return _Checked(result, new, history, read)


def _write_baseline(target: Path, checked: _Checked, options: CheckOptions) -> None:
    """`--update-baseline`: PATH's report, its history the old baseline's plus this change."""
    from hlogap.files import write_bytes
    from hlogap.render.json import baseline_bytes
    from hlogap.report.gate.history import entry

    assert options.reason is not None  # check_reason
    record = entry(options.reason, checked.result.outcome, checked.result.change)
    write_bytes(target, baseline_bytes(checked.new, [*checked.history, record]))
    wrote(target)


def _step_summary(verdict: CheckResult | str, read: list[str]) -> None:
    """`check`'s verdict (or the one-line reason there is none) appended to GitHub Actions' step
    summary when GITHUB_STEP_SUMMARY is set; never onto a file the check read."""
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if not step_summary:
        return
    from hlogap.files import check_output
    from hlogap.render.md import append_step_summary
    from hlogap.source import refuse_to_overwrite

    check_output(Path(step_summary))
    refuse_to_overwrite(Path(step_summary), read)
    append_step_summary(verdict, Path(step_summary))
