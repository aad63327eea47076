from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PrimitiveType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRIMITIVE_TYPE_INVALID: _ClassVar[PrimitiveType]
    PRED: _ClassVar[PrimitiveType]
    S1: _ClassVar[PrimitiveType]
    S2: _ClassVar[PrimitiveType]
    S4: _ClassVar[PrimitiveType]
    S8: _ClassVar[PrimitiveType]
    S16: _ClassVar[PrimitiveType]
    S32: _ClassVar[PrimitiveType]
    S64: _ClassVar[PrimitiveType]
    U1: _ClassVar[PrimitiveType]
    U2: _ClassVar[PrimitiveType]
    U4: _ClassVar[PrimitiveType]
    U8: _ClassVar[PrimitiveType]
    U16: _ClassVar[PrimitiveType]
    U32: _ClassVar[PrimitiveType]
    U64: _ClassVar[PrimitiveType]
    F16: _ClassVar[PrimitiveType]
    F32: _ClassVar[PrimitiveType]
    BF16: _ClassVar[PrimitiveType]
    F64: _ClassVar[PrimitiveType]
    F8E5M2: _ClassVar[PrimitiveType]
    F8E4M3: _ClassVar[PrimitiveType]
    F8E4M3FN: _ClassVar[PrimitiveType]
    F8E4M3B11FNUZ: _ClassVar[PrimitiveType]
    F8E3M4: _ClassVar[PrimitiveType]
    F8E5M2FNUZ: _ClassVar[PrimitiveType]
    F8E4M3FNUZ: _ClassVar[PrimitiveType]
    F4E2M1FN: _ClassVar[PrimitiveType]
    F8E8M0FNU: _ClassVar[PrimitiveType]
    C64: _ClassVar[PrimitiveType]
    C128: _ClassVar[PrimitiveType]
    TUPLE: _ClassVar[PrimitiveType]
    OPAQUE_TYPE: _ClassVar[PrimitiveType]
    TOKEN: _ClassVar[PrimitiveType]
    BUFFER: _ClassVar[PrimitiveType]
PRIMITIVE_TYPE_INVALID: PrimitiveType
PRED: PrimitiveType
S1: PrimitiveType
S2: PrimitiveType
S4: PrimitiveType
S8: PrimitiveType
S16: PrimitiveType
S32: PrimitiveType
S64: PrimitiveType
U1: PrimitiveType
U2: PrimitiveType
U4: PrimitiveType
U8: PrimitiveType
U16: PrimitiveType
U32: PrimitiveType
U64: PrimitiveType
F16: PrimitiveType
F32: PrimitiveType
BF16: PrimitiveType
F64: PrimitiveType
F8E5M2: PrimitiveType
F8E4M3: PrimitiveType
F8E4M3FN: PrimitiveType
F8E4M3B11FNUZ: PrimitiveType
F8E3M4: PrimitiveType
F8E5M2FNUZ: PrimitiveType
F8E4M3FNUZ: PrimitiveType
F4E2M1FN: PrimitiveType
F8E8M0FNU: PrimitiveType
C64: PrimitiveType
C128: PrimitiveType
TUPLE: PrimitiveType
OPAQUE_TYPE: PrimitiveType
TOKEN: PrimitiveType
BUFFER: PrimitiveType

class PaddingConfig(_message.Message):
    __slots__ = ("dimensions",)
    class PaddingConfigDimension(_message.Message):
        __slots__ = ("edge_padding_low", "edge_padding_high", "interior_padding")
        EDGE_PADDING_LOW_FIELD_NUMBER: _ClassVar[int]
        EDGE_PADDING_HIGH_FIELD_NUMBER: _ClassVar[int]
        INTERIOR_PADDING_FIELD_NUMBER: _ClassVar[int]
        edge_padding_low: int
        edge_padding_high: int
        interior_padding: int
        def __init__(self, edge_padding_low: _Optional[int] = ..., edge_padding_high: _Optional[int] = ..., interior_padding: _Optional[int] = ...) -> None: ...
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    dimensions: _containers.RepeatedCompositeFieldContainer[PaddingConfig.PaddingConfigDimension]
    def __init__(self, dimensions: _Optional[_Iterable[_Union[PaddingConfig.PaddingConfigDimension, _Mapping]]] = ...) -> None: ...

class TileProto(_message.Message):
    __slots__ = ("dimensions",)
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    dimensions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, dimensions: _Optional[_Iterable[int]] = ...) -> None: ...

class SplitConfigProto(_message.Message):
    __slots__ = ("dimension", "split_indices")
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    SPLIT_INDICES_FIELD_NUMBER: _ClassVar[int]
    dimension: int
    split_indices: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, dimension: _Optional[int] = ..., split_indices: _Optional[_Iterable[int]] = ...) -> None: ...

class LayoutProto(_message.Message):
    __slots__ = ("minor_to_major", "dim_level_types", "tiles", "tail_padding_alignment_in_elements", "element_size_in_bits", "memory_space", "index_primitive_type", "pointer_primitive_type", "physical_shape", "dynamic_shape_metadata_prefix_bytes", "split_configs")
    MINOR_TO_MAJOR_FIELD_NUMBER: _ClassVar[int]
    DIM_LEVEL_TYPES_FIELD_NUMBER: _ClassVar[int]
    TILES_FIELD_NUMBER: _ClassVar[int]
    TAIL_PADDING_ALIGNMENT_IN_ELEMENTS_FIELD_NUMBER: _ClassVar[int]
    ELEMENT_SIZE_IN_BITS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_SPACE_FIELD_NUMBER: _ClassVar[int]
    INDEX_PRIMITIVE_TYPE_FIELD_NUMBER: _ClassVar[int]
    POINTER_PRIMITIVE_TYPE_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_SHAPE_FIELD_NUMBER: _ClassVar[int]
    DYNAMIC_SHAPE_METADATA_PREFIX_BYTES_FIELD_NUMBER: _ClassVar[int]
    SPLIT_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    minor_to_major: _containers.RepeatedScalarFieldContainer[int]
    dim_level_types: _containers.RepeatedScalarFieldContainer[int]
    tiles: _containers.RepeatedCompositeFieldContainer[TileProto]
    tail_padding_alignment_in_elements: int
    element_size_in_bits: int
    memory_space: int
    index_primitive_type: PrimitiveType
    pointer_primitive_type: PrimitiveType
    physical_shape: ShapeProto
    dynamic_shape_metadata_prefix_bytes: int
    split_configs: _containers.RepeatedCompositeFieldContainer[SplitConfigProto]
    def __init__(self, minor_to_major: _Optional[_Iterable[int]] = ..., dim_level_types: _Optional[_Iterable[int]] = ..., tiles: _Optional[_Iterable[_Union[TileProto, _Mapping]]] = ..., tail_padding_alignment_in_elements: _Optional[int] = ..., element_size_in_bits: _Optional[int] = ..., memory_space: _Optional[int] = ..., index_primitive_type: _Optional[_Union[PrimitiveType, str]] = ..., pointer_primitive_type: _Optional[_Union[PrimitiveType, str]] = ..., physical_shape: _Optional[_Union[ShapeProto, _Mapping]] = ..., dynamic_shape_metadata_prefix_bytes: _Optional[int] = ..., split_configs: _Optional[_Iterable[_Union[SplitConfigProto, _Mapping]]] = ...) -> None: ...

class ShapeProto(_message.Message):
    __slots__ = ("element_type", "dimensions", "is_dynamic_dimension", "tuple_shapes", "layout")
    ELEMENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    IS_DYNAMIC_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    TUPLE_SHAPES_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    element_type: PrimitiveType
    dimensions: _containers.RepeatedScalarFieldContainer[int]
    is_dynamic_dimension: _containers.RepeatedScalarFieldContainer[bool]
    tuple_shapes: _containers.RepeatedCompositeFieldContainer[ShapeProto]
    layout: LayoutProto
    def __init__(self, element_type: _Optional[_Union[PrimitiveType, str]] = ..., dimensions: _Optional[_Iterable[int]] = ..., is_dynamic_dimension: _Optional[_Iterable[bool]] = ..., tuple_shapes: _Optional[_Iterable[_Union[ShapeProto, _Mapping]]] = ..., layout: _Optional[_Union[LayoutProto, _Mapping]] = ...) -> None: ...

class ProgramShapeProto(_message.Message):
    __slots__ = ("parameters", "result", "parameter_names")
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_NAMES_FIELD_NUMBER: _ClassVar[int]
    parameters: _containers.RepeatedCompositeFieldContainer[ShapeProto]
    result: ShapeProto
    parameter_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, parameters: _Optional[_Iterable[_Union[ShapeProto, _Mapping]]] = ..., result: _Optional[_Union[ShapeProto, _Mapping]] = ..., parameter_names: _Optional[_Iterable[str]] = ...) -> None: ...

class OpMetadata(_message.Message):
    __slots__ = ("op_type", "op_name", "source_file", "source_line", "source_end_line", "source_column", "source_end_column", "size_of_generated_code_in_bytes", "size_of_memory_working_set_in_bytes", "deduplicated_name", "stack_frame_id", "scheduling_name")
    OP_TYPE_FIELD_NUMBER: _ClassVar[int]
    OP_NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FILE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_LINE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_END_LINE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_COLUMN_FIELD_NUMBER: _ClassVar[int]
    SOURCE_END_COLUMN_FIELD_NUMBER: _ClassVar[int]
    SIZE_OF_GENERATED_CODE_IN_BYTES_FIELD_NUMBER: _ClassVar[int]
    SIZE_OF_MEMORY_WORKING_SET_IN_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_NAME_FIELD_NUMBER: _ClassVar[int]
    STACK_FRAME_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULING_NAME_FIELD_NUMBER: _ClassVar[int]
    op_type: str
    op_name: str
    source_file: str
    source_line: int
    source_end_line: int
    source_column: int
    source_end_column: int
    size_of_generated_code_in_bytes: int
    size_of_memory_working_set_in_bytes: int
    deduplicated_name: str
    stack_frame_id: int
    scheduling_name: str
    def __init__(self, op_type: _Optional[str] = ..., op_name: _Optional[str] = ..., source_file: _Optional[str] = ..., source_line: _Optional[int] = ..., source_end_line: _Optional[int] = ..., source_column: _Optional[int] = ..., source_end_column: _Optional[int] = ..., size_of_generated_code_in_bytes: _Optional[int] = ..., size_of_memory_working_set_in_bytes: _Optional[int] = ..., deduplicated_name: _Optional[str] = ..., stack_frame_id: _Optional[int] = ..., scheduling_name: _Optional[str] = ...) -> None: ...

class LiteralProto(_message.Message):
    __slots__ = ("shape", "preds", "s2s", "s4s", "s8s", "u2s", "u4s", "u8s", "s32s", "s64s", "u32s", "u64s", "f32s", "f64s", "c64s", "c128s", "tuple_literals", "f16s", "bf16s", "u16s", "s16s")
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    PREDS_FIELD_NUMBER: _ClassVar[int]
    S2S_FIELD_NUMBER: _ClassVar[int]
    S4S_FIELD_NUMBER: _ClassVar[int]
    S8S_FIELD_NUMBER: _ClassVar[int]
    U2S_FIELD_NUMBER: _ClassVar[int]
    U4S_FIELD_NUMBER: _ClassVar[int]
    U8S_FIELD_NUMBER: _ClassVar[int]
    S32S_FIELD_NUMBER: _ClassVar[int]
    S64S_FIELD_NUMBER: _ClassVar[int]
    U32S_FIELD_NUMBER: _ClassVar[int]
    U64S_FIELD_NUMBER: _ClassVar[int]
    F32S_FIELD_NUMBER: _ClassVar[int]
    F64S_FIELD_NUMBER: _ClassVar[int]
    C64S_FIELD_NUMBER: _ClassVar[int]
    C128S_FIELD_NUMBER: _ClassVar[int]
    TUPLE_LITERALS_FIELD_NUMBER: _ClassVar[int]
    F16S_FIELD_NUMBER: _ClassVar[int]
    BF16S_FIELD_NUMBER: _ClassVar[int]
    U16S_FIELD_NUMBER: _ClassVar[int]
    S16S_FIELD_NUMBER: _ClassVar[int]
    shape: ShapeProto
    preds: _containers.RepeatedScalarFieldContainer[bool]
    s2s: bytes
    s4s: bytes
    s8s: bytes
    u2s: bytes
    u4s: bytes
    u8s: bytes
    s32s: _containers.RepeatedScalarFieldContainer[int]
    s64s: _containers.RepeatedScalarFieldContainer[int]
    u32s: _containers.RepeatedScalarFieldContainer[int]
    u64s: _containers.RepeatedScalarFieldContainer[int]
    f32s: _containers.RepeatedScalarFieldContainer[float]
    f64s: _containers.RepeatedScalarFieldContainer[float]
    c64s: _containers.RepeatedScalarFieldContainer[float]
    c128s: _containers.RepeatedScalarFieldContainer[float]
    tuple_literals: _containers.RepeatedCompositeFieldContainer[LiteralProto]
    f16s: bytes
    bf16s: bytes
    u16s: bytes
    s16s: bytes
    def __init__(self, shape: _Optional[_Union[ShapeProto, _Mapping]] = ..., preds: _Optional[_Iterable[bool]] = ..., s2s: _Optional[bytes] = ..., s4s: _Optional[bytes] = ..., s8s: _Optional[bytes] = ..., u2s: _Optional[bytes] = ..., u4s: _Optional[bytes] = ..., u8s: _Optional[bytes] = ..., s32s: _Optional[_Iterable[int]] = ..., s64s: _Optional[_Iterable[int]] = ..., u32s: _Optional[_Iterable[int]] = ..., u64s: _Optional[_Iterable[int]] = ..., f32s: _Optional[_Iterable[float]] = ..., f64s: _Optional[_Iterable[float]] = ..., c64s: _Optional[_Iterable[float]] = ..., c128s: _Optional[_Iterable[float]] = ..., tuple_literals: _Optional[_Iterable[_Union[LiteralProto, _Mapping]]] = ..., f16s: _Optional[bytes] = ..., bf16s: _Optional[bytes] = ..., u16s: _Optional[bytes] = ..., s16s: _Optional[bytes] = ...) -> None: ...

class WindowDimension(_message.Message):
    __slots__ = ("size", "stride", "padding_low", "padding_high", "window_dilation", "base_dilation", "window_reversal")
    SIZE_FIELD_NUMBER: _ClassVar[int]
    STRIDE_FIELD_NUMBER: _ClassVar[int]
    PADDING_LOW_FIELD_NUMBER: _ClassVar[int]
    PADDING_HIGH_FIELD_NUMBER: _ClassVar[int]
    WINDOW_DILATION_FIELD_NUMBER: _ClassVar[int]
    BASE_DILATION_FIELD_NUMBER: _ClassVar[int]
    WINDOW_REVERSAL_FIELD_NUMBER: _ClassVar[int]
    size: int
    stride: int
    padding_low: int
    padding_high: int
    window_dilation: int
    base_dilation: int
    window_reversal: bool
    def __init__(self, size: _Optional[int] = ..., stride: _Optional[int] = ..., padding_low: _Optional[int] = ..., padding_high: _Optional[int] = ..., window_dilation: _Optional[int] = ..., base_dilation: _Optional[int] = ..., window_reversal: _Optional[bool] = ...) -> None: ...

class Window(_message.Message):
    __slots__ = ("dimensions",)
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    dimensions: _containers.RepeatedCompositeFieldContainer[WindowDimension]
    def __init__(self, dimensions: _Optional[_Iterable[_Union[WindowDimension, _Mapping]]] = ...) -> None: ...

class GatherDimensionNumbers(_message.Message):
    __slots__ = ("offset_dims", "collapsed_slice_dims", "start_index_map", "index_vector_dim", "operand_batching_dims", "start_indices_batching_dims")
    OFFSET_DIMS_FIELD_NUMBER: _ClassVar[int]
    COLLAPSED_SLICE_DIMS_FIELD_NUMBER: _ClassVar[int]
    START_INDEX_MAP_FIELD_NUMBER: _ClassVar[int]
    INDEX_VECTOR_DIM_FIELD_NUMBER: _ClassVar[int]
    OPERAND_BATCHING_DIMS_FIELD_NUMBER: _ClassVar[int]
    START_INDICES_BATCHING_DIMS_FIELD_NUMBER: _ClassVar[int]
    offset_dims: _containers.RepeatedScalarFieldContainer[int]
    collapsed_slice_dims: _containers.RepeatedScalarFieldContainer[int]
    start_index_map: _containers.RepeatedScalarFieldContainer[int]
    index_vector_dim: int
    operand_batching_dims: _containers.RepeatedScalarFieldContainer[int]
    start_indices_batching_dims: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, offset_dims: _Optional[_Iterable[int]] = ..., collapsed_slice_dims: _Optional[_Iterable[int]] = ..., start_index_map: _Optional[_Iterable[int]] = ..., index_vector_dim: _Optional[int] = ..., operand_batching_dims: _Optional[_Iterable[int]] = ..., start_indices_batching_dims: _Optional[_Iterable[int]] = ...) -> None: ...

class ScatterDimensionNumbers(_message.Message):
    __slots__ = ("update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims", "index_vector_dim", "input_batching_dims", "scatter_indices_batching_dims")
    UPDATE_WINDOW_DIMS_FIELD_NUMBER: _ClassVar[int]
    INSERTED_WINDOW_DIMS_FIELD_NUMBER: _ClassVar[int]
    SCATTER_DIMS_TO_OPERAND_DIMS_FIELD_NUMBER: _ClassVar[int]
    INDEX_VECTOR_DIM_FIELD_NUMBER: _ClassVar[int]
    INPUT_BATCHING_DIMS_FIELD_NUMBER: _ClassVar[int]
    SCATTER_INDICES_BATCHING_DIMS_FIELD_NUMBER: _ClassVar[int]
    update_window_dims: _containers.RepeatedScalarFieldContainer[int]
    inserted_window_dims: _containers.RepeatedScalarFieldContainer[int]
    scatter_dims_to_operand_dims: _containers.RepeatedScalarFieldContainer[int]
    index_vector_dim: int
    input_batching_dims: _containers.RepeatedScalarFieldContainer[int]
    scatter_indices_batching_dims: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, update_window_dims: _Optional[_Iterable[int]] = ..., inserted_window_dims: _Optional[_Iterable[int]] = ..., scatter_dims_to_operand_dims: _Optional[_Iterable[int]] = ..., index_vector_dim: _Optional[int] = ..., input_batching_dims: _Optional[_Iterable[int]] = ..., scatter_indices_batching_dims: _Optional[_Iterable[int]] = ...) -> None: ...

class ConvolutionDimensionNumbers(_message.Message):
    __slots__ = ("input_batch_dimension", "input_feature_dimension", "input_spatial_dimensions", "kernel_input_feature_dimension", "kernel_output_feature_dimension", "kernel_spatial_dimensions", "output_batch_dimension", "output_feature_dimension", "output_spatial_dimensions")
    INPUT_BATCH_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    INPUT_FEATURE_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SPATIAL_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    KERNEL_INPUT_FEATURE_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    KERNEL_OUTPUT_FEATURE_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    KERNEL_SPATIAL_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_BATCH_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FEATURE_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SPATIAL_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    input_batch_dimension: int
    input_feature_dimension: int
    input_spatial_dimensions: _containers.RepeatedScalarFieldContainer[int]
    kernel_input_feature_dimension: int
    kernel_output_feature_dimension: int
    kernel_spatial_dimensions: _containers.RepeatedScalarFieldContainer[int]
    output_batch_dimension: int
    output_feature_dimension: int
    output_spatial_dimensions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, input_batch_dimension: _Optional[int] = ..., input_feature_dimension: _Optional[int] = ..., input_spatial_dimensions: _Optional[_Iterable[int]] = ..., kernel_input_feature_dimension: _Optional[int] = ..., kernel_output_feature_dimension: _Optional[int] = ..., kernel_spatial_dimensions: _Optional[_Iterable[int]] = ..., output_batch_dimension: _Optional[int] = ..., output_feature_dimension: _Optional[int] = ..., output_spatial_dimensions: _Optional[_Iterable[int]] = ...) -> None: ...

class DotDimensionNumbers(_message.Message):
    __slots__ = ("lhs_contracting_dimensions", "rhs_contracting_dimensions", "lhs_batch_dimensions", "rhs_batch_dimensions")
    LHS_CONTRACTING_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    RHS_CONTRACTING_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    LHS_BATCH_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    RHS_BATCH_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    lhs_contracting_dimensions: _containers.RepeatedScalarFieldContainer[int]
    rhs_contracting_dimensions: _containers.RepeatedScalarFieldContainer[int]
    lhs_batch_dimensions: _containers.RepeatedScalarFieldContainer[int]
    rhs_batch_dimensions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, lhs_contracting_dimensions: _Optional[_Iterable[int]] = ..., rhs_contracting_dimensions: _Optional[_Iterable[int]] = ..., lhs_batch_dimensions: _Optional[_Iterable[int]] = ..., rhs_batch_dimensions: _Optional[_Iterable[int]] = ...) -> None: ...

class FrontendAttributes(_message.Message):
    __slots__ = ("map",)
    class MapEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MAP_FIELD_NUMBER: _ClassVar[int]
    map: _containers.ScalarMap[str, str]
    def __init__(self, map: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ReplicaGroup(_message.Message):
    __slots__ = ("replica_ids",)
    REPLICA_IDS_FIELD_NUMBER: _ClassVar[int]
    replica_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, replica_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class IotaReplicaGroupListProto(_message.Message):
    __slots__ = ("num_replica_groups", "num_devices_per_group", "iota_reshape_dims", "iota_transpose_perm")
    NUM_REPLICA_GROUPS_FIELD_NUMBER: _ClassVar[int]
    NUM_DEVICES_PER_GROUP_FIELD_NUMBER: _ClassVar[int]
    IOTA_RESHAPE_DIMS_FIELD_NUMBER: _ClassVar[int]
    IOTA_TRANSPOSE_PERM_FIELD_NUMBER: _ClassVar[int]
    num_replica_groups: int
    num_devices_per_group: int
    iota_reshape_dims: _containers.RepeatedScalarFieldContainer[int]
    iota_transpose_perm: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, num_replica_groups: _Optional[int] = ..., num_devices_per_group: _Optional[int] = ..., iota_reshape_dims: _Optional[_Iterable[int]] = ..., iota_transpose_perm: _Optional[_Iterable[int]] = ...) -> None: ...

class CollectiveDeviceListProto(_message.Message):
    __slots__ = ("replica_groups", "iota_replica_group_list")
    REPLICA_GROUPS_FIELD_NUMBER: _ClassVar[int]
    IOTA_REPLICA_GROUP_LIST_FIELD_NUMBER: _ClassVar[int]
    replica_groups: _containers.RepeatedCompositeFieldContainer[ReplicaGroup]
    iota_replica_group_list: IotaReplicaGroupListProto
    def __init__(self, replica_groups: _Optional[_Iterable[_Union[ReplicaGroup, _Mapping]]] = ..., iota_replica_group_list: _Optional[_Union[IotaReplicaGroupListProto, _Mapping]] = ...) -> None: ...

class MeshProto(_message.Message):
    __slots__ = ("axes", "device_ids")
    class MeshAxis(_message.Message):
        __slots__ = ("name", "size")
        NAME_FIELD_NUMBER: _ClassVar[int]
        SIZE_FIELD_NUMBER: _ClassVar[int]
        name: str
        size: int
        def __init__(self, name: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...
    AXES_FIELD_NUMBER: _ClassVar[int]
    DEVICE_IDS_FIELD_NUMBER: _ClassVar[int]
    axes: _containers.RepeatedCompositeFieldContainer[MeshProto.MeshAxis]
    device_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, axes: _Optional[_Iterable[_Union[MeshProto.MeshAxis, _Mapping]]] = ..., device_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class AxisRefProto(_message.Message):
    __slots__ = ("mesh_axis_index", "sub_axis_info")
    class SubAxis(_message.Message):
        __slots__ = ("pre_size", "size")
        PRE_SIZE_FIELD_NUMBER: _ClassVar[int]
        SIZE_FIELD_NUMBER: _ClassVar[int]
        pre_size: int
        size: int
        def __init__(self, pre_size: _Optional[int] = ..., size: _Optional[int] = ...) -> None: ...
    MESH_AXIS_INDEX_FIELD_NUMBER: _ClassVar[int]
    SUB_AXIS_INFO_FIELD_NUMBER: _ClassVar[int]
    mesh_axis_index: int
    sub_axis_info: AxisRefProto.SubAxis
    def __init__(self, mesh_axis_index: _Optional[int] = ..., sub_axis_info: _Optional[_Union[AxisRefProto.SubAxis, _Mapping]] = ...) -> None: ...

class MeshAxesReplicaGroupListProto(_message.Message):
    __slots__ = ("mesh", "axes")
    MESH_FIELD_NUMBER: _ClassVar[int]
    AXES_FIELD_NUMBER: _ClassVar[int]
    mesh: MeshProto
    axes: _containers.RepeatedCompositeFieldContainer[AxisRefProto]
    def __init__(self, mesh: _Optional[_Union[MeshProto, _Mapping]] = ..., axes: _Optional[_Iterable[_Union[AxisRefProto, _Mapping]]] = ...) -> None: ...

class SourceTarget(_message.Message):
    __slots__ = ("source", "target")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    source: int
    target: int
    def __init__(self, source: _Optional[int] = ..., target: _Optional[int] = ...) -> None: ...

class PrecisionConfig(_message.Message):
    __slots__ = ("operand_precision", "algorithm")
    OPERAND_PRECISION_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    operand_precision: _containers.RepeatedScalarFieldContainer[int]
    algorithm: int
    def __init__(self, operand_precision: _Optional[_Iterable[int]] = ..., algorithm: _Optional[int] = ...) -> None: ...

class OpSharding(_message.Message):
    __slots__ = ("type", "tile_assignment_dimensions", "tile_assignment_devices", "tuple_shardings", "replicate_on_last_tile_dim", "last_tile_dims", "iota_reshape_dims", "iota_transpose_perm")
    class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        REPLICATED: _ClassVar[OpSharding.Type]
        MAXIMAL: _ClassVar[OpSharding.Type]
        TUPLE: _ClassVar[OpSharding.Type]
        OTHER: _ClassVar[OpSharding.Type]
        MANUAL: _ClassVar[OpSharding.Type]
        UNKNOWN: _ClassVar[OpSharding.Type]
        UNREDUCED: _ClassVar[OpSharding.Type]
    REPLICATED: OpSharding.Type
    MAXIMAL: OpSharding.Type
    TUPLE: OpSharding.Type
    OTHER: OpSharding.Type
    MANUAL: OpSharding.Type
    UNKNOWN: OpSharding.Type
    UNREDUCED: OpSharding.Type
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TILE_ASSIGNMENT_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    TILE_ASSIGNMENT_DEVICES_FIELD_NUMBER: _ClassVar[int]
    TUPLE_SHARDINGS_FIELD_NUMBER: _ClassVar[int]
    REPLICATE_ON_LAST_TILE_DIM_FIELD_NUMBER: _ClassVar[int]
    LAST_TILE_DIMS_FIELD_NUMBER: _ClassVar[int]
    IOTA_RESHAPE_DIMS_FIELD_NUMBER: _ClassVar[int]
    IOTA_TRANSPOSE_PERM_FIELD_NUMBER: _ClassVar[int]
    type: OpSharding.Type
    tile_assignment_dimensions: _containers.RepeatedScalarFieldContainer[int]
    tile_assignment_devices: _containers.RepeatedScalarFieldContainer[int]
    tuple_shardings: _containers.RepeatedCompositeFieldContainer[OpSharding]
    replicate_on_last_tile_dim: bool
    last_tile_dims: _containers.RepeatedScalarFieldContainer[OpSharding.Type]
    iota_reshape_dims: _containers.RepeatedScalarFieldContainer[int]
    iota_transpose_perm: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, type: _Optional[_Union[OpSharding.Type, str]] = ..., tile_assignment_dimensions: _Optional[_Iterable[int]] = ..., tile_assignment_devices: _Optional[_Iterable[int]] = ..., tuple_shardings: _Optional[_Iterable[_Union[OpSharding, _Mapping]]] = ..., replicate_on_last_tile_dim: _Optional[bool] = ..., last_tile_dims: _Optional[_Iterable[_Union[OpSharding.Type, str]]] = ..., iota_reshape_dims: _Optional[_Iterable[int]] = ..., iota_transpose_perm: _Optional[_Iterable[int]] = ...) -> None: ...

class DeviceAssignmentProto(_message.Message):
    __slots__ = ("replica_count", "computation_count")
    REPLICA_COUNT_FIELD_NUMBER: _ClassVar[int]
    COMPUTATION_COUNT_FIELD_NUMBER: _ClassVar[int]
    replica_count: int
    computation_count: int
    def __init__(self, replica_count: _Optional[int] = ..., computation_count: _Optional[int] = ...) -> None: ...

class HloInstructionProto(_message.Message):
    __slots__ = ("name", "opcode", "shape", "metadata", "literal", "parameter_number", "fusion_kind", "tuple_index", "dimensions", "window", "convolution_dimension_numbers", "feature_group_count", "batch_group_count", "slice_dimensions", "exponent_bits", "mantissa_bits", "dynamic_slice_sizes", "padding_config", "distribution", "channel_id", "custom_call_target", "sharding", "dot_dimension_numbers", "fft_type", "fft_length", "comparison_direction", "gather_dimension_numbers", "gather_slice_sizes", "id", "operand_ids", "control_predecessor_ids", "called_computation_ids", "backend_config", "replica_groups", "use_global_device_ids", "is_host_transfer", "is_stable", "scatter_dimension_numbers", "precision_config", "source_target_pairs", "custom_call_has_side_effect", "custom_call_api_version", "delta", "indices_are_sorted", "frontend_attributes", "unique_indices", "rng_algorithm", "comparison_type", "async_execution_thread", "k", "largest", "collective_device_list", "iota_collective_device_list", "mesh_axes_replica_group_list", "is_composite")
    class SliceDimensions(_message.Message):
        __slots__ = ("start", "limit", "stride")
        START_FIELD_NUMBER: _ClassVar[int]
        LIMIT_FIELD_NUMBER: _ClassVar[int]
        STRIDE_FIELD_NUMBER: _ClassVar[int]
        start: int
        limit: int
        stride: int
        def __init__(self, start: _Optional[int] = ..., limit: _Optional[int] = ..., stride: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPCODE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    LITERAL_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_NUMBER_FIELD_NUMBER: _ClassVar[int]
    FUSION_KIND_FIELD_NUMBER: _ClassVar[int]
    TUPLE_INDEX_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    CONVOLUTION_DIMENSION_NUMBERS_FIELD_NUMBER: _ClassVar[int]
    FEATURE_GROUP_COUNT_FIELD_NUMBER: _ClassVar[int]
    BATCH_GROUP_COUNT_FIELD_NUMBER: _ClassVar[int]
    SLICE_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    EXPONENT_BITS_FIELD_NUMBER: _ClassVar[int]
    MANTISSA_BITS_FIELD_NUMBER: _ClassVar[int]
    DYNAMIC_SLICE_SIZES_FIELD_NUMBER: _ClassVar[int]
    PADDING_CONFIG_FIELD_NUMBER: _ClassVar[int]
    DISTRIBUTION_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_ID_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_CALL_TARGET_FIELD_NUMBER: _ClassVar[int]
    SHARDING_FIELD_NUMBER: _ClassVar[int]
    DOT_DIMENSION_NUMBERS_FIELD_NUMBER: _ClassVar[int]
    FFT_TYPE_FIELD_NUMBER: _ClassVar[int]
    FFT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    COMPARISON_DIRECTION_FIELD_NUMBER: _ClassVar[int]
    GATHER_DIMENSION_NUMBERS_FIELD_NUMBER: _ClassVar[int]
    GATHER_SLICE_SIZES_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    OPERAND_IDS_FIELD_NUMBER: _ClassVar[int]
    CONTROL_PREDECESSOR_IDS_FIELD_NUMBER: _ClassVar[int]
    CALLED_COMPUTATION_IDS_FIELD_NUMBER: _ClassVar[int]
    BACKEND_CONFIG_FIELD_NUMBER: _ClassVar[int]
    REPLICA_GROUPS_FIELD_NUMBER: _ClassVar[int]
    USE_GLOBAL_DEVICE_IDS_FIELD_NUMBER: _ClassVar[int]
    IS_HOST_TRANSFER_FIELD_NUMBER: _ClassVar[int]
    IS_STABLE_FIELD_NUMBER: _ClassVar[int]
    SCATTER_DIMENSION_NUMBERS_FIELD_NUMBER: _ClassVar[int]
    PRECISION_CONFIG_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TARGET_PAIRS_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_CALL_HAS_SIDE_EFFECT_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_CALL_API_VERSION_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    INDICES_ARE_SORTED_FIELD_NUMBER: _ClassVar[int]
    FRONTEND_ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_INDICES_FIELD_NUMBER: _ClassVar[int]
    RNG_ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    COMPARISON_TYPE_FIELD_NUMBER: _ClassVar[int]
    ASYNC_EXECUTION_THREAD_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    LARGEST_FIELD_NUMBER: _ClassVar[int]
    COLLECTIVE_DEVICE_LIST_FIELD_NUMBER: _ClassVar[int]
    IOTA_COLLECTIVE_DEVICE_LIST_FIELD_NUMBER: _ClassVar[int]
    MESH_AXES_REPLICA_GROUP_LIST_FIELD_NUMBER: _ClassVar[int]
    IS_COMPOSITE_FIELD_NUMBER: _ClassVar[int]
    name: str
    opcode: str
    shape: ShapeProto
    metadata: OpMetadata
    literal: LiteralProto
    parameter_number: int
    fusion_kind: str
    tuple_index: int
    dimensions: _containers.RepeatedScalarFieldContainer[int]
    window: Window
    convolution_dimension_numbers: ConvolutionDimensionNumbers
    feature_group_count: int
    batch_group_count: int
    slice_dimensions: _containers.RepeatedCompositeFieldContainer[HloInstructionProto.SliceDimensions]
    exponent_bits: int
    mantissa_bits: int
    dynamic_slice_sizes: _containers.RepeatedScalarFieldContainer[int]
    padding_config: PaddingConfig
    distribution: int
    channel_id: int
    custom_call_target: str
    sharding: OpSharding
    dot_dimension_numbers: DotDimensionNumbers
    fft_type: int
    fft_length: _containers.RepeatedScalarFieldContainer[int]
    comparison_direction: str
    gather_dimension_numbers: GatherDimensionNumbers
    gather_slice_sizes: _containers.RepeatedScalarFieldContainer[int]
    id: int
    operand_ids: _containers.RepeatedScalarFieldContainer[int]
    control_predecessor_ids: _containers.RepeatedScalarFieldContainer[int]
    called_computation_ids: _containers.RepeatedScalarFieldContainer[int]
    backend_config: bytes
    replica_groups: _containers.RepeatedCompositeFieldContainer[ReplicaGroup]
    use_global_device_ids: bool
    is_host_transfer: bool
    is_stable: bool
    scatter_dimension_numbers: ScatterDimensionNumbers
    precision_config: PrecisionConfig
    source_target_pairs: _containers.RepeatedCompositeFieldContainer[SourceTarget]
    custom_call_has_side_effect: bool
    custom_call_api_version: int
    delta: int
    indices_are_sorted: bool
    frontend_attributes: FrontendAttributes
    unique_indices: bool
    rng_algorithm: int
    comparison_type: str
    async_execution_thread: str
    k: int
    largest: bool
    collective_device_list: CollectiveDeviceListProto
    iota_collective_device_list: IotaReplicaGroupListProto
    mesh_axes_replica_group_list: MeshAxesReplicaGroupListProto
    is_composite: bool
    def __init__(self, name: _Optional[str] = ..., opcode: _Optional[str] = ..., shape: _Optional[_Union[ShapeProto, _Mapping]] = ..., metadata: _Optional[_Union[OpMetadata, _Mapping]] = ..., literal: _Optional[_Union[LiteralProto, _Mapping]] = ..., parameter_number: _Optional[int] = ..., fusion_kind: _Optional[str] = ..., tuple_index: _Optional[int] = ..., dimensions: _Optional[_Iterable[int]] = ..., window: _Optional[_Union[Window, _Mapping]] = ..., convolution_dimension_numbers: _Optional[_Union[ConvolutionDimensionNumbers, _Mapping]] = ..., feature_group_count: _Optional[int] = ..., batch_group_count: _Optional[int] = ..., slice_dimensions: _Optional[_Iterable[_Union[HloInstructionProto.SliceDimensions, _Mapping]]] = ..., exponent_bits: _Optional[int] = ..., mantissa_bits: _Optional[int] = ..., dynamic_slice_sizes: _Optional[_Iterable[int]] = ..., padding_config: _Optional[_Union[PaddingConfig, _Mapping]] = ..., distribution: _Optional[int] = ..., channel_id: _Optional[int] = ..., custom_call_target: _Optional[str] = ..., sharding: _Optional[_Union[OpSharding, _Mapping]] = ..., dot_dimension_numbers: _Optional[_Union[DotDimensionNumbers, _Mapping]] = ..., fft_type: _Optional[int] = ..., fft_length: _Optional[_Iterable[int]] = ..., comparison_direction: _Optional[str] = ..., gather_dimension_numbers: _Optional[_Union[GatherDimensionNumbers, _Mapping]] = ..., gather_slice_sizes: _Optional[_Iterable[int]] = ..., id: _Optional[int] = ..., operand_ids: _Optional[_Iterable[int]] = ..., control_predecessor_ids: _Optional[_Iterable[int]] = ..., called_computation_ids: _Optional[_Iterable[int]] = ..., backend_config: _Optional[bytes] = ..., replica_groups: _Optional[_Iterable[_Union[ReplicaGroup, _Mapping]]] = ..., use_global_device_ids: _Optional[bool] = ..., is_host_transfer: _Optional[bool] = ..., is_stable: _Optional[bool] = ..., scatter_dimension_numbers: _Optional[_Union[ScatterDimensionNumbers, _Mapping]] = ..., precision_config: _Optional[_Union[PrecisionConfig, _Mapping]] = ..., source_target_pairs: _Optional[_Iterable[_Union[SourceTarget, _Mapping]]] = ..., custom_call_has_side_effect: _Optional[bool] = ..., custom_call_api_version: _Optional[int] = ..., delta: _Optional[int] = ..., indices_are_sorted: _Optional[bool] = ..., frontend_attributes: _Optional[_Union[FrontendAttributes, _Mapping]] = ..., unique_indices: _Optional[bool] = ..., rng_algorithm: _Optional[int] = ..., comparison_type: _Optional[str] = ..., async_execution_thread: _Optional[str] = ..., k: _Optional[int] = ..., largest: _Optional[bool] = ..., collective_device_list: _Optional[_Union[CollectiveDeviceListProto, _Mapping]] = ..., iota_collective_device_list: _Optional[_Union[IotaReplicaGroupListProto, _Mapping]] = ..., mesh_axes_replica_group_list: _Optional[_Union[MeshAxesReplicaGroupListProto, _Mapping]] = ..., is_composite: _Optional[bool] = ...) -> None: ...

class HloComputationProto(_message.Message):
    __slots__ = ("name", "instructions", "program_shape", "id", "root_id", "is_fusion_computation", "execution_thread")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_SHAPE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_ID_FIELD_NUMBER: _ClassVar[int]
    IS_FUSION_COMPUTATION_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_THREAD_FIELD_NUMBER: _ClassVar[int]
    name: str
    instructions: _containers.RepeatedCompositeFieldContainer[HloInstructionProto]
    program_shape: ProgramShapeProto
    id: int
    root_id: int
    is_fusion_computation: bool
    execution_thread: str
    def __init__(self, name: _Optional[str] = ..., instructions: _Optional[_Iterable[_Union[HloInstructionProto, _Mapping]]] = ..., program_shape: _Optional[_Union[ProgramShapeProto, _Mapping]] = ..., id: _Optional[int] = ..., root_id: _Optional[int] = ..., is_fusion_computation: _Optional[bool] = ..., execution_thread: _Optional[str] = ...) -> None: ...

class StackFrameIndexProto(_message.Message):
    __slots__ = ("file_names", "function_names", "file_locations", "stack_frames")
    class FileLocation(_message.Message):
        __slots__ = ("file_name_id", "function_name_id", "line", "column", "end_line", "end_column")
        FILE_NAME_ID_FIELD_NUMBER: _ClassVar[int]
        FUNCTION_NAME_ID_FIELD_NUMBER: _ClassVar[int]
        LINE_FIELD_NUMBER: _ClassVar[int]
        COLUMN_FIELD_NUMBER: _ClassVar[int]
        END_LINE_FIELD_NUMBER: _ClassVar[int]
        END_COLUMN_FIELD_NUMBER: _ClassVar[int]
        file_name_id: int
        function_name_id: int
        line: int
        column: int
        end_line: int
        end_column: int
        def __init__(self, file_name_id: _Optional[int] = ..., function_name_id: _Optional[int] = ..., line: _Optional[int] = ..., column: _Optional[int] = ..., end_line: _Optional[int] = ..., end_column: _Optional[int] = ...) -> None: ...
    class StackFrame(_message.Message):
        __slots__ = ("file_location_id", "parent_frame_id")
        FILE_LOCATION_ID_FIELD_NUMBER: _ClassVar[int]
        PARENT_FRAME_ID_FIELD_NUMBER: _ClassVar[int]
        file_location_id: int
        parent_frame_id: int
        def __init__(self, file_location_id: _Optional[int] = ..., parent_frame_id: _Optional[int] = ...) -> None: ...
    FILE_NAMES_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_NAMES_FIELD_NUMBER: _ClassVar[int]
    FILE_LOCATIONS_FIELD_NUMBER: _ClassVar[int]
    STACK_FRAMES_FIELD_NUMBER: _ClassVar[int]
    file_names: _containers.RepeatedScalarFieldContainer[str]
    function_names: _containers.RepeatedScalarFieldContainer[str]
    file_locations: _containers.RepeatedCompositeFieldContainer[StackFrameIndexProto.FileLocation]
    stack_frames: _containers.RepeatedCompositeFieldContainer[StackFrameIndexProto.StackFrame]
    def __init__(self, file_names: _Optional[_Iterable[str]] = ..., function_names: _Optional[_Iterable[str]] = ..., file_locations: _Optional[_Iterable[_Union[StackFrameIndexProto.FileLocation, _Mapping]]] = ..., stack_frames: _Optional[_Iterable[_Union[StackFrameIndexProto.StackFrame, _Mapping]]] = ...) -> None: ...

class HloModuleProto(_message.Message):
    __slots__ = ("name", "entry_computation_name", "entry_computation_id", "computations", "host_program_shape", "id", "stack_frame_index", "frontend_attributes", "device_assignment")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ENTRY_COMPUTATION_NAME_FIELD_NUMBER: _ClassVar[int]
    ENTRY_COMPUTATION_ID_FIELD_NUMBER: _ClassVar[int]
    COMPUTATIONS_FIELD_NUMBER: _ClassVar[int]
    HOST_PROGRAM_SHAPE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    STACK_FRAME_INDEX_FIELD_NUMBER: _ClassVar[int]
    FRONTEND_ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    DEVICE_ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    name: str
    entry_computation_name: str
    entry_computation_id: int
    computations: _containers.RepeatedCompositeFieldContainer[HloComputationProto]
    host_program_shape: ProgramShapeProto
    id: int
    stack_frame_index: StackFrameIndexProto
    frontend_attributes: FrontendAttributes
    device_assignment: DeviceAssignmentProto
    def __init__(self, name: _Optional[str] = ..., entry_computation_name: _Optional[str] = ..., entry_computation_id: _Optional[int] = ..., computations: _Optional[_Iterable[_Union[HloComputationProto, _Mapping]]] = ..., host_program_shape: _Optional[_Union[ProgramShapeProto, _Mapping]] = ..., id: _Optional[int] = ..., stack_frame_index: _Optional[_Union[StackFrameIndexProto, _Mapping]] = ..., frontend_attributes: _Optional[_Union[FrontendAttributes, _Mapping]] = ..., device_assignment: _Optional[_Union[DeviceAssignmentProto, _Mapping]] = ...) -> None: ...

class HloProto(_message.Message):
    __slots__ = ("hlo_module",)
    HLO_MODULE_FIELD_NUMBER: _ClassVar[int]
    hlo_module: HloModuleProto
    def __init__(self, hlo_module: _Optional[_Union[HloModuleProto, _Mapping]] = ...) -> None: ...

class LogicalBufferProto(_message.Message):
    __slots__ = ("id", "size", "defined_at", "color")
    class Location(_message.Message):
        __slots__ = ("instruction_name", "instruction_id", "shape_index")
        INSTRUCTION_NAME_FIELD_NUMBER: _ClassVar[int]
        INSTRUCTION_ID_FIELD_NUMBER: _ClassVar[int]
        SHAPE_INDEX_FIELD_NUMBER: _ClassVar[int]
        instruction_name: str
        instruction_id: int
        shape_index: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, instruction_name: _Optional[str] = ..., instruction_id: _Optional[int] = ..., shape_index: _Optional[_Iterable[int]] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    DEFINED_AT_FIELD_NUMBER: _ClassVar[int]
    COLOR_FIELD_NUMBER: _ClassVar[int]
    id: int
    size: int
    defined_at: LogicalBufferProto.Location
    color: int
    def __init__(self, id: _Optional[int] = ..., size: _Optional[int] = ..., defined_at: _Optional[_Union[LogicalBufferProto.Location, _Mapping]] = ..., color: _Optional[int] = ...) -> None: ...

class BufferAllocationProto(_message.Message):
    __slots__ = ("index", "size", "is_thread_local", "is_tuple", "is_entry_computation_parameter", "is_constant", "parameter_number", "parameter_shape_index", "maybe_live_out", "color", "assigned")
    class Assigned(_message.Message):
        __slots__ = ("logical_buffer_id", "offset", "size")
        LOGICAL_BUFFER_ID_FIELD_NUMBER: _ClassVar[int]
        OFFSET_FIELD_NUMBER: _ClassVar[int]
        SIZE_FIELD_NUMBER: _ClassVar[int]
        logical_buffer_id: int
        offset: int
        size: int
        def __init__(self, logical_buffer_id: _Optional[int] = ..., offset: _Optional[int] = ..., size: _Optional[int] = ...) -> None: ...
    INDEX_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    IS_THREAD_LOCAL_FIELD_NUMBER: _ClassVar[int]
    IS_TUPLE_FIELD_NUMBER: _ClassVar[int]
    IS_ENTRY_COMPUTATION_PARAMETER_FIELD_NUMBER: _ClassVar[int]
    IS_CONSTANT_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_NUMBER_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_SHAPE_INDEX_FIELD_NUMBER: _ClassVar[int]
    MAYBE_LIVE_OUT_FIELD_NUMBER: _ClassVar[int]
    COLOR_FIELD_NUMBER: _ClassVar[int]
    ASSIGNED_FIELD_NUMBER: _ClassVar[int]
    index: int
    size: int
    is_thread_local: bool
    is_tuple: bool
    is_entry_computation_parameter: bool
    is_constant: bool
    parameter_number: int
    parameter_shape_index: _containers.RepeatedScalarFieldContainer[int]
    maybe_live_out: bool
    color: int
    assigned: _containers.RepeatedCompositeFieldContainer[BufferAllocationProto.Assigned]
    def __init__(self, index: _Optional[int] = ..., size: _Optional[int] = ..., is_thread_local: _Optional[bool] = ..., is_tuple: _Optional[bool] = ..., is_entry_computation_parameter: _Optional[bool] = ..., is_constant: _Optional[bool] = ..., parameter_number: _Optional[int] = ..., parameter_shape_index: _Optional[_Iterable[int]] = ..., maybe_live_out: _Optional[bool] = ..., color: _Optional[int] = ..., assigned: _Optional[_Iterable[_Union[BufferAllocationProto.Assigned, _Mapping]]] = ...) -> None: ...

class HeapSimulatorTrace(_message.Message):
    __slots__ = ("events", "whole_module_simulation", "buffer_allocation_index")
    class Event(_message.Message):
        __slots__ = ("kind", "buffer_id", "computation_name", "instruction_name", "share_with_canonical_id")
        class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
            __slots__ = ()
            ALLOC: _ClassVar[HeapSimulatorTrace.Event.Kind]
            FREE: _ClassVar[HeapSimulatorTrace.Event.Kind]
            SHARE_WITH: _ClassVar[HeapSimulatorTrace.Event.Kind]
        ALLOC: HeapSimulatorTrace.Event.Kind
        FREE: HeapSimulatorTrace.Event.Kind
        SHARE_WITH: HeapSimulatorTrace.Event.Kind
        KIND_FIELD_NUMBER: _ClassVar[int]
        BUFFER_ID_FIELD_NUMBER: _ClassVar[int]
        COMPUTATION_NAME_FIELD_NUMBER: _ClassVar[int]
        INSTRUCTION_NAME_FIELD_NUMBER: _ClassVar[int]
        SHARE_WITH_CANONICAL_ID_FIELD_NUMBER: _ClassVar[int]
        kind: HeapSimulatorTrace.Event.Kind
        buffer_id: int
        computation_name: str
        instruction_name: str
        share_with_canonical_id: int
        def __init__(self, kind: _Optional[_Union[HeapSimulatorTrace.Event.Kind, str]] = ..., buffer_id: _Optional[int] = ..., computation_name: _Optional[str] = ..., instruction_name: _Optional[str] = ..., share_with_canonical_id: _Optional[int] = ...) -> None: ...
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    WHOLE_MODULE_SIMULATION_FIELD_NUMBER: _ClassVar[int]
    BUFFER_ALLOCATION_INDEX_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[HeapSimulatorTrace.Event]
    whole_module_simulation: bool
    buffer_allocation_index: int
    def __init__(self, events: _Optional[_Iterable[_Union[HeapSimulatorTrace.Event, _Mapping]]] = ..., whole_module_simulation: _Optional[bool] = ..., buffer_allocation_index: _Optional[int] = ...) -> None: ...

class BufferAssignmentProto(_message.Message):
    __slots__ = ("logical_buffers", "buffer_aliases", "buffer_allocations", "heap_simulator_traces")
    class BufferAlias(_message.Message):
        __slots__ = ("source_buffer_id", "location")
        SOURCE_BUFFER_ID_FIELD_NUMBER: _ClassVar[int]
        LOCATION_FIELD_NUMBER: _ClassVar[int]
        source_buffer_id: int
        location: LogicalBufferProto.Location
        def __init__(self, source_buffer_id: _Optional[int] = ..., location: _Optional[_Union[LogicalBufferProto.Location, _Mapping]] = ...) -> None: ...
    LOGICAL_BUFFERS_FIELD_NUMBER: _ClassVar[int]
    BUFFER_ALIASES_FIELD_NUMBER: _ClassVar[int]
    BUFFER_ALLOCATIONS_FIELD_NUMBER: _ClassVar[int]
    HEAP_SIMULATOR_TRACES_FIELD_NUMBER: _ClassVar[int]
    logical_buffers: _containers.RepeatedCompositeFieldContainer[LogicalBufferProto]
    buffer_aliases: _containers.RepeatedCompositeFieldContainer[BufferAssignmentProto.BufferAlias]
    buffer_allocations: _containers.RepeatedCompositeFieldContainer[BufferAllocationProto]
    heap_simulator_traces: _containers.RepeatedCompositeFieldContainer[HeapSimulatorTrace]
    def __init__(self, logical_buffers: _Optional[_Iterable[_Union[LogicalBufferProto, _Mapping]]] = ..., buffer_aliases: _Optional[_Iterable[_Union[BufferAssignmentProto.BufferAlias, _Mapping]]] = ..., buffer_allocations: _Optional[_Iterable[_Union[BufferAllocationProto, _Mapping]]] = ..., heap_simulator_traces: _Optional[_Iterable[_Union[HeapSimulatorTrace, _Mapping]]] = ...) -> None: ...

class HloProtoBufferAssignment(_message.Message):
    __slots__ = ("buffer_assignment",)
    BUFFER_ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    buffer_assignment: BufferAssignmentProto
    def __init__(self, buffer_assignment: _Optional[_Union[BufferAssignmentProto, _Mapping]] = ...) -> None: ...
