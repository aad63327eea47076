"""Materialized logits: a [tokens, vocab] logits tensor (vocab of ~32k or more) made by a
matmul, written to memory and read by a softmax / cross-entropy (a reduction over the vocab and
an exponential), and the tensors of its size the loss and its gradient make from it. A chunked
(or fused) cross-entropy never holds them: the saving is each op's time over its bound without
their bytes (its FLOPs and efficiency kept).

Logits made inside a loop whose every product reads or writes the vocab dimension (the output
matmul, and in the gradient its two products, nothing else of the model) are a chunked loss
already: each trip holds one block of tokens' logits, which is the change this cause asks for.
A loop that also holds other products (a microbatch loop around the whole model) is no chunk:
its logits are a microbatch's, still materialized."""

from __future__ import annotations

from collections.abc import Iterator

from hlogap.advice.base import Context, Finding, register
from hlogap.advice.patterns import (
    ModuleOps,
    array,
    inner_dot,
    makers,
    module_ops,
    opcodes,
    savings,
    shape_text,
    users,
)
from hlogap.hlo.ir import Instruction
from hlogap.report.model import OpRow
from hlogap.units import fmt_si, fmt_us

MIN_VOCAB = 30_000
MIN_TOKENS = 8


def _logits(ops: ModuleOps, inst: Instruction) -> Instruction | None:
    """The op's dot when it writes a [tokens, vocab] result (the dot's own size)."""
    dot = inner_dot(ops.module, inst)
    out = array(inst.shape)
    if dot is None or out is None or len(dot.shape.dims) < 2:
        return None
    vocab, tokens = dot.shape.dims[-1], dot.shape.num_elements // max(dot.shape.dims[-1], 1)
    if vocab < MIN_VOCAB or tokens < MIN_TOKENS or out.num_elements != dot.shape.num_elements:
        return None
    return dot


def _chunk_loop(ops: ModuleOps, inst: Instruction, vocab: int) -> Instruction | None:
    """The while loop whose body makes the logits one block of tokens a trip (a chunked loss:
    every product in the body reads or writes the vocab dimension), else None."""
    found = ops.loop_of(inst)
    if found is None:
        return None
    loop, comp = found
    dots = [d for i in comp.instructions if (d := inner_dot(ops.module, i)) is not None]
    if all(
        any(
            vocab in s.dims
            for shape in (d.shape, *d.operand_shapes)
            if shape is not None
            for s in shape.leaves()
        )
        for d in dots
    ):
        return loop
    return None


def _component(ops: ModuleOps, start: Instruction, elements: int) -> list[Instruction]:
    """The ops joined to `start` by tensors of `elements` elements or more (either way), and
    the ops that read such a tensor (a reduction, the gradient's matmul), not followed on."""
    found = {id(start): start}
    todo = [start]
    while todo:
        op = todo.pop(0)
        for other in [*users(ops, op), *makers(ops, op)]:
            if id(other) in found or ops.row(other) is None:
                continue
            out = array(other.shape)
            reads = any(s is not None and s.num_elements >= elements for s in other.operand_shapes)
            big = out is not None and out.num_elements >= elements
            if not (big or (reads and other in users(ops, op))):
                continue
            found[id(other)] = other
            if big and inner_dot(ops.module, other) is None:
                todo.append(other)
    return list(found.values())


def materialized_logits(ctx: Context) -> Iterator[Finding]:
    for ops in module_ops(ctx):
        taken: set[int] = set()
        for comp in ops.module.computations:
            for inst in comp.instructions:
                if ops.row(inst) is None or id(inst) in taken:
                    continue
                dot = _logits(ops, inst)
                if dot is None:
                    continue
                elements = dot.shape.num_elements
                if _chunk_loop(ops, inst, dot.shape.dims[-1]) is not None:
                    continue
                insts = [i for i in _component(ops, inst, elements) if id(i) not in taken]
                inner = set().union(*(opcodes(ops.module, i) for i in insts))
                if "exponential" not in inner or "reduce" not in inner:
                    continue
                taken.update(id(i) for i in insts)
                rows: list[OpRow] = [r for i in insts if (r := ops.row(i)) is not None]
                saved = savings(rows, insts, elements)
                total = sum(saved)
                if total <= 0:
                    continue
                logits = dot.shape
                measured = sum(r.measured_us for r in rows)
                big = sum(1 for i in insts if (array(i.shape) or logits).num_elements >= elements)
                yield Finding(
                    "materialized logits",
                    tuple(rows),
                    total,
                    f"{inst.name} writes the logits {shape_text(logits)} "
                    f"({fmt_si(logits.byte_size(), 'B')}, vocab {logits.dims[-1]:,}) to memory; "
                    f"the softmax / cross-entropy reads them and {big} op(s) write tensors of "
                    f"their size; the {len(rows)} ops take {fmt_us(measured)} (device time); "
                    f"never held whole, they save {fmt_us(total)}",
                    "compute the loss in chunks of tokens (a chunked cross-entropy: the "
                    "output matmul, log-softmax and loss per chunk under jax.checkpoint or "
                    "lax.map, so only a chunk's logits exist at once), or a fused "
                    "linear+cross-entropy kernel",
                    op_savings=tuple(saved),
                )


register(materialized_logits)
