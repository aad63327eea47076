"""Waits on transfers to or from host memory (host offload): the bytes, what the link carried,
and the overlap that would hide them."""

from __future__ import annotations

from collections.abc import Iterator

from hlogap.advice.base import Context, Finding, capped, register
from hlogap.units import fmt_si

WAITS_FOR = "waits for a "  # the host-wait hint's start (hlogap.bounds.hints.host_wait_hint)


def host_waits(ctx: Context) -> Iterator[Finding]:
    # A done whose transfer was hidden (each wait its own bound) lost nothing: not an op of it
    # (its gap is float rounding of bound = measured).
    waits = [
        r
        for r in ctx.rows
        if (r.bound_by == "host" or any(h.startswith(WAITS_FOR) for h in r.hints))
        and r.gap_us > r.measured_us * 1e-9
    ]
    saving = sum(capped(r, r.gap_us) for r in waits)
    if saving <= 0:
        return
    top = max(waits, key=lambda r: r.gap_us)
    link = ctx.chip.host_bw
    detail = next((h for h in top.hints if h.startswith(WAITS_FOR)), "")
    evidence = (
        f"{len(waits)} op(s) wait {fmt_si(sum(r.measured_us for r in waits) / 1e6, 's')} "
        f"(device time) on host transfers"
        + (f"; the longest, {top.name}, {detail}" if detail else "")
    )
    yield Finding(
        "host offload wait",
        tuple(waits),
        saving,
        evidence + (f"; host link {fmt_si(link, 'B/s')}" if link else ""),
        "start each transfer earlier so it runs beside compute (prefetch the offloaded tensor "
        f"a step ahead, as the scheduler's host-offload overlap does){_keep(ctx)}",
    )


def _keep(ctx: Context) -> str:
    """Keeping the offloaded tensors on the device, where there is room: whether the bytes the
    module keeps in host memory fit in what the device has free."""
    memory = ctx.memory
    room = memory.headroom_bytes if memory is not None else None
    if memory is None or not room or room <= 0:
        return ""
    free = fmt_si(room, "B")
    host = memory.peak.host_bytes if memory.peak is not None else 0
    if not host:
        return f", or keep the offloaded tensors on the device ({free} free)"
    if host <= room:
        return (
            f", or keep the offloaded tensors on the device: their {fmt_si(host, 'B')} fit in "
            f"the {free} free"
        )
    return (
        f"; keeping the offloaded tensors on the device does not fit: they hold "
        f"{fmt_si(host, 'B')} in host memory, {free} is free (keep only part of them)"
    )


register(host_waits)
