"""`hlogap demo`: audit a CPU profile bundled with hlogap, and say how to read the result."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import hlogap
from hlogap.cli.args import (
    DEMO_SAMPLES,
    AuditTopOpt,
    ChipOpt,
    FormatOpt,
    OutputOpt,
    SampleOpt,
    WideOpt,
)
from hlogap.cli.commands.calibrate import warn_if_noisy
from hlogap.cli.output import (
    OutputChoice,
    check_target,
    fit_lines,
    refuse_overwriting_inputs,
    write_document,
    write_stdout,
)
from hlogap.cli.process import collect_from_here
from hlogap.errors import HlogapError, UsageError

if TYPE_CHECKING:
    from hlogap.report.model import AuditReport


def demo(
    top: AuditTopOpt = 20,
    fmt: FormatOpt = None,
    chip: ChipOpt = None,
    wide: WideOpt = False,
    output: OutputOpt = None,
    sample: SampleOpt = "flaws",
) -> None:
    """Audit a CPU profile bundled with hlogap (calibrates this CPU if needed), and say how to
    read the result.

    \b
    Examples:
      hlogap demo --top 5
      hlogap demo --sample mlp -o demo.html
    """
    import tempfile

    from hlogap.options import AuditOptions
    from hlogap.pipeline import audit as run_audit
    from hlogap.render.base import choose_format, needs_timeline

    chosen = choose_format("audit", fmt, output)
    if sample not in DEMO_SAMPLES:
        raise UsageError(f"unknown sample '{sample}' (use one of: {', '.join(DEMO_SAMPLES)})")
    target = check_target(output)
    logdir = Path(hlogap.__file__).parent / "data" / DEMO_SAMPLES[sample]
    with tempfile.TemporaryDirectory(prefix="hlogap-demo-") as scratch:
        chosen_chip = chip if chip is not None else _calibrated(Path(scratch))
        options = AuditOptions(chip=chosen_chip, timeline=needs_timeline(chosen))
        collect_from_here()
        report = run_audit(logdir, options)
    refuse_overwriting_inputs([target], report, chip)
    write_document(report, "audit", OutputChoice(fmt, output, top, wide=wide))
    if chosen == "table" and target is None:
        write_stdout("".join(f"{line}\n" for line in fit_lines(_lessons(report), wide)))


def _calibrated(scratch: Path) -> str | None:
    """The chip of a demo without `--chip`: None where this CPU is calibrated (the audit reads
    the calibration), else calibrate it now and keep the chip file in hlogap's cache (or, where
    the cache cannot be written, in `scratch` for this run only: its path)."""
    from hlogap.chips.calibrate import calibrated_chip, chip_text, measure
    from hlogap.chips.database import calibrated_path
    from hlogap.files import write_text

    if calibrated_chip() is not None:
        return None
    print("hlogap: calibrating this CPU once (dots and copies)...", file=sys.stderr)
    result = measure()
    warn_if_noisy(result)
    try:
        write_text(calibrated_path(), chip_text(result), make_parents=True)
    except HlogapError as exc:  # no writable cache (a read-only HOME): use it once
        print(f"hlogap: warning: {exc}; this calibration is not kept", file=sys.stderr)
        once = scratch / "cpu.toml"
        write_text(once, chip_text(result))
        return str(once)
    return None


def _lessons(report: AuditReport) -> list[str]:
    """What the demo ends with: how to read the table, the top action, the next command."""
    from hlogap.units import fmt_us

    lessons = [
        "",
        "how to read it: one row per op, the most time lost first; n = its occurrences "
        "(3x200: 200 runs in each, a loop body); gap = measured - bound, the bound being the "
        "roofline's lower limit on the op's time; eff = bound / measured (- where unmodeled: "
        "no bound); why = what bounds it",
    ]
    if report.actions:
        top = report.actions[0]
        lessons.append(
            f"top action: {top.change} (saves {fmt_us(top.saving_us)}, {top.frame}: {top.cause})"
        )
    lessons.append(
        "next: hlogap audit YOUR_LOGDIR --steps (or -o report.html for a page, "
        "-o trace.json.gz for Perfetto's timeline)"
    )
    return lessons
