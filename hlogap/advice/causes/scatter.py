"""Scatters far under their memory roof: updates that land on the same rows are applied one
after another (atomics on a GPU, a serial loop elsewhere), so the op runs at a fraction of the
bandwidth its bytes would allow."""

from __future__ import annotations

from collections.abc import Iterator

from hlogap.advice.base import Context, Finding, capped, register
from hlogap.hlo.ir import Instruction, Module
from hlogap.units import fmt_si

SLOW = 0.25  # efficiency under which a scatter is named
# A run shorter than this is launch overhead, not collisions (the launch-bound cause's case).
LONG_RUN_US = 10.0


def slow_scatters(ctx: Context) -> Iterator[Finding]:
    for row in ctx.rows:
        if row.efficiency is None or row.efficiency >= SLOW or row.bound_by != "memory":
            continue
        inst, module = ctx.instruction(row)
        scatter = _scatter(inst, module) if inst is not None else None
        if scatter is None:
            continue
        flags = [
            f"{flag}=true"
            for flag in ("indices_are_sorted", "unique_indices")
            if scatter.attrs.get(flag) != "true"
        ]
        runs = row.occurrences * max(row.runs_per_occurrence, 1)
        if row.measured_us / max(runs, 1) < LONG_RUN_US:
            continue
        rate = row.bytes * row.occurrences / (row.measured_us / 1e6)
        yield Finding(
            "slow scatter",
            (row,),
            capped(row, row.gap_us),
            f"a scatter at {row.efficiency:.0%} of its memory roof: {fmt_si(rate, 'B/s')} over "
            f"{runs} run(s); updates that may land on the same rows are applied one after "
            "another unless XLA is told they do not",
            "combine duplicate indices before scattering (a segment sum), or declare what holds "
            + (f"({', '.join(flags)})" if flags else "(its flags already say sorted and unique)")
            + "; a small table can be a one-hot matmul instead",
        )


def _scatter(inst: Instruction, module: Module | None) -> Instruction | None:
    """The scatter the op is, or the one its fused computation holds."""
    if inst.opcode == "scatter":
        return inst
    if inst.opcode == "fusion" and module is not None and inst.called:
        called = module.computation(inst.called[0])
        if called is not None:
            return next((i for i in called.instructions if i.opcode == "scatter"), None)
    return None


register(slow_scatters)
