"""Property: generated IR -> printer -> parser gives the same IR (shapes, instructions, modules)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from hlogap.hlo.ir import (
    ELEMENT_BITS,
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
    print_instruction,
    print_module,
    print_shape,
)
from hlogap.hlo.text import expand_iota, parse_instruction, parse_module, parse_shape, unescape
from hlogap.units import printable

ARRAY_TYPES = sorted(t for t in ELEMENT_BITS if t not in ("token", "opaque"))
# Layout items XLA writes besides T, L, E and S, in the order its printer writes them.
EXTRA_ITEMS = ("D(D,C)", "#(u32)", "*(u64)", "SC(0:4,8)", "P(f32[4]{0})", "M(8)")
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
NAMES = st.from_regex(r"[a-z_][a-z0-9_.\-]{0,8}", fullmatch=True)
SMALL = st.integers(0, 9)


@st.composite
def layouts(draw: st.DrawFn, rank: int) -> Layout:
    minor_to_major = tuple(draw(st.permutations(range(rank))))
    tile = st.lists(st.one_of(st.integers(1, 512), st.just(-1)), min_size=1, max_size=3)
    return Layout(
        minor_to_major,
        tuple(tuple(t) for t in draw(st.lists(tile, max_size=3))),
        draw(st.integers(0, 7)),
        tuple(item for item in EXTRA_ITEMS if draw(st.booleans()) and draw(st.booleans())),
        draw(st.sampled_from((0, 0, 2, 4))),
        draw(st.sampled_from((1, 1, 128))),
    )


@st.composite
def arrays(draw: st.DrawFn) -> Shape:
    element = draw(st.sampled_from([*ARRAY_TYPES, "token", "opaque"]))
    if element in ("token", "opaque"):
        return Shape(element)
    rank = draw(st.integers(0, 4))
    dims, dynamic = [], []
    for _ in range(rank):
        kind = draw(st.sampled_from(("static", "static", "bounded", "unbounded")))
        dims.append(-1 if kind == "unbounded" else draw(st.integers(0, 10**6)))
        dynamic.append(kind != "static")
    layout = draw(st.one_of(st.none(), layouts(rank)))
    return Shape(element, tuple(dims), tuple(dynamic) if any(dynamic) else (), layout)


SHAPES = st.recursive(
    arrays(),
    lambda inner: st.lists(inner, max_size=4).map(lambda s: Shape("tuple", tuple_shapes=tuple(s))),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(SHAPES)
def test_shapes(shape: Shape) -> None:
    assert parse_shape(print_shape(shape)) == shape


@given(TEXT)
def test_string_escaping(text: str) -> None:
    assert unescape(escape(text)) == text
    assert parse_instruction(f"%c = f32[] custom-call(), custom_call_target={format_string(text)}")


@st.composite
def windows(draw: st.DrawFn) -> Window:
    rank = draw(st.integers(1, 3))

    def per_dim(values: st.SearchStrategy[int]) -> tuple[int, ...]:
        return tuple(draw(values) for _ in range(rank))

    return Window(
        per_dim(st.integers(1, 9)),
        per_dim(st.integers(1, 3)),
        per_dim(st.integers(-2, 3)),
        per_dim(st.integers(-2, 3)),
        per_dim(st.integers(1, 3)),
        per_dim(st.integers(1, 3)),
        tuple(bool(x) for x in per_dim(st.integers(0, 1))),
    )


@st.composite
def conv_dims(draw: st.DrawFn) -> ConvDims:
    n = draw(st.integers(0, 3))
    lhs, rhs, out = (draw(st.permutations(range(n + 2))) for _ in range(3))
    return ConvDims(
        lhs[0],
        lhs[1],
        tuple(lhs[2:]),
        rhs[0],
        rhs[1],
        tuple(rhs[2:]),
        out[0],
        out[1],
        tuple(out[2:]),
    )


@st.composite
def replica_groups(draw: st.DrawFn) -> ReplicaGroups:
    if draw(st.booleans()):
        groups = draw(st.lists(st.lists(SMALL, max_size=4).map(tuple), max_size=4))
        return ReplicaGroups(tuple(groups))
    reshape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    perm = tuple(draw(st.permutations(range(len(reshape)))))
    total = 1
    for d in reshape:
        total *= d
    size = draw(st.sampled_from([d for d in range(1, total + 1) if total % d == 0]))
    text = f"[{total // size},{size}]<=[{','.join(map(str, reshape))}]T({','.join(map(str, perm))})"
    return ReplicaGroups(expand_iota(total // size, size, reshape, perm)[0], text)


@st.composite
def instructions(
    draw: st.DrawFn, name: str, operands: dict[str, Shape] | None = None
) -> Instruction:
    """An instruction whose `attrs` hold the text of its typed fields, as the parser leaves them.

    With `operands` (the shapes defined so far in a computation) operands refer to those and
    carry their shapes; otherwise operand shapes are generated (or absent, None).
    """
    opcode = draw(st.sampled_from(("add", "fusion", "constant", "parameter", "custom-call", "dot")))
    inst = Instruction(name, opcode, draw(SHAPES), is_root=draw(st.booleans()))
    if opcode == "constant":
        inst.literal = draw(st.sampled_from(("0", "-inf", "{1, 2}", "{ { 1 }, { 2 } }", "{...}")))
    elif opcode == "parameter":
        inst.parameter_number = draw(SMALL)
    elif operands:
        inst.operands = draw(st.lists(st.sampled_from(sorted(operands)), max_size=3))
        inst.operand_shapes = [operands[o] for o in inst.operands]
    elif operands is None:
        for _ in range(draw(st.integers(0, 3))):
            inst.operands.append(draw(NAMES))
            inst.operand_shapes.append(draw(st.one_of(st.none(), SHAPES)))
    attrs = inst.attrs

    def maybe() -> bool:
        return draw(st.integers(0, 3)) == 0

    if maybe():
        inst.window = draw(windows())
        attrs["window"] = format_window(inst.window)
    if maybe():
        inst.conv_dims = draw(conv_dims())
        attrs["dim_labels"] = format_dim_labels(inst.conv_dims)
    if maybe():
        inst.feature_group_count = draw(st.integers(2, 8))
        attrs["feature_group_count"] = str(inst.feature_group_count)
    if maybe():
        lists = [tuple(draw(st.lists(SMALL, max_size=3))) for _ in range(4)]
        inst.dot_dims = DotDims(*lists)
        attrs.update(format_dot_dims(inst.dot_dims))
    if maybe():
        inst.dimensions = tuple(draw(st.lists(SMALL, max_size=4)))
        attrs["dimensions"] = format_int_list(inst.dimensions)
    if maybe():
        slices = st.builds(SliceDim, SMALL, SMALL, st.integers(1, 3))
        inst.slice = tuple(draw(st.lists(slices, max_size=3)))
        attrs["slice"] = format_slice(inst.slice)
    if maybe():
        inst.channel_id = draw(st.integers(1, 99))
        attrs["channel_id"] = str(inst.channel_id)
    if maybe():
        inst.replica_groups = draw(replica_groups())
        attrs["replica_groups"] = format_replica_groups(inst.replica_groups)
        attrs["use_global_device_ids"] = "true"  # an attribute kept as text only
    if maybe():
        inst.tuple_index = draw(SMALL)
        attrs["index"] = str(inst.tuple_index)
    if maybe():
        inst.called = draw(st.lists(NAMES, min_size=2, max_size=2))
        attrs["condition"], attrs["body"] = (f"%{c}" for c in inst.called)
    elif maybe():
        inst.called = draw(st.lists(NAMES, min_size=1, max_size=3))
        attrs["calls"] = "{" + ", ".join(f"%{c}" for c in inst.called) + "}"
    if maybe():
        inst.fusion_kind = draw(st.sampled_from(("kLoop", "kInput", "kOutput", "kCustom")))
        attrs["kind"] = inst.fusion_kind
    if maybe():
        inst.custom_call_target = draw(TEXT)
        attrs["custom_call_target"] = format_string(inst.custom_call_target)
    if maybe():
        attrs["sharding"] = draw(
            st.sampled_from(("{replicated}", "{{maximal device=0}, {manual}}"))
        )
    if maybe():
        inst.op_name = draw(TEXT.map(printable))  # control characters are dropped
        parts = [f"op_name={format_string(inst.op_name)}"]
        if draw(st.booleans()):
            source, line = draw(TEXT.map(printable).filter(bool)), draw(st.integers(1, 999))
            inst.source = f"{source}:{line}"
            parts += [f"source_file={format_string(source)}", f"source_line={line}"]
        attrs["metadata"] = "{" + " ".join(parts) + "}"
    if maybe():
        config = draw(
            st.one_of(
                st.dictionaries(TEXT, st.one_of(TEXT, st.integers())).map(json.dumps),
                TEXT.map(lambda t: "{" + t + "}"),  # braced, maybe unbalanced: then quoted
                TEXT,
            )
        )
        inst.backend_config = config
        attrs["backend_config"] = format_backend_config(config)
    return inst


@settings(max_examples=250, deadline=None)
@given(st.data())
def test_instructions(data: st.DataObject) -> None:
    inst = data.draw(instructions(data.draw(NAMES)))
    assert parse_instruction(print_instruction(inst)) == inst


@st.composite
def frame_tables(draw: st.DrawFn) -> StackFrameIndex:
    files = tuple(draw(st.lists(TEXT, min_size=1, max_size=3)))
    functions = tuple(draw(st.lists(TEXT, min_size=1, max_size=3)))
    locations = tuple(
        FileLocation(
            draw(st.integers(1, len(files))),
            draw(st.integers(1, len(functions))),
            *(draw(st.integers(0, 999)) for _ in range(4)),
        )
        for _ in range(draw(st.integers(1, 3)))
    )
    frames = []
    for k in range(draw(st.integers(1, 4))):
        frames.append(StackFrame(draw(st.integers(1, len(locations))), draw(st.integers(0, k))))
    return StackFrameIndex(files, functions, locations, tuple(frames))


@st.composite
def modules(draw: st.DrawFn) -> Module:
    names = draw(st.lists(NAMES, min_size=2, max_size=12, unique=True))
    comp_count = draw(st.integers(1, min(3, len(names) - 1)))
    frames = draw(st.one_of(st.none(), frame_tables()))
    module = Module(draw(NAMES), attrs={"is_scheduled": "true"} if draw(st.booleans()) else {})
    module.frames = frames
    cut = sorted(
        draw(
            st.lists(
                st.integers(1, len(names) - 1), min_size=comp_count - 1, max_size=comp_count - 1
            )
        )
    )
    bounds = [0, *cut, len(names)]
    for c in range(comp_count):
        comp = Computation(f"comp.{c}", is_entry=c == comp_count - 1)
        defined: dict[str, Shape] = {}
        for name in names[bounds[c] : bounds[c + 1]]:
            inst = draw(instructions(name, defined))
            if frames is not None and "metadata" not in inst.attrs and draw(st.booleans()):
                frame = draw(st.integers(1, len(frames.stack_frames)))
                inst.attrs["metadata"] = f"{{stack_frame_id={frame}}}"
                inst.source = frames.source(frame)
            defined[name] = inst.shape
            comp.instructions.append(inst)
        if draw(st.booleans()):
            comp.execution_thread = draw(TEXT.filter(bool))
        module.computations.append(comp)
    module.entry = module.computations[-1].name
    return module


@settings(max_examples=100, deadline=None)
@given(modules())
def test_modules(module: Module) -> None:
    assert parse_module(print_module(module)) == module
