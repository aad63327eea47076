"""cuDNN and MIOpen convolutions: the convolution's FLOPs from its window and shapes."""

from __future__ import annotations

from collections.abc import Sequence

from hlogap.cost.custom_calls.registry import CustomCost, rule
from hlogap.cost.matmul import conv_flops, matmul_dtype
from hlogap.hlo.ir import Instruction, Shape


@rule("library convolution", prefixes=("__cudnn$conv", "__miopen$conv"))
def convolution(inst: Instruction, shapes: Sequence[Shape | None], cost: CustomCost) -> None:
    lhs = shapes[0] if shapes else None
    rhs = shapes[1] if len(shapes) > 1 else None
    if lhs is None or rhs is None:
        cost.work.unmodeled = f"convolution call '{inst.custom_call_target}' has < 2 operands"
        return
    cost.work.add_matrix(conv_flops(inst, lhs, rhs, cost.outputs[0]), matmul_dtype(shapes))
