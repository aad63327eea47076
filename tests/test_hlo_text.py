"""HLO text parsing: shapes, instructions, modules, errors, and the real corpora in ../shared.

JAX's `compiled.as_text()` is parsed in tests/test_hlo_proto.py, next to the proto of the same
module it must agree with.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hlogap.errors import HlogapError
from hlogap.hlo.ir import (
    ConvDims,
    DotDims,
    FileLocation,
    Layout,
    ReplicaGroups,
    Shape,
    SliceDim,
    StackFrame,
    Window,
)
from hlogap.hlo.text import HloParseError, parse_instruction, parse_module, parse_shape

SHARED = Path(__file__).resolve().parents[2] / "shared"


def shared(path: str) -> Path:
    full = SHARED / path
    if not full.exists():
        pytest.skip(f"../shared/{path} is not available")
    return full


# ---- shapes ----


def test_tiled_layout_with_memory_space() -> None:
    shape = parse_shape("bf16[32,32,4096]{2,1,0:T(8,128)(2,1)S(1)}")
    assert shape == Shape(
        "bf16", (32, 32, 4096), layout=Layout((2, 1, 0), ((8, 128), (2, 1)), memory_space=1)
    )
    assert shape.memory_space == 1


def test_scalars_tokens_and_nested_tuples() -> None:
    assert parse_shape("f32[]") == Shape("f32")
    assert parse_shape("f32[]{:T(128)S(6)}").layout == Layout((), ((128,),), 6)
    assert parse_shape("token[]") == Shape("token")
    shape = parse_shape("(f32[2], (u32[]{:S(2)}, token[]), ())")
    assert shape.is_tuple
    assert [s.element_type for s in shape.leaves()] == ["f32", "u32", "token"]
    assert shape.tuple_shapes[2] == Shape("tuple")


def test_dynamic_dimensions() -> None:
    assert parse_shape("s32[<=16,4]") == Shape("s32", (16, 4), (True, False))
    assert parse_shape("f32[?,3]") == Shape("f32", (-1, 3), (True, False))


def test_layout_items_kept() -> None:
    layout = parse_shape("s4[8,128]{1,0:T(8,128)(8,1)L(256)E(4)S(1)SC(0:4)M(8)}").layout
    assert layout == Layout(
        (1, 0), ((8, 128), (8, 1)), 1, ("SC(0:4)", "M(8)"), 4, tail_padding_alignment=256
    )
    assert parse_shape("f32[2]{0:T(*,2)}").layout == Layout((0,), ((-1, 2),))


def test_comments_inside_tuples() -> None:
    shape = parse_shape("(f32[], f32[], f32[], f32[], f32[], /*index=5*/f32[])")
    assert len(shape.tuple_shapes) == 6


# ---- instructions ----


def test_instruction_with_inline_operand_shapes() -> None:
    inst = parse_instruction(
        "%fusion.3 = bf16[8,128]{1,0:T(8,128)(2,1)} fusion(bf16[8,128]{1,0} %p.1), "
        "kind=kCustom, calls=%all-reduce-scatter.3"
    )
    assert (inst.name, inst.opcode, inst.is_root) == ("fusion.3", "fusion", False)
    assert inst.operands == ["p.1"]
    assert inst.operand_shapes == [Shape("bf16", (8, 128), layout=Layout((1, 0)))]
    assert inst.fusion_kind == "kCustom"
    assert inst.called == ["all-reduce-scatter.3"]
    assert list(inst.attrs) == ["kind", "calls"]


def test_short_form_root_without_percent() -> None:
    inst = parse_instruction("ROOT add.1 = f32[] add(lhs, rhs)")
    assert inst.is_root and inst.name == "add.1" and inst.operands == ["lhs", "rhs"]
    assert inst.operand_shapes == [None, None]


def test_dot_and_metadata() -> None:
    inst = parse_instruction(
        "ROOT %dot.4 = f32[16,128]{1,0} dot(f32[256,16]{1,0} %convert.3, f32[128,256]{1,0} "
        "%Arg_0.1), lhs_batch_dims={}, lhs_contracting_dims={0}, rhs_contracting_dims={1}, "
        'metadata={op_type="dot" op_name="jit(f)/dot_general" source_file="a \\"b\\".py" '
        "source_line=12 stack_frame_id=3 profile_type={1}}"
    )
    assert inst.dot_dims == DotDims((), (), (0,), (1,))
    assert inst.op_name == "jit(f)/dot_general"
    assert inst.source == 'a "b".py:12'


def test_convolution_attributes() -> None:
    inst = parse_instruction(
        "%conv = f32[1,4,4,16] convolution(f32[1,8,8,3] %x, f32[3,3,3,16] %w), "
        "window={size=3x3 stride=2x2 pad=1_1x0_-1 lhs_dilate=1x2 rhs_dilate=2x1 rhs_reversal=1x0}, "
        "dim_labels=b01f_01io->b01f, feature_group_count=3, batch_group_count=2"
    )
    assert inst.window == Window((3, 3), (2, 2), (1, 0), (1, -1), (1, 2), (2, 1), (True, False))
    assert inst.conv_dims == ConvDims(0, 3, (1, 2), 2, 3, (0, 1), 0, 3, (1, 2))
    assert (inst.feature_group_count, inst.batch_group_count) == (3, 2)
    minimal = parse_instruction("%c = f32[1,1,8] convolution(%x, %w), window={size=16 pad=15_15}")
    assert minimal.window == Window((16,), (1,), (15,), (15,), (1,), (1,), (False,))
    labels = parse_instruction("%c = f32[] convolution(%x, %w), dim_labels=bf012_oi012->bf012")
    assert labels.conv_dims == ConvDims(0, 1, (2, 3, 4), 1, 0, (2, 3, 4), 0, 1, (2, 3, 4))


def test_slices_and_dimensions() -> None:
    inst = parse_instruction("%s = f32[8,2] slice(f32[16,4] %p), slice={[0:8:1], [0:4:2]}")
    assert inst.slice == (SliceDim(0, 8, 1), SliceDim(0, 4, 2))
    assert parse_instruction("%s = f32[8] slice(%p), slice={[0:8]}").slice == (SliceDim(0, 8),)
    assert parse_instruction("%b = f32[2] broadcast(%p), dimensions={}").dimensions == ()
    assert parse_instruction("%r = f32[] reduce(%p, %z), dimensions={0,1}").dimensions == (0, 1)


@pytest.mark.parametrize(
    ("text", "groups", "compact"),
    [
        ("{{0,1},{2,3}}", ((0, 1), (2, 3)), None),
        ("{}", (), None),
        ("[4,2]<=[2,4]T(1,0)", ((0, 4), (1, 5), (2, 6), (3, 7)), "[4,2]<=[2,4]T(1,0)"),
        ("[2,4]<=[8]", ((0, 1, 2, 3), (4, 5, 6, 7)), "[2,4]<=[8]"),
        ("[1,4]<=[4]", ((0, 1, 2, 3),), "[1,4]<=[4]"),
        # Mesh axes: the devices that differ only along the named axes.
        ("mesh['x'=4,'y'=2] {'x'}", ((0, 2, 4, 6), (1, 3, 5, 7)), "mesh['x'=4,'y'=2] {'x'}"),
        ("mesh['x'=4,'y'=2] {'y','x'}", ((0, 1, 2, 3, 4, 5, 6, 7),), None),
        ("mesh[a=8] {a:(1)2}", ((0, 4), (1, 5), (2, 6), (3, 7)), None),
        ("mesh[a=8] {a:(1)2,a:(4)2}", ((0, 1, 4, 5), (2, 3, 6, 7)), None),
        ("mesh['x'=2,'y'=2], device_ids=(3,2,1,0) {'y'}", ((3, 2), (1, 0)), None),
        # The device list in the iota form (XLA:CPU's all-to-all along a minor mesh axis):
        # [2,4]T(1,0) is the list 0,4,1,5,2,6,3,7, and both forms give the same groups.
        (
            "mesh['a'=1,'b'=4,'c'=2], device_ids=([2,4]T(1,0)) {'b'}",
            ((0, 1, 2, 3), (4, 5, 6, 7)),
            None,
        ),
        (
            "mesh['a'=1,'b'=4,'c'=2], device_ids=(0,4,1,5,2,6,3,7) {'b'}",
            ((0, 1, 2, 3), (4, 5, 6, 7)),
            None,
        ),
        ("mesh['x'=2,'y'=2], device_ids=([4]) {'y'}", ((0, 1), (2, 3)), None),
    ],
)
def test_replica_groups(
    text: str, groups: tuple[tuple[int, ...], ...], compact: str | None
) -> None:
    inst = parse_instruction(
        f"%ar = f32[4] all-reduce(f32[4] %p), channel_id=7, replica_groups={text}, "
        "use_global_device_ids=true, to_apply=%add"
    )
    assert inst.replica_groups is not None
    assert inst.replica_groups.groups == groups
    if compact is not None:
        assert inst.replica_groups.iota == compact
    assert inst.channel_id == 7 and inst.called == ["add"]
    assert inst.attrs["use_global_device_ids"] == "true"


@pytest.mark.parametrize(
    "ids", ["[2,3]", "[2,4]T(0,0)", "[0,8]", "[2,4]T(1,0"], ids=["size", "perm", "zero", "open"]
)
def test_an_iota_device_list_that_does_not_fit_the_mesh_is_malformed(ids: str) -> None:
    with pytest.raises(HloParseError):
        parse_instruction(
            f"%a = f32[4] all-reduce(f32[4] %p), replica_groups=mesh['x'=2,'y'=4], "
            f"device_ids=({ids}) {{'y'}}, to_apply=%add"
        )


def test_called_computations() -> None:
    w = parse_instruction("%w = (s32[], f32[2]) while(%t), condition=%cond, body=%body")
    assert w.called == ["cond", "body"]
    c = parse_instruction("%c = f32[] conditional(%p, %a, %b), branch_computations={%b0, %b1}")
    assert c.called == ["b0", "b1"]
    tf = parse_instruction(
        "%c = f32[] conditional(%p, %a, %b), true_computation=%t, false_computation=%f"
    )
    assert tf.called == ["t", "f"]
    assert parse_instruction("%a = f32[] async-start(%x), calls={%x1, %x2}").called == ["x1", "x2"]


def test_custom_call_and_backend_config() -> None:
    inst = parse_instruction(
        '%cc = (f32[4], u8[16]{0}) custom-call(f32[4] %x), custom_call_target="__cublas$gemm", '
        'backend_config={"gemm":{"alpha":1,"dims":[1,2]},"s":"a,b}"}, '
        'frontend_attributes={_xla_stream_annotation="1",kernel_metadata={}}, '
        "sharding={{devices=[2,1]0,1}, {replicated}}"
    )
    assert inst.custom_call_target == "__cublas$gemm"
    assert inst.backend_config == '{"gemm":{"alpha":1,"dims":[1,2]},"s":"a,b}"}'
    assert inst.attrs["sharding"] == "{{devices=[2,1]0,1}, {replicated}}"
    assert inst.attrs["frontend_attributes"].startswith("{_xla_stream_annotation")
    quoted = parse_instruction('%cc = f32[] custom-call(), backend_config="a\\n\\"b\\"\\303\\251"')
    assert quoted.backend_config == 'a\n"b"é'


def test_constants_parameters_and_tuple_index() -> None:
    assert parse_instruction("%c = f32[] constant(-inf)").literal == "-inf"
    array = parse_instruction("%c = f32[2,2]{1,0} constant({ { 1, 2 }, { 3, 4 } }), metadata={}")
    assert array.literal == "{ { 1, 2 }, { 3, 4 } }" and array.operands == []
    assert parse_instruction("%c = f32[3] constant({...})").literal == "{...}"
    assert parse_instruction('%c = s8[2] constant("a(")').literal == '"a("'
    assert parse_instruction("%p = f32[2] parameter(3)").parameter_number == 3
    gte = parse_instruction("%g = f32[2] get-tuple-element((f32[2], s32[]) %t), index=1")
    assert gte.tuple_index == 1 and gte.operand_shapes[0] is not None


def test_attributes_on_continuation_lines() -> None:
    inst = parse_instruction(
        "ROOT %dot.4 = f32[16,128]{1,0} dot(\nf32[256,16]{1,0} %convert.3,\n"
        "f32[128,256]{1,0} %Arg_0.1),\nlhs_contracting_dims={0}, rhs_contracting_dims={1}"
    )
    assert inst.operands == ["convert.3", "Arg_0.1"]
    assert inst.dot_dims == DotDims(lhs_contracting=(0,), rhs_contracting=(1,))


def test_trailing_comma_of_abbreviated_listings() -> None:
    inst = parse_instruction("%convert.3 = f32[256,16]{1,0} convert(bf16[256,16]{1,0} %a),")
    assert inst.attrs == {}


# ---- modules ----

MODULE = """\
HloModule jit_f, is_scheduled=true, entry_computation_layout={(f32[8,16]{1,0})->f32[]}

FileNames
1 "/tmp/a b.py"

FunctionNames
1 "<module>"
2 "f"

FileLocations
1 {file_name_id=1 function_name_id=1 line=3 end_line=3 column=4 end_column=56}
2 {file_name_id=1 function_name_id=2 line=2 end_line=2 column=20 end_column=41}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=2}


%region_0.1 (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0), metadata={op_name="reduce_sum"}
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(%a, %b), metadata={op_name="jit(f)/reduce_sum" stack_frame_id=2}
}

%fused (p: f32[8,16]) -> f32[] {
  %p = f32[8,16]{1,0} parameter(0)
  %zero = f32[] constant(0)
  ROOT %r = f32[] reduce(%p, %zero), dimensions={0,1}, to_apply=%region_0.1,
    metadata={op_name="jit(f)/reduce_sum" source_file="x.py" source_line=9 stack_frame_id=2}
}

ENTRY %main.2 (x.1: f32[8,16]) -> f32[] {
  %x.1 = f32[8,16]{1,0} parameter(0), metadata={op_name="x"}
  ROOT %fusion = f32[] fusion(%x.1), kind=kLoop, calls=%fused
}
"""


def test_module_structure() -> None:
    module = parse_module(MODULE)
    assert module.name == "jit_f"
    assert list(module.attrs) == ["is_scheduled", "entry_computation_layout"]
    assert [c.name for c in module.computations] == ["region_0.1", "fused", "main.2"]
    assert module.entry == "main.2" and module.entry_computation is not None
    assert module.entry_computation.is_entry
    fused = module.computation("fused")
    assert fused is not None and fused.root is not None and fused.root.name == "r"
    assert fused.root.called == ["region_0.1"]


def test_module_resolves_operand_shapes_and_sources() -> None:
    module = parse_module(MODULE)
    insts = module.instructions()
    assert insts["r"].operand_shapes == [Shape("f32", (8, 16), layout=Layout((1, 0))), Shape("f32")]
    assert insts["fusion"].operand_shapes[0] == insts["x.1"].shape
    assert insts["sum"].source == "/tmp/a b.py:2"  # through StackFrames 2 -> FileLocations 2
    assert insts["r"].source == "x.py:9"  # an explicit source_file wins over the frame
    assert insts["a"].source is None
    assert module.frames is not None
    assert module.frames.file_locations[0] == FileLocation(1, 1, 3, 3, 4, 56)
    # XLA's text prints the parent one above the proto's 1-based id (0 meaning none).
    assert module.frames.stack_frames == (StackFrame(1, 0), StackFrame(2, 1))


def test_headerless_module_named_after_its_entry() -> None:
    module = parse_module("ENTRY %main.5 {\n  ROOT %p = f32[] parameter(0)\n}\n")
    assert module.name == "main.5" and module.attrs == {} and module.frames is None


def test_execution_thread() -> None:
    text = 'HloModule m\n%c () -> f32[], execution_thread="host" {\n ROOT %k = f32[] constant(1)\n}'
    assert parse_module(text).computations[0].execution_thread == "host"


# ---- errors ----


@pytest.mark.parametrize(
    ("parse", "text", "line", "column", "expected"),
    [
        (parse_shape, "f32[2,", 1, 7, "an integer"),
        (parse_shape, "q32[2]", 1, 1, "a shape"),
        (parse_shape, "f32[2]{0,1}", 1, 7, "a layout listing each of the 1 dimensions once"),
        (parse_shape, "f32[2] x", 1, 8, "the end of the shape"),
        (parse_instruction, "%x = f32[2] add(%a", 1, 19, "','"),
        (parse_instruction, "%x = f32[] add(%a), window={size=3x}", 1, 28, "a window like"),
        (parse_instruction, '%x = f32[] custom-call(), custom_call_target="a', 1, 46, "a closing"),
        (parse_instruction, "%x = f32[] all-reduce(%a), replica_groups=[2,3]<=[4]", 1, 43, "iota"),
        (parse_module, "HloModule m\n\nENTRY %e {\n  %a = f32[] parameter(0)\n", 5, 1, "'}'"),
        (
            parse_module,
            "HloModule m\nENTRY %e {\n %a = f32[] add(%b)\n %a = f32[] add(%b)\n}",
            4,
            2,
            "an instruction name other than 'a'",
        ),
    ],
)
def test_errors_say_where_and_what(
    parse: Callable[[str], object], text: str, line: int, column: int, expected: str
) -> None:
    with pytest.raises(HloParseError) as info:
        parse(text)
    error = info.value
    assert (error.line, error.column) == (line, column)
    assert error.expected.startswith(expected)
    assert isinstance(error, ValueError) and not isinstance(error, HlogapError)
    assert f"line {line} column {column}" in str(error)


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    with pytest.raises(HloParseError):
        parse_shape("(" * 5000 + "f32[]" + ")" * 5000)


HLO_ALPHABET = "%{}()[],=:\"\\ \nabfxyzTS0123456789<>-_.*/'"
TPU_LINE = (
    "%all-gather.206 = bf16[1,2048,16,128]{1,3,2,0:T(8,128)(2,1)} all-gather(bf16[1,512,16,128]"
    "{1,3,2,0:T(8,128)(2,1)} %param_0.1426), channel_id=98, replica_groups=[1,4]<=[4], "
    'dimensions={1}, use_global_device_ids=true, frontend_attributes={chain_id="6"}'
)


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        st.text(alphabet=HLO_ALPHABET, max_size=80),
        st.builds(
            lambda cut, junk: TPU_LINE[:cut] + junk + TPU_LINE[cut:],
            st.integers(0, len(TPU_LINE)),
            st.text(alphabet=HLO_ALPHABET, max_size=4),
        ),
        st.builds(
            lambda a, b: MODULE[:a] + MODULE[b:],
            st.integers(0, len(MODULE)),
            st.integers(0, len(MODULE)),
        ),
    )
)
def test_garbage_raises_only_parse_errors(text: str) -> None:
    for parse in (parse_shape, parse_instruction, parse_module):
        with contextlib.suppress(HloParseError):
            parse(text)


# ---- real corpora ----


def test_tpu_trace_op_lines() -> None:
    """Every op line of the damaged TPU v6e trace parses; the trace's string table glued a
    `"\\tcopy-done*` fragment to one line, which is cut here (it is not HLO)."""
    lines = shared("fixtures/tpu-text/tpu_hlo_ops.txt").read_text().splitlines()
    assert len(lines) == 17
    for line in lines:
        inst = parse_instruction(line.split('"\t', 1)[0])
        assert inst.shape.leaves() and inst.operands
    all_reduce = parse_instruction(lines[0])
    assert all_reduce.replica_groups == ReplicaGroups(
        ((0, 4), (1, 5), (2, 6), (3, 7)), "[4,2]<=[2,4]T(1,0)"
    )
    copy_start = parse_instruction(lines[11])
    assert [s.memory_space for s in copy_start.shape.leaves()] == [0, 5, 2]


def _op_profile_expressions() -> list[str]:
    profile = json.loads(
        gzip.decompress(shared("fixtures/tpu-v5p-xprof/op_profile.json.gz").read_bytes())
    )
    found: set[str] = set()
    stack = [profile["byProgram"], profile["byProgramExcludeIdle"]]
    while stack:
        node = stack.pop()
        expression = node.get("xla", {}).get("expression")
        if expression:
            found.add(expression)
        stack.extend(node.get("children", []))
    return sorted(found)


def test_tpu_v5p_op_profile_expressions() -> None:
    expressions = _op_profile_expressions()
    assert len(expressions) > 1800
    opcodes = set()
    for text in expressions:
        inst = parse_instruction(text)
        opcodes.add(inst.opcode)
        # Nothing is dropped: every `, key=` of the text is an attribute.
        assert len(inst.attrs) == len(re.findall(r", [a-z_\-]+=", _without_strings(text)))
    assert {"fusion", "convolution", "all-gather", "copy-start", "custom-call"} <= opcodes


def _without_strings(text: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)


def _seed_snippets(text: str) -> tuple[list[str], list[str]]:
    """HLO quoted in a seed: ENTRY computations and single instructions (possibly wrapped)."""
    modules: list[str] = []
    instructions: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("ENTRY"):
            end = next(k for k in range(i, len(lines)) if lines[k].strip().startswith("}"))
            modules.append("\n".join(lines[i : end + 1]))
            i = end + 1
            continue
        if re.match(r"(ROOT )?%\S+ = ", line):
            parts = [line]
            # Wrapped instructions continue while brackets are open or a line ends with ','.
            while i + 1 < len(lines):
                joined = " ".join(parts)
                unbalanced = joined.count("(") > joined.count(")")
                nxt = lines[i + 1].strip()
                if not nxt or not (unbalanced or (joined.endswith(",") and nxt[0] not in "%}R")):
                    break
                parts.append(nxt)
                i += 1
            instructions.append(" ".join(parts))
        i += 1
    return modules, instructions


def test_seed_snippets() -> None:
    seeds = sorted(shared("seeds").glob("*.txt"))
    modules, instructions = [], []
    for seed in seeds:
        found = _seed_snippets(seed.read_text())
        modules += found[0]
        instructions += found[1]
    assert len(modules) >= 4 and len(instructions) >= 12
    for text in modules:
        module = parse_module(text)
        dot = module.instructions()["dot.4"]
        assert dot.is_root and dot.dot_dims == DotDims(lhs_contracting=(0,), rhs_contracting=(1,))
        row_major = Layout((1, 0))
        assert dot.operand_shapes == [
            Shape("f32", (256, 16), layout=row_major),
            Shape("f32", (128, 256), layout=row_major),
        ]
    for text in instructions:
        # One seed elides a layout as `{...}`; that is prose, not HLO.
        inst = parse_instruction(text.replace("]{...}", "]"))
        assert inst.opcode in ("parameter", "convert", "dot", "fusion")
