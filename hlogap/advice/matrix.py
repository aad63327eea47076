"""Matmul-like ops (dots, convolutions, GEMM and convolution library calls, fusions of them):
their weight and activation bytes, from the instruction's own operands."""

from __future__ import annotations

from dataclasses import dataclass

from hlogap.advice.base import Context
from hlogap.hlo.ir import Instruction, Module
from hlogap.report.model import OpRow

_LIBRARY_MATMUL = ("gemm", "matmul", "conv")


@dataclass(frozen=True)
class MatrixOp:
    """One run of a matmul-like op: its FLOPs and HBM bytes as costed, split into the weight
    (its largest operand: read once whatever the batch) and the activations (the rest: inputs
    and outputs that grow with the rows)."""

    row: OpRow
    instruction: Instruction
    flops: float
    bytes: float
    weight_bytes: float
    weight_elements: int
    runs: int

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
    weight = max(shapes, key=lambda s: s.byte_size())
    runs = max(row.runs_per_occurrence, 1)
    return MatrixOp(
        row,
        inst,
        row.flops / runs,
        row.bytes / runs,
        float(min(weight.byte_size(), row.bytes / runs)),
        weight.num_elements,
        runs,
    )


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
