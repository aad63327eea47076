"""Copies and transposes that only change a layout: the time they add, and the ops on either
side that could agree on one layout instead."""

from __future__ import annotations

from collections.abc import Iterator

from hlogap.advice.base import Context, Finding, capped, register
from hlogap.hlo.ir import Instruction, Module
from hlogap.hlo.opcodes import changes_layout
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
    """A transpose or a copy into another layout, or a fusion of only those (under bitcasts)."""
    if inst.opcode != "fusion" or not inst.called:
        return changes_layout(inst)
    called = module.computation(inst.called[0])
    if called is None:
        return False
    work = [i for i in called.instructions if i.opcode not in ("parameter", "bitcast")]
    return bool(work) and all(changes_layout(i) for i in work)


register(layout_copies)
