"""Devices idle inside their steps, waiting to start an op: the op that ended the gaps
(`idle_before_us`, from the step pass), how long and how often, where the gaps sit (`where`:
between steps, between programs, inside an execution), the ops on either side, and what
usually keeps a device waiting there. On one device the gaps are the step's own: removing them
shortens the step by their time, which is claimed. On several devices a gap removed shortens a
step only on the device that ends it last, and only where nothing after the gap waits on
another device (a collective's peers); the step pass cannot tell, so nothing is claimed (the
finding stays a hint on its op)."""

from __future__ import annotations

from collections.abc import Iterator

from hlogap.advice.base import Context, Finding, register
from hlogap.advice.patterns import makers, module_ops
from hlogap.hlo.opcodes import ASYNC_TRANSFERS, COLLECTIVE_OPCODES
from hlogap.report.model import OpRow
from hlogap.trace.model import OpKey
from hlogap.units import fmt_us

# An op the devices waited for this share of their own step time (device time) or more.
IDLE_SHARE = 0.05
MAX_OPS = 3  # the ops waited for longest, one finding each
# Host events that wait for the device's result (JAX's and PjRt's names, lower case).
_BLOCKING = ("block_until_ready", "try_to_block", "await", "device_get", "__array__", "tolist")
HOST_EVENTS = 3  # the host events covering most of an op's longest gaps, named
# Ops that hand control to the host, or wait for data from it.
HOST_OPCODES = frozenset({"infeed", "outfeed", "send", "recv", "send-done", "recv-done"})


def device_idle(ctx: Context) -> Iterator[Finding]:
    device_wall = sum(s.device_wall_us for s in ctx.steps)
    if device_wall <= 0:
        return
    one_device = all(s.devices <= 1 for s in ctx.steps)
    waited = sorted(
        (r for r in ctx.rows if (r.idle_before_us or 0.0) >= IDLE_SHARE * device_wall),
        key=lambda r: -(r.idle_before_us or 0.0),
    )
    for row in waited[:MAX_OPS]:
        idle = row.idle_before_us or 0.0
        gaps = max(row.idle_gaps, 1)
        where, before = _place(ctx, row)
        claim = (
            f"on one device the gaps are the step's own: removing them saves "
            f"{fmt_us(idle / len(ctx.steps))} a step"
            if one_device
            else "no step time claimed: on several devices removing a gap shortens a step "
            "only on its last device, and only where nothing after it waits on another device"
        )
        yield Finding(
            "device idle",
            (row,),
            0.0,  # none of the op's own time: the wait is before it
            f"device idle {where}, between {before} and {row.name}: {fmt_us(idle)} (device "
            f"time) over {len(ctx.steps)} steps, in {row.idle_gaps:,} gaps of "
            f"{fmt_us(idle / gaps)} on average, {idle / device_wall:.0%} of the devices' own "
            f"step time; {claim}{_host_side(ctx, row)}",
            _waited_on_result(ctx, row, where) + _change(ctx, row, where),
            claimed_us=idle if one_device else None,
            where=where,
        )


def _host_side(ctx: Context, row: OpRow) -> str:
    """What the host's threads did in the op's longest gaps (the host plane's events that
    overlap them), and how much of the gaps no host event covers."""
    gaps = [g for g in ctx.idle_host.get(OpKey(row.module, row.program_id, row.name), ()) if g.read]
    if not gaps:
        return ""
    total = sum(g.end_ps - g.start_ps for g in gaps)
    covered = sum(g.covered_ps for g in gaps)
    ran: dict[tuple[str, str], int] = {}
    for gap in gaps:
        for line, name, ps in gap.events:
            ran[(line, name)] = ran.get((line, name), 0) + ps
    top = sorted(ran.items(), key=lambda item: (-item[1], item[0]))[:HOST_EVENTS]
    lengths = ", ".join(fmt_us((g.end_ps - g.start_ps) / 1e6) for g in gaps)
    named = (
        "; ".join(f"{name} on {line} ({fmt_us(ps / 1e6)})" for (line, name), ps in top)
        if top
        else "no host event"
    )
    untraced = total - covered
    rest = (
        f"; {untraced / total:.0%} of them no host event covers (host work the profile does not "
        "record: Python between calls, input loading, a sleep)"
        if total > 0 and untraced / total >= 0.05
        else ""
    )
    return f"; in its {len(gaps)} longest gap(s) ({lengths}) the host's threads ran: {named}{rest}"


def _waited_on_result(ctx: Context, row: OpRow, where: str) -> str:
    """Where the host's thread that spent most of the gaps in them blocked on a result (a
    wait for the device: `block_until_ready`, a buffer's await, a copy to the host), say so
    first: the launch came late because the host waited for the previous result."""
    if where == "inside an execution":
        return ""
    gaps = ctx.idle_host.get(OpKey(row.module, row.program_id, row.name), ())
    ran: dict[str, int] = {}
    for gap in gaps:
        for _, name, ps in gap.events:
            ran[name] = ran.get(name, 0) + ps
    total = sum(g.end_ps - g.start_ps for g in gaps)
    if not ran or total <= 0:
        return ""
    name, ps = max(ran.items(), key=lambda item: item[1])
    if ps < 0.5 * total or not any(w in name.lower() for w in _BLOCKING):
        return ""
    return (
        f"in {ps / total:.0%} of the longest gaps the host sat in {name}, waiting for a "
        "result before it launched the next work: "
    )


def _place(ctx: Context, row: OpRow) -> tuple[str, str]:
    """Where the gaps before the op sit, and the op that ran before them: inside an execution
    when an op of the same program makes its input (that op named), else at the program's
    start (between programs, or between steps where one program runs once a step)."""
    inst, module = ctx.instruction(row)
    if inst is None or module is None:
        return "inside an execution", "the op before it"
    ops = next(
        (o for o in module_ops(ctx) if o.module is module),
        None,
    )
    comp = ctx.graph(module).home.get(id(inst))
    if ops is None or comp is None:
        return "inside an execution", "the op before it"
    timed = [m.name for m in makers(ops, inst) if ops.row(m) is not None]
    if timed:
        return "inside an execution", ", ".join(timed[:2])
    if not comp.is_entry:
        ordered = [i.name for i in comp.instructions if ops.row(i) is not None]
        last = ordered[-1] if ordered else "the loop's last op"
        return "inside an execution", f"{last} (the loop's previous trip)"
    # The program's first op: the gap is before its execution.
    programs = {(r.module, r.program_id) for r in ctx.rows if r.occurrences > 0}
    steps = max(len(ctx.steps), 1)
    devices = max(max((s.devices for s in ctx.steps), default=1), 1)
    runs = row.occurrences / (steps * devices)
    if len(programs) > 1 or runs > 1.5:
        others = sorted({m for m, _ in programs if m != row.module})
        before = (
            f"the previous program's last op ({', '.join(others[:3])})"
            if others
            else "the previous execution's last op"
        )
        return "between programs", before
    return "between steps", "the previous step's last op"


def _change(ctx: Context, row: OpRow, where: str) -> str:
    """What usually keeps a device waiting to start an op of this kind, there."""
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
    if where == "inside an execution":
        return (
            "the program waits on the host between its own ops, not on dispatch: host-side "
            "work between its kernels (a library call's host part such as a convolution's or "
            "GEMM's plan or workspace setup, a synchronous host copy, a while loop's condition "
            "read back on the host); keep that work off the step (cache the plans, autotune "
            "once, keep loop bounds on the device) or fuse the ops on either side"
        )
    if where == "between programs":
        return (
            "the host launched the next program late: keep it ahead of the devices (nothing "
            "that waits on a result between the calls, such as printing or .item() of a "
            "loss; fewer, larger programs: jit the whole step together; prefetch the input)"
        )
    return (
        "the host launched the step late: keep the host ahead of the devices (dispatch steps "
        "asynchronously, nothing that waits on a result inside the loop such as printing "
        "or .item() of a loss each step; scan the steps; prefetch the input)"
    )


register(device_idle, after_steps=True)
