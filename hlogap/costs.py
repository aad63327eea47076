"""The cost model: FLOPs, HBM bytes and interconnect bytes of every HLO op (docs/cost-model.md).

It only counts; turning counts into times with a chip's peaks is `hlogap.roofline`'s job. FLOPs
follow XLA's HloCostAnalysis (what `cost_analysis()` and TPU traces report); bytes are what
crosses HBM. The parts live in `hlogap.cost`; this module is the interface.
"""

from __future__ import annotations

from hlogap.cost.base import OpCost
from hlogap.cost.model import (
    cost_computation,
    cost_instruction,
    cost_module,
    timed_computations,
    trip_count,
)

__all__ = [
    "OpCost",
    "cost_computation",
    "cost_instruction",
    "cost_module",
    "timed_computations",
    "trip_count",
]
