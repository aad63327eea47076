"""Dense linear algebra custom calls: LAPACK on CPU (`lapack_spotrf_ffi`, ...), cuSOLVER and
hipSOLVER/rocSOLVER on GPUs. XLA counts them as 0 FLOPs; these are the standard operation
counts of LAPACK Working Note 41 (Blackford & Dongarra, "Installation Guide for LAPACK",
Appendix: operation counts), leading terms, per matrix, times the batch. Complex types count 4
real FLOPs per complex multiply-add pair (x4). Eigen- and singular-value solvers count only
their reduction to tridiagonal / bidiagonal form, the part every algorithm performs: a lower
bound (docs/cost-model.md).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from hlogap.cost.custom_calls.registry import CustomCost, rule
from hlogap.cost.matmul import matmul_dtype
from hlogap.hlo.ir import Instruction, Shape

_ROUTINE = re.compile(r"(potrf|getrf|geqrf|orgqr|ungqr|trsm|syevd|heevd|gesdd|gesvd)")


def lapack_flops(routine: str, m: int, n: int, k: int = 0) -> float:
    """Real FLOPs of one matrix: `m` x `n` (rows, columns; potrf, syevd: n x n); `k`: orgqr's
    reflectors, trsm's triangle order (B is m x n)."""
    if routine == "potrf":
        return n**3 / 3
    if routine == "getrf":
        big, small = max(m, n), min(m, n)
        return big * small**2 - small**3 / 3
    if routine == "geqrf":
        big, small = max(m, n), min(m, n)
        return 2 * big * small**2 - 2 * small**3 / 3
    if routine in ("orgqr", "ungqr"):
        return 4 * m * n * k - 2 * (m + n) * k**2 + 4 * k**3 / 3
    if routine == "trsm":  # B (m x n) solved against a k x k triangle, on either side
        return m * n * k
    if routine in ("syevd", "heevd"):  # reduction to tridiagonal form
        return 4 * n**3 / 3
    big, small = max(m, n), min(m, n)  # gesdd, gesvd: reduction to bidiagonal form
    return 4 * big * small**2 - 4 * small**3 / 3


@rule("dense linear algebra", prefixes=("lapack_", "cusolver_", "hipsolver_", "rocsolver_"))
def linear_algebra(inst: Instruction, shapes: Sequence[Shape | None], cost: CustomCost) -> None:
    target = inst.custom_call_target or ""
    found = _ROUTINE.search(target)
    a = shapes[0] if shapes else None
    if found is None or a is None or a.rank < 2:
        cost.work.unmodeled = f"linear algebra call '{target}' has no operation count here"
        return
    routine = found.group(1)
    *batch, m, n = a.dims
    k = 0
    if routine in ("orgqr", "ungqr"):
        tau = shapes[1] if len(shapes) > 1 else None
        k = tau.dims[-1] if tau is not None and tau.rank else min(m, n)
    elif routine == "trsm":
        b = shapes[1] if len(shapes) > 1 else None
        if b is None or b.rank < 2:
            cost.work.unmodeled = f"triangular solve '{target}': no right-hand side"
            return
        k = m  # the triangle's order
        *batch, m, n = b.dims
    complex_factor = 4 if a.element_type.startswith("c") else 1
    flops = lapack_flops(routine, m, n, k) * math.prod(batch) * complex_factor
    cost.work.add_matrix(flops, matmul_dtype(shapes))
    cost.note = f"{routine}: LAPACK Working Note 41 operation count"
