"""f32 matmuls on a chip whose bf16 peak is higher than the peak f32 runs at: the time at each.

On a calibrated chip (`hlogap calibrate`) each peak is the best of rounds that disagreed by the
recorded spread. Where the ratio of the two peaks is within what the spreads allow of the
threshold (`NARROWER_WORTH`), another calibration could fall on either side: the finding is
kept whenever the ratio may reach it (it does not come and go with the machine's noise), and
its evidence says the deciding figures are within their spread."""

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
    # The ratio another calibration may record: each peak within its rounds' spread.
    (f32_lo, f32_hi), (bf16_lo, bf16_hi) = chip.peak_band(f32_key), chip.peak_band(bf16_key)
    low, high = bf16_lo / f32_hi, bf16_hi / f32_lo
    if high < NARROWER_WORTH:
        return
    noise = (
        ""
        if low >= NARROWER_WORTH
        else f"; within the calibration's spread ({f32_key} "
        f"{chip.flops_spread.get(f32_key, 0.0):.0%}, {bf16_key} "
        f"{chip.flops_spread.get(bf16_key, 0.0):.0%} between rounds) the {bf16_key} peak is "
        f"{low:.2g}x to {high:.2g}x the {f32_key} one, on both sides of the {NARROWER_WORTH:.2g}x "
        f"this advice needs: kept, its saving uncertain (calibrate again on an idle machine)"
    )
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
            f"{bf16_key} peak ({bf16 / f32:.2g}x){noise}",
            "compute it in bf16 (cast the operands, keep an f32 accumulator: "
            "preferred_element_type=float32)",
        )


register(wider_than_needed)
