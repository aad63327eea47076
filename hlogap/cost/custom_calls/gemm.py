"""cuBLAS, cuBLASLt and hipBLASLt gemms: a dot from the backend config's dimension numbers."""

from __future__ import annotations

from collections.abc import Sequence

from hlogap.cost.base import config
from hlogap.cost.custom_calls.registry import CustomCost, rule
from hlogap.cost.matmul import dot_flops, matmul_dtype
from hlogap.hlo.ir import Instruction, Shape


@rule("library gemm", prefixes=("__cublas$", "__hipblas"))
def gemm(inst: Instruction, shapes: Sequence[Shape | None], cost: CustomCost) -> None:
    target = inst.custom_call_target
    gemm_config = config(inst).get("gemm_backend_config")
    dnums = gemm_config.get("dot_dimension_numbers") if isinstance(gemm_config, dict) else None
    lhs = shapes[0] if shapes else None
    if isinstance(dnums, dict) and lhs is not None:
        contracting = [int(d) for d in dnums.get("lhs_contracting_dimensions", [])]
        cost.work.add_matrix(dot_flops(lhs, cost.outputs[0], contracting), matmul_dtype(shapes))
    else:
        cost.work.unmodeled = f"gemm custom call '{target}' has no dot_dimension_numbers"
