"""What the pattern causes (unfused attention, materialized logits, per-example loop) read off
a module's HLO: the op rows of each module with their instructions, what a fusion computes
inside, and the ops a tensor of a given size flows through."""

from __future__ import annotations

from collections.abc import Iterator

from msgspec import Struct

from hlogap.advice.base import Context, removed
from hlogap.advice.graph import ModuleGraph
from hlogap.hlo.ir import Computation, Instruction, Module, Shape
from hlogap.hlo.printer import print_shape
from hlogap.report.model import OpRow

# Ops that only rename or regroup a value: looked through (as hlogap.advice.graph does).
PLUMBING = frozenset({"bitcast", "get-tuple-element", "tuple", "reshape"})


class ModuleOps(Struct):
    """One module's op rows, by instruction name, with the module and its graph."""

    module: Module
    graph: ModuleGraph
    rows: dict[str, OpRow]

    def instruction(self, comp: Computation, name: str) -> Instruction | None:
        return comp.instruction(name)

    def row(self, inst: Instruction) -> OpRow | None:
        return self.rows.get(inst.name)

    def home(self, inst: Instruction) -> Computation | None:
        return self.graph.home.get(id(inst))

    def loop_of(self, inst: Instruction) -> tuple[Instruction, Computation] | None:
        """The while loop whose body holds `inst`, and that body; None outside any loop."""
        comp = self.home(inst)
        if comp is None or comp.is_entry:
            return None
        loop = next(
            (
                i
                for c in self.module.computations
                for i in c.instructions
                if i.opcode == "while" and i.attrs.get("body", "").lstrip("%") == comp.name
            ),
            None,
        )
        return (loop, comp) if loop is not None else None


def module_ops(ctx: Context) -> Iterator[ModuleOps]:
    """The rows of each module whose HLO is at hand, with the module."""
    by_module: dict[tuple[str, str], list[OpRow]] = {}
    for row in ctx.rows:
        by_module.setdefault((row.module, row.program_id), []).append(row)
    for (name, program_id), rows in by_module.items():
        module = ctx.index.module(name, program_id)
        if module is None:
            continue
        yield ModuleOps(module, ctx.graph(module), {r.name: r for r in rows})


def inside(module: Module, inst: Instruction) -> list[Instruction]:
    """The instruction itself, or what its fused computation holds (one level of calls)."""
    if inst.opcode == "fusion" and inst.called:
        called = module.computation(inst.called[0])
        if called is not None:
            return list(called.instructions)
    return [inst]


def inner_dot(module: Module, inst: Instruction) -> Instruction | None:
    """The dot the op is or computes inside (the first one), else None."""
    return next((i for i in inside(module, inst) if i.opcode == "dot"), None)


def opcodes(module: Module, inst: Instruction) -> set[str]:
    return {i.opcode for i in inside(module, inst)}


def array(shape: Shape | None) -> Shape | None:
    return shape if shape is not None and not shape.is_tuple else None


def users(ops: ModuleOps, inst: Instruction) -> list[Instruction]:
    """The ops that read the instruction's result, through plumbing."""
    found: list[Instruction] = []
    todo, seen = [inst], set()
    while todo:
        op = todo.pop(0)
        if id(op) in seen:
            continue
        seen.add(id(op))
        for user in ops.graph.users.get(id(op), []):
            if user.opcode in PLUMBING:
                todo.append(user)
            else:
                found.append(user)
    return list({id(u): u for u in found}.values())


def makers(ops: ModuleOps, inst: Instruction) -> list[Instruction]:
    """The ops that make the instruction's operands, through plumbing (parameters left out)."""
    comp = ops.home(inst)
    if comp is None:
        return []
    found: list[Instruction] = []
    todo, seen = list(inst.operands), set()
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        op = comp.instruction(name)
        if op is None or op.opcode in ("parameter", "constant"):
            continue
        if op.opcode in PLUMBING:
            todo[:0] = op.operands
        else:
            found.append(op)
    return found


def big_bytes(inst: Instruction, elements: int) -> int:
    """Bytes per run of the op's operands and result that hold `elements` elements or more
    (the tensors a fused kernel keeps on chip)."""
    shapes = [*inst.operand_shapes, inst.shape]
    return sum(
        s.byte_size()
        for shape in shapes
        if shape is not None
        for s in shape.leaves()
        if s.num_elements >= elements
    )


def savings(rows: list[OpRow], insts: list[Instruction], elements: int) -> list[float]:
    """Each op's saving when the tensors of `elements` elements or more stay on chip: its
    bound without their bytes (FLOPs kept), its efficiency kept (hlogap.advice.base.removed)."""
    out = []
    for row, inst in zip(rows, insts, strict=True):
        per_occurrence = big_bytes(inst, elements) * max(row.runs_per_occurrence, 1)
        share = min(per_occurrence / row.bytes, 1.0) if row.bytes > 0 else 0.0
        out.append(removed(row, share))
    return out


def shape_text(shape: Shape | None) -> str:
    if shape is None:
        return "?"
    plain = Shape(shape.element_type, shape.dims, tuple_shapes=shape.tuple_shapes)
    return print_shape(plain)
