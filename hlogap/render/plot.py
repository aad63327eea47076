"""`audit --plot FILE`: a roofline chart of the audited ops (needs the `plot` extra, matplotlib).

Each modeled op is a point at (arithmetic intensity, achieved FLOP/s) under the chip's roofs
(HBM bandwidth x intensity, and each dtype's peak), its area proportional to the time it loses.
`.svg` and `.png` are written by matplotlib; `.html` wraps the SVG in a page.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hlogap.errors import HlogapError, UsageError
from hlogap.files import check_output
from hlogap.units import fmt_si

if TYPE_CHECKING:
    from hlogap.report.model import AuditReport, OpRow
    from hlogap.report.schema import Chip

PLOT_SUFFIXES = (".svg", ".png", ".html")


# Ops named on the chart, at most (the ones that lose the most time).
LABELLED = 8


def check_plot_target(target: Path) -> None:
    """Before any work: a chart file of a kind we draw, at a place we may write."""
    if target.suffix.lower() not in PLOT_SUFFIXES:
        raise UsageError(f"--plot takes a .svg, .png or .html file, not {target.name}")
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:  # before the audit, not after it
        also = (
            "; the HTML report (-o report.html) draws the same chart without it"
            if target.suffix.lower() == ".html"
            else ""
        )
        raise UsageError(f"--plot needs matplotlib: pip install 'hlogap[plot]'{also}")
    check_output(target)


def draw_plot(report: AuditReport, target: Path) -> bytes:
    """The chart's bytes, for `target`'s kind: drawn before any output is written, so that a
    chart that cannot be drawn fails the audit (one line, exit 3) with nothing written."""
    check_plot_target(target)
    suffix = target.suffix.lower()
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise UsageError("--plot needs matplotlib: pip install 'hlogap[plot]'") from exc

    chip = report.chip
    if chip is None:
        raise UsageError(f"--plot needs the chip's peaks, and the report {report.path} names none")
    # An op with no measured time has no achieved rate to place.
    rows = [
        r
        for r in report.ops
        if r.bound_by != "unmodeled" and r.flops > 0 and r.bytes > 0 and r.measured_us > 0
    ]
    try:
        return _drawn(plt, report, chip, rows, suffix)
    except (ArithmeticError, ValueError, RuntimeError) as exc:  # matplotlib's, on odd numbers
        raise HlogapError(f"cannot draw the roofline chart {target.name}: {exc}") from exc


def _drawn(plt: Any, report: AuditReport, chip: Chip, rows: list[OpRow], suffix: str) -> bytes:
    """Names are text, never markup: matplotlib's math text (`$...$`) is off for each label."""
    fig, ax = plt.subplots(figsize=(9, 6))
    intensities = [r.flops / r.bytes for r in rows]
    lo = min([*intensities, 0.1]) / 2
    hi = max([*intensities, max(chip.peak_flops.values()) / chip.hbm_bw]) * 4
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    # One roof per distinct peak: dtypes that share a peak share a line (no duplicate lines).
    by_peak: dict[float, list[str]] = {}
    for dtype, peak in chip.peak_flops.items():
        by_peak.setdefault(peak, []).append(dtype)
    for peak, dtypes in sorted(by_peak.items(), key=lambda kv: -kv[0]):
        ridge = peak / chip.hbm_bw
        label = f"{'/'.join(dtypes)} {fmt_si(peak, 'FLOP/s')}, ridge {ridge:.0f}"
        ax.plot(xs, [min(peak, x * chip.hbm_bw) for x in xs], lw=1.2, label=label)
    if rows:
        achieved = [r.flops * r.occurrences / (r.measured_us * 1e-6) for r in rows]
        worst = max(max(r.gap_us for r in rows), 1e-9)
        sizes = [20 + 400 * max(r.gap_us, 0.0) / worst for r in rows]
        ax.scatter(intensities, achieved, s=sizes, alpha=0.5, c="tab:red", edgecolors="k")
        # Names of the ops that lose most, skipping any that would sit on a name already drawn.
        placed: list[tuple[float, float]] = []
        ranked = sorted(zip(rows, intensities, achieved), key=lambda t: -t[0].gap_us)
        for r, x, y in ranked[:LABELLED]:
            at = (math.log10(x), math.log10(max(y, 1e-30)))
            if any(abs(at[0] - p[0]) < 0.35 and abs(at[1] - p[1]) < 0.25 for p in placed):
                continue
            placed.append(at)
            ax.annotate(
                r.name,
                (x, y),
                fontsize=7,
                xytext=(5, 4),
                textcoords="offset points",
                parse_math=False,
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / HBM byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(f"{chip.display}: ops by time lost (area)", parse_math=False)
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(fontsize=8, loc="lower right")
    try:
        image = io.BytesIO()
        fig.savefig(image, format=suffix[1:].replace("html", "svg"), bbox_inches="tight", dpi=120)
    finally:
        plt.close(fig)
    data = image.getvalue()
    if suffix == ".html":
        head = b"<!doctype html><meta charset=utf-8><title>hlogap roofline</title>\n"
        data = head + data
    return data
