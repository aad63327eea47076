"""Short, specific reasons why an op is slow, from its IR, its counts and its bound."""

from __future__ import annotations

import numpy as np

from hlogap.bounds.roofline import Bound
from hlogap.chips import Chip, dtype_key
from hlogap.cost import OpCost
from hlogap.hlo.ir import Instruction
from hlogap.hlo.opcodes import COMMAND_BUFFER_FLAG, changes_layout, is_command_buffer
from hlogap.units import fmt_si, fmt_us

# Padding above this share of the bytes moved is worth a hint.
PADDING_HINT_FRACTION = 0.1
# How the hint for an op measured below its bound begins.
FASTER_THAN_ROOF = "faster than the roofline"
# A bf16 peak this many times an f32 matmul's own peak is worth naming.
NARROWER_WORTH = 1.5
# A collective sending at this share of its link's rate or more is link-bound; below
# `WAITING_BELOW` of it, the link explains little of its time: it waits.
NEAR_LINK = 0.5
WAITING_BELOW = 0.1


def hints_for(
    inst: Instruction | None,
    cost: OpCost,
    bound: Bound,
    chip: Chip,
    missing: str | None,
    measured_us: float | None = None,
) -> list[str]:
    """Hints for one op; `measured_us` is its time per occurrence when it was measured."""
    out: list[str] = []
    if missing:
        out.append(f"unmodeled: {missing}")
        return out
    if cost.unmodeled or bound.unmodeled:
        out.append(f"unmodeled: {cost.unmodeled or bound.unmodeled}")
        return out
    if inst is None:
        return out
    if is_command_buffer(inst) and cost.note:
        count, _, names = cost.note.partition(": ")
        out.append(
            f"{count} timed as one (a CUDA graph): XLA_FLAGS={COMMAND_BUFFER_FLAG} times each op"
        )
        out.append(f"runs {names}")
    if cost.matrix_flops and cost.hbm_bytes:
        out.extend(_matmul(cost, bound, chip))
    if cost.padding_bytes and cost.hbm_bytes:
        share = cost.padding_bytes / cost.hbm_bytes
        if share >= PADDING_HINT_FRACTION:
            out.append(f"tile padding is {share:.0%} of the bytes moved; pad dims to the tile size")
    relayout = changes_layout(inst) or (inst.opcode == "fusion" and "transpose" in inst.name)
    if relayout and cost.hbm_bytes > 0:  # a transpose proved a bitcast moves nothing
        out.append("layout change: data is copied to another layout; check producer layouts")
    transfer = bound.work_s * 1e6
    if bound.overlapped and transfer > 0:
        link = " on the host link" if bound.bound_by == "host" else ""
        out.append(
            f"async transfer needs >= {_us(transfer)}{link} and overlaps later ops; "
            "waiting for it shows on its done"
        )
    elif bound.overlapped and measured_us:
        # The work is counted on the start; time on the done is the device waiting for it.
        out.append(
            f"async op not overlapped: the device waits {_us(measured_us)} per "
            "occurrence at this done; schedule independent work between start and done"
        )
    if cost.collective and bound.bound_by == "communication" and not bound.overlapped:
        out.append(_collective(cost, bound, chip, measured_us))
    if measured_us and bound.lower_s * 1e6 > measured_us * 1.001:
        # A bound is a floor: beating it means the roof itself is wrong for this op.
        out.insert(
            0,
            f"{FASTER_THAN_ROOF}: {chip.name}'s peaks are too low for this op "
            "(wrong --chip, or a chip file's figures set too low: a calibrated chip, whose "
            "figures are raised to its ops' rates, never is)",
        )
    if bound.bound_by == "none" and not bound.overlapped:
        why = f" ({cost.note})" if cost.note else ""
        spent = f": its {_us(measured_us)} per occurrence are overhead" if measured_us else ""
        out.append(f"no work the roofline counts{why}{spent}")
    if measured_us and not bound.overlapped:
        out.extend(_achieved(cost, bound, chip, measured_us * 1e-6))
    return out


def _us(value: float) -> str:
    """A time in its unit (85.2 ms, not 8.52e+04 us); below a microsecond, three digits in
    nanoseconds (3.75 ns, not 0.00375 us)."""
    return fmt_us(value) if abs(value) >= 1 else f"{value * 1e3:.3g} ns"


def _matmul(cost: OpCost, bound: Bound, chip: Chip) -> list[str]:
    """A matmul's ridge and type, each against the peak its bound used (`matrix_key`: an f32
    dot runs at a GPU's tf32 peak) and the memory rate its bound used (a cache level's where
    its bytes fit one), so a hint never argues with the bound-by column."""
    dtype = cost.matrix_dtype or "bf16"
    key = chip.matrix_key(dtype)
    out: list[str] = []
    ridge = chip.ridge_point(dtype, cost.hbm_bytes)
    intensity = cost.flops / cost.hbm_bytes
    if bound.bound_by == "memory" and intensity < ridge:
        memory = chip.memory_bw(cost.hbm_bytes)
        cache = (
            ""
            if memory == chip.hbm_bw
            else f" (over the {fmt_si(memory, 'B/s')} cache level its "
            f"{fmt_si(cost.hbm_bytes, 'B')} fit)"
        )
        out.append(
            f"intensity {intensity:.3g} FLOP/B is below {chip.name}'s {key} ridge point "
            f"{ridge:.0f}{cache}: more rows per weight read (batch) help"
        )
    now, bf16 = chip.matrix_peak(dtype), chip.matrix_peak("bf16")
    if bound.bound_by == "compute" and dtype_key(dtype) == "f32" and bf16 >= NARROWER_WORTH * now:
        out.append(
            f"f32 matmul at {chip.name}'s {key} peak: its {chip.matrix_key('bf16')} peak is "
            f"{bf16 / now:.2g}x that; consider bf16 inputs with f32 accumulation"
        )
    return out


def _collective(cost: OpCost, bound: Bound, chip: Chip, measured_us: float | None) -> str:
    """A collective against its link bound: near it, link-bound; far above it, the time is the
    devices waiting (latency, synchronisation, a late peer), which the link does not explain."""
    over = f"{cost.collective} over {cost.group_size or '?'} devices"
    link = chip.interconnect_bw or 0.0
    if not measured_us or not link:
        return (
            f"{over}: the bound is its bytes at the link's full rate; time above it is latency "
            "or waiting for the other devices"
        )
    rate = cost.comm_bytes / (measured_us * 1e-6)
    sends = f"sends {fmt_si(rate, 'B/s')}, {rate / link:.0%} of the {fmt_si(link, 'B/s')} link"
    if rate >= NEAR_LINK * link:
        return f"{over} is link-bound: {sends}"
    if rate >= WAITING_BELOW * link:
        return (
            f"{over} {sends}: below the link's rate from latency, waiting for the other "
            "devices, or a link slower than its figure"
        )
    return (
        f"{over} waits, not link-bound: its {fmt_si(cost.comm_bytes, 'B')} need "
        f"{_us(bound.t_comm_s * 1e6)} at the {fmt_si(link, 'B/s')} link's rate, it took "
        f"{_us(measured_us)} per occurrence: latency, synchronisation with the other devices "
        "or a late peer"
    )


def _achieved(cost: OpCost, bound: Bound, chip: Chip, seconds: float) -> list[str]:
    """What the op achieved against the roof that bounds it: the rate behind the gap."""
    if bound.bound_by == "compute" and cost.flops:
        dtype = cost.matrix_dtype or cost.vector_dtype or "bf16"
        vector = None if cost.matrix_flops else chip.vector_key(dtype)
        peak = chip.matrix_peak(dtype) if vector is None else chip.vector_peak(dtype)
        # The peak its bound used, by its key (f32 work may run at a tf32 or a vector peak).
        named = chip.matrix_key(dtype) if vector is None else f"{vector} vector"
        rate = cost.flops / seconds
        return [f"achieves {fmt_si(rate, 'FLOP/s')}, {rate / peak:.0%} of the {named} peak"]
    if bound.bound_by == "memory" and cost.hbm_bytes:
        rate = cost.hbm_bytes / seconds
        roof = chip.memory_bw(cost.hbm_bytes)
        if roof == chip.hbm_bw:
            return [f"moves {fmt_si(rate, 'B/s')}, {rate / roof:.0%} of HBM bandwidth"]
        return [
            f"moves {fmt_si(rate, 'B/s')}, {rate / roof:.0%} of the {fmt_si(roof, 'B/s')} its "
            f"{fmt_si(cost.hbm_bytes, 'B')} working set gets from cache"
        ]
    if (
        bound.bound_by == "communication"
        and not cost.collective  # `_collective` says it for collectives
        and cost.comm_bytes
        and chip.interconnect_bw
    ):
        rate = cost.comm_bytes / seconds
        return [f"sends {fmt_si(rate, 'B/s')}, {rate / chip.interconnect_bw:.0%} of the link"]
    return []


def host_wait_hint(
    host_bytes: float,
    spans_s: np.ndarray,
    waits_s: np.ndarray,
    transfer_s: float,
    link_rate: float,
    chip: Chip,
    sharing: int = 0,
) -> str:
    """What the host link achieved for a done's transfers (start to done), and what it carried
    in all, in that direction, while host transfers were in flight (`sharing`: how many other
    transfers were in flight beside these at some point). `waits_s` are the done's waits and
    `transfer_s` one transfer's bytes over the link at its full rate: a wait shorter than that
    is its own bound (`wait_bound_s`), the rest of the transfer hidden behind other work, and
    the hint says so, so that a done at 100% efficiency is not read as the link at its peak."""
    what = f"waits for a {fmt_si(host_bytes, 'B')} transfer over the host link"
    if not len(spans_s) or not spans_s.sum() or not chip.host_bw:
        return what
    rate = host_bytes * len(spans_s) / float(spans_s.sum())
    window = f"{fmt_si(rate, 'B/s')}, {rate / chip.host_bw:.0%} of {chip.name}'s " + (
        f"{fmt_si(chip.host_bw, 'B/s')} host link"
    )
    hidden = int((waits_s < transfer_s).sum())
    need = f"the {_us(transfer_s * 1e6)} its bytes need on the link"
    if len(waits_s) and hidden == len(waits_s):
        text = (
            f"{what}, hidden behind other work: every wait ({_us(float(waits_s.max()) * 1e6)} "
            f"at most) was shorter than {need}, so each is its own bound and the hidden part "
            f"cost nothing; over its whole window, start to done, the transfer moved {window}"
        )
    else:
        text = f"{what}: start to done moves {window}"
        if hidden:
            text += (
                f"; {hidden} of its {len(waits_s)} waits were shorter than {need} (the "
                "transfer partly hidden behind other work: each its own bound)"
            )
    if sharing and link_rate > rate * 1.05:
        others = "another transfer" if sharing == 1 else f"{sharing} other transfers"
        text += (
            f"; it shares the link with {others}: together they carry "
            f"{fmt_si(link_rate, 'B/s')} ({link_rate / chip.host_bw:.0%}) in that direction"
        )
    if "assumed" in chip.sources.get("host.bw", ""):
        text += " (the link figure is assumed: see `hlogap chips`)"
    return text


def counters_hint(utilisation: dict[str, float]) -> str:
    """What the `_counters_` line says of each unit while the op ran, most used first. The
    figures are the compiled code's slot occupancy (which units its instructions use) laid
    over the time, not measured busy time: docs/counters.md has the evidence."""
    units = sorted(utilisation.items(), key=lambda u: -u[1])
    shown = ", ".join(f"{unit} {share:.0%}" for unit, share in units if share > 0)
    return (
        "unit slot occupancy of its code while it ran (the profile's `_counters_`, not "
        f"measured busy time): {shown or 'no unit used'}"
    )
