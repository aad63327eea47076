"""Command buffers (XLA:GPU's CUDA graphs): one timed call, its ops' times estimated.

XLA:GPU outlines runs of ops into a `call` of a `command_buffer` computation and launches each
as one CUDA graph. The profile then times the call, not its ops: the call is one measured row,
bounded by the sum of its ops' bounds, and its ops are listed under it (`command_buffer_ops`),
each with its own bound and a share of the call's measured time in proportion to that bound
(`estimated`). The shares add up to the call's time, and the ops are not rows of the report's
`ops`: no total counts the call's time twice. A profile that traces the graph node by node
(nsys `--cuda-graph-trace=node`) times the ops themselves: they are then measured rows of
their own, and nothing is estimated.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import NamedTuple

from hlogap.bounds.hints import hints_for
from hlogap.bounds.roofline import Bound, BoundBy, bound_op
from hlogap.chips import Chip
from hlogap.cost import OpCost, cost_instruction
from hlogap.cost.base import called, index_of
from hlogap.hlo.fingerprint import fingerprint
from hlogap.hlo.ir import Instruction, Module
from hlogap.hlo.opcodes import COMMAND_BUFFER_FLAG, FREE, AsyncRole, categorize, is_command_buffer
from hlogap.hlo.printer import print_instruction
from hlogap.report.model import OpRow
from hlogap.units import fmt_us, printable

# Ops named in the call's hint of estimated times; the rest are in `command_buffer_ops`.
HINTED_OPS = 5


class SummedBound(Bound, frozen=True):
    """The bound of ops that run one after another: their lower bounds add up (XLA records a
    command buffer's commands in its schedule's order). The resource times are the ops'
    sums, so the upper bound is theirs too."""

    summed_lower_s: float = 0.0

    @property
    def lower_s(self) -> float:
        return self.summed_lower_s


class BufferedOp(NamedTuple):
    """One op a command buffer runs, costed and bounded on its own."""

    inst: Instruction
    cost: OpCost
    role: AsyncRole  # as a GPU times it
    bound: Bound


class CommandBuffer(NamedTuple):
    """A `call` XLA:GPU runs as one CUDA graph, and the ops of its computation."""

    call: Instruction
    module: Module
    ops: tuple[BufferedOp, ...]

    def on(self, chip: Chip) -> CommandBuffer:
        """The same ops bounded on another chip (`--what-if`)."""
        ops = tuple(o._replace(bound=bound_op(o.cost, chip, o.role)) for o in self.ops)
        return self._replace(ops=ops)

    @property
    def bound(self) -> Bound:
        """The sum of its ops' bounds; `unmodeled` (with the first reason) where one op has no
        bound: its share of the time is unknown."""
        unknown = next((o.bound for o in self.ops if o.bound.bound_by == "unmodeled"), None)
        if unknown is not None:
            return unknown
        by_resource: dict[BoundBy, float] = {}
        for o in self.ops:
            by_resource[o.bound.bound_by] = by_resource.get(o.bound.bound_by, 0.0) + o.bound.lower_s
        lower = sum(by_resource.values())
        # What bounds most of its bound time bounds it.
        bound_by: BoundBy = max(by_resource, key=lambda k: by_resource[k]) if lower else "none"
        return SummedBound(
            t_compute_s=sum(o.bound.t_compute_s for o in self.ops),
            t_memory_s=sum(o.bound.t_memory_s for o in self.ops),
            t_comm_s=sum(o.bound.t_comm_s for o in self.ops),
            bound_by=bound_by,
            t_host_s=sum(o.bound.t_host_s for o in self.ops),
            summed_lower_s=lower,
        )


def command_buffer(
    inst: Instruction,
    module: Module | None,
    chip: Chip,
    role: Callable[[Instruction], AsyncRole],
    timed_apart: Collection[str],
    num_devices: int | None = None,
) -> CommandBuffer | None:
    """The command buffer `inst` calls, its ops costed and bounded on `chip` (`role`: each
    op's async role as a GPU times it). None when `inst` is no command buffer call, its
    computation is not in `module`, or one of its ops is among `timed_apart` (the ops of the
    module the profile times on their own: its graph was traced node by node)."""
    if module is None or not is_command_buffer(inst):
        return None
    bodies = called(inst, index_of(module))
    if not bodies or any(op.name in timed_apart for op in bodies[0].instructions):
        return None
    ops = []
    for op in bodies[0].instructions:
        if op.opcode in FREE:
            continue
        cost = cost_instruction(op, module, num_devices=num_devices)
        timed_as = role(op)
        ops.append(BufferedOp(op, cost, timed_as, bound_op(cost, chip, timed_as)))
    return CommandBuffer(inst, module, tuple(ops))


def estimated_rows(call: OpRow, buffer: CommandBuffer, chip: Chip) -> list[OpRow]:
    """The rows of the buffer's ops under its call's row `call` (measured, bounded): each op's
    bound, and the call's measured time split in proportion to the ops' bounds; equally where
    an op has no bound (its share is not known) or none has a bound above 0. Their measured
    times add up to the call's."""
    runs = call.runs_per_occurrence
    per_run = max(call.occurrences * runs, 1)
    summed = buffer.bound
    weights = [o.bound.lower_s for o in buffer.ops]
    by_bound = summed.bound_by not in ("unmodeled", "none")
    if not by_bound:
        weights = [1.0] * len(weights)
    total = sum(weights)
    # The call beat its summed roof (the GPU's L2 cache holds what one node writes for the
    # next) and is bounded by its measured time: each op's floor is its share of it.
    beat_roof = call.bound_us < summed.lower_s * 1e6 * runs * call.occurrences
    how = "in proportion to its bound" if by_bound else "equally (not every op has a bound)"
    rows: list[OpRow] = []
    for op, weight in zip(buffer.ops, weights, strict=True):
        share = weight / total
        measured_us = call.measured_us * share
        bound_us = op.bound.lower_s * 1e6 * runs * call.occurrences
        if beat_roof:
            bound_us = min(bound_us, measured_us)
        estimate = (
            f"estimated: {share:.0%} of command buffer '{call.name}' "
            f"({fmt_us(measured_us)}), {how}: the profile times the CUDA graph as one "
            f"(XLA_FLAGS={COMMAND_BUFFER_FLAG} times each op)"
        )
        inst, cost = op.inst, op.cost
        rows.append(
            OpRow(
                module=call.module,
                program_id=call.program_id,
                name=inst.name,
                opcode=inst.opcode,
                category=categorize(inst, buffer.module),
                occurrences=call.occurrences,
                runs_per_occurrence=runs,
                events=0,  # no event of its own: the graph's launch is the call's
                measured_us=measured_us,
                total_us=measured_us,
                median_us=None if call.median_us is None else call.median_us * share,
                bound_us=bound_us,
                upper_bound_us=op.bound.upper_s * 1e6 * runs * call.occurrences,
                bound_by=op.bound.bound_by,
                flops=cost.flops * runs,
                bytes=cost.hbm_bytes * runs,
                comm_bytes=cost.comm_bytes * runs,
                transcendentals=cost.transcendentals * runs,
                dtype=(cost.matrix_dtype or cost.vector_dtype or "") if cost.flops else "",
                t_compute_us=op.bound.t_compute_s * 1e6 * runs,
                t_memory_us=op.bound.t_memory_s * 1e6 * runs,
                t_comm_us=op.bound.t_comm_s * 1e6 * runs,
                # From the HLO's metadata: printed as names are (no control characters).
                op_name=printable(inst.op_name or ""),
                source=printable(inst.source or ""),
                hlo=printable(print_instruction(inst)),
                fingerprint=fingerprint(inst, buffer.module),
                estimated=True,
                hints=[
                    estimate,
                    *hints_for(inst, cost, op.bound, chip, None, measured_us / per_run),
                ],
            )
        )
    return rows


def split_hint(call: OpRow) -> str:
    """The call's hint naming its ops' estimated times, longest first."""
    longest = sorted(call.command_buffer_ops, key=lambda r: -r.measured_us)
    named = ", ".join(f"{r.name} {fmt_us(r.measured_us)}" for r in longest[:HINTED_OPS])
    more = len(longest) - HINTED_OPS
    return f"its ops' estimated times: {named}" + (f" and {more} more" if more > 0 else "")
