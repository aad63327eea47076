"""The C decoder (hlogap/hlo/_hlodecode.c) against the reference: upb and Python.

The oracle is hlogap's Python decoder (`decode_hlo_proto` with the extension set aside), which
reads the proto through upb's messages: every HloProto of the committed fixtures and, when
present, of the shared profiles under ../shared/fixtures decodes to the same `repr` both ways,
and damaged protos give the same module or the same error both ways.
"""

from __future__ import annotations

import contextlib
import json
import lzma
import re
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hlogap.hlo import decode
from hlogap.hlo.decode import HloDecodeError, decode_hlo_module_proto, decode_hlo_proto
from hlogap.hlo.ir import (
    Computation,
    DotDims,
    FileLocation,
    Instruction,
    Layout,
    Module,
    Shape,
    SliceDim,
    StackFrame,
    StackFrameIndex,
)
from hlogap.hlo.printer import format_backend_config
from hlogap.hlo.text import is_braced
from hlogap.proto import hlo_pb2, xplane_pb2

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "fixtures"
PT = hlo_pb2.PrimitiveType


@pytest.fixture(autouse=True)
def _extension() -> None:
    if decode._hlodecode is None:
        pytest.fail("hlogap was installed without its C decoder (hlogap/hlo/_hlodecode.c)")


def _plane_protos(path: Path) -> Iterator[tuple[str, bytes]]:
    """The `Hlo Proto` stats (serialized HloProtos) of an xplane file."""
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    for plane in space.planes:
        names = {k: m.name for k, m in plane.stat_metadata.items()}
        for event in plane.event_metadata.values():
            for stat in event.stats:
                if names.get(stat.metadata_id) == "Hlo Proto":
                    yield f"{path.name}:{event.name}", stat.bytes_value


def _archive_protos(path: Path) -> Iterator[tuple[str, bytes]]:
    """The HloProto dumps (`*.hlo.pb`, xz or not) of an nsys-jax archive."""
    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            if re.search(r"\.hlo\.pb(\.xz)?$", name):
                data = archive.read(name)
                yield f"{path.name}:{name}", lzma.decompress(data) if name.endswith(".xz") else data


def _committed() -> dict[str, bytes]:
    planes = sorted((ROOT / "tests/fixtures").rglob("*.xplane.pb"))
    planes += sorted((ROOT / "hlogap/data").rglob("*.xplane.pb"))
    return {key: data for path in planes for key, data in _plane_protos(path)}


def _shared() -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    for path in sorted(SHARED.rglob("*.xplane.pb")) if SHARED.is_dir() else []:
        found.update(_plane_protos(path))
    for path in sorted(SHARED.rglob("*.zip")) if SHARED.is_dir() else []:
        found.update(_archive_protos(path))
    return found


@pytest.fixture(scope="module")
def committed() -> dict[str, bytes]:
    protos = _committed()
    assert len(protos) > 30  # every fixture program's modules
    return protos


@pytest.fixture(scope="module")
def shared() -> dict[str, bytes]:
    protos = _shared()
    if not protos:
        pytest.skip("../shared/fixtures is not available")
    return protos


def _reference(data: bytes, read: Callable[[bytes], Module]) -> str:
    """What the Python decoder makes of the bytes: the module's repr, or the error."""
    saved = decode._hlodecode
    decode._hlodecode = None
    try:
        return repr(read(data))
    except HloDecodeError as e:
        return f"HloDecodeError: {e}"
    finally:
        decode._hlodecode = saved


def _with_c(data: bytes, read: Callable[[bytes], Module]) -> str:
    try:
        return repr(read(data))
    except HloDecodeError as e:
        return f"HloDecodeError: {e}"


def _same_both_ways(protos: dict[str, bytes]) -> None:
    for key, data in protos.items():
        assert _with_c(data, decode_hlo_proto) == _reference(data, decode_hlo_proto), key


def test_committed_fixtures_decode_the_same(committed: dict[str, bytes]) -> None:
    _same_both_ways(committed)


def test_shared_profiles_decode_the_same(shared: dict[str, bytes]) -> None:
    _same_both_ways(shared)


def test_the_c_decoder_answers_for_real_modules(
    committed: dict[str, bytes], shared: dict[str, bytes]
) -> None:
    """Real modules are made in C, not handed back to upb whole (which would be equal, and
    slow): some of their instructions may still be Python's (collectives, windows, ...)."""
    for key, data in {**committed, **shared}.items():
        assert decode._decode_in_c(data, wrapped=True) is not None, key


def _instruction(**fields: object) -> hlo_pb2.HloInstructionProto:
    return hlo_pb2.HloInstructionProto(**fields)  # type: ignore[arg-type]


def _module_of(*instructions: hlo_pb2.HloInstructionProto) -> hlo_pb2.HloModuleProto:
    computation = hlo_pb2.HloComputationProto(
        name="main", id=1, root_id=instructions[-1].id, instructions=instructions
    )
    return hlo_pb2.HloModuleProto(name="m", entry_computation_id=1, computations=[computation])


F32 = hlo_pb2.ShapeProto(element_type=PT.F32, dimensions=[4], layout={"minor_to_major": [0]})
S32 = hlo_pb2.ShapeProto(element_type=PT.S32)


def _cases() -> dict[str, hlo_pb2.HloModuleProto]:
    """Modules holding what the C decoder writes itself, and what it leaves to Python."""
    p = _instruction(name="p", opcode="parameter", id=1, shape=F32, parameter_number=0)
    i = _instruction(name="i", opcode="parameter", id=2, shape=S32, parameter_number=1)
    return {
        "compare types": _module_of(
            p,
            _instruction(
                name="c",
                opcode="compare",
                id=3,
                shape=hlo_pb2.ShapeProto(element_type=PT.PRED, dimensions=[4]),
                operand_ids=[1, 1],
                comparison_direction="LT",
                comparison_type="TOTALORDER",
            ),
        ),
        "slices and strides": _module_of(
            p,
            _instruction(
                name="s",
                opcode="slice",
                id=3,
                shape=F32,
                operand_ids=[1],
                slice_dimensions=[{"start": 1, "limit": 4, "stride": 2}],
            ),
        ),
        "dynamic slice": _module_of(
            p,
            i,
            _instruction(
                name="d",
                opcode="dynamic-slice",
                id=3,
                shape=F32,
                operand_ids=[1, 2],
                dynamic_slice_sizes=[2],
            ),
        ),
        "custom call with an escaped target": _module_of(
            p,
            _instruction(
                name="cc",
                opcode="custom-call",
                id=3,
                shape=F32,
                operand_ids=[1],
                custom_call_target='my"target\\',
                custom_call_has_side_effect=True,
                custom_call_api_version=4,
                backend_config=b'{"b":1,"a":[2]}',
                precision_config={"operand_precision": [0, 2]},
                feature_group_count=2,
            ),
        ),
        "metadata to escape and a stack frame": _module_of(
            _instruction(
                name="p",
                opcode="parameter",
                id=1,
                shape=F32,
                metadata={"op_name": 'a"b\x01', "op_type": "t", "stack_frame_id": 1},
                frontend_attributes={"map": {"k": "v", "g": "{x}"}},
            ),
        ),
        "metadata with quotes and backslashes": _module_of(
            _instruction(
                name="p",
                opcode="parameter",
                id=1,
                shape=F32,
                metadata={
                    "op_name": "jit(f)/x[axis=('a',)]\\n\"",
                    "source_file": "d'ir/f.py",
                    "source_line": -3,
                    "source_end_column": 9,
                    "deduplicated_name": "fusion.1",
                    "scheduling_name": "s",
                },
            ),
        ),
        "collectives, windows and sorts (Python's)": _module_of(
            p,
            _instruction(
                name="ar",
                opcode="all-reduce",
                id=3,
                shape=F32,
                operand_ids=[1],
                replica_groups=[{"replica_ids": [0, 1]}],
                channel_id=5,
                use_global_device_ids=True,
            ),
            _instruction(name="srt", opcode="sort", id=4, shape=F32, operand_ids=[3]),
        ),
        "constants": _module_of(
            _instruction(
                name="k",
                opcode="constant",
                id=1,
                shape=S32,
                literal={"shape": S32, "s32s": [-7]},
            ),
        ),
        "dots": _module_of(
            p,
            _instruction(
                name="d",
                opcode="dot",
                id=3,
                shape=F32,
                operand_ids=[1, 1],
                dot_dimension_numbers={
                    "lhs_contracting_dimensions": [1],
                    "rhs_contracting_dimensions": [0],
                    "lhs_batch_dimensions": [0],
                    "rhs_batch_dimensions": [2],
                },
                precision_config={"operand_precision": [1, 1]},
            ),
            _instruction(
                name="d2",
                opcode="dot",
                id=4,
                shape=F32,
                operand_ids=[1, 1],
                dot_dimension_numbers={},
            ),
        ),
        "pads and collectives": _module_of(
            p,
            _instruction(
                name="pad",
                opcode="pad",
                id=3,
                shape=F32,
                operand_ids=[1, 1],
                padding_config={"dimensions": [{"edge_padding_low": 1, "interior_padding": 2}]},
            ),
            _instruction(name="pad0", opcode="pad", id=4, shape=F32, operand_ids=[1, 1]),
            _instruction(
                name="ag",
                opcode="all-gather-start",
                id=5,
                shape=F32,
                operand_ids=[1],
                dimensions=[0],
                channel_id=2,
                collective_device_list={
                    "iota_replica_group_list": {
                        "num_replica_groups": 2,
                        "num_devices_per_group": 4,
                        "iota_reshape_dims": [4, 2],
                        "iota_transpose_perm": [1, 0],
                    }
                },
            ),
            _instruction(name="a2a", opcode="all-to-all", id=6, shape=F32, operand_ids=[1]),
            _instruction(
                name="rs",
                opcode="reduce-scatter",
                id=7,
                shape=F32,
                operand_ids=[1],
                replica_groups=[{"replica_ids": [0, 2]}, {"replica_ids": [1, 3]}],
                iota_collective_device_list={"num_replica_groups": 1, "num_devices_per_group": 2},
            ),
        ),
        "tuples, tokens and dynamic dimensions": _module_of(
            _instruction(
                name="t",
                opcode="parameter",
                id=1,
                parameter_number=0,
                shape=hlo_pb2.ShapeProto(
                    element_type=PT.TUPLE,
                    tuple_shapes=[
                        F32,
                        hlo_pb2.ShapeProto(element_type=PT.TOKEN),
                        hlo_pb2.ShapeProto(
                            element_type=PT.F32,
                            dimensions=[8, -(2**63)],
                            is_dynamic_dimension=[True, False],
                        ),
                        hlo_pb2.ShapeProto(
                            element_type=PT.BF16,
                            dimensions=[8, 128],
                            layout={
                                "minor_to_major": [1, 0],
                                "tiles": [{"dimensions": [8, 128]}, {"dimensions": [2, 1]}],
                                "memory_space": 1,
                                "tail_padding_alignment_in_elements": 4,
                            },
                        ),
                        hlo_pb2.ShapeProto(
                            element_type=PT.S4,
                            dimensions=[2],
                            layout={"minor_to_major": [0], "element_size_in_bits": 4},
                        ),
                        hlo_pb2.ShapeProto(element_type=PT.F32, layout={}),
                    ],
                ),
            ),
            _instruction(
                name="g",
                opcode="get-tuple-element",
                id=2,
                shape=F32,
                operand_ids=[1],
                tuple_index=0,
                control_predecessor_ids=[1],
            ),
        ),
    }


@pytest.mark.parametrize("case", sorted(_cases()))
def test_unusual_instructions_decode_the_same(case: str) -> None:
    data = _cases()[case].SerializeToString()
    assert _with_c(data, decode_hlo_module_proto) == _reference(data, decode_hlo_module_proto)
    wrapped = hlo_pb2.HloProto(hlo_module=_cases()[case]).SerializeToString()
    assert _with_c(wrapped, decode_hlo_proto) == _reference(wrapped, decode_hlo_proto)


def _while_module() -> bytes:
    """A loop, a fusion and a call: the called computations' attributes."""
    p = _instruction(name="p", opcode="parameter", id=1, shape=S32, parameter_number=0)
    cond = hlo_pb2.HloComputationProto(
        name="cond",
        id=2,
        root_id=11,
        instructions=[_instruction(name="c", opcode="parameter", id=11, shape=S32)],
    )
    body = hlo_pb2.HloComputationProto(
        name="body",
        id=3,
        root_id=12,
        instructions=[_instruction(name="b", opcode="parameter", id=12, shape=S32)],
    )
    main = hlo_pb2.HloComputationProto(
        name="main",
        id=1,
        root_id=5,
        instructions=[
            p,
            _instruction(
                name="w",
                opcode="while",
                id=3,
                shape=S32,
                operand_ids=[1],
                called_computation_ids=[3, 2],
            ),
            _instruction(
                name="f",
                opcode="fusion",
                id=4,
                shape=S32,
                operand_ids=[3],
                called_computation_ids=[3],
                fusion_kind="kLoop",
            ),
            _instruction(
                name="r",
                opcode="reduce",
                id=5,
                shape=S32,
                operand_ids=[4, 1],
                called_computation_ids=[2],
                dimensions=[],
            ),
        ],
    )
    module = hlo_pb2.HloModuleProto(
        name="loops", entry_computation_name="main", computations=[cond, body, main]
    )
    return module.SerializeToString()


def test_called_computations_decode_the_same() -> None:
    data = _while_module()
    assert _with_c(data, decode_hlo_module_proto) == _reference(data, decode_hlo_module_proto)
    assert decode._decode_in_c(data, wrapped=False) is not None


def _damaged(data: st.DataObject, blob: bytes) -> bytes:
    damaged = bytearray(blob)
    for _ in range(data.draw(st.integers(0, 4))):
        at = data.draw(st.integers(0, len(damaged) - 1))
        damaged[at] = data.draw(st.integers(0, 255))
    return bytes(damaged[: data.draw(st.integers(0, len(damaged)))])


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_damaged_modules_decode_or_fail_the_same(data: st.DataObject) -> None:
    """Bytes changed or cut anywhere: the same module, or the same error, both ways (a C
    decoder that read past a field's end, or took what upb refuses, would differ)."""
    cases = [c.SerializeToString() for c in _cases().values()] + [_while_module()]
    blob = _damaged(data, cases[data.draw(st.integers(0, len(cases) - 1))])
    assert _with_c(blob, decode_hlo_module_proto) == _reference(blob, decode_hlo_module_proto)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_damaged_real_modules_decode_or_fail_the_same(data: st.DataObject) -> None:
    protos = sorted(_committed().items())
    blob = _damaged(data, protos[data.draw(st.integers(0, len(protos) - 1))][1])
    assert _with_c(blob, decode_hlo_proto) == _reference(blob, decode_hlo_proto)


def _literal_module(element: int, dims: list[int], **values: object) -> bytes:
    shape = hlo_pb2.ShapeProto(element_type=element, dimensions=dims)
    if dims:
        shape.layout.minor_to_major.extend(reversed(range(len(dims))))
    literal = hlo_pb2.LiteralProto(shape=shape, **values)  # type: ignore[arg-type]
    constant = _instruction(name="k", opcode="constant", id=1, shape=shape, literal=literal)
    return _module_of(constant).SerializeToString()


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(
        [
            (PT.F32, "f32s", st.floats(width=32)),
            (PT.S32, "s32s", st.integers(-(2**31), 2**31 - 1)),
            (PT.S64, "s64s", st.integers(-(2**63), 2**63 - 1)),
            (PT.U32, "u32s", st.integers(0, 2**32 - 1)),
            (PT.U64, "u64s", st.integers(0, 2**64 - 1)),
            (PT.PRED, "preds", st.booleans()),
        ]
    ).flatmap(
        lambda kind: st.tuples(
            st.just(kind[0]),
            st.just(kind[1]),
            st.lists(st.integers(0, 3), max_size=3),
            st.lists(kind[2], max_size=13),
        )
    )
)
def test_literals_decode_the_same(case: tuple[int, str, list[int], list[object]]) -> None:
    """Constants (scalars, arrays, values that fit the shape or not) as XLA prints them,
    f32s with the digits that read back."""
    element, field, dims, values = case
    data = _literal_module(element, dims, **{field: values})
    assert _with_c(data, decode_hlo_module_proto) == _reference(data, decode_hlo_module_proto)


def _nested_literal(depth: int) -> bytes:
    """A constant whose literal nests `depth` tuples, written field by field (upb's own
    messages refuse to hold it)."""
    literal = hlo_pb2.LiteralProto(shape=S32, s32s=[1]).SerializeToString()
    tuple_shape = decode._field(1, hlo_pb2.ShapeProto(element_type=PT.TUPLE).SerializeToString())
    for _ in range(depth):
        literal = tuple_shape + decode._field(10, literal)  # shape, tuple_literals
    constant = _instruction(name="k", opcode="constant", id=1, shape=S32).SerializeToString()
    computation = hlo_pb2.HloComputationProto(name="main", id=1, root_id=1).SerializeToString()
    computation += decode._field(2, constant + decode._field(8, literal))
    module = hlo_pb2.HloModuleProto(name="m", entry_computation_id=1).SerializeToString()
    return decode._field(1, module + decode._field(3, computation))


@pytest.mark.parametrize("depth", [90, 95, 96, 120])
def test_nesting_past_upbs_limit_fails_the_same(depth: int) -> None:
    """upb refuses messages nested past its limit (100 levels: here a literal of 96 tuples):
    a part the C decoder hands to upb is parsed where it sits in the whole, so the limit
    falls at the same depth."""
    data = _nested_literal(depth)
    expected = _reference(data, decode_hlo_proto)
    assert expected.startswith("HloDecodeError") == (depth > 95)
    assert _with_c(data, decode_hlo_proto) == expected
    # Up to the limit the C decoder makes the module itself (its literal parsed by upb).
    assert (decode._decode_in_c(data, wrapped=True) is None) == (depth > 95)


def test_invalid_utf8_fails_the_same() -> None:
    """upb refuses a string field that is not UTF-8, read or not (fusion_kind on a parameter
    is not): the C decoder hands such a module back."""
    module = _module_of(
        _instruction(name="x", opcode="parameter", id=1, shape=S32, fusion_kind="k")
    ).SerializeToString()
    for text in (b"\xff", b"a\xed\xa0\x80"):  # a surrogate is not UTF-8 either
        # fusion_kind (field 11), the instruction's name (1), the module's name (1)
        for field in (b"\x5a\x01k", b"\x0a\x01x", b"\x0a\x01m"):
            bad = module.replace(field, field[:1] + bytes([len(text)]) + text, 1)
            assert bad != module
            assert _reference(bad, decode_hlo_module_proto).startswith("HloDecodeError")
            assert _with_c(bad, decode_hlo_module_proto) == _reference(bad, decode_hlo_module_proto)


def test_without_the_extension_python_decodes(committed: dict[str, bytes]) -> None:
    key, data = sorted(committed.items())[0]
    with contextlib.ExitStack() as stack:
        stack.callback(setattr, decode, "_hlodecode", decode._hlodecode)
        decode._hlodecode = None  # type: ignore[assignment]
        assert decode._decode_in_c(data, wrapped=True) is None
        assert isinstance(decode_hlo_proto(data), Module), key


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(), _JSON, max_size=5))
def test_a_json_object_config_prints_unquoted(value: dict[str, object]) -> None:
    """decode.py prints a JSON object config as it re-serialized it, without asking
    `is_braced`: the text parser's own check agrees on every such dump (quotes, braces and
    backslashes in its strings included)."""
    raw = json.dumps(value).encode()
    config, text = decode._backend_config(raw)
    assert text == config and is_braced(config)
    assert text == format_backend_config(config)


def _with_program_shape(program_shape: bytes) -> bytes:
    """A module whose computation carries these bytes as its program shape (read by no one,
    checked by upb)."""
    p = _instruction(name="p", opcode="parameter", id=1, shape=S32)
    computation = hlo_pb2.HloComputationProto(name="main", id=1, root_id=1, instructions=[p])
    data = computation.SerializeToString() + decode._field(4, program_shape)
    module = hlo_pb2.HloModuleProto(name="m", entry_computation_id=1).SerializeToString()
    return module + decode._field(3, data)


def _deep_shape(depth: int) -> bytes:
    shape = S32.SerializeToString()
    for _ in range(depth):
        shape = decode._field(4, shape)  # tuple_shapes
    return shape


@pytest.mark.parametrize(
    "program_shape",
    [
        hlo_pb2.ProgramShapeProto(parameters=[F32], result=S32, parameter_names=["x"]),
        decode._field(3, b"\xff"),  # a parameter name that is not UTF-8
        decode._field(1, b"\x1a\x05\x01"),  # dimensions running past the shape's end
        decode._field(2, decode._field(5, decode._field(6, b"\x08"))),  # a cut tile
        decode._field(2, _deep_shape(20)),
        decode._field(2, _deep_shape(40)),  # past the C check's depth: upb's
        decode._field(2, _deep_shape(99)),  # past upb's limit
        decode._field(2, b"\x10\x05" + decode._field(9, b"")),  # an unknown field
    ],
    ids=lambda p: str(len(p if isinstance(p, bytes) else p.SerializeToString())),
)
def test_program_shapes_are_checked_the_same(
    program_shape: bytes | hlo_pb2.ProgramShapeProto,
) -> None:
    raw = program_shape if isinstance(program_shape, bytes) else program_shape.SerializeToString()
    data = _with_program_shape(raw)
    assert _with_c(data, decode_hlo_module_proto) == _reference(data, decode_hlo_module_proto)


def test_a_changed_ir_class_fails_at_setup() -> None:
    """The C decoder writes the IR's fields itself: a class whose fields are not those it
    knows is refused when hlogap imports it, not decoded into half-made objects."""
    fields = decode._fields(Instruction)
    with pytest.raises(ValueError, match="fields changed"):
        decode._hlodecode.setup(  # type: ignore[union-attr]
            Instruction,
            (*fields, "cost"),
            decode._defaults(Instruction),
            Computation,
            decode._fields(Computation),
            decode._defaults(Computation),
            (SliceDim, decode._fields(SliceDim)),
            (Shape, decode._fields(Shape)),
            (Layout, decode._fields(Layout)),
            (FileLocation, decode._fields(FileLocation)),
            (StackFrame, decode._fields(StackFrame)),
            (StackFrameIndex, decode._fields(StackFrameIndex)),
            (DotDims, decode._fields(DotDims)),
            decode._ELEMENT_NAMES,
        )
    data = next(iter(_committed().values()))
    assert decode._decode_in_c(data, wrapped=True) is not None  # still set up as before
