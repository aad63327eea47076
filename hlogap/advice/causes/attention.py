"""Unfused attention: a batched QK^T product whose [.., Sq, Sk] scores are written to memory,
read by a softmax (a max/sum reduction over Sk and an exponential) and by the batched PV
product. A fused attention kernel keeps the scores on chip: the saving is each op's time over
its bound without the score tensors' bytes (its FLOPs and efficiency kept). One action for
every layer of the pattern (`layers`). Scores made one block of keys a trip of a loop with an
online softmax (blocked, flash-style attention written in JAX) are what a fused kernel
computes, not this pattern."""

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

MIN_SEQ = 64  # scores this long on both sides or more are worth a fused kernel
MAX_HOPS = 12  # ops between the two products

_KERNEL = {
    "gpu": "jax.nn.dot_product_attention(q, k, v, implementation='cudnn') (cuDNN flash "
    "attention; on AMD the vendor's fused attention, e.g. CK flash attention)",
    "tpu": "Pallas flash or splash attention (jax.experimental.pallas.ops.tpu.flash_attention "
    "/ splash_attention), or jax.nn.dot_product_attention",
}


def _scores(ops: ModuleOps, inst: Instruction) -> Instruction | None:
    """The op's batched dot when its [.., Sq, Sk] result is what the op writes (QK^T)."""
    dot = inner_dot(ops.module, inst)
    out = array(inst.shape)
    if dot is None or dot.dot_dims is None or not dot.dot_dims.lhs_batch or out is None:
        return None
    dims = dot.shape.dims
    if len(dims) < 3 or min(dims[-2:]) < MIN_SEQ:
        return None
    if out.num_elements != dot.shape.num_elements:
        return None
    return dot


def _key_block_loop(ops: ModuleOps, inst: Instruction, dot: Instruction) -> Instruction | None:
    """The while loop whose body makes these scores one block of keys a trip with an online
    softmax, else None: the loop carries a running statistic of each score row (a tensor of
    the scores' shape less the key dimension: the running max, the sum of exponentials) and
    never the scores, so a block's scores are all that exist at once. A loop over layers
    carries activations, not per-row softmax statistics."""
    found = ops.loop_of(inst)
    if found is None:
        return None
    loop, _ = found
    carried = {s.dims for s in loop.shape.leaves()}
    if dot.shape.dims[:-1] in carried and dot.shape.dims not in carried:
        return loop
    return None


def _layer(
    ops: ModuleOps, qk: Instruction, elements: int
) -> tuple[list[Instruction], Instruction] | None:
    """The ops from the QK product through the softmax to the PV product that reads the
    scores; None unless such a product and a softmax are found."""
    rows_of = elements // max(array(qk.shape).dims[-1], 1)  # type: ignore[union-attr]
    chain: list[Instruction] = [qk]
    seen = {id(qk)}
    todo = [(qk, 0)]
    pv: Instruction | None = None
    while todo:
        op, hops = todo.pop(0)
        for user in users(ops, op):
            if id(user) in seen or ops.row(user) is None:
                continue
            seen.add(id(user))
            dot = inner_dot(ops.module, user)
            if dot is not None and dot.dot_dims is not None and dot.dot_dims.lhs_batch:
                pv = pv or user
                chain.append(user)
                continue
            out = array(user.shape)
            if out is None or out.num_elements < rows_of or hops >= MAX_HOPS:
                continue
            chain.append(user)
            todo.append((user, hops + 1))
    if pv is None:
        return None
    inner = set().union(*(opcodes(ops.module, i) for i in chain))
    if "exponential" not in inner or "reduce" not in inner:
        return None
    # Score-sized tensors made for the product (a mask, a bias): part of the traffic.
    extra = [m for m in makers(ops, qk) if (array(m.shape) or qk.shape).num_elements >= elements]
    return [*chain, *(m for m in extra if ops.row(m) is not None)], pv


def unfused_attention(ctx: Context) -> Iterator[Finding]:
    for ops in module_ops(ctx):
        layers: list[tuple[Instruction, Instruction, list[Instruction], Instruction]] = []
        taken: set[int] = set()
        for comp in ops.module.computations:
            for inst in comp.instructions:
                if ops.row(inst) is None or id(inst) in taken:
                    continue
                dot = _scores(ops, inst)
                if dot is None or _key_block_loop(ops, inst, dot) is not None:
                    continue
                found = _layer(ops, inst, dot.shape.num_elements)
                if found is None:
                    continue
                chain = [i for i in found[0] if id(i) not in taken]
                taken.update(id(i) for i in chain)
                layers.append((inst, dot, chain, found[1]))
        if not layers:
            continue
        insts = [i for _, _, chain, _ in layers for i in chain]
        rows: list[OpRow] = [r for i in insts if (r := ops.row(i)) is not None]
        elements = min(d.shape.num_elements for _, d, _, _ in layers)
        saved = savings(rows, insts, elements)
        total = sum(saved)
        if total <= 0:
            continue
        qk, dot, _, pv = layers[0]
        score = dot.shape
        measured = sum(r.measured_us for r in rows)
        traffic = sum(
            r.bytes * r.occurrences for r in rows if r.bytes > 0
        )  # every byte of the ops, as costed
        yield Finding(
            "unfused attention",
            tuple(rows),
            total,
            f"{len(layers)} attention layer(s) unfused: {qk.name} writes the scores "
            f"{shape_text(score)} ({fmt_si(score.byte_size(), 'B')} a layer) to memory, a "
            f"softmax reads them and {pv.name} multiplies them by V; the "
            f"{len(rows)} ops take {fmt_us(measured)} (device time) and move "
            f"{fmt_si(traffic, 'B')}; kept on chip, the scores save {fmt_us(total)}",
            f"use a fused attention kernel: {_kernel(ctx)}",
            op_savings=tuple(saved),
            layers=len(layers),
        )


def _kernel(ctx: Context) -> str:
    return _KERNEL.get(
        ctx.backend,
        "jax.nn.dot_product_attention (cuDNN flash attention on NVIDIA, Pallas flash/splash "
        "attention on TPU, the vendor's fused attention on AMD)",
    )


register(unfused_attention)
