"""A fingerprint of an op that survives recompilation, for matching ops across runs.

XLA numbers instructions and fusions in creation order (`fusion.41` becomes `fusion.43` when an
unrelated op is added), so names are unstable. What an unrelated change leaves alone: the opcode,
the result and operand shapes with their element types, the fusion kind, the multiset of opcodes
(with shapes) inside a fused computation, custom-call targets, and the JAX `op_name` metadata of
the instruction and of what it fuses. Layouts are left out (layout assignment may move them).
"""

from __future__ import annotations

import hashlib

from hlogap.hlo.ir import Instruction, Module, Shape
from hlogap.hlo.opcodes import STRUCTURAL


def _shape(shape: Shape | None) -> str:
    if shape is None:
        return "?"
    if shape.is_tuple:
        return "(" + ",".join(_shape(s) for s in shape.tuple_shapes) + ")"
    return f"{shape.element_type}[{','.join(map(str, shape.dims))}]"


def _body(inst: Instruction, module: Module | None, depth: int = 0) -> list[str]:
    """Sorted description of the computations an instruction calls (fusions, to_apply...)."""
    if module is None or depth > 3:
        return []
    parts: list[str] = []
    for name in inst.called:
        comp = module.computation(name)
        if comp is None:
            continue
        for sub in comp.instructions:
            if sub.opcode in STRUCTURAL:
                continue
            parts.append(f"{sub.opcode}:{_shape(sub.shape)}:{sub.op_name or ''}")
            parts.extend(_body(sub, module, depth + 1))
    return sorted(parts)


def fingerprint(inst: Instruction, module: Module | None) -> str:
    """A short hex digest; equal for the same op in two compiles of the same program."""
    items = [
        inst.opcode,
        _shape(inst.shape),
        ";".join(_shape(s) for s in inst.operand_shapes),
        inst.fusion_kind or "",
        inst.custom_call_target or "",
        inst.op_name or "",
        *_body(inst, module),
    ]
    return hashlib.sha1("\n".join(items).encode()).hexdigest()[:16]
