"""Matmul-like ops (dots, convolutions, GEMM and convolution library calls, fusions of them):
their weight and activation bytes, the weight decided from the program (`hlogap.cost.roles`):
an operand carried across steps, or the output where it is a carried weight's gradient."""

from __future__ import annotations

from typing import NamedTuple

from hlogap.advice.base import Context
from hlogap.cost.base import index_of
from hlogap.cost.roles import roles
from hlogap.hlo.ir import Instruction, Module, Shape
from hlogap.report.model import OpRow
from hlogap.units import fmt_si

_LIBRARY_MATMUL = ("gemm", "matmul", "conv")


class MatrixOp(NamedTuple):
    """One run of a matmul-like op: its FLOPs and HBM bytes as costed, split into the weight
    (what stays the same size whatever the batch: an operand the program carries across steps,
    or the output where it is such a weight's gradient) and the activations (the rest: inputs
    and outputs that grow with the rows)."""

    row: OpRow
    instruction: Instruction
    flops: float
    bytes: float
    weight_bytes: float
    weight_elements: int
    runs: int
    # What the weight is: "operand N", "gradient" (the output), or "" (none: every operand
    # and the output are activations).
    weight: str = "operand"

    @property
    def weight_text(self) -> str:
        """The weight in words, for a finding's evidence."""
        if not self.weight:
            return "it reads no weight (its operands are activations)"
        what = "its output, a weight's gradient," if self.weight == "gradient" else "its weight"
        return f"{what} only {fmt_si(self.weight_bytes, 'B')}"

    @property
    def activation_bytes(self) -> float:
        return max(self.bytes - self.weight_bytes, 0.0)

    @property
    def rows_per_weight_read(self) -> float:
        """M of an [M,K] x [K,N] product: FLOPs / (2 x weight elements)."""
        return self.flops / (2 * self.weight_elements) if self.weight_elements else 0.0

    def batch_to_reach(self, ridge: float) -> float | None:
        """How many times its rows the op needs for its intensity (FLOPs over bytes, the weight
        read once) to reach `ridge`; None when the activations alone keep it below, whatever the
        batch."""
        gap = self.flops - ridge * self.activation_bytes
        if gap <= 0:
            return None
        return max(1.0, ridge * self.weight_bytes / gap)


def matrix_op(ctx: Context, row: OpRow) -> MatrixOp | None:
    """The op as a matmul, when it is one and its HLO is at hand."""
    inst, module = ctx.instruction(row)
    if inst is None or row.flops <= 0 or row.bytes <= 0 or not _is_matmul(inst, module):
        return None
    shapes = [s for s in inst.operand_shapes if s is not None and not s.is_tuple]
    if not shapes:
        return None
    weight, what = weight_of(inst, module, shapes)
    runs = max(row.runs_per_occurrence, 1)
    return MatrixOp(
        row,
        inst,
        row.flops / runs,
        row.bytes / runs,
        float(min(weight.byte_size(), row.bytes / runs)) if weight is not None else 0.0,
        weight.num_elements if weight is not None else 0,
        runs,
        what,
    )


def weight_of(
    inst: Instruction, module: Module | None, shapes: list[Shape]
) -> tuple[Shape | None, str]:
    """The op's weight and what it is (`MatrixOp.weight`), from the program: in a program
    that carries parameters across steps (a training step), an operand traced to one, or the
    output where it is one's gradient, else none (activations times activations: attention's
    QK^T); in one that carries none (inference, a gradient alone), a convolution's kernel, an
    operand traced to an entry parameter where the other is computed, else the largest."""
    found = roles(module) if module is not None else None
    ix = index_of(module)
    if found is None or ix is None:
        return max(shapes, key=lambda s: s.byte_size()), "operand"
    operands = [
        (k, ix.producer(inst, k), s)
        for k, s in enumerate(inst.operand_shapes)
        if k in _matmul_operands(inst, module) and s is not None and not s.is_tuple
    ]
    if not operands:
        return max(shapes, key=lambda s: s.byte_size()), "operand"
    if found.carried:
        # A library GEMM's result is its tuple's first element (the second its workspace).
        out = inst.shape.tuple_shapes[0] if inst.shape.tuple_shapes else inst.shape
        if not out.is_tuple and found.is_gradient(inst):
            return out, "gradient"
        carried = [(k, s) for k, p, s in operands if found.is_weight(p)]
        if carried:
            k, shape = max(carried, key=lambda c: c[1].byte_size())
            return shape, f"operand {k}"
        if _batched(operands):
            return None, ""  # activations times activations (attention's QK^T, its PV)
    kernel = _kernel_operand(inst, module)
    if kernel is not None and kernel < len(inst.operand_shapes):
        held = inst.operand_shapes[kernel]
        if held is not None and not held.is_tuple:
            return held, f"operand {kernel}"
    params = [(k, s) for k, p, s in operands[:2] if found.source(p) is not None]
    if len(params) == 1:
        return params[0][1], f"operand {params[0][0]}"
    if not params and _batched(operands):
        return None, ""
    # Where the program does not tell (a weight reached through ops not followed): the largest.
    k, shape = max(((k, s) for k, _, s in operands), key=lambda c: c[1].byte_size())
    return shape, f"operand {k}"


def _matmul_operands(inst: Instruction, module: Module | None) -> list[int]:
    """The op's operands its product multiplies: a fusion's that its fused dot or convolution
    reads (through ops that move or re-type them), else the first two."""
    if inst.opcode != "fusion" or module is None or not inst.called:
        return [0, 1]
    body = module.computation(inst.called[0])
    ix = index_of(module)
    product = (
        next((i for i in body.instructions if i.opcode in ("dot", "convolution")), None)
        if body is not None
        else None
    )
    if product is None or ix is None:
        return [0, 1]
    found: list[int] = []
    for k in range(min(2, len(product.operands))):
        read = ix.producer(product, k)
        while read is not None and read.opcode in ("bitcast", "reshape", "transpose", "convert"):
            read = ix.producer(read, 0)
        if read is not None and read.opcode == "parameter" and read.parameter_number is not None:
            found.append(read.parameter_number)
    return found or [0, 1]


def _batched(operands: list[tuple[int, Instruction | None, Shape]]) -> bool:
    """A batched product of two computed operands (both of rank 3 or more, of the same
    leading batch): no weight has a batch dimension."""
    pair = [s for _, _, s in operands[:2]]
    return len(pair) == 2 and all(s.rank >= 3 for s in pair) and pair[0].dims[0] == pair[1].dims[0]


def _kernel_operand(inst: Instruction, module: Module | None) -> int | None:
    """A convolution's kernel: its operand 1 (a convolution, a library convolution call), or
    the fusion operand its fused convolution's kernel is."""
    if inst.opcode == "convolution" or (inst.opcode == "custom-call" and inst.conv_dims):
        return 1
    if inst.opcode != "fusion" or module is None or not inst.called:
        return None
    body = module.computation(inst.called[0])
    ix = index_of(module)
    conv = next((i for i in body.instructions if i.opcode == "convolution"), None) if body else None
    if conv is None or ix is None:
        return None
    kernel = ix.producer(conv, 1)
    while kernel is not None and kernel.opcode in ("bitcast", "reshape", "transpose", "convert"):
        kernel = ix.producer(kernel, 0)
    return kernel.parameter_number if kernel is not None and kernel.opcode == "parameter" else None


def _is_matmul(inst: Instruction, module: Module | None) -> bool:
    if inst.opcode in ("dot", "convolution"):
        return True
    if inst.opcode == "custom-call":
        target = (inst.custom_call_target or "").lower()
        return inst.conv_dims is not None or any(k in target for k in _LIBRARY_MATMUL)
    if inst.opcode == "fusion" and module is not None and inst.called:
        called = module.computation(inst.called[0])
        return called is not None and any(
            i.opcode in ("dot", "convolution") for i in called.instructions
        )
    return False
