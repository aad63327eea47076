"""Pallas/Mosaic TPU kernels (`tpu_custom_call`): reported, never used as a roof."""

from __future__ import annotations

from collections.abc import Sequence

from hlogap.cost.base import config
from hlogap.cost.custom_calls.registry import CustomCost, rule
from hlogap.hlo.ir import Instruction, Shape


@rule("Pallas kernel", targets=("tpu_custom_call",))
def pallas(inst: Instruction, shapes: Sequence[Shape | None], cost: CustomCost) -> None:
    """A kernel may carry its author's cost_estimate in the backend_config. The estimate is a
    scheduling hint, not a count: block-sparse kernels (splash attention) skip masked blocks, and
    on the v5p profile the estimates put the bound at up to 4x the measured time."""
    cfg = config(inst).get("custom_call_config")
    est = cfg.get("cost_estimate") if isinstance(cfg, dict) else None
    if not isinstance(est, dict):
        cost.work.unmodeled = f"custom call '{inst.custom_call_target}' has no cost model"
        return
    flops = float(est.get("flops", 0))
    nbytes = float(est.get("bytes_accessed", 0))
    cost.work.unmodeled = (
        f"Pallas kernel: its cost_estimate ({flops:.3g} FLOP, {nbytes:.3g} B) is its author's "
        "hint, not a count"
    )
