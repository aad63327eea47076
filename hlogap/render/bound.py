"""Output of `hlogap bound`: a small table or the contract's JSON object."""

from __future__ import annotations

import json

from hlogap.bounds.instruction import InstructionBound
from hlogap.units import fmt_si


def render_bound(result: InstructionBound, fmt: str) -> str:
    d = result.to_dict()
    if fmt == "json":
        return json.dumps(d, indent=2) + "\n"
    intensity = d["intensity"]
    chip = result.chip
    dtype = result.cost.matrix_dtype or "bf16"
    lines = [
        f"{d['name']} ({d['opcode']}) on {chip.display} [{chip.name}]",
        f"  FLOPs            {fmt_si(result.cost.flops, 'FLOP')}"
        + (
            f" (matrix {fmt_si(result.cost.matrix_flops, 'FLOP')} at {dtype})"
            if result.cost.matrix_flops
            else ""
        ),
        f"  HBM bytes        {fmt_si(result.cost.hbm_bytes, 'B')}",
        f"  interconnect     {fmt_si(result.cost.comm_bytes, 'B')}",
        "  intensity        "
        + ("-" if intensity is None else f"{intensity:.3g} FLOP/B")
        + f" (ridge point {chip.ridge_point(dtype):.0f} for {dtype})",
        f"  T_compute        {d['t_compute_us']:.4g} us",
        f"  T_memory         {d['t_memory_us']:.4g} us",
        f"  T_comm           {d['t_comm_us']:.4g} us",
        f"  bound            {d['bound_us']:.4g} us ({d['bound_by']}); "
        f"upper bound {d['upper_bound_us']:.4g} us",
    ]
    lines += [f"  hint: {h}" for h in result.hints]
    return "\n".join(lines) + "\n"
