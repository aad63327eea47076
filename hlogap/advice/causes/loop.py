"""A per-example loop: a while loop whose trips walk a batch (its trip count is a dimension of
an array the loop carries), each trip a matrix-vector product against the same weights (an
operand the loop passes through unchanged). Batched, the weights are read once for all the
examples: the saving is the loop's time (the while and its body's ops) over the batched
product's bound (the body's FLOPs at the peak, the weights read once)."""

from __future__ import annotations

import json
from collections.abc import Iterator

from hlogap.advice.base import Context, Finding, register
from hlogap.advice.patterns import ModuleOps, inside, module_ops, shape_text
from hlogap.hlo.ir import Computation, Instruction, Shape
from hlogap.report.model import OpRow
from hlogap.units import fmt_si, fmt_us

MIN_TRIPS = 4  # fewer trips than this are no batch


def _trips(inst: Instruction) -> int | None:
    try:
        config = json.loads(inst.backend_config or "{}")
        return int(config["known_trip_count"]["n"])
    except (ValueError, KeyError, TypeError):
        return None


def _vector(shape: Shape | None) -> bool:
    return shape is not None and not shape.is_tuple and sum(d > 1 for d in shape.dims) <= 1


def _matrix(shape: Shape | None) -> bool:
    return shape is not None and not shape.is_tuple and sum(d > 1 for d in shape.dims) >= 2


def _invariant(body: Computation) -> set[str]:
    """The body's values the loop passes on unchanged: get-tuple-elements of its parameter at
    the index the root tuple hands them back."""
    root = body.root
    if root is None or root.opcode != "tuple":
        return set()
    out = set()
    for index, name in enumerate(root.operands):
        op = body.instruction(name)
        if op is not None and op.opcode == "get-tuple-element" and op.tuple_index == index:
            out.add(op.name)
    return out


def _weights(body: Computation, dot_op: Instruction, kept: set[str]) -> Instruction | None:
    """The dot's operand that is a loop-invariant matrix (through bitcasts), if any."""
    for name in dot_op.operands:
        op = body.instruction(name)
        while op is not None and op.opcode in ("bitcast", "reshape", "copy") and op.operands:
            op = body.instruction(op.operands[0])
        if op is not None and op.name in kept and _matrix(op.shape):
            return op
    return None


def _matvec(ops: ModuleOps, body: Computation) -> tuple[Instruction, Instruction] | None:
    """The body's op that multiplies a loop-invariant matrix by a vector, and the matrix."""
    kept = _invariant(body)
    for inst in body.instructions:
        if ops.row(inst) is None:
            continue
        dot = next((i for i in inside(ops.module, inst) if i.opcode == "dot"), None)
        if dot is None or not _vector(dot.shape):
            continue
        shapes = [s for s in inst.operand_shapes if s is not None]
        if not any(_vector(s) for s in shapes):
            continue
        weights = _weights(body, inst, kept)
        if weights is not None:
            return inst, weights
    return None


def _body_rows(ops: ModuleOps, body_name: str) -> list[OpRow]:
    """The rows of the body's ops and of the computations it calls (nested loops)."""
    out: list[OpRow] = []
    todo, seen = [body_name], set()
    while todo:
        name = todo.pop()
        comp = ops.module.computation(name)
        if comp is None or name in seen:
            continue
        seen.add(name)
        for inst in comp.instructions:
            row = ops.row(inst)
            if row is not None:
                out.append(row)
            if inst.opcode == "while":
                todo += [c.lstrip("%") for c in inst.called]
    return out


def per_example_loop(ctx: Context) -> Iterator[Finding]:
    for ops in module_ops(ctx):
        for comp in ops.module.computations:
            for inst in comp.instructions:
                loop = ops.row(inst)
                if inst.opcode != "while" or loop is None:
                    continue
                found = _finding(ctx, ops, inst, loop)
                if found is not None:
                    yield found


def _finding(ctx: Context, ops: ModuleOps, inst: Instruction, loop: OpRow) -> Finding | None:
    trips = _trips(inst)
    body_name = inst.attrs.get("body", "").lstrip("%") or (inst.called[-1] if inst.called else "")
    body = ops.module.computation(body_name)
    if trips is None or trips < MIN_TRIPS or body is None:
        return None
    # The trips walk a batch: an array the loop carries has a dimension of the trip count.
    carried = [s for s in (inst.shape.leaves() if inst.shape else []) if trips in s.dims]
    if not carried:
        return None
    found = _matvec(ops, body)
    if found is None:
        return None
    matvec, weights = found
    rows = [loop, *_body_rows(ops, body_name)]
    rows = list({(r.module, r.program_id, r.name): r for r in rows}.values())
    measured = sum(r.measured_us for r in rows)
    flops = sum(r.flops * r.occurrences for r in rows)
    weight_bytes = weights.shape.byte_size()
    # Batched: the weights read once per occurrence of the loop, not once per trip.
    occurrences = max(loop.occurrences, 1)
    moved = sum(r.bytes * r.occurrences for r in rows)
    moved -= weight_bytes * (trips - 1) * occurrences
    dtype = next((r.dtype for r in rows if r.name == matvec.name and r.dtype), "f32")
    peak = ctx.chip.matrix_peak(dtype)
    bound = max(flops / peak if peak else 0.0, max(moved, 0.0) / ctx.chip.hbm_bw) * 1e6
    saving = max(0.0, measured - bound)
    if saving <= 0:
        return None
    share = saving / measured
    batch = carried[0]
    return Finding(
        "per-example loop",
        tuple(rows),
        saving,
        f"{inst.name} runs {trips} trips over the batch ({shape_text(batch)} carried), each "
        f"trip {matvec.name} multiplies the same weights {shape_text(weights.shape)} "
        f"({weights.name}, passed through the loop unchanged) by one vector: the weights are "
        f"read {trips} times a run ({fmt_si(weight_bytes * trips, 'B')}); the loop's "
        f"{len(rows)} ops take {fmt_us(measured)} (device time), one batched product's bound "
        f"is {fmt_us(bound)} ({fmt_si(flops / max(occurrences, 1), 'FLOP')} a run)",
        f"batch the loop: jax.vmap the per-example function over the batch (or write the "
        f"batched product, a [{trips}, ...] matrix times the weights) so the weights are read "
        "once a step, not once an example",
        op_savings=tuple(r.measured_us * share for r in rows),
    )


register(per_example_loop)
