"""Compiler markers left in place, and host-offload copies."""

from __future__ import annotations

from collections.abc import Sequence

from hlogap.cost.custom_calls.registry import CustomCost, rule
from hlogap.hlo.ir import Instruction, Shape


@rule(
    "compiler marker",
    targets=(
        "AllocateBuffer",
        "AssumeGatherIndicesInBound",
        "Sharding",
        "SPMDFullToShardShape",
        "SPMDShardToFullShape",
        "LayoutConstraint",
        "annotate_device_placement",
    ),
    needs_shapes=False,
)
def marker(inst: Instruction, shapes: Sequence[Shape | None], cost: CustomCost) -> None:
    """No work, no traffic of its own."""
    cost.free = True
    cost.note = f"custom call '{inst.custom_call_target}' is a compiler marker: no work"


@rule("host offload copy", targets=("MoveToHost", "MoveToDevice"), needs_shapes=False)
def host_copy(inst: Instruction, shapes: Sequence[Shape | None], cost: CustomCost) -> None:
    """Bytes only: its operands read, its outputs written."""
    cost.note = f"custom call '{inst.custom_call_target}' is a copy"
