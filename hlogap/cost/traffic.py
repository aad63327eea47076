"""HBM bytes of one op: what it reads from and writes to HBM, padding included.

A fusion moves only its operands and results; an operand read only through slices, dynamic
slices or gathers is read in part; an operand updated in place (dynamic-update-slice, scatter) is
read and written only where the update lands; non-scalar constants inside a fusion are read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from hlogap.cost.base import (
    ModuleIndex,
    Traffic,
    bare,
    called,
    first_leaf,
    hbm,
    operand_shapes,
    parameter,
)
from hlogap.cost.custom_calls import CustomCost
from hlogap.hlo.ir import Computation, Instruction, Shape

# Ops a fusion runs in place on its operand 0 (XLA shares the buffer): only the update moves.
IN_PLACE = frozenset({"dynamic-update-slice", "scatter"})


def op_traffic(
    inst: Instruction,
    ix: ModuleIndex | None,
    t: Traffic,
    custom: CustomCost | None,
) -> None:
    op = inst.opcode
    shapes = operand_shapes(inst, ix)
    out = inst.shape
    comps = called(inst, ix) if op == "fusion" else []
    if comps and ix is not None:
        _fusion(inst, comps[0], ix, t)
        return
    if op == "slice":
        t.add_read(out)
        t.add_write(out)
    elif op in ("dynamic-slice", "gather"):
        t.add_read(out)  # only what is picked
        for s in shapes[1:]:
            t.add_read(s)
        t.add_write(out)
    elif op == "dynamic-update-slice":  # in place: the update is read and written
        for s in shapes[1:]:
            t.add_read(s)
        t.add_write(shapes[1] if len(shapes) > 1 else None)
    elif op == "scatter":
        n = (len(shapes) - 1) // 2  # operands, indices, updates
        for s in shapes[n:]:
            t.add_read(s)  # the indices and the updates
        touched = _touched(inst, ix)
        if not _overwrites(inst, ix):
            t.add_read(touched)  # combined with the update: the rows it lands on are read
        t.add_write(touched)
    elif custom is not None:
        if custom.free:
            return
        if custom.hbm_bytes is not None:
            # The call's own total: what it writes is its outputs, the rest is read.
            written = min(sum(hbm(s)[0] for s in custom.outputs), int(custom.hbm_bytes))
            t.read += int(custom.hbm_bytes) - written
            t.write += written
            return
        for s in shapes:
            t.add_read(s)
        for s in custom.outputs:
            t.add_write(s)
    else:
        for s in shapes:
            t.add_read(s)
        for s in _written(inst):
            t.add_write(s)


def _written(inst: Instruction) -> list[Shape]:
    """The result leaves an op writes: not the aliased operands and contexts async ops carry."""
    op, out = inst.opcode, inst.shape
    if not out.is_tuple or not out.tuple_shapes:
        return [out]
    if op in ("all-gather-start", "collective-permute-start"):
        return [out.tuple_shapes[1]]  # (operand, result, contexts...)
    if op in ("copy-start", "recv"):
        return [first_leaf(out)]  # (destination, source or context, context)
    if op == "send":
        return []
    if op == "fusion":  # no module: skip results aliased to operands (TPU async collectives)
        aliased = {
            int(i)
            for i in re.findall(r"\{(\d+)\}\s*:", inst.attrs.get("output_to_operand_aliasing", ""))
        }
        return [s for i, s in enumerate(out.tuple_shapes) if i not in aliased]
    return [out]


def _fusion(inst: Instruction, comp: Computation, ix: ModuleIndex, t: Traffic) -> None:
    users = ix.users(comp)
    outer = operand_shapes(inst, ix)
    for p in comp.instructions:
        if p.opcode == "parameter" and p.parameter_number is not None:
            number = p.parameter_number
            shape = outer[number] if number < len(outer) else None
            _read_parameter(p, shape or p.shape, comp, users, ix, t)
        elif p.opcode == "constant" and p.shape.num_elements > 1:
            t.add_read(p.shape)  # non-scalar constants live in memory (XLA counts them too)
    root = comp.root
    parts = root.operands if root is not None and root.opcode == "tuple" else None
    local = ix.local[bare(comp.name)]
    results: Sequence[Shape] = inst.shape.tuple_shapes if inst.shape.is_tuple else [inst.shape]
    for i, leaf in enumerate(results):
        producer = local.get(bare(parts[i])) if parts and i < len(parts) else root
        if producer is not None and producer.opcode == "parameter" and parts:
            continue  # passed through: nothing is written
        if producer is not None and _in_place(producer, local):
            if leaf.memory_space == 0:  # only where the update lands is written
                t.add_write(_touched(producer, ix))
        else:
            t.add_write(leaf)


def _read_parameter(
    p: Instruction,
    outer: Shape,
    comp: Computation,
    users: dict[str, list[Instruction]],
    ix: ModuleIndex,
    t: Traffic,
) -> None:
    if all(leaf.memory_space != 0 for leaf in outer.leaves()):
        return
    partial = Traffic()
    if _partial_read(p, comp, users, ix, partial) and partial.read < hbm(outer)[0]:
        t.read += partial.read
        t.padding += partial.padding
    else:
        t.add_read(outer)  # read once, however many ops use it (broadcasts included)


def _partial_read(
    value: Instruction,
    comp: Computation,
    users: dict[str, list[Instruction]],
    ix: ModuleIndex,
    t: Traffic,
) -> bool:
    """Adds what `value`'s users read of it; False as soon as one reads all of it."""
    name = bare(value.name)
    root = comp.root
    if value is root:
        return False  # flows out whole: into the result, or to the op using a nested fusion
    for user in users.get(name, []):
        op = user.opcode
        first = bool(user.operands) and bare(user.operands[0]) == name
        if op == "slice" or (op in ("dynamic-slice", "gather") and first):
            t.add_read(user.shape)
        elif op in IN_PLACE and first:
            if op == "scatter" and not _overwrites(user, ix):
                t.add_read(_touched(user, ix))  # combined with the update: the rows it lands on
        elif op == "tuple" and user is root:
            continue  # passed through: not read
        elif op in ("bitcast", "get-tuple-element"):
            if not _partial_read(user, comp, users, ix, t):
                return False
        elif op == "fusion" and [bare(o) for o in user.operands].count(name) == 1:
            inner = called(user, ix)
            number = [bare(o) for o in user.operands].index(name)
            param = parameter(inner[0], number) if inner else None
            if param is None or not _partial_read(param, inner[0], ix.users(inner[0]), ix, t):
                return False
        else:
            return False
    return True


def _in_place(inst: Instruction, local: dict[str, Instruction]) -> bool:
    """An update of a fusion operand, whose buffer the result shares (not of a fresh buffer, such
    as a broadcast zero the fusion fills first)."""
    if inst.opcode not in IN_PLACE or not inst.operands:
        return False
    base = local.get(bare(inst.operands[0]))
    seen: set[str] = set()  # hostile HLO may chain bitcasts into a cycle
    while base is not None and base.opcode == "bitcast" and base.operands:
        if base.name in seen:
            return False
        seen.add(base.name)
        base = local.get(bare(base.operands[0]))
    return base is not None and base.opcode == "parameter"


def _update(inst: Instruction, ix: ModuleIndex | None) -> Shape | None:
    """The update of an in-place op: dynamic-update-slice operand 1, a scatter's first updates."""
    shapes = operand_shapes(inst, ix)
    index = 1 if inst.opcode == "dynamic-update-slice" else (len(shapes) - 1) // 2 + 1
    return shapes[index] if index < len(shapes) else None


def _touched(inst: Instruction, ix: ModuleIndex | None) -> Shape | None:
    """What an in-place update touches of its operand: the update, or the whole operand when
    that is smaller (a segment sum adds many update rows into few operand rows, which stay in
    cache between updates)."""
    update = _update(inst, ix)
    operand = (operand_shapes(inst, ix) or [None])[0]
    if inst.opcode == "scatter" and operand is not None and update is not None:
        return operand if hbm(operand)[0] < hbm(update)[0] else update
    return update


def _overwrites(inst: Instruction, ix: ModuleIndex | None) -> bool:
    """A scatter whose combiner returns the update (`.at[].set`): the old rows are not read."""
    combiner = called(inst, ix)
    root = combiner[0].root if combiner else None
    return root is not None and root.opcode == "parameter" and root.parameter_number == 1


def is_bitcast(inst: Instruction, operand: Shape | None) -> bool:
    """A reshape or transpose that keeps the physical element order moves nothing."""
    out = inst.shape
    if operand is None or operand.is_tuple or operand.element_type != out.element_type:
        return False
    lay_in, lay_out = operand.layout, out.layout
    if (lay_in and lay_in.tiles) or (lay_out and lay_out.tiles):
        return False
    if operand.memory_space != out.memory_space:
        return False
    m2m_in = list(lay_in.minor_to_major) if lay_in and lay_in.minor_to_major else None
    m2m_out = list(lay_out.minor_to_major) if lay_out and lay_out.minor_to_major else None
    if inst.opcode == "transpose":
        perm = inst.dimensions or tuple(range(out.rank))
        src = m2m_in or _row_major(operand.rank)
        dst = [perm[d] for d in (m2m_out or _row_major(out.rank))]
        return _physical(src, operand.dims) == _physical(dst, operand.dims)
    # A reshape between row-major layouts is a bitcast (size-1 dims do not matter).
    return all(
        m2m is None or _physical(m2m, shape.dims) == _physical(_row_major(shape.rank), shape.dims)
        for m2m, shape in ((m2m_in, operand), (m2m_out, out))
    )


def _row_major(rank: int) -> list[int]:
    return list(reversed(range(rank)))


def _physical(minor_to_major: list[int], dims: Sequence[int]) -> list[int]:
    return [d for d in minor_to_major if d < len(dims) and dims[d] != 1]
