"""Copies and transposes that only change a layout: the time they add, and the ops on either
side that could agree on one layout instead."""

from __future__ import annotations

from collections.abc import Iterator

from hlogap.advice.base import Context, Finding, capped, register
from hlogap.hlo.ir import Instruction, Module
from hlogap.units import fmt_si


def layout_copies(ctx: Context) -> Iterator[Finding]:
    for row in ctx.rows:
        inst, module = ctx.instruction(row)
        if inst is None or module is None or not _is_layout_change(inst, module):
            continue
        saving = capped(row, row.measured_us)
        if saving <= 0:
            continue
        graph = ctx.graph(module)
        makers, readers = graph.producers(inst), graph.consumers(inst)
        maker = makers[0] if makers else "its input"
        reader = ", ".join(readers[:2]) if readers else "its users"
        runs = max(row.runs_per_occurrence, 1)
        yield Finding(
            "layout copy",
            (row,),
            saving,
            f"moves {fmt_si(row.bytes / runs, 'B')} per run only to change the layout of "
            f"{maker if maker.startswith('the input') else maker + chr(39) + 's result'} "
            f"for {reader}",
            f"have {maker} write the layout {reader} reads (or fuse the copy into it)",
        )


def _is_layout_change(inst: Instruction, module: Module) -> bool:
    """A transpose, a copy into another layout, or a fusion of only those (under bitcasts). A
    copy into the same layout is a buffer copy (a loop's state, an output XLA may not alias):
    not a layout change."""
    if inst.opcode != "fusion" or not inst.called:
        return _relayouts(inst)
    called = module.computation(inst.called[0])
    if called is None:
        return False
    work = [i for i in called.instructions if i.opcode not in ("parameter", "bitcast")]
    return bool(work) and all(_relayouts(i) for i in work)


def _relayouts(inst: Instruction) -> bool:
    if inst.opcode == "transpose":
        return True
    if inst.opcode != "copy" or not inst.operand_shapes or inst.operand_shapes[0] is None:
        return False
    before, after = inst.operand_shapes[0].layout, inst.shape.layout
    return (
        before is not None and after is not None and before.minor_to_major != after.minor_to_major
    )


register(layout_copies)
