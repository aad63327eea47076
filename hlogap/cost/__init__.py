"""The cost model: FLOPs, HBM bytes and interconnect bytes of every HLO op (docs/cost-model.md).

It only counts; turning counts into times with a chip's peaks is `hlogap.bounds`' job. FLOPs
follow XLA's HloCostAnalysis (what `cost_analysis()` and TPU traces report); bytes are what
crosses HBM.

base: OpCost, the module index, shapes -> HBM bytes. matmul: dot and convolution FLOPs.
custom_calls: one cost rule per file (cuDNN, cuBLAS/hipBLASLt, fused attention, Pallas kernels).
flops: XLA's FLOP count per op. collectives: the ring model. traffic: HBM bytes per op.
model: ops, computations, modules.
"""

from __future__ import annotations

from hlogap.cost.base import OpCost
from hlogap.cost.model import (
    cost_computation,
    cost_instruction,
    cost_module,
    executions_per_run,
    timed_computations,
    trip_count,
)

__all__ = [
    "OpCost",
    "cost_computation",
    "cost_instruction",
    "cost_module",
    "executions_per_run",
    "timed_computations",
    "trip_count",
]
