"""Collective time with no compute beside it, per mesh axis, and the overlap that hides it."""

from __future__ import annotations

from collections.abc import Iterator

from hlogap.advice.base import Context, Finding, capped, register
from hlogap.hlo.opcodes import collective_kind
from hlogap.report.model import OpRow
from hlogap.units import fmt_si, fmt_us

_OVERLAP = {
    "gpu": "--xla_gpu_enable_latency_hiding_scheduler=true (async collectives scheduled beside "
    "compute) and collective matmul (--xla_gpu_multi_streamed_windowed_einsum=true)",
    "tpu": "--xla_tpu_enable_async_collective_fusion=true with "
    "--xla_tpu_overlap_compute_collective_tc=true, and collective matmul "
    "(--xla_tpu_enable_windowed_einsum_for_all_gather / _reduce_scatter)",
}


def exposed_collectives(ctx: Context) -> Iterator[Finding]:
    """Per mesh axis: what the collectives lose against the link. How much of it is on the
    step's critical path (run alone, not beside compute) the step re-timing says."""
    groups: dict[str, list[OpRow]] = {}
    for row in ctx.rows:
        if row.mesh_axes is None and collective_kind(row.opcode) is None:
            continue
        axes = " x ".join(row.mesh_axes) if row.mesh_axes else "(axes unknown)"
        groups.setdefault(axes, []).append(row)
    for axes, rows in groups.items():
        saving = sum(capped(r, r.gap_us) for r in rows)
        if saving <= 0:
            continue
        time = sum(r.measured_us for r in rows)
        sent = sum(r.comm_bytes * r.occurrences for r in rows)
        evidence = f"{len(rows)} collective(s) over {axes}: {fmt_us(time)} (device time)"
        if sent and time:
            link = ctx.chip.interconnect_bw
            evidence += f", {fmt_si(sent / (time / 1e6), 'B/s')} bus bandwidth"
            evidence += f" of a {fmt_si(link, 'B/s')} link" if link else ""
        flags = _OVERLAP.get(ctx.backend, "async collectives scheduled beside compute")
        yield Finding(
            "exposed collective",
            tuple(rows),
            saving,
            evidence,
            f"overlap them with compute: {flags}",
        )


register(exposed_collectives)
