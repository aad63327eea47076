"""IR -> HLO text that `hlogap.hlo.text` reads back to an equal IR.

Attributes print from `Instruction.attrs`, the text as written, so nothing the IR does not type is
lost. The `format_*` helpers write typed values in XLA's syntax; the proto decoder builds its
`attrs` with them, so a decoded module prints like XLA's own dump.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from hlogap.hlo.ir import (
    ConvDims,
    DotDims,
    Instruction,
    Layout,
    Module,
    ReplicaGroups,
    Shape,
    SliceDim,
    StackFrameIndex,
    Window,
)
from hlogap.hlo.text import is_braced

# absl::CEscape: these by name, other non-printable or non-ASCII bytes as octal.
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", '"': '\\"', "'": "\\'", "\\": "\\\\"}
# A character that is not printable ASCII, or one of the printable ones escaped by name.
_TO_ESCAPE = re.compile(r"[^\x20-\x7e]|[\"'\\]")


def escape(text: str) -> str:
    """`text` escaped the way XLA writes string attributes (without the quotes)."""
    if _TO_ESCAPE.search(text) is None:
        return text
    out: list[str] = []
    for byte in text.encode():
        char = chr(byte)
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif 0x20 <= byte < 0x7F:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return "".join(out)


def format_string(text: str) -> str:
    return f'"{escape(text)}"'


def format_int_list(values: Iterable[int]) -> str:
    return "{" + ",".join(str(v) for v in values) + "}"


def format_layout(layout: Layout) -> str:
    """`{2,1,0:T(8,128)(2,1)S(1)}`, items in the order XLA's `Layout::Print` writes them."""
    first = [e for e in layout.extra if e.startswith("D(")]
    middle = [e for e in layout.extra if e[0] in "#*"]
    last = [e for e in layout.extra if e not in first and e not in middle]
    items = first
    if layout.tiles:
        tiles = (",".join("*" if d == -1 else str(d) for d in t) for t in layout.tiles)
        items.append("T" + "".join(f"({t})" for t in tiles))
    if layout.tail_padding_alignment != 1:
        items.append(f"L({layout.tail_padding_alignment})")
    items += middle
    if layout.element_size_in_bits:
        items.append(f"E({layout.element_size_in_bits})")
    if layout.memory_space:
        items.append(f"S({layout.memory_space})")
    items += last
    body = ",".join(str(d) for d in layout.minor_to_major)
    return "{" + body + (":" + "".join(items) if items else "") + "}"


def print_shape(shape: Shape) -> str:
    if shape.is_tuple:
        return "(" + ", ".join(print_shape(s) for s in shape.tuple_shapes) + ")"
    dims = []
    for i, d in enumerate(shape.dims):
        if shape.dynamic and shape.dynamic[i]:
            dims.append("?" if d < 0 else f"<={d}")
        else:
            dims.append(str(d))
    text = f"{shape.element_type}[{','.join(dims)}]"
    return text + format_layout(shape.layout) if shape.layout is not None else text


def format_window(window: Window) -> str:
    """`{size=3x3 stride=2x2 pad=1_1x1_1 ...}`; fields at their defaults are left out."""
    parts = ["size=" + "x".join(map(str, window.size))]
    if any(s != 1 for s in window.stride):
        parts.append("stride=" + "x".join(map(str, window.stride)))
    if any(window.pad_low) or any(window.pad_high):
        pads = (f"{lo}_{hi}" for lo, hi in zip(window.pad_low, window.pad_high))
        parts.append("pad=" + "x".join(pads))
    if any(d != 1 for d in window.lhs_dilate):
        parts.append("lhs_dilate=" + "x".join(map(str, window.lhs_dilate)))
    if any(d != 1 for d in window.rhs_dilate):
        parts.append("rhs_dilate=" + "x".join(map(str, window.rhs_dilate)))
    if any(window.rhs_reversal):
        parts.append("rhs_reversal=" + "x".join(str(int(r)) for r in window.rhs_reversal))
    return "{" + " ".join(parts) + "}"


def format_dim_labels(dims: ConvDims) -> str:
    """`b01f_01io->b01f`."""

    def labels(a: tuple[str, int], b: tuple[str, int], spatial: tuple[int, ...]) -> str:
        out = ["?"] * (len(spatial) + 2)
        out[a[1]], out[b[1]] = a[0], b[0]
        for i, d in enumerate(spatial):
            out[d] = str(i)
        return "".join(out)

    lhs = labels(("b", dims.input_batch), ("f", dims.input_feature), dims.input_spatial)
    rhs = labels(
        ("i", dims.kernel_input_feature), ("o", dims.kernel_output_feature), dims.kernel_spatial
    )
    out = labels(("b", dims.output_batch), ("f", dims.output_feature), dims.output_spatial)
    return f"{lhs}_{rhs}->{out}"


def format_dot_dims(dims: DotDims) -> dict[str, str]:
    """The dot attributes; batch dims only when there are some, as XLA prints them."""
    out = {}
    if dims.lhs_batch:
        out["lhs_batch_dims"] = format_int_list(dims.lhs_batch)
    out["lhs_contracting_dims"] = format_int_list(dims.lhs_contracting)
    if dims.rhs_batch:
        out["rhs_batch_dims"] = format_int_list(dims.rhs_batch)
    out["rhs_contracting_dims"] = format_int_list(dims.rhs_contracting)
    return out


def format_slice(dims: Iterable[SliceDim]) -> str:
    """`{[0:8], [0:4]}`; every stride is written when any is not 1: `{[1:5:2], [0:4:1]}`."""
    dims = list(dims)
    strided = any(d.stride != 1 for d in dims)
    parts = (f"[{d.start}:{d.limit}" + (f":{d.stride}]" if strided else "]") for d in dims)
    return "{" + ", ".join(parts) + "}"


def format_replica_groups(groups: ReplicaGroups) -> str:
    if groups.iota is not None:
        return groups.iota
    return "{" + ",".join(format_int_list(g) for g in groups.groups) + "}"


def format_backend_config(config: str) -> str:
    """A `{...}` config (JSON, an FFI attribute dict) prints as it is; anything else quoted."""
    return config if is_braced(config) else format_string(config)


def _operands(inst: Instruction, known: dict[str, Shape] | None) -> str:
    if inst.opcode == "constant":
        return inst.literal or ""
    if inst.opcode == "parameter":
        return "" if inst.parameter_number is None else str(inst.parameter_number)
    parts = []
    for name, shape in zip(inst.operands, inst.operand_shapes):
        # In a module an operand's shape is its definition's; write it only when it differs.
        if shape is None or (known is not None and known.get(name) == shape):
            parts.append(f"%{name}")
        else:
            parts.append(f"{print_shape(shape)} %{name}")
    return ", ".join(parts)


def _instruction(inst: Instruction, known: dict[str, Shape] | None) -> str:
    head = f"{'ROOT ' if inst.is_root else ''}%{inst.name} = {print_shape(inst.shape)} "
    attrs = "".join(f", {k}={v}" for k, v in inst.attrs.items())
    return f"{head}{inst.opcode}({_operands(inst, known)}){attrs}"


def print_instruction(inst: Instruction) -> str:
    """One instruction with its operands' shapes inline, as TPU traces store op text."""
    return _instruction(inst, None)


def _without_layout(shape: Shape) -> Shape:
    if shape.is_tuple:
        return replace(shape, tuple_shapes=tuple(_without_layout(s) for s in shape.tuple_shapes))
    return replace(shape, layout=None)


def _frames(frames: StackFrameIndex) -> list[str]:
    lines = ["FileNames"]
    lines += [f"{i} {format_string(n)}" for i, n in enumerate(frames.file_names, 1)]
    lines += ["", "FunctionNames"]
    lines += [f"{i} {format_string(n)}" for i, n in enumerate(frames.function_names, 1)]
    lines += ["", "FileLocations"]
    lines += [
        f"{i} {{file_name_id={loc.file_name_id} function_name_id={loc.function_name_id}"
        f" line={loc.line} end_line={loc.end_line} column={loc.column}"
        f" end_column={loc.end_column}}}"
        for i, loc in enumerate(frames.file_locations, 1)
    ]
    lines += ["", "StackFrames"]
    # XLA's text writes parent_frame_id one above the proto's value; the parser undoes it.
    lines += [
        f"{i} {{file_location_id={f.file_location_id} parent_frame_id={f.parent_frame_id + 1}}}"
        for i, f in enumerate(frames.stack_frames, 1)
    ]
    return [*lines, "", ""]


def print_module(module: Module) -> str:
    """The module in `compiled.as_text()` form: header, stack-frame tables, computations."""
    header = f"HloModule {module.name}" + "".join(f", {k}={v}" for k, v in module.attrs.items())
    lines = [header, ""]
    if module.frames is not None:
        lines += _frames(module.frames)
    for comp in module.computations:
        params = sorted(
            (i for i in comp.instructions if i.opcode == "parameter"),
            key=lambda i: i.parameter_number if i.parameter_number is not None else -1,
        )
        signature = ", ".join(f"{p.name}: {print_shape(_without_layout(p.shape))}" for p in params)
        root = comp.root
        result = print_shape(_without_layout(root.shape)) if root is not None else "()"
        entry = "ENTRY " if comp.is_entry or comp.name == module.entry else ""
        thread = (
            f", execution_thread={format_string(comp.execution_thread)}"
            if comp.execution_thread
            else ""
        )
        lines.append(f"{entry}%{comp.name} ({signature}) -> {result}{thread} {{")
        known = {inst.name: inst.shape for inst in comp.instructions}
        lines += [f"  {_instruction(inst, known)}" for inst in comp.instructions]
        lines += ["}", ""]
    return "\n".join(lines)
