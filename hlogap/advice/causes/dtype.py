"""f32 matmuls on a chip whose bf16 peak is higher than the peak f32 runs at: the time at each."""

from __future__ import annotations

from collections.abc import Iterator

from hlogap.advice.base import Context, Finding, capped, register
from hlogap.advice.matrix import matrix_op
from hlogap.bounds.hints import NARROWER_WORTH
from hlogap.units import fmt_us


def wider_than_needed(ctx: Context) -> Iterator[Finding]:
    chip = ctx.chip
    # The peaks the bounds use, by key: f32 operands run at tf32 where the chip has it.
    f32, bf16 = chip.matrix_peak("f32"), chip.matrix_peak("bf16")
    f32_key, bf16_key = chip.matrix_key("f32"), chip.matrix_key("bf16")
    if bf16 < NARROWER_WORTH * f32:
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
            f"at {chip.name}'s {f32_key} peak, {fmt_us(narrow / occurrences)} at its "
            f"{bf16_key} peak ({bf16 / f32:.2g}x)",
            "compute it in bf16 (cast the operands, keep an f32 accumulator: "
            "preferred_element_type=float32)",
        )


register(wider_than_needed)
