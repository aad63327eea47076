"""`TopK` custom calls (`jax.lax.top_k` on CPU and GPU): one comparison per input element.

XLA's cost analysis reports -1 for them. Selecting the k largest of n needs every element
compared at least once (a partial sort does about n log2 k), so n comparisons per row is the
lower bound the roofline needs; the bytes are the operand read and the k values and indices
written (the default traffic of a custom call).
"""

from __future__ import annotations

from collections.abc import Sequence

from hlogap.cost.custom_calls.registry import CustomCost, rule
from hlogap.hlo.ir import Instruction, Shape


@rule("top-k selection", targets=("TopK", "__gpu$TopK"))
def top_k(inst: Instruction, shapes: Sequence[Shape | None], cost: CustomCost) -> None:
    values = shapes[0] if shapes else None
    if values is None:
        cost.work.unmodeled = "TopK without an operand"
        return
    cost.work.flops += values.num_elements
    cost.note = "TopK: one comparison per element (a lower bound; XLA reports -1)"
