"""A memory-bound matmul under its ridge point (its peak over the memory rate its bound uses):
the batch (rows per weight read) it needs to reach it (the seeds' chapter 1: the critical
batch), or, where its bytes are its activations, that no batch will.

On a calibrated chip the ridge moves with its peak's recorded spread (`Chip.peak_band`): an op
whose intensity another calibration may put on either side of the ridge keeps its finding
(rather than coming and going with the machine's noise), which says so."""

from __future__ import annotations

from collections.abc import Iterator

from hlogap.advice.base import Context, Finding, capped, register
from hlogap.advice.matrix import matrix_op
from hlogap.report.model import OpRow
from hlogap.units import fmt_si

# A batch this many times the current one or more is worth asking for.
MEANINGFUL = 1.2


def below_ridge(ctx: Context) -> Iterator[Finding]:
    chip = ctx.chip
    for row in ctx.rows:
        # Only where its own bound says memory: the ridge then is the peak its bound used over
        # the memory rate its bound used (a cache level's where one run's bytes fit one).
        # On a calibrated chip, a compute-bound op the spread may put under the ridge too.
        bound = row.bound_by == "memory" or (bool(chip.flops_spread) and row.bound_by == "compute")
        m = matrix_op(ctx, row) if bound else None
        if m is None:
            continue
        dtype = row.dtype or "bf16"
        ridge = chip.ridge_point(dtype, m.bytes)
        key = chip.matrix_key(dtype)
        low, high = (ridge * b / chip.peak_flops[key] for b in chip.peak_band(key))
        intensity = m.flops / m.bytes
        if intensity >= high:
            continue
        noise = (
            f"; within the calibration's spread ({key} {chip.flops_spread.get(key, 0.0):.0%} "
            f"between rounds) the ridge is {low:.3g} to {high:.3g} FLOP/B, on both sides of "
            "its intensity: kept, its saving uncertain (calibrate again on an idle machine)"
            if intensity >= low
            else ""
        )
        if row.bound_by != "memory" and not noise:
            continue
        # Within the spread, the batch asked for is the one past the band's top: past the
        # ridge whatever another calibration records.
        target = high if noise else ridge
        saving = capped(row, row.measured_us - row.t_compute_us * row.occurrences)
        if saving <= 0:
            continue
        where = (
            f"intensity {intensity:.1f} FLOP/B is {'near' if noise else 'under'} "
            f"{chip.name}'s {key} ridge {ridge:.0f}"
        )
        memory = chip.memory_bw(m.bytes)
        if memory != chip.hbm_bw:
            where += (
                f" (over the {fmt_si(memory, 'B/s')} cache level its {fmt_si(m.bytes, 'B')} fit)"
            )
        where += noise
        scale = m.batch_to_reach(target)
        if scale is not None and scale < MEANINGFUL:
            continue  # at the ridge already, near enough: its gap is not the batch's
        if scale is None:
            yield Finding(
                "activation-bound",
                (row,),
                saving,
                f"{where}; {fmt_si(m.activation_bytes, 'B')} of its {fmt_si(m.bytes, 'B')} per "
                f"run are activations (inputs and outputs), {m.weight_text}: no batch lifts it "
                f"past {m.flops / max(m.activation_bytes, 1.0):.0f} FLOP/B",
                _fuse(ctx, row),
            )
            continue
        rows = m.rows_per_weight_read
        evidence = (
            f"{where}; about {rows:.0f} rows per weight read, the ridge needs about "
            f"{rows * scale:.0f} ({scale:.1f}x the batch)"
        )
        room = ctx.memory.batch_scale if ctx.memory is not None else None
        if room is not None:
            enough = "enough" if room >= scale else "not enough: shard the weights or remat"
            evidence += f"; the memory headroom fits {room:.1f}x the batch ({enough})"
        yield Finding(
            "below the ridge",
            (row,),
            saving,
            evidence,
            f"raise the rows per weight read (batch, or tokens per step) to about "
            f"{rows * scale:.0f}",
        )


def _fuse(ctx: Context, row: OpRow) -> str:
    """Keep the activations on chip: fuse with the op that reads (or makes) them."""
    inst, module = ctx.instruction(row)
    if inst is None or module is None:
        return "fuse it with the op that reads its output, or keep its activations narrower"
    graph = ctx.graph(module)
    readers, makers = graph.consumers(inst), graph.producers(inst)
    if readers and not readers[0].startswith("the "):
        return f"fuse it with {readers[0]}, which reads its output, or keep its output narrower"
    if makers:
        return f"fuse it with {makers[0]}, which makes its input, or keep its input narrower"
    return "fuse it with the op that reads its output, or keep its activations narrower"


register(below_ridge)
