"""f32 matmuls on a chip whose bf16 peak is higher: the time at the other peak."""

from __future__ import annotations

from collections.abc import Iterator

from hlogap.advice.base import Context, Finding, capped, register
from hlogap.advice.matrix import matrix_op
from hlogap.units import fmt_us

# A faster type worth naming: its peak at least this many times f32's.
WORTH = 1.5


def wider_than_needed(ctx: Context) -> Iterator[Finding]:
    chip = ctx.chip
    f32, bf16 = chip.matrix_peak("f32"), chip.matrix_peak("bf16")
    if bf16 < WORTH * f32:
        return
    for row in ctx.rows:
        if row.dtype != "f32":
            continue
        m = matrix_op(ctx, row)
        if m is None:
            continue
        occurrences = max(row.occurrences, 1) * m.runs
        now = m.flops / f32 * 1e6 * occurrences
        narrow = m.flops / bf16 * 1e6 * occurrences
        # bf16 operands move half the bytes of the f32 ones (the result stays f32).
        memory = row.t_memory_us * row.occurrences
        saving = capped(row, row.measured_us - max(narrow, memory / 2))
        if saving <= 0:
            continue
        yield Finding(
            "dtype",
            (row,),
            saving,
            f"an f32 matmul: its {m.flops:.3g} FLOPs per run take {fmt_us(now / occurrences)} "
            f"at {chip.name}'s f32 peak, {fmt_us(narrow / occurrences)} at its bf16 peak "
            f"({bf16 / f32:.0f}x)",
            "compute it in bf16 (cast the operands, keep an f32 accumulator: "
            "preferred_element_type=float32)",
        )


register(wider_than_needed)
