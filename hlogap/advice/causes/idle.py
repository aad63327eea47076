"""Devices idle inside their steps, waiting to start an op: the op that ended the gaps
(`idle_before_us`, from the step pass), how long and how often, and what usually keeps a
device waiting for that kind of op. No step time is claimed: a gap removed shortens a step
only on the device that ends it last, and only where nothing after the gap waits on another
device (a collective's peers); the step pass cannot tell, so the saving is left unclaimed
rather than overstated."""

from __future__ import annotations

from collections.abc import Iterator

from hlogap.advice.base import Context, Finding, register
from hlogap.hlo.opcodes import ASYNC_TRANSFERS, COLLECTIVE_OPCODES
from hlogap.report.model import OpRow
from hlogap.units import fmt_us

# An op the devices waited for this share of their own step time (device time) or more.
IDLE_SHARE = 0.05
MAX_OPS = 3  # the ops waited for longest, one finding each
# Ops that hand control to the host, or wait for data from it.
HOST_OPCODES = frozenset({"infeed", "outfeed", "send", "recv", "send-done", "recv-done"})


def device_idle(ctx: Context) -> Iterator[Finding]:
    device_wall = sum(s.device_wall_us for s in ctx.steps)
    if device_wall <= 0:
        return
    waited = sorted(
        (r for r in ctx.rows if (r.idle_before_us or 0.0) >= IDLE_SHARE * device_wall),
        key=lambda r: -(r.idle_before_us or 0.0),
    )
    for row in waited[:MAX_OPS]:
        idle = row.idle_before_us or 0.0
        gaps = max(row.idle_gaps, 1)
        yield Finding(
            "device idle",
            (row,),
            0.0,  # none of the op's own time: the wait is before it
            f"device idle before {row.name}: {fmt_us(idle)} (device time) over "
            f"{len(ctx.steps)} steps, in {row.idle_gaps:,} gaps of {fmt_us(idle / gaps)} on "
            f"average, {idle / device_wall:.0%} of the devices' own step time; no step time "
            "claimed: removing a gap shortens a step only on its last device, and only where "
            "nothing after it waits on another device",
            _change(ctx, row),
        )


def _change(ctx: Context, row: OpRow) -> str:
    """What usually keeps a device waiting to start an op of this kind."""
    inst, _ = ctx.instruction(row)
    target = (inst.custom_call_target or "") if inst is not None else ""
    base = row.opcode.removesuffix("-start").removesuffix("-done")
    if "callback" in target:
        return (
            "a host callback stops the device every run: move it out of the step "
            "(jax.debug.print, pure_callback, io_callback) or run it every N steps"
        )
    if row.opcode in HOST_OPCODES:
        return (
            "the device waits for the host's data: feed it ahead (prefetch input to the "
            "device a step or two early, more input workers, a faster input pipeline)"
        )
    if base in COLLECTIVE_OPCODES or row.opcode in ASYNC_TRANSFERS:
        return (
            "a transfer that waits to start: its peers reach it late (another device's or "
            "host's longer work before it, see the hosts section) or its launch comes late"
        )
    return (
        "the host launched it late: keep the host ahead of the devices (dispatch steps "
        "asynchronously, nothing that waits on a result inside the loop such as printing "
        "or .item() of a loss each step; fewer, larger programs: scan the steps; prefetch "
        "the input)"
    )


register(device_idle, after_steps=True)
