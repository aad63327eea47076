"""The HLO IR shared by the text parser, the proto decoder and the cost model.

One IR whatever the source: a module holds computations, a computation holds instructions in
program order, an instruction has a shape, operands (by name, with their shapes when known) and
typed attributes where the cost model needs them. Attributes the cost model does not read are kept
as raw text in `attrs` so that printing and comparing lose nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hlogap.units import printable

# Bits per element. Sub-byte types pack; `token` and `tuple` hold no data.
ELEMENT_BITS: dict[str, int] = {
    "pred": 8,
    "s1": 1,
    "u1": 1,
    "s2": 2,
    "s4": 4,
    "s8": 8,
    "s16": 16,
    "s32": 32,
    "s64": 64,
    "u2": 2,
    "u4": 4,
    "u8": 8,
    "u16": 16,
    "u32": 32,
    "u64": 64,
    "f4e2m1fn": 4,
    "f8e3m4": 8,
    "f8e4m3": 8,
    "f8e4m3fn": 8,
    "f8e4m3b11fnuz": 8,
    "f8e4m3fnuz": 8,
    "f8e5m2": 8,
    "f8e5m2fnuz": 8,
    "f8e8m0fnu": 8,
    "bf16": 16,
    "f16": 16,
    "f32": 32,
    "f64": 64,
    "c64": 64,
    "c128": 128,
    "token": 0,
    "opaque": 0,
}


@dataclass(frozen=True)
class Layout:
    """`{minor_to_major:T(8,128)(2,1)S(1)}`. Tiles are outermost first; -1 stands for `*`."""

    minor_to_major: tuple[int, ...] = ()
    tiles: tuple[tuple[int, ...], ...] = ()
    memory_space: int = 0
    # Layout items the cost model ignores (`#(u32)`, `SC(...)`, `P(...)`, `M(8)`, ...), as written.
    extra: tuple[str, ...] = ()
    # `E(4)`: bits per element when packed (sub-byte types); 0 means the type's own width.
    element_size_in_bits: int = 0
    # `L(n)`: the tiled element count is rounded up to a multiple of n.
    tail_padding_alignment: int = 1


@dataclass(frozen=True)
class Shape:
    """An array shape (`element_type` + `dims`) or a tuple (`element_type == "tuple"`)."""

    element_type: str
    dims: tuple[int, ...] = ()
    # True where the dim is dynamic (`s32[<=16]`); `dims` then holds the bound.
    dynamic: tuple[bool, ...] = ()
    layout: Layout | None = None
    tuple_shapes: tuple[Shape, ...] = ()

    @property
    def is_tuple(self) -> bool:
        return self.element_type == "tuple"

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def num_elements(self) -> int:
        """Elements of an array shape; for a tuple, the sum over its leaves."""
        if self.is_tuple:
            return sum(s.num_elements for s in self.tuple_shapes)
        return math.prod(self.dims)

    @property
    def element_bits(self) -> int:
        return ELEMENT_BITS.get(self.element_type, 0)

    @property
    def memory_space(self) -> int:
        return self.layout.memory_space if self.layout else 0

    def leaves(self) -> list[Shape]:
        """Array shapes of a (nested) tuple, in order; `[self]` for an array."""
        if not self.is_tuple:
            return [self]
        out: list[Shape] = []
        for s in self.tuple_shapes:
            out.extend(s.leaves())
        return out

    def byte_size(self) -> int:
        """Logical bytes (no tiling padding), summed over tuple leaves."""
        return sum((leaf.num_elements * leaf.element_bits + 7) // 8 for leaf in self.leaves())


@dataclass(frozen=True)
class Window:
    """One entry per spatial dimension of `window={size=3x3 stride=.. pad=1_1x1_1 ...}`."""

    size: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    pad_low: tuple[int, ...] = ()
    pad_high: tuple[int, ...] = ()
    lhs_dilate: tuple[int, ...] = ()
    rhs_dilate: tuple[int, ...] = ()
    rhs_reversal: tuple[bool, ...] = ()


@dataclass(frozen=True)
class DotDims:
    """A dot's batch and contracting dimensions, per operand."""

    lhs_batch: tuple[int, ...] = ()
    rhs_batch: tuple[int, ...] = ()
    lhs_contracting: tuple[int, ...] = ()
    rhs_contracting: tuple[int, ...] = ()


@dataclass(frozen=True)
class ConvDims:
    """Convolution dimension numbers, as parsed from `dim_labels=b01f_01io->b01f`."""

    input_batch: int = 0
    input_feature: int = 1
    input_spatial: tuple[int, ...] = ()
    kernel_input_feature: int = 0
    kernel_output_feature: int = 1
    kernel_spatial: tuple[int, ...] = ()
    output_batch: int = 0
    output_feature: int = 1
    output_spatial: tuple[int, ...] = ()


@dataclass(frozen=True)
class ReplicaGroups:
    """`{{0,1},{2,3}}` (explicit) or `[4,2]<=[2,4]T(1,0)` (iota); `groups` is always expanded."""

    groups: tuple[tuple[int, ...], ...] = ()
    # The compact form as written, kept so that printing round-trips: iota `[4,2]<=[2,4]T(1,0)`
    # or mesh axes `mesh['x'=4,'y'=2] {'x'}`; None for the list form.
    iota: str | None = None
    # Devices per group of the compact form, known by arithmetic: its groups are left empty
    # where they span too many devices to list (hlogap.hlo.text.MAX_LISTED_DEVICES). The
    # groups and the compact form determine it: not compared.
    size: int | None = field(default=None, compare=False)

    @property
    def group_size(self) -> int | None:
        """Devices per group, or None when the groups are empty (all devices in one group)."""
        return len(self.groups[0]) if self.groups else self.size


@dataclass(frozen=True)
class SliceDim:
    """One dimension of a slice: `[start:limit:stride]`."""

    start: int
    limit: int
    stride: int = 1


# Slots: a module holds 10^4-10^5 instructions (less memory, and the C decoder,
# hlogap/hlo/_hlodecode.c, writes each one's slots directly).
@dataclass(slots=True)
class Instruction:
    """One HLO instruction: its opcode, shape, operands and the attributes the cost model reads."""

    name: str
    opcode: str
    shape: Shape
    operands: list[str] = field(default_factory=list)
    # Shapes of the operands when the text gives them inline or the module resolves them.
    operand_shapes: list[Shape | None] = field(default_factory=list)
    is_root: bool = False
    # Called computations by name: fusion `calls`, `to_apply`, while `condition`/`body`,
    # conditional `branch_computations`, call/async `calls`.
    called: list[str] = field(default_factory=list)
    # Typed attributes (None / empty when absent).
    dot_dims: DotDims | None = None
    conv_dims: ConvDims | None = None
    window: Window | None = None
    feature_group_count: int = 1
    batch_group_count: int = 1
    dimensions: tuple[int, ...] | None = None
    slice: tuple[SliceDim, ...] | None = None
    replica_groups: ReplicaGroups | None = None
    channel_id: int | None = None
    fusion_kind: str | None = None  # "kLoop", "kInput", "kOutput", "kCustom"
    custom_call_target: str | None = None
    backend_config: str | None = None  # raw JSON (or proto text) as written
    op_name: str | None = None  # metadata op_name
    source: str | None = None  # "file:line" from metadata, when present
    parameter_number: int | None = None
    tuple_index: int | None = None  # get-tuple-element `index=`
    literal: str | None = None  # constant payload as written inside `constant(...)`
    # Every attribute as written (`name -> raw value text`), typed or not, in order.
    attrs: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Computation:
    """One HLO computation: its instructions, in the order the module lists them."""

    name: str
    instructions: list[Instruction] = field(default_factory=list)
    is_entry: bool = False
    execution_thread: str = ""  # `execution_thread="..."`; empty is the main thread

    @property
    def root(self) -> Instruction | None:
        for inst in self.instructions:
            if inst.is_root:
                return inst
        return self.instructions[-1] if self.instructions else None

    def instruction(self, name: str) -> Instruction | None:
        for inst in self.instructions:
            if inst.name == name:
                return inst
        return None


@dataclass(frozen=True)
class FileLocation:
    """A source location of the module's stack-frame table (ids into its name tables)."""

    file_name_id: int  # 1-based into StackFrameIndex.file_names
    function_name_id: int  # 1-based into StackFrameIndex.function_names
    line: int = 0
    end_line: int = 0
    column: int = 0
    end_column: int = 0


@dataclass(frozen=True)
class StackFrame:
    """A frame of the module's stack-frame table: its location and its caller."""

    file_location_id: int  # 1-based into StackFrameIndex.file_locations
    # 1-based id of the calling frame, 0 for none (the proto's numbering; XLA's text prints it + 1).
    parent_frame_id: int = 0


@dataclass(frozen=True)
class StackFrameIndex:
    """The module's `FileNames`/`FunctionNames`/`FileLocations`/`StackFrames` tables.

    Instruction metadata points into them with `stack_frame_id` (1-based), the innermost frame.
    """

    file_names: tuple[str, ...] = ()
    function_names: tuple[str, ...] = ()
    file_locations: tuple[FileLocation, ...] = ()
    stack_frames: tuple[StackFrame, ...] = ()

    def source(self, frame_id: int) -> str | None:
        """`file:line` of a frame, or None when the id points nowhere."""
        if not 0 < frame_id <= len(self.stack_frames):
            return None
        loc_id = self.stack_frames[frame_id - 1].file_location_id
        if not 0 < loc_id <= len(self.file_locations):
            return None
        loc = self.file_locations[loc_id - 1]
        if not 0 < loc.file_name_id <= len(self.file_names):
            return None
        name = self.file_names[loc.file_name_id - 1]
        return printable(f"{name}:{loc.line}" if loc.line else name)  # as names are printed


@dataclass
class Module:
    """One HLO module: its computations, its entry and its header."""

    name: str
    computations: list[Computation] = field(default_factory=list)
    entry: str | None = None
    # Header attributes as written (`is_scheduled`, `entry_computation_layout`, ...), in order.
    attrs: dict[str, str] = field(default_factory=dict)
    frames: StackFrameIndex | None = None
    # `computation`'s table: the first computation of each name, for the list it was made from
    # at the length it had (computations are appended); made again when either changed.
    _named: tuple[list[Computation], int, dict[str, Computation]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def computation(self, name: str) -> Computation | None:
        comps = self.computations
        made = self._named
        if made is None or made[0] is not comps or made[1] != len(comps):
            named: dict[str, Computation] = {}
            for comp in comps:
                named.setdefault(comp.name, comp)
            made = self._named = (comps, len(comps), named)
        found = made[2].get(name)
        if found is not None and found.name == name:
            return found
        for comp in comps:  # not in the table (or renamed since): as the list has it
            if comp.name == name:
                return comp
        return None

    @property
    def entry_computation(self) -> Computation | None:
        if self.entry is not None:
            return self.computation(self.entry)
        for comp in self.computations:
            if comp.is_entry:
                return comp
        return self.computations[-1] if self.computations else None

    def instructions(self) -> dict[str, Instruction]:
        """Every instruction of the module by name (HLO names are unique within a module)."""
        return {inst.name: inst for comp in self.computations for inst in comp.instructions}
