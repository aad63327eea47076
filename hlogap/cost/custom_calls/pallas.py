"""Pallas/Mosaic TPU kernels (`tpu_custom_call`): the kernel's own `cost_estimate`.

Pallas writes the `CostEstimate` a user passes to `pallas_call(..., cost_estimate=...)` into the
custom call's backend config (`custom_call_config.cost_estimate`: `flops`, `transcendentals`,
`bytes_accessed`, and in newer JAX `remote_bytes_transferred`). It is the only count of a Mosaic
kernel's work there is: the kernel body is compiled MLIR, and the `flops` stat TPU traces give
the op is not the kernel's count (1.08e9 for a 2048x1024x2048 matmul that does 8.6e9). Without an
estimate the kernel is unmodeled: shapes say nothing of what a kernel computes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hlogap.cost.base import config, widest
from hlogap.cost.custom_calls.registry import CustomCost, rule
from hlogap.hlo.ir import Instruction, Shape

NO_ESTIMATE = (
    "Pallas kernel without a cost estimate: pass cost_estimate=pl.CostEstimate(flops=..., "
    "transcendentals=..., bytes_accessed=...) to pallas_call to get its bound"
)


@rule("Pallas kernel", targets=("tpu_custom_call",), needs_shapes=False)
def pallas(inst: Instruction, shapes: Sequence[Shape | None], cost: CustomCost) -> None:
    """FLOPs, transcendentals and HBM bytes from the kernel's cost_estimate.

    The estimate does not say which unit does the FLOPs: they are charged to the matrix unit
    (the fastest), at the widest operand type's peak (TPUs take f32 at the bf16 rate), which
    keeps the bound a lower bound. An estimate that claims more than the kernel did is caught
    where the bound meets the measured time (hlogap.rows.analysis).
    """
    cfg = config(inst).get("custom_call_config")
    est = cfg.get("cost_estimate") if isinstance(cfg, dict) else None
    counts = _counts(est) if isinstance(est, dict) else None
    if counts is None:
        cost.work.unmodeled = NO_ESTIMATE
        return
    flops, transcendentals, nbytes = counts
    dtype = widest(s.element_type for s in shapes if s is not None and s.rank > 0)
    if flops:
        cost.work.add_matrix(flops, dtype or "bf16")
    cost.work.transcendentals = transcendentals
    cost.hbm_bytes = nbytes
    cost.note = (
        f"Pallas kernel: its cost_estimate ({flops:.3g} FLOP, {transcendentals:.3g} "
        f"transcendentals, {nbytes:.3g} B), FLOPs at the {dtype or 'bf16'} matrix peak"
    )


def _counts(est: dict[str, object]) -> tuple[float, float, float] | None:
    """(flops, transcendentals, bytes_accessed) of an estimate, None where one is not a count."""
    values = [est.get(k, 0) for k in ("flops", "transcendentals", "bytes_accessed")]
    numbers = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(numbers) != 3 or not all(math.isfinite(n) and n >= 0 for n in numbers):
        return None
    return numbers[0], numbers[1], numbers[2]
