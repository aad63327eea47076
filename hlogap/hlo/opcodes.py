"""The HLO opcode taxonomy: every set of opcodes the later stages ask about, in one place."""

from __future__ import annotations

import re
from typing import Literal

from hlogap.hlo.ir import Instruction, Module

# Collective opcodes (their async forms add `-start`/`-done`).
COLLECTIVE_OPCODES = frozenset(
    {
        "all-reduce",
        "all-gather",
        "reduce-scatter",
        "all-to-all",
        "collective-permute",
        "collective-broadcast",
        "ragged-all-to-all",
    }
)
# Data in flight rather than compute: async copies (DMA, host offload: `S(5)`) and point to
# point transfers; with the collectives, what "exposed communication" counts.
ASYNC_TRANSFERS = frozenset({"copy-start", "copy-done", "send", "send-done", "recv", "recv-done"})


def is_transfer(opcode: str) -> bool:
    """A collective (sync or async) or an async copy / send / recv."""
    base = opcode.removesuffix("-start").removesuffix("-done")
    return base in COLLECTIVE_OPCODES or opcode in ASYNC_TRANSFERS


# The collectives the ring model costs; ragged-all-to-all moves data-dependent amounts.
RING_COLLECTIVES = COLLECTIVE_OPCODES - {"ragged-all-to-all"}

TRANSCENDENTAL = frozenset(
    {
        "exponential",
        "exponential-minus-one",
        "log",
        "log-plus-one",
        "logistic",
        "power",
        "sqrt",
        "cbrt",
        "rsqrt",
        "tanh",
        "sine",
        "cosine",
        "tan",
        "atan2",
        "erf",
    }
)
# One FLOP per output element (XLA's HandleElementwiseOp); convert is one too.
ELEMENTWISE = frozenset(
    {
        "add",
        "subtract",
        "multiply",
        "divide",
        "remainder",
        "maximum",
        "minimum",
        "abs",
        "negate",
        "sign",
        "floor",
        "ceil",
        "round-nearest-afz",
        "round-nearest-even",
        "not",
        "and",
        "or",
        "xor",
        "shift-left",
        "shift-right-arithmetic",
        "shift-right-logical",
        "compare",
        "select",
        "clamp",
        "convert",
        "bitcast-convert",
        "stochastic-convert",
        "reduce-precision",
        "is-finite",
        "real",
        "imag",
        "complex",
        "popcnt",
        "count-leading-zeros",
    }
)
# Plumbing: no work of their own, and inside a fused computation they come and go between compiles.
STRUCTURAL = frozenset({"parameter", "get-tuple-element", "tuple", "bitcast", "constant"})
# No computation and no memory traffic of their own.
FREE = STRUCTURAL | frozenset(
    {
        "after-all",
        "add-dependency",
        "domain",
        "opt-barrier",
    }
)
# Their bodies' ops are timed as events of their own (CPU thunks, GPU kernels, TPU ops).
CONTROL_FLOW = frozenset({"while", "conditional", "call"})
# The second half of an async pair: the work is counted on the start.
ASYNC_DONE = frozenset(
    {
        "all-reduce-done",
        "all-gather-done",
        "collective-permute-done",
        "copy-done",
        "async-done",
        "async-update",
        "send-done",
        "recv-done",
    }
)

AsyncRole = Literal["start", "done", ""]


def collective_kind(opcode: str) -> str | None:
    """ "all-gather" for all-gather and all-gather-start; None for other ops."""
    kind = opcode.removesuffix("-start")
    return kind if kind in RING_COLLECTIVES else None


def async_role(opcode: str, name: str) -> AsyncRole:
    """ "start", "done" or "" for an op of an async pair (opcode, or TPU's wrapping fusion name)."""
    base = name.rsplit(".", 1)[0] if opcode == "fusion" else opcode
    if base.endswith("-start"):
        return "start"
    if base.endswith("-done"):
        return "done"
    return ""


# XLA:GPU outlines runs of ops into `call`s of computations it names `command_buffer` (uniquified
# `command_buffer.N`: CommandBufferScheduling) and runs each as one CUDA graph.
_COMMAND_BUFFER = re.compile(r"%?command_buffer(\.\d+)?")
COMMAND_BUFFER_FLAG = "--xla_gpu_enable_command_buffer="
# Newer XLA:GPU forms command buffers from the thunk sequence instead (CommandBufferConversionPass)
# and names each `command_buffer_<id of its first thunk>`: a name the HLO does not hold.
THUNK_COMMAND_BUFFER = re.compile(r"command_buffer_\d+")


def is_command_buffer(inst: Instruction) -> bool:
    """A call XLA:GPU runs as one command buffer: the trace times its ops as this one op."""
    return inst.opcode == "call" and any(_COMMAND_BUFFER.fullmatch(c) for c in inst.called)


def categorize(inst: Instruction, module: Module | None) -> str:
    """A short category in xprof's vocabulary (`loop fusion`, `convolution fusion`, ...)."""
    op = inst.opcode
    base = op.removesuffix("-start").removesuffix("-done")
    if base in COLLECTIVE_OPCODES:
        return base
    if op == "fusion":
        called = module.computation(inst.called[0]) if module and inst.called else None
        opcodes = {i.opcode for i in called.instructions} if called else set()
        if opcodes & COLLECTIVE_OPCODES or any(
            o.removesuffix("-start") in COLLECTIVE_OPCODES for o in opcodes
        ):
            return "collective fusion"
        if "convolution" in opcodes:
            return "convolution fusion"
        if "dot" in opcodes:
            return "matmul fusion" if inst.fusion_kind != "kCustom" else "custom fusion"
        kind = {"kLoop": "loop", "kInput": "input", "kOutput": "output", "kCustom": "custom"}.get(
            inst.fusion_kind or "", ""
        )
        return f"{kind} fusion".strip()
    if op == "custom-call":
        return "custom-call"
    if op in ("dot", "convolution"):
        return "matmul" if op == "dot" else "convolution"
    if is_command_buffer(inst):
        return "command buffer"
    if op in ("while", "conditional", "call"):
        return "control flow"
    if op in ("copy", "copy-start", "copy-done", "transpose"):
        return "data formatting"
    return op


def changes_layout(inst: Instruction) -> bool:
    """A transpose, or a copy into another layout. A copy into the same layout is a buffer copy
    (a loop's state, an output XLA may not alias), not a layout change."""
    if inst.opcode == "transpose":
        return True
    if inst.opcode != "copy" or not inst.operand_shapes or inst.operand_shapes[0] is None:
        return False
    before, after = inst.operand_shapes[0].layout, inst.shape.layout
    return (
        before is not None and after is not None and before.minor_to_major != after.minor_to_major
    )
