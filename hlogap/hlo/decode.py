"""Serialized `xla.HloProto` / `xla.HloModuleProto` -> the same IR the text parser builds.

Traces store a module as the `Hlo Proto` stat (an `HloProto` wrapping an `HloModuleProto`);
`HloModule.as_serialized_hlo_module_proto()` gives the bare `HloModuleProto`. Operands and called
computations are ids in the proto and names in the IR. Typed fields are filled under the same
conditions under which XLA's text printer writes the attribute, and `attrs` is written with
`hlogap.hlo.printer`'s helpers, so a decoded module equals the parse of XLA's dump of it.
Not decoded (absent from `attrs`): `origin`, `statistics`, `output_to_operand_aliasing`,
`operand_layout_constraints`, `parameter_replication` and backend-specific rarities.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import struct
from collections.abc import Mapping
from dataclasses import MISSING

from google.protobuf.message import DecodeError

from hlogap.hlo.ir import (
    Computation,
    ConvDims,
    DotDims,
    FileLocation,
    Instruction,
    Layout,
    Module,
    ReplicaGroups,
    Shape,
    SliceDim,
    StackFrame,
    StackFrameIndex,
    Window,
)
from hlogap.hlo.printer import (
    escape,
    format_backend_config,
    format_dim_labels,
    format_dot_dims,
    format_int_list,
    format_replica_groups,
    format_slice,
    format_string,
    format_window,
    print_shape,
)
from hlogap.hlo.text import AxisRef, expand_iota, expand_mesh_axes, is_braced
from hlogap.proto import hlo_pb2
from hlogap.units import printable

try:
    from hlogap.hlo import _hlodecode
except ImportError:  # installed without its C extension: upb parses, Python decodes
    _hlodecode = None  # type: ignore[assignment]


class HloDecodeError(ValueError):
    """Bytes that are not a well-formed serialized HLO module."""


_PT = hlo_pb2.PrimitiveType
# Element type names as HLO text writes them.
_ELEMENT_NAMES = {
    v: ("opaque" if n == "OPAQUE_TYPE" else n.lower())
    for n, v in _PT.items()
    if n not in ("PRIMITIVE_TYPE_INVALID", "BUFFER")
}
_UNBOUNDED = -(2**63)  # xla::Shape::kUnboundedSize, a `?` dimension
# Opcodes whose text always carries `dimensions={...}` (others only when the proto has some).
_ALWAYS_DIMENSIONS = frozenset(
    {
        "broadcast",
        "concatenate",
        "map",
        "reduce",
        "reverse",
        "sort",
        "transpose",
        "all-gather",
        "all-gather-start",
        "reduce-scatter",
    }
)
_NO_DIMENSIONS = frozenset({"iota", "fft"})
_COLLECTIVES = frozenset(
    {
        "all-reduce",
        "all-reduce-start",
        "all-gather",
        "all-gather-start",
        "reduce-scatter",
        "all-to-all",
        "ragged-all-to-all",
        "collective-broadcast",
    }
)
_TO_APPLY = frozenset(
    {
        "call",
        "map",
        "reduce",
        "reduce-window",
        "all-reduce",
        "all-reduce-start",
        "reduce-scatter",
        "scatter",
        "sort",
        "topk",
    }
)
# Opcodes with attrs of their own between the dot's and the precision's, and after it.
_SLICE_TO_SCATTER = frozenset({"slice", "dynamic-slice", "pad", "gather", "scatter"})
_REDUCE_PRECISION_TO_CUSTOM_CALL = frozenset(
    {"reduce-precision", "rng", "rng-bit-generator", "topk", "custom-call"}
)
_PRECISION = ("default", "high", "highest")
_FFT_TYPES = {0: "FFT", 1: "IFFT", 2: "RFFT", 3: "IRFFT"}  # xla.FftType
_RNG_DISTRIBUTION = {1: "rng_uniform", 2: "rng_normal"}
_RNG_ALGORITHM = {0: "rng_default", 1: "rng_three_fry", 2: "rng_philox"}
_API_VERSIONS = {
    2: "API_VERSION_STATUS_RETURNING",
    3: "API_VERSION_STATUS_RETURNING_UNIFIED",
    4: "API_VERSION_TYPED_FFI",
}
# Little-endian byte-packed literal fields (`s8s`, `bf16s`, ...) by element type.
_PACKED = {"s8": "<b", "u8": "<B", "s16": "<h", "u16": "<H", "f16": "<e", "bf16": "<H"}
# `%g` digits XLA's RoundTripFpToString tries first, then the most a type needs (xla/util.cc).
_FLOAT_DIGITS = {"f16": (5, 5), "bf16": (4, 4), "f32": (6, 9), "f64": (15, 17)}


def decode_hlo_proto(data: bytes) -> Module:
    """An `xla.HloProto` (the `Hlo Proto` stat of xprof traces)."""
    module = _decode_in_c(data, wrapped=True)
    if module is not None:
        return module
    proto = hlo_pb2.HloProto()
    _parse(proto, data)
    if not proto.HasField("hlo_module"):
        raise HloDecodeError("the HloProto holds no HLO module")
    return _module(proto.hlo_module)


def decode_hlo_module_proto(data: bytes) -> Module:
    """A bare `xla.HloModuleProto` (`HloModule.as_serialized_hlo_module_proto()`)."""
    module = _decode_in_c(data, wrapped=False)
    if module is not None:
        return module
    proto = hlo_pb2.HloModuleProto()
    _parse(proto, data)
    return _module(proto)


def _decode_in_c(data: bytes, wrapped: bool) -> Module | None:
    """The module as `_module` decodes it, made by the C extension (~20x faster); None where
    the extension is absent or leaves the module to upb and `_module` (bad or unusual bytes:
    they then say what is wrong, as they always did)."""
    if _hlodecode is None:
        return None
    hooks = _Hooks(wrapped)
    # The decode makes ~5 container objects an instruction and no reference cycle: the
    # collector's passes over them while it runs would find nothing (and they cost a third
    # of the decode's time where many objects are alive).
    collecting = gc.isenabled()
    gc.disable()
    try:
        name, entry, computations = _hlodecode.decode(data, wrapped, hooks)
    except Exception:
        return None
    finally:
        if collecting:
            gc.enable()
    module = Module(name=name, entry=entry, frames=hooks.frames)
    module.attrs.update(hooks.module_attrs)
    module.computations = computations
    return module


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field as the wire writes it."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


class _Hooks:
    """What the C decoder asks of Python for one module, each once per distinct serialized
    sub-message: the text `_Instruction` writes from it. Each part is parsed by upb where it
    sits in the whole message (inside a module, a computation, an instruction), so upb checks
    it as when it parses the whole, nesting limit included."""

    __slots__ = ("frames", "module_attrs", "shapes", "state", "wrapped")

    def __init__(self, wrapped: bool) -> None:
        self.wrapped = wrapped
        self.frames: StackFrameIndex | None = None
        self.module_attrs: dict[str, str] = {}
        self.shapes: dict[bytes, Shape] = {}
        self.state: _ModuleState | None = None

    def _module(self, fields: bytes) -> hlo_pb2.HloModuleProto:
        if not self.wrapped:
            return hlo_pb2.HloModuleProto.FromString(fields)
        return hlo_pb2.HloProto.FromString(_field(1, fields)).hlo_module

    def _instruction(self, fields: bytes) -> hlo_pb2.HloInstructionProto:
        computation = self._module(_field(3, _field(2, fields))).computations[0]
        return computation.instructions[0]

    def head(self, parts: list[bytes]) -> None:
        """The module's fields besides its name, entry and computations (and its stack
        frames, where the C decoder made them: `frames` is set)."""
        if not parts:
            return
        proto = self._module(b"".join(parts))
        if proto.HasField("stack_frame_index"):
            self.frames = _frames(proto.stack_frame_index)
        if proto.HasField("device_assignment"):
            devices = proto.device_assignment
            self.module_attrs["replica_count"] = str(devices.replica_count)
            self.module_attrs["num_partitions"] = str(devices.computation_count)

    def computations(self, parts: list[bytes]) -> None:
        """The computations' fields not decoded (program shapes), checked by upb."""
        if parts:
            self._module(_field(3, b"".join(parts)))

    def shape(self, raw: bytes) -> Shape:
        return _shape(self._instruction(_field(3, raw)).shape)

    def metadata(self, raw: bytes) -> _Metadata:
        return _metadata(self._instruction(_field(7, raw)).metadata, self.frames)

    def literal(self, raw: bytes) -> str:
        return _literal(self._instruction(_field(8, raw)).literal, self.shapes)

    def sharding(self, raw: bytes) -> str:
        return format_sharding(self._instruction(_field(40, raw)).sharding)

    def frontend_attributes(self, raw: bytes) -> str | None:
        values = self._instruction(_field(68, raw)).frontend_attributes.map
        return _frontend_attributes(values) if values else None

    def backend_config(self, raw: bytes) -> tuple[str, str]:
        return _backend_config(raw)

    def replica_groups(self, raw: bytes) -> tuple[ReplicaGroups, str]:
        """A collective's groups, from its groups' fields (none: the empty list)."""
        groups = _replica_groups(self._instruction(raw))
        return groups, format_replica_groups(groups)

    def string(self, raw: bytes) -> str:
        return format_string(raw.decode())

    def instruction(
        self,
        raw: bytes,
        is_root: bool,
        defined: dict[int, tuple[str, Shape]],
        comp_names: dict[int, str],
    ) -> Instruction:
        """An instruction whose fields the C decoder leaves to `_Instruction`."""
        if self.state is None:
            self.state = _ModuleState(defined, comp_names, self.frames, self.shapes)
        return _Instruction(self._instruction(raw), self.state, is_root).build()


def _parse(proto: hlo_pb2.HloProto | hlo_pb2.HloModuleProto, data: bytes) -> None:
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, TypeError) as e:  # upb raises DecodeError; be safe
        raise HloDecodeError(f"not a serialized {type(proto).__name__}: {e}") from None


def _module(proto: hlo_pb2.HloModuleProto) -> Module:
    if not proto.computations:
        raise HloDecodeError(f"HLO module {proto.name!r} has no computations")
    comp_names = {c.id: c.name for c in proto.computations}
    # Instruction ids are unique in a module; operands refer to them. A module repeats few
    # distinct shapes: each is decoded once, by its serialized bytes (Shapes are frozen).
    shapes: dict[bytes, Shape] = {}
    defined: dict[int, tuple[str, Shape]] = {}
    count = 0
    for c in proto.computations:
        instructions = c.instructions
        count += len(instructions)
        for i in instructions:
            defined[i.id] = (i.name, _cached_shape(i.shape, shapes))
    if len(defined) != count:
        raise HloDecodeError(f"HLO module {proto.name!r} repeats instruction ids")
    frames = _frames(proto.stack_frame_index) if proto.HasField("stack_frame_index") else None
    entry = proto.entry_computation_name or comp_names.get(proto.entry_computation_id)
    module = Module(name=proto.name, entry=entry, frames=frames)
    if proto.HasField("device_assignment"):  # what XLA's text prints in the module's header
        devices = proto.device_assignment
        module.attrs["replica_count"] = str(devices.replica_count)
        module.attrs["num_partitions"] = str(devices.computation_count)
    state = _ModuleState(defined, comp_names, frames, shapes)
    for c in proto.computations:
        comp = Computation(c.name, is_entry=c.name == entry, execution_thread=c.execution_thread)
        root = c.root_id
        comp.instructions = [_Instruction(i, state, i.id == root).build() for i in c.instructions]
        module.computations.append(comp)
    return module


def _frames(index: hlo_pb2.StackFrameIndexProto) -> StackFrameIndex:
    return StackFrameIndex(
        tuple(index.file_names),
        tuple(index.function_names),
        tuple(
            FileLocation(
                loc.file_name_id,
                loc.function_name_id,
                loc.line,
                loc.end_line,
                loc.column,
                loc.end_column,
            )
            for loc in index.file_locations
        ),
        tuple(StackFrame(f.file_location_id, f.parent_frame_id) for f in index.stack_frames),
    )


def _element_name(value: int) -> str:
    name = _ELEMENT_NAMES.get(value)
    if name is None:
        raise HloDecodeError(f"unsupported element type {value} in an HLO shape")
    return name


def _cached_shape(proto: hlo_pb2.ShapeProto, shapes: dict[bytes, Shape]) -> Shape:
    """`_shape`, once per distinct shape of a module (the same bytes decode to the same Shape)."""
    key = proto.SerializeToString()
    shape = shapes.get(key)
    if shape is None:
        shape = shapes[key] = _shape(proto)
    return shape


def _shape(proto: hlo_pb2.ShapeProto, depth: int = 0) -> Shape:
    if depth > 64:
        raise HloDecodeError("HLO tuple shapes nested too deeply")
    element = _element_name(proto.element_type)
    if element == "tuple":
        return Shape("tuple", tuple_shapes=tuple(_shape(s, depth + 1) for s in proto.tuple_shapes))
    dims = tuple(-1 if d == _UNBOUNDED else d for d in proto.dimensions)
    if any(d < 0 and d != _UNBOUNDED for d in proto.dimensions):
        raise HloDecodeError(f"HLO shape with a negative dimension: {list(proto.dimensions)}")
    dynamic = tuple(proto.is_dynamic_dimension)
    if len(dynamic) not in (0, len(dims)):
        raise HloDecodeError(f"HLO shape with {len(dims)} dims and {len(dynamic)} dynamic flags")
    layout = None
    if proto.HasField("layout") and element not in ("token", "opaque"):
        layout = _layout(proto.layout, depth)
        if sorted(layout.minor_to_major) != list(range(len(dims))):
            raise HloDecodeError(f"HLO layout {list(layout.minor_to_major)} for {len(dims)} dims")
        # XLA's text leaves out a scalar's layout when it would print as `{}`.
        if not dims and layout == Layout():
            layout = None
    return Shape(element, dims, dynamic if any(dynamic) else (), layout)


def _layout(proto: hlo_pb2.LayoutProto, depth: int) -> Layout:
    extra = []
    if proto.dim_level_types:
        extra.append(
            "D(" + ",".join("DCSH"[t] if t < 4 else "?" for t in proto.dim_level_types) + ")"
        )
    for prefix, value in (("#", proto.index_primitive_type), ("*", proto.pointer_primitive_type)):
        if value:
            extra.append(f"{prefix}({_element_name(value)})")
    for split in proto.split_configs:
        extra.append(f"SC({split.dimension}:{','.join(map(str, split.split_indices))})")
    if proto.HasField("physical_shape"):
        extra.append(f"P({print_shape(_shape(proto.physical_shape, depth + 1))})")
    if proto.dynamic_shape_metadata_prefix_bytes:
        extra.append(f"M({proto.dynamic_shape_metadata_prefix_bytes})")
    tiles = tuple(tuple(t.dimensions) for t in proto.tiles)
    if any(d < 1 and d != -1 for tile in tiles for d in tile):  # -1: `*`, combined dimensions
        raise HloDecodeError(f"HLO layout with a tile size below 1: {list(map(list, tiles))}")
    return Layout(
        tuple(proto.minor_to_major),
        tiles,
        proto.memory_space,
        tuple(extra),
        proto.element_size_in_bits,
        proto.tail_padding_alignment_in_elements or 1,
    )


_Metadata = tuple[str | None, str | None, str | None]  # attrs text, op_name, source


class _ModuleState:
    """What one module's instructions are decoded against, and its caches."""

    __slots__ = ("comp_names", "defined", "frames", "metadata", "shapes")

    def __init__(
        self,
        defined: dict[int, tuple[str, Shape]],
        comp_names: dict[int, str],
        frames: StackFrameIndex | None,
        shapes: dict[bytes, Shape],
    ) -> None:
        self.defined = defined
        self.comp_names = comp_names
        self.frames = frames
        self.shapes = shapes
        # Decoded metadata by its bytes: a module's instructions share few (a fusion's
        # instructions carry the metadata of the op they were fused from).
        self.metadata: dict[bytes, _Metadata] = {}


class _Instruction:
    """Builds one IR instruction, writing attrs in the order XLA's printer does."""

    __slots__ = ("attrs", "defined", "inst", "module", "p")

    def __init__(
        self, proto: hlo_pb2.HloInstructionProto, module: _ModuleState, is_root: bool
    ) -> None:
        self.p = proto
        self.module = module
        self.defined = module.defined
        self.inst = Instruction(
            name=proto.name,
            opcode=proto.opcode,
            shape=self.defined[proto.id][1],
            is_root=is_root,
        )
        self.attrs = self.inst.attrs

    def build(self) -> Instruction:
        p, inst, defined = self.p, self.inst, self.defined
        operand_ids = p.operand_ids
        if operand_ids:
            operands, shapes = inst.operands, inst.operand_shapes
            for operand in operand_ids:
                found = defined.get(operand)
                if found is None:
                    raise HloDecodeError(f"instruction {p.name!r} uses unknown id {operand}")
                operands.append(found[0])
                shapes.append(found[1])
        called_ids = p.called_computation_ids
        if called_ids:
            comp_names = self.module.comp_names
            for called in called_ids:
                if called not in comp_names:
                    raise HloDecodeError(
                        f"instruction {p.name!r} calls unknown computation {called}"
                    )
                inst.called.append(comp_names[called])
        self._opcode_attrs()
        if inst.called:
            self._called_attrs()
        if p.frontend_attributes.map:
            self.attrs["frontend_attributes"] = _frontend_attributes(p.frontend_attributes.map)
        if p.control_predecessor_ids:
            names = (f"%{self._defined(i)[0]}" for i in p.control_predecessor_ids)
            self.attrs["control-predecessors"] = "{" + ", ".join(names) + "}"
        self._metadata()
        if p.backend_config:
            config, text = _backend_config(p.backend_config)
            inst.backend_config = config
            self.attrs["backend_config"] = text
        return inst

    def _defined(self, instruction_id: int) -> tuple[str, Shape]:
        if instruction_id not in self.defined:
            raise HloDecodeError(f"instruction {self.p.name!r} uses unknown id {instruction_id}")
        return self.defined[instruction_id]

    def _opcode_attrs(self) -> None:
        p, inst, attrs, op = self.p, self.inst, self.attrs, self.inst.opcode
        if op == "parameter":
            inst.parameter_number = p.parameter_number
        elif op == "constant":
            literal = _literal(p.literal, self.module.shapes) if p.HasField("literal") else None
            inst.literal = literal
        elif op == "get-tuple-element":
            inst.tuple_index = p.tuple_index
            attrs["index"] = str(p.tuple_index)
        elif op == "fusion":
            inst.fusion_kind = p.fusion_kind
            attrs["kind"] = p.fusion_kind
        elif op == "fft":
            attrs["fft_type"] = _FFT_TYPES.get(p.fft_type, str(p.fft_type))
            attrs["fft_length"] = "{" + ",".join(map(str, p.fft_length)) + "}"
        elif op == "iota" and p.dimensions:
            attrs["iota_dimension"] = str(p.dimensions[0])
        elif op == "compare":
            attrs["direction"] = p.comparison_direction
            first = inst.operand_shapes[0] if inst.operand_shapes else None
            operand = first.element_type if first is not None else ""
            if p.comparison_type and p.comparison_type != _default_comparison(operand):
                attrs["type"] = p.comparison_type
        if p.channel_id > 0:
            inst.channel_id = p.channel_id
            attrs["channel_id"] = str(p.channel_id)
        if op in _COLLECTIVES:
            inst.replica_groups = _replica_groups(p)
            attrs["replica_groups"] = format_replica_groups(inst.replica_groups)
        if op == "collective-permute" or op == "collective-permute-start":
            pairs = ",".join(f"{{{s.source},{s.target}}}" for s in p.source_target_pairs)
            attrs["source_target_pairs"] = "{" + pairs + "}"
        if op not in _NO_DIMENSIONS and (p.dimensions or op in _ALWAYS_DIMENSIONS):
            inst.dimensions = tuple(p.dimensions)
            attrs["dimensions"] = format_int_list(p.dimensions)
        if op == "sort" and p.is_stable:
            attrs["is_stable"] = "true"
        if p.use_global_device_ids:
            attrs["use_global_device_ids"] = "true"
        if p.HasField("window") and p.window.dimensions:
            inst.window = _window(p.window)
            attrs["window"] = format_window(inst.window)
        if p.HasField("convolution_dimension_numbers"):
            inst.conv_dims = _conv_dims(p.convolution_dimension_numbers)
            attrs["dim_labels"] = format_dim_labels(inst.conv_dims)
        inst.feature_group_count = p.feature_group_count or 1
        inst.batch_group_count = p.batch_group_count or 1
        if inst.feature_group_count != 1:
            attrs["feature_group_count"] = str(inst.feature_group_count)
        if inst.batch_group_count != 1:
            attrs["batch_group_count"] = str(inst.batch_group_count)
        if p.HasField("dot_dimension_numbers"):
            d = p.dot_dimension_numbers
            inst.dot_dims = DotDims(
                tuple(d.lhs_batch_dimensions),
                tuple(d.rhs_batch_dimensions),
                tuple(d.lhs_contracting_dimensions),
                tuple(d.rhs_contracting_dimensions),
            )
            attrs.update(format_dot_dims(inst.dot_dims))
        if op in _SLICE_TO_SCATTER:
            self._slice_to_scatter()
        if p.HasField("precision_config"):
            precision = p.precision_config.operand_precision
            if any(precision):
                names = (_PRECISION[x] if 0 <= x < 3 else str(x) for x in precision)
                attrs["operand_precision"] = "{" + ",".join(names) + "}"
        if op in _REDUCE_PRECISION_TO_CUSTOM_CALL:
            self._reduce_precision_to_custom_call()
        if p.is_host_transfer:
            attrs["is_host_transfer"] = "true"
        if p.HasField("sharding"):
            attrs["sharding"] = format_sharding(p.sharding)

    def _slice_to_scatter(self) -> None:
        """The attrs of slice, dynamic-slice, pad, gather and scatter, in the printer's order."""
        p, inst, attrs, op = self.p, self.inst, self.attrs, self.inst.opcode
        if op == "slice":
            inst.slice = tuple(SliceDim(s.start, s.limit, s.stride) for s in p.slice_dimensions)
            attrs["slice"] = format_slice(inst.slice)
        if op == "dynamic-slice":
            attrs["dynamic_slice_sizes"] = format_int_list(p.dynamic_slice_sizes)
        if op == "pad":
            attrs["padding"] = _padding(p.padding_config)
        if op == "gather":
            self._gather()
        if op == "scatter":
            self._scatter()
        if op in ("gather", "scatter") and p.indices_are_sorted:
            attrs["indices_are_sorted"] = "true"
        if op == "scatter" and p.unique_indices:
            attrs["unique_indices"] = "true"

    def _reduce_precision_to_custom_call(self) -> None:
        """The attrs of reduce-precision, rng, rng-bit-generator, topk and custom-call."""
        p, inst, attrs, op = self.p, self.inst, self.attrs, self.inst.opcode
        if op == "reduce-precision":
            attrs["exponent_bits"] = str(p.exponent_bits)
            attrs["mantissa_bits"] = str(p.mantissa_bits)
        if op == "rng":
            attrs["distribution"] = _RNG_DISTRIBUTION.get(p.distribution, str(p.distribution))
        if op == "rng-bit-generator":
            attrs["algorithm"] = _RNG_ALGORITHM.get(p.rng_algorithm, str(p.rng_algorithm))
        if op == "topk":
            attrs["k"] = str(p.k)
            attrs["largest"] = "true" if p.largest else "false"
        if op == "custom-call":
            inst.custom_call_target = p.custom_call_target
            attrs["custom_call_target"] = format_string(p.custom_call_target)
            if p.custom_call_has_side_effect:
                attrs["custom_call_has_side_effect"] = "true"
            if p.custom_call_api_version in _API_VERSIONS:
                attrs["api_version"] = _API_VERSIONS[p.custom_call_api_version]

    def _gather(self) -> None:
        d, attrs = self.p.gather_dimension_numbers, self.attrs
        attrs["offset_dims"] = format_int_list(d.offset_dims)
        attrs["collapsed_slice_dims"] = format_int_list(d.collapsed_slice_dims)
        attrs["start_index_map"] = format_int_list(d.start_index_map)
        if d.operand_batching_dims:
            attrs["operand_batching_dims"] = format_int_list(d.operand_batching_dims)
        if d.start_indices_batching_dims:
            attrs["start_indices_batching_dims"] = format_int_list(d.start_indices_batching_dims)
        attrs["index_vector_dim"] = str(d.index_vector_dim)
        attrs["slice_sizes"] = format_int_list(self.p.gather_slice_sizes)

    def _scatter(self) -> None:
        d, attrs = self.p.scatter_dimension_numbers, self.attrs
        attrs["update_window_dims"] = format_int_list(d.update_window_dims)
        attrs["inserted_window_dims"] = format_int_list(d.inserted_window_dims)
        attrs["scatter_dims_to_operand_dims"] = format_int_list(d.scatter_dims_to_operand_dims)
        if d.input_batching_dims:
            attrs["input_batching_dims"] = format_int_list(d.input_batching_dims)
        if d.scatter_indices_batching_dims:
            attrs["scatter_indices_batching_dims"] = format_int_list(
                d.scatter_indices_batching_dims
            )
        attrs["index_vector_dim"] = str(d.index_vector_dim)

    def _called_attrs(self) -> None:
        called, attrs, op = self.inst.called, self.attrs, self.inst.opcode
        if not called:
            return
        names = [f"%{c}" for c in called]
        if op == "while" and len(names) == 2:
            # The proto lists the body first; the IR keeps the text's condition-then-body order.
            self.inst.called.reverse()
            attrs["condition"], attrs["body"] = names[1], names[0]
        elif op == "select-and-scatter" and len(names) == 2:
            attrs["select"], attrs["scatter"] = names
        elif op == "conditional":
            predicate = self.inst.operand_shapes[0] if self.inst.operand_shapes else None
            if predicate is not None and predicate.element_type == "pred" and len(names) == 2:
                attrs["true_computation"], attrs["false_computation"] = names
            else:
                attrs["branch_computations"] = "{" + ", ".join(names) + "}"
        elif op in _TO_APPLY:
            attrs["to_apply"] = names[0]
        elif op == "custom-call":
            attrs["called_computations"] = "{" + ", ".join(names) + "}"
        else:
            attrs["calls"] = names[0] if len(names) == 1 else "{" + ", ".join(names) + "}"

    def _metadata(self) -> None:
        if not self.p.HasField("metadata"):
            return
        m, cache = self.p.metadata, self.module.metadata
        key = m.SerializeToString()
        found = cache.get(key)
        if found is None:
            found = cache[key] = _metadata(m, self.module.frames)
        text, op_name, source = found
        if op_name is not None:
            self.inst.op_name = op_name
        if source is not None:
            self.inst.source = source
        if text is not None:
            self.attrs["metadata"] = text


def _metadata(m: hlo_pb2.OpMetadata, frames: StackFrameIndex | None) -> _Metadata:
    """The `metadata={...}` text (None when empty), the op name and the source line."""
    op_name, source_file, source_line = m.op_name, m.source_file, m.source_line
    frame = m.stack_frame_id
    parts = [
        f'{key}="{escape(value)}"'
        for key, value in (("op_type", m.op_type), ("op_name", op_name))
        if value
    ]
    if source_file:
        parts.append(f'source_file="{escape(source_file)}"')
    for key, number in (
        ("source_line", source_line),
        ("source_end_line", m.source_end_line),
        ("source_column", m.source_column),
        ("source_end_column", m.source_end_column),
    ):
        if number:
            parts.append(f"{key}={number}")
    for key, value in (
        ("deduplicated_name", m.deduplicated_name),
        ("scheduling_name", m.scheduling_name),
    ):
        if value:
            parts.append(f'{key}="{escape(value)}"')
    if frame:
        parts.append(f"stack_frame_id={frame}")
    # Metadata reaches the outputs as names do: printable (hlogap.units).
    source = None
    if source_file:
        source = printable(f"{source_file}:{source_line}" if source_line else source_file)
    elif frame and frames is not None:
        source = frames.source(frame)
    text = "{" + " ".join(parts) + "}" if parts else None
    return text, printable(op_name) if op_name else None, source


def _replica_groups(p: hlo_pb2.HloInstructionProto) -> ReplicaGroups:
    """The groups of a collective, whichever field holds them."""
    try:
        if p.HasField("mesh_axes_replica_group_list"):
            return _mesh_groups(p.mesh_axes_replica_group_list)
        if p.HasField("iota_collective_device_list"):
            return _iota_groups(p.iota_collective_device_list)
        devices = p.collective_device_list
        if devices.HasField("iota_replica_group_list"):
            return _iota_groups(devices.iota_replica_group_list)
    except ValueError as e:
        raise HloDecodeError(f"instruction {p.name!r}: bad replica groups ({e})") from None
    groups = devices.replica_groups if p.HasField("collective_device_list") else p.replica_groups
    return ReplicaGroups(tuple(tuple(g.replica_ids) for g in groups))


def _frontend_attributes(values: Mapping[str, str]) -> str:
    """`{a="1",b={}}`: sorted by key; values that are `{...}` groups unquoted, as XLA does."""
    items = (f"{k}={v if is_braced(v) else format_string(v)}" for k, v in sorted(values.items()))
    return "{" + ",".join(items) + "}"


def _backend_config(raw: bytes) -> tuple[str, str]:
    """The config as XLA's text shows it (JSON objects re-serialized with sorted keys), and
    its `backend_config=` attr text."""
    config = raw.decode("utf-8", errors="backslashreplace")
    if config.startswith("{"):
        try:
            value = json.loads(config)
        except (ValueError, RecursionError):  # nested past the parser's depth: as stored
            return config, format_backend_config(config)  # not JSON (an FFI dict, say)
        if isinstance(value, dict):
            text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            # A JSON object's dump is one balanced `{...}` group (brackets paired, quotes in
            # strings escaped): printed as it is, without `is_braced`'s scan of it.
            return text, text
    return config, format_backend_config(config)


def _iota_groups(iota: hlo_pb2.IotaReplicaGroupListProto) -> ReplicaGroups:
    reshape = tuple(iota.iota_reshape_dims)
    perm = tuple(iota.iota_transpose_perm) or tuple(range(len(reshape)))
    n, size = iota.num_replica_groups, iota.num_devices_per_group
    text = f"[{n},{size}]<=[{','.join(map(str, reshape))}]"
    if len(reshape) > 1:
        text += f"T({','.join(map(str, perm))})"
    groups, group_size = expand_iota(n, size, reshape, perm)
    return ReplicaGroups(groups, text, group_size)


def _mesh_groups(proto: hlo_pb2.MeshAxesReplicaGroupListProto) -> ReplicaGroups:
    axes = proto.mesh.axes
    sizes = tuple(a.size for a in axes)
    refs: list[AxisRef] = []
    names = []
    for ref in proto.axes:
        if not 0 <= ref.mesh_axis_index < len(axes):
            raise ValueError(f"mesh axis {ref.mesh_axis_index} out of range")
        name = f"'{axes[ref.mesh_axis_index].name}'"
        if ref.HasField("sub_axis_info"):
            sub = (ref.sub_axis_info.pre_size, ref.sub_axis_info.size)
            refs.append((ref.mesh_axis_index, sub))
            names.append(f"{name}:({sub[0]}){sub[1]}")
        else:
            refs.append((ref.mesh_axis_index, None))
            names.append(name)
    groups, size = expand_mesh_axes(sizes, tuple(proto.mesh.device_ids), tuple(refs))
    mesh = ",".join(f"'{a.name}'={a.size}" for a in axes)
    devices = proto.mesh.device_ids
    ids = f", device_ids=({','.join(map(str, devices))})" if devices else ""
    return ReplicaGroups(groups, f"mesh[{mesh}]{ids} {{{','.join(names)}}}", size)


def _window(proto: hlo_pb2.Window) -> Window:
    dims = proto.dimensions
    return Window(
        size=tuple(d.size for d in dims),
        stride=tuple(d.stride for d in dims),
        pad_low=tuple(d.padding_low for d in dims),
        pad_high=tuple(d.padding_high for d in dims),
        lhs_dilate=tuple(d.base_dilation for d in dims),
        rhs_dilate=tuple(d.window_dilation for d in dims),
        rhs_reversal=tuple(d.window_reversal for d in dims),
    )


def _conv_dims(d: hlo_pb2.ConvolutionDimensionNumbers) -> ConvDims:
    dims = ConvDims(
        d.input_batch_dimension,
        d.input_feature_dimension,
        tuple(d.input_spatial_dimensions),
        d.kernel_input_feature_dimension,
        d.kernel_output_feature_dimension,
        tuple(d.kernel_spatial_dimensions),
        d.output_batch_dimension,
        d.output_feature_dimension,
        tuple(d.output_spatial_dimensions),
    )
    n = len(dims.input_spatial)
    for labels in (
        (dims.input_batch, dims.input_feature, *dims.input_spatial),
        (dims.kernel_input_feature, dims.kernel_output_feature, *dims.kernel_spatial),
        (dims.output_batch, dims.output_feature, *dims.output_spatial),
    ):
        if sorted(labels) != list(range(n + 2)):
            raise HloDecodeError(f"convolution dimension numbers {labels} are not a permutation")
    return dims


def _padding(config: hlo_pb2.PaddingConfig) -> str:
    """`0_1x2_3` (low_high), with `_interior` on every dim when any dim has interior padding."""
    dims = config.dimensions
    interior = any(d.interior_padding for d in dims)
    return "x".join(
        f"{d.edge_padding_low}_{d.edge_padding_high}"
        + (f"_{d.interior_padding}" if interior else "")
        for d in dims
    )


def _default_comparison(element_type: str) -> str:
    if element_type.startswith(("f", "bf", "c")):
        return "FLOAT"
    return "SIGNED" if element_type.startswith("s") else "UNSIGNED"


def _literal(proto: hlo_pb2.LiteralProto, shapes: dict[bytes, Shape]) -> str:
    """The literal as XLA prints it inside `constant(...)`: `0`, `{1, 2}`, `{ { 1, 2 } }`."""
    shape = _cached_shape(proto.shape, shapes)
    values = _literal_values(proto, shape.element_type)
    # What is not decoded prints as XLA's own elision; rank bounds the recursion below.
    if shape.is_tuple or values is None or len(values) != math.prod(shape.dims) or shape.rank > 64:
        return "{...}"
    if not shape.dims:
        return values[0]
    # Rank 1 prints `{1, 2}`; higher ranks pad every brace: `{ { 1, 2 }, { 3, 4 } }`.
    return _nest(values, shape.dims, " " if len(shape.dims) > 1 else "")


def _nest(values: list[str], dims: tuple[int, ...], pad: str) -> str:
    if len(dims) == 1:
        items = values
    else:
        step = len(values) // dims[0] if dims[0] else 0
        items = [_nest(values[k * step : (k + 1) * step], dims[1:], pad) for k in range(dims[0])]
    return "{" + pad + ", ".join(items) + pad + "}"


def _literal_values(proto: hlo_pb2.LiteralProto, element: str) -> list[str] | None:
    """Values in row-major order as text, or None for types not decoded here."""
    if element == "pred":
        return ["true" if v else "false" for v in proto.preds]
    if element in ("s32", "s64", "u32", "u64"):
        return [str(v) for v in getattr(proto, element + "s")]
    if element in ("f32", "f64"):
        return [_float(v, element) for v in getattr(proto, element + "s")]
    if element not in _PACKED:
        return None
    code, raw = _PACKED[element], getattr(proto, element + "s")
    if len(raw) % struct.calcsize(code):
        return None
    values = [v for (v,) in struct.iter_unpack(code, raw)]
    if element == "bf16":  # the top half of an f32
        values = [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in values]
    return [_float(v, element) if element in _FLOAT_DIGITS else str(v) for v in values]


def _float(value: float, element: str) -> str:
    """XLA's RoundTripFpToString: `%g` with digits10, or max_digits10 when that does not
    read back (f32, f64); always max_digits10 for the 16-bit types."""
    if math.isnan(value):
        return "-nan" if math.copysign(1.0, value) < 0 else "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    first, most = _FLOAT_DIGITS[element]
    text = f"{value:.{first}g}"
    if first != most and _as_f32(float(text), element) != value:
        text = f"{value:.{most}g}"
    return text


def _as_f32(value: float, element: str) -> float:
    """`value` rounded to f32 when `element` is f32 (inf past its range)."""
    if element != "f32":
        return value
    try:
        rounded: float = struct.unpack("<f", struct.pack("<f", value))[0]
        return rounded
    except OverflowError:
        return math.copysign(math.inf, value)


_SHARDING_TYPES = {0: "replicated", 1: "maximal", 4: "manual", 5: "unknown", 6: "unreduced"}


def format_sharding(sharding: hlo_pb2.OpSharding) -> str:
    """An `OpSharding` as XLA's text prints it: `{devices=[4,1,2]<=[8] last_tile_dim_replicate}`,
    `{replicated}`, `{maximal device=3}`, a tuple `{{...}, {...}}`."""
    return "{" + _sharding_body(sharding) + "}"


def _sharding_body(sharding: hlo_pb2.OpSharding) -> str:
    if sharding.type == hlo_pb2.OpSharding.TUPLE:
        return ", ".join(format_sharding(s) for s in sharding.tuple_shardings)
    if sharding.type == hlo_pb2.OpSharding.MAXIMAL:
        devices = sharding.tile_assignment_devices
        return f"maximal device={devices[0]}" if devices else "maximal"
    if sharding.type != hlo_pb2.OpSharding.OTHER:
        return _SHARDING_TYPES.get(sharding.type, "unknown")
    text = "devices=[" + ",".join(map(str, sharding.tile_assignment_dimensions)) + "]"
    if sharding.iota_reshape_dims:
        text += "<=[" + ",".join(map(str, sharding.iota_reshape_dims)) + "]"
        perm = list(sharding.iota_transpose_perm)
        if len(sharding.iota_reshape_dims) > 1 and perm:
            text += "T(" + ",".join(map(str, perm)) + ")"
    else:
        text += ",".join(map(str, sharding.tile_assignment_devices))
    if sharding.replicate_on_last_tile_dim:
        text += " last_tile_dim_replicate"
    elif sharding.last_tile_dims:
        kinds = (_SHARDING_TYPES.get(k, "unknown") for k in sharding.last_tile_dims)
        text += " last_tile_dims={" + ", ".join(kinds) + "}"
    return text


def _fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _defaults(cls: type) -> dict[str, object]:
    return {f.name: f.default for f in dataclasses.fields(cls) if f.default is not MISSING}


# The C decoder writes these classes' fields itself: it checks at import that they are the
# fields it knows (a field added to the IR fails here, not in a decoded module).
if _hlodecode is not None:
    _hlodecode.setup(
        Instruction,
        _fields(Instruction),
        _defaults(Instruction),
        Computation,
        _fields(Computation),
        _defaults(Computation),
        (SliceDim, _fields(SliceDim)),
        (Shape, _fields(Shape)),
        (Layout, _fields(Layout)),
        (FileLocation, _fields(FileLocation)),
        (StackFrame, _fields(StackFrame)),
        (StackFrameIndex, _fields(StackFrameIndex)),
        (DotDims, _fields(DotDims)),
        _ELEMENT_NAMES,
    )
