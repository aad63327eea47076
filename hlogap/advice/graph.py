"""Who makes an op's input and who reads its output, in its module (through the bitcasts and
tuple plumbing between them), named as a person reading the profile would look them up."""

from __future__ import annotations

from msgspec import Struct

from hlogap.hlo.ir import Computation, Instruction, Module

# Ops that only rename or regroup a value: looked through.
_PLUMBING = frozenset({"bitcast", "get-tuple-element", "tuple", "reshape"})


class ModuleGraph(Struct):
    """Each instruction's computation and users, found once per module."""

    home: dict[int, Computation]  # by id(instruction): names repeat across computations
    users: dict[int, list[Instruction]]

    @classmethod
    def of(cls, module: Module) -> ModuleGraph:
        home: dict[int, Computation] = {}
        users: dict[int, list[Instruction]] = {}
        for comp in module.computations:
            by_name = {i.name: i for i in comp.instructions}
            for inst in comp.instructions:
                home[id(inst)] = comp
                for operand in inst.operands:
                    made = by_name.get(operand)
                    if made is not None:
                        users.setdefault(id(made), []).append(inst)
        return cls(home, users)

    def producers(self, inst: Instruction) -> list[str]:
        """The ops that make this op's operands (`the input x` for parameters)."""
        comp = self.home.get(id(inst))
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

    def consumers(self, inst: Instruction) -> list[str]:
        """The ops that read this op's result (`the program's output` for the root)."""
        comp = self.home.get(id(inst))
        if comp is None:
            return []
        found: list[str] = []
        todo = [inst]
        seen: set[int] = set()
        while todo:
            op = todo.pop(0)
            if id(op) in seen:
                continue
            seen.add(id(op))
            if op.is_root:
                found.append(
                    "the program's output" if comp.is_entry else f"the root of {comp.name}"
                )
            for user in self.users.get(id(op), []):
                if user.opcode in _PLUMBING:
                    todo.append(user)
                else:
                    found.append(user.name)
        return list(dict.fromkeys(found))
