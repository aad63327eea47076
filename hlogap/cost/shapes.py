"""The shape rules of an op, checked before it is costed.

HLO that parses may still describe an op no compiler would emit: a dot contracting a dimension
its operand does not have, a reduce-window larger than its (padded) operand, an array larger
than any memory. Costing such an op would make numbers up (a memory bound for the dot, 1e20
FLOPs for the window); `check_shapes` raises ValueError with the broken rule instead, and the
op is `unmodeled` with that reason (`hlogap.cost.model.cost_instruction`).
"""

from __future__ import annotations

from hlogap.cost.base import ModuleIndex, called, first_leaf, operand_shapes
from hlogap.hlo.ir import DotDims, Instruction, Shape, Window

# No device holds an array of a pebibyte (the largest HBM is a few hundred GB; host memory a
# few TB): a shape past it is not a program's.
MAX_ARRAY_BYTES = 1 << 50


def check_shapes(inst: Instruction, ix: ModuleIndex | None) -> None:
    """Raise ValueError where `inst` (or an op of the computation a fusion calls) breaks the
    shape rules of its opcode."""
    _check_one(inst, ix)
    if inst.opcode == "fusion":
        for body in called(inst, ix):
            for inner in body.instructions:
                _check_one(inner, ix)


def _check_one(inst: Instruction, ix: ModuleIndex | None) -> None:
    operands = operand_shapes(inst, ix)
    for shape in [inst.shape, *(s for s in operands if s is not None)]:
        _check_size(shape)
    if inst.opcode == "dot" and inst.dot_dims is not None and len(operands) >= 2:
        lhs, rhs = operands[0], operands[1]
        if lhs is not None and rhs is not None and not (lhs.is_tuple or rhs.is_tuple):
            _check_dot(inst.dot_dims, lhs, rhs)
    if inst.opcode == "reduce-window" and inst.window is not None and operands:
        first = operands[0]
        if first is not None and not first.is_tuple:
            _check_window(inst.window, first, first_leaf(inst.shape))


def _check_size(shape: Shape) -> None:
    for leaf in shape.leaves():
        if leaf.num_elements * leaf.element_bits > MAX_ARRAY_BYTES * 8:
            raise ValueError(f"an array of {leaf.element_type}{list(leaf.dims)} exceeds any memory")


def _check_dot(dims: DotDims, lhs: Shape, rhs: Shape) -> None:
    for side, shape, contracting, batch in (
        ("lhs", lhs, dims.lhs_contracting, dims.lhs_batch),
        ("rhs", rhs, dims.rhs_contracting, dims.rhs_batch),
    ):
        used = [*contracting, *batch]
        if any(not 0 <= d < shape.rank for d in used) or len(set(used)) != len(used):
            raise ValueError(
                f"{side} contracting/batch dimensions {used} do not fit its rank {shape.rank}"
            )
    for what, left, right in (
        ("contracting", dims.lhs_contracting, dims.rhs_contracting),
        ("batch", dims.lhs_batch, dims.rhs_batch),
    ):
        if [lhs.dims[d] for d in left] != [rhs.dims[d] for d in right]:
            raise ValueError(f"the {what} dimensions of lhs and rhs differ in size")


def _check_window(window: Window, operand: Shape, out: Shape) -> None:
    """The output's dims are XLA's for this window over the operand (`window_util::
    StridedBound`: 0 where the window is larger than the padded operand)."""
    if not len(window.size) == operand.rank == out.rank:
        raise ValueError(
            f"a window of rank {len(window.size)} over an operand of rank {operand.rank}"
        )

    def at(values: tuple[int, ...], i: int, default: int) -> int:
        return values[i] if i < len(values) else default

    for i, size in enumerate(window.size):
        dilated_input = max(operand.dims[i] - 1, 0) * at(window.lhs_dilate, i, 1) + 1
        if operand.dims[i] == 0:
            dilated_input = 0
        padded = dilated_input + at(window.pad_low, i, 0) + at(window.pad_high, i, 0)
        span = (size - 1) * at(window.rhs_dilate, i, 1) + 1
        stride = at(window.stride, i, 1)
        if size < 1 or stride < 1:
            raise ValueError(f"window dimension {i} has size {size}, stride {stride}")
        expected = 0 if span > padded else (padded - span) // stride + 1
        if out.dims[i] != expected:
            raise ValueError(
                f"window dimension {i} (size {size}) over {padded} elements gives {expected}, "
                f"not {out.dims[i]}"
            )
