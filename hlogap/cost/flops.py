"""FLOPs and transcendentals of one op, as XLA's HloCostAnalysis counts them.

XLA's count is what `cost_analysis()` returns and what TPU traces carry, so it is the reference;
departures are documented in docs/cost-model.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hlogap.cost.base import (
    ModuleIndex,
    Work,
    bare,
    called,
    elements,
    first_leaf,
    ints,
    operand_shapes,
)
from hlogap.cost.custom_calls import custom_call
from hlogap.cost.matmul import at, conv_flops, dot_flops, matmul_dtype
from hlogap.hlo.ir import Computation, Instruction, Shape, Window
from hlogap.hlo.opcodes import ELEMENTWISE, TRANSCENDENTAL, collective_kind

_APPLYING = frozenset({"reduce", "reduce-window", "map", "scatter", "select-and-scatter", "sort"})


def computation_work(comp: Computation, ix: ModuleIndex) -> Work:
    """FLOPs of a called computation (fused body, reducer, branch), memoised per module."""
    key = bare(comp.name)
    cached = ix.work.get(key)
    if cached is None:
        cached = ix.work[key] = Work()  # stored first: a computation calling itself adds nothing
        for inst in comp.instructions:
            cached.add(work(inst, ix))
    return cached


def work(inst: Instruction, ix: ModuleIndex | None) -> Work:
    """FLOPs and transcendentals of one execution of `inst`."""
    op = inst.opcode
    w = Work()
    if op in TRANSCENDENTAL:
        w.transcendentals = elements(inst.shape)
    elif op in ELEMENTWISE:
        w.flops = elements(inst.shape)
    elif op in ("dot", "ragged-dot", "convolution"):
        _matrix_op(inst, ix, w)
    elif op in _APPLYING:
        _applying(inst, ix, w)
    elif op in ("all-reduce", "all-reduce-start"):
        # XLA assumes two replicas: one addition per output element.
        w.flops = sum(leaf.num_elements for leaf in inst.shape.leaves())
    elif op in ("rng", "rng-bit-generator"):  # XLA prices a random number as a transcendental
        w.transcendentals = sum(leaf.num_elements for leaf in inst.shape.leaves())
    elif op in ("fft", "triangular-solve", "cholesky"):
        w.flops = _linalg_flops(inst, ix)
    elif op == "custom-call":
        w = custom_call(inst, ix).work
    elif op == "fusion":
        _fusion(inst, ix, w)
    elif op in ("call", "async-start", "while") and ix is not None:
        for comp in called(inst, ix):  # a while counts one iteration, as XLA does
            w.add(computation_work(comp, ix))
    elif op == "conditional" and ix is not None:  # the costliest branch, quantity by quantity
        w = max_work([computation_work(c, ix) for c in called(inst, ix)])
    if collective_kind(op):
        w.collective = inst
    return w


def _matrix_op(inst: Instruction, ix: ModuleIndex | None, w: Work) -> None:
    shapes = operand_shapes(inst, ix)
    lhs = shapes[0] if shapes else None
    rhs = shapes[1] if len(shapes) > 1 else None
    if lhs is None or rhs is None:
        w.unmodeled = f"operand shapes of {inst.opcode} '{inst.name}' are unknown"
    elif inst.opcode != "convolution":
        contracting = inst.dot_dims.lhs_contracting if inst.dot_dims else ()
        w.add_matrix(dot_flops(lhs, inst.shape, contracting), matmul_dtype(_read_as(inst, ix)))
    else:
        w.add_matrix(conv_flops(inst, lhs, rhs, inst.shape), matmul_dtype(_read_as(inst, ix)))


def _read_as(inst: Instruction, ix: ModuleIndex | None) -> list[Shape | None]:
    """A dot's (or convolution's) operand shapes as the op reads them: an operand its fusion
    widens from the fusion's own input (`convert` of a bf16 parameter to f32, fused into the
    dot's op) is read, and run, as the narrower type (XLA:CPU's YNNPACK fusions run such a dot
    on the CPU's bf16 units): the dot's peak is the input's type's."""
    shapes = operand_shapes(inst, ix)
    home = ix.comp_of.get(id(inst)) if ix is not None else None
    if ix is None or home is None or home.is_entry:  # the entry's converts are ops of their own
        return shapes
    read = list(shapes)
    for i, shape in enumerate(shapes[:2]):
        widen = ix.producer(inst, i)
        if shape is None or widen is None or widen.opcode != "convert":
            continue
        source = ix.producer(widen, 0)
        narrow = operand_shapes(widen, ix)[0] if widen.operands else None
        if (
            source is not None
            and source.opcode == "parameter"
            and narrow is not None
            and narrow.element_type.startswith(("f", "bf"))
            and shape.element_type.startswith("f")
            and 0 < narrow.element_bits < shape.element_bits
        ):
            read[i] = narrow
    return read


def _fusion(inst: Instruction, ix: ModuleIndex | None, w: Work) -> None:
    comps = called(inst, ix)
    if not comps or ix is None:
        w.unmodeled = f"fused computation of '{inst.name}' is not available"
        return
    if inst.fusion_kind == "kCustom":
        # XLA costs a custom gather/scatter fusion as that one op.
        for sub in comps[0].instructions:
            if sub.opcode in ("gather", "scatter"):
                w.add(work(sub, ix))
                return
    w.add(computation_work(comps[0], ix))


def _applying(inst: Instruction, ix: ModuleIndex | None, w: Work) -> None:
    """Ops that apply a computation per element: reduce, reduce-window, map, scatter, sort."""
    op = inst.opcode
    shapes = operand_shapes(inst, ix)
    if op == "sort":
        n = elements(shapes[0]) if shapes else 0
        w.flops = n * max(n - 1, 0).bit_length()  # n * ceil(log2 n) comparisons
        return
    comps = called(inst, ix)
    sub = computation_work(comps[0], ix) if comps and ix is not None else None
    if sub is None:
        # A TPU op's text comes without its reducer: assume one op (add, max) per application.
        sub = Work(flops=1.0)
        w.note = f"computation applied by {op} '{inst.name}' unavailable: 1 FLOP per application"
    out = elements(first_leaf(inst.shape))
    if op == "reduce":
        count = elements(shapes[0]) - out if shapes else 0
    elif op == "map":
        count = out
    elif op == "scatter":
        n = (len(shapes) - 1) // 2  # operands, indices, updates
        count = elements(shapes[n + 1]) if len(shapes) > n + 1 else 0
    elif op == "reduce-window":
        count = _reduce_window_count(inst, out)
    else:  # select-and-scatter: window-1 selects and one scatter per source element
        source = elements(shapes[1]) if len(shapes) > 1 else 0
        window = math.prod(inst.window.size) if inst.window else 1
        scatter = computation_work(comps[1], ix) if len(comps) > 1 and ix else Work(flops=1.0)
        w.add(sub, source * (window - 1))
        w.add(scatter, source)
        return
    w.add(sub, count)


def _reduce_window_count(inst: Instruction, out: int) -> int:
    """(window - 1) applications per output, except XLA's reduce-then-broadcast special case."""
    win = inst.window or Window()
    count = (math.prod(win.size) - 1) * out
    reducing = [i for i, s in enumerate(win.size) if s != 1]
    padded = [i for i in range(len(win.size)) if at(win.pad_low, i, 0) or at(win.pad_high, i, 0)]
    if len(reducing) == 1 and len(padded) == 1 and not inst.shape.is_tuple:
        i = reducing[0]
        low, high, size = at(win.pad_low, i, 0), at(win.pad_high, i, 0), win.size[i]
        span = inst.shape.dims[i] if i < inst.shape.rank else 0
        if low and low == high and size == 2 * low + 1 and low == span - 1:
            count = out // span + span - 1
    return count


def _linalg_flops(inst: Instruction, ix: ModuleIndex | None) -> float:
    shapes = operand_shapes(inst, ix)
    a = shapes[0] if shapes else None
    if a is None or not a.leaves():
        return 0.0
    if inst.opcode == "fft":  # 2 x 4 FMAs per complex multiply x log2 of each length
        lengths = ints(inst.attrs.get("fft_length", ""))
        logs = math.prod(max(n, 1).bit_length() - 1 for n in lengths)
        return 2.0 * 4 * logs * first_leaf(a).num_elements
    last = a.dims[-1] if a.dims else 0
    if inst.opcode == "triangular-solve":
        b = shapes[1] if len(shapes) > 1 else None
        return 2.0 * last * elements(b)
    return float(last * a.num_elements // 3)  # cholesky


def max_work(items: Sequence[Work]) -> Work:
    """Per-quantity maximum (XLA's rule for conditional branches)."""
    w = Work()
    for item in items:
        w.flops = max(w.flops, item.flops)
        w.transcendentals = max(w.transcendentals, item.transcendentals)
        if item.matrix_flops > w.matrix_flops:
            w.matrix = dict(item.matrix)
        w.unmodeled = w.unmodeled or item.unmodeled
    return w
