"""Who makes an op's input and who reads its output, in its module (through the bitcasts and
tuple plumbing between them), named as a person reading the profile would look them up."""

from __future__ import annotations

from hlogap.hlo.ir import Computation, Instruction, Module

# Ops that only rename or regroup a value: looked through.
_PLUMBING = frozenset({"bitcast", "get-tuple-element", "tuple", "reshape"})


def _home(module: Module, inst: Instruction) -> Computation | None:
    return next((c for c in module.computations if inst in c.instructions), None)


def producers(module: Module, inst: Instruction) -> list[str]:
    """The ops that make this op's operands (`the program's input x` for entry parameters)."""
    comp = _home(module, inst)
    if comp is None:
        return []
    by_name = {i.name: i for i in comp.instructions}
    found: list[str] = []
    todo = list(inst.operands)
    seen: set[str] = set()
    while todo:
        name = todo.pop(0)
        if name in seen or name not in by_name:
            continue
        seen.add(name)
        op = by_name[name]
        if op.opcode in _PLUMBING:
            todo[:0] = op.operands
        elif op.opcode == "parameter":
            found.append(f"the input {op.op_name or op.name}")
        else:
            found.append(op.name)
    return found


def consumers(module: Module, inst: Instruction) -> list[str]:
    """The ops that read this op's result (`the program's output` for the root)."""
    comp = _home(module, inst)
    if comp is None:
        return []
    found: list[str] = []
    todo = [inst]
    seen: set[str] = set()
    while todo:
        op = todo.pop(0)
        if op.name in seen:
            continue
        seen.add(op.name)
        if op.is_root:
            found.append("the program's output" if comp.is_entry else f"the root of {comp.name}")
        for user in _users(comp, op):
            if user.opcode in _PLUMBING:
                todo.append(user)
            else:
                found.append(user.name)
    return list(dict.fromkeys(found))


def _users(comp: Computation, op: Instruction) -> list[Instruction]:
    return [i for i in comp.instructions if op.name in i.operands]
