"""Ops whose runs are a few microseconds each with no work to speak of: launch overhead, paid
once per run; their count and total, and what removes them."""

from __future__ import annotations

from collections.abc import Iterator

from hlogap.advice.base import Context, Finding, capped, register
from hlogap.trace.backends.base import platform_of
from hlogap.units import fmt_us

# A run this short whose bound is under a quarter of it is overhead, not work.
SHORT_RUN_US = 10.0
WORK_SHARE = 0.25
MIN_RUNS = 20  # runs of one op (all devices) for its overhead to be a pattern


def launch_bound(ctx: Context) -> Iterator[Finding]:
    tiny = []
    for row in ctx.rows:
        runs = row.occurrences * max(row.runs_per_occurrence, 1)
        # Unmodeled ops are not known to be tiny; "none" ones are another op's overhead.
        if runs < MIN_RUNS or row.measured_us <= 0 or row.bound_by in ("unmodeled", "none"):
            continue
        per_run = row.measured_us / runs
        if per_run < SHORT_RUN_US and row.bound_us < WORK_SHARE * row.measured_us:
            tiny.append(row)
    saving = sum(capped(r, r.gap_us) for r in tiny)
    if saving <= 0:
        return
    runs = sum(r.occurrences * max(r.runs_per_occurrence, 1) for r in tiny)
    measured = sum(r.measured_us for r in tiny)
    if platform_of(ctx.backend).command_buffers:
        change = (
            "launch fewer kernels: let XLA fuse them, or run them as CUDA graphs (XLA's "
            "command buffers, --xla_gpu_enable_command_buffer)"
        )
    else:
        change = (
            "give the compiler fewer, larger ops: fuse them, or move the loop into the "
            "program (lax.scan, fori_loop)"
        )
    yield Finding(
        "launch-bound",
        tuple(tiny),
        saving,
        f"{len(tiny)} op(s) ran {runs:,} times for {fmt_us(measured)} (device time), "
        f"{fmt_us(measured / runs)} a run on average with under {WORK_SHARE:.0%} of it work: "
        "per-run overhead",
        change,
    )


register(launch_bound)
