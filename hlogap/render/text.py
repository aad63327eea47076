"""Number formatting and the report header shared by the human-readable renderers."""

from __future__ import annotations

from hlogap.report.model import AuditReport
from hlogap.units import fmt_eff, fmt_si, fmt_us


def header_lines(report: AuditReport) -> list[str]:
    chip = report.chip
    bf16 = chip.peak_flops.get("bf16") or max(chip.peak_flops.values())
    speedup = report.speedup
    modeled = report.modeled_fraction
    return [
        f"profile: {report.path}"
        + (f" (run {report.run})" if report.run else "")
        + f", {report.backend.upper()}, hosts: {', '.join(report.hosts)}",
        f"chip: {chip.display} [{chip.name}], {report.chip_reason}; "
        f"peak {fmt_si(bf16, 'FLOP/s')}, HBM {fmt_si(chip.hbm_bw, 'B/s')}",
        f"devices: {report.devices}, ops: {len(report.ops)}, events: {report.events}",
        f"measured {fmt_us(report.measured_us)}, bound {fmt_us(report.bound_us)}, "
        f"gap {fmt_us(report.gap_us)}, efficiency {fmt_eff(report.efficiency)}, "
        f"modeled {fmt_eff(modeled)} of time"
        + (f", possible speedup {speedup:.2f}x" if speedup else ""),
    ]
