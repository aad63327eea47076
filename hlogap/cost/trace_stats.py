"""Costs from XLA's own per-op stats in a TPU trace, for ops whose HLO we cannot count.

A TPU op's event metadata carries XLA's `flops` and `bytes_accessed`. hlogap counts from the HLO
where it can; where it cannot (a fusion whose body is not in the trace), XLA's figures are better
than nothing. On megacore chips (v4, v5p: two TensorCores as one device, `cores_per_device` in
the chip file) XLA counts a matmul fusion per TensorCore, half of the device's work, except ops
named `...in_megacore...`
(checked against ../shared/fixtures/tpu-v5p-xprof, see docs/cost-model.md).
"""

from __future__ import annotations

from hlogap.cost.base import OpCost


def cost_from_trace_stats(
    unmodeled: OpCost,
    xla_flops: float,
    xla_bytes: float | None,
    op_name: str,
    cores_per_device: int,
) -> OpCost:
    """Fill an unmodeled op's FLOPs (and bytes, when counted as 0) from XLA's trace stats."""
    scale = 1.0 if "in_megacore" in op_name else float(cores_per_device)
    read = unmodeled.hbm_read_bytes
    write = unmodeled.hbm_write_bytes
    # Without the fused body, operands + outputs overstate what a fusion that slices or updates
    # in place moves; XLA saw the body. The smaller of the two keeps the bound a lower bound.
    if xla_bytes is not None and (read + write == 0 or xla_bytes < read + write):
        read, write = xla_bytes, 0.0
    # Which unit does the work is unknown: the matrix unit's peak keeps the bound a lower bound.
    return unmodeled._replace(
        flops=xla_flops * scale,
        matrix_flops=xla_flops * scale,
        matrix_dtype=unmodeled.vector_dtype or "bf16",
        hbm_read_bytes=read,
        hbm_write_bytes=write,
        unmodeled=None,
        note=f"FLOPs from XLA's cost analysis in the trace ({unmodeled.unmodeled})",
    )
