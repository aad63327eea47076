"""A library or custom kernel well under the roof of the resource that bounds it: the data
are not the limit, the kernel is. The change is in the kernel or its configuration, not in the
batch."""

from __future__ import annotations

from collections.abc import Iterator

from hlogap.advice.base import Context, Finding, capped, register
from hlogap.report.model import OpRow
from hlogap.units import fmt_si

SLOW = 0.5  # efficiency under which a kernel is named
_ATTENTION = ("attn", "attention", "flash", "mha")


def slow_kernels(ctx: Context) -> Iterator[Finding]:
    """One finding per kernel (custom-call target), over every op that calls it."""
    by_target: dict[str, list[OpRow]] = {}
    for row in ctx.rows:
        if row.opcode != "custom-call" or row.bound_by != "compute" or row.efficiency is None:
            continue
        inst, _ = ctx.instruction(row)
        target = (inst.custom_call_target or "") if inst is not None else ""
        if target and row.efficiency < SLOW:
            by_target.setdefault(target, []).append(row)
    for target, rows in by_target.items():
        measured = sum(r.measured_us for r in rows)
        achieved = sum(r.flops * r.occurrences for r in rows) / (measured / 1e6)
        efficiency = sum(r.bound_us for r in rows) / measured
        dtype = rows[0].dtype or "bf16"
        runs = sum(r.occurrences * r.runs_per_occurrence for r in rows)
        if any(k in target.lower() for k in _ATTENTION):
            change = (
                "try another attention implementation or configuration (e.g. Transformer "
                "Engine's NVTE_FUSED_ATTN_BACKEND, cuDNN vs. CK/flash kernels), and check that "
                "its head size and sequence tiling suit the chip and that masking skips work"
            )
        else:
            change = (
                "profile the kernel itself (tile sizes, occupancy) or try another implementation"
            )
        yield Finding(
            "slow kernel",
            tuple(rows),
            sum(capped(r, r.gap_us) for r in rows),
            f"{len(rows)} {'op' if len(rows) == 1 else 'ops'} calling {target} ({runs:,} "
            f"{'run' if runs == 1 else 'runs'}): compute-bound at {efficiency:.0%} of their roof, "
            f"{fmt_si(achieved, 'FLOP/s')} against {ctx.chip.name}'s "
            f"{fmt_si(ctx.chip.matrix_peak(dtype), 'FLOP/s')} {dtype} peak; their bytes are not "
            "the limit, so more batch will not help",
            change,
        )


register(slow_kernels)
