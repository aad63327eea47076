"""HLO text -> IR: `parse_module`, `parse_instruction`, `parse_shape`.

One forward pass over the text. Small anchored regexes read the token at the cursor (no regex
scans ahead or backtracks over more than one token). Attribute values are first cut out as
balanced raw text, kept verbatim in `Instruction.attrs`, and the ones the cost model reads are
then parsed into typed fields from that same span of the text. Every failure is an
`HloParseError` carrying the line, the column, what was expected and the text found there.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from hlogap.hlo import MAX_DEVICES
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
from hlogap.units import printable


class HloParseError(ValueError):
    """Malformed HLO text: where (1-based line and column), what was expected, what was found."""

    def __init__(self, expected: str, *, line: int, column: int, snippet: str) -> None:
        self.expected = expected
        self.line = line
        self.column = column
        self.snippet = snippet
        super().__init__(
            f"HLO text, line {line} column {column}: expected {expected}, found {snippet!r}"
        )


# Whitespace, newlines and `/*index=5*/` comments, which XLA puts inside long tuples.
_SKIP = re.compile(r"(?:\s|/\*.*?\*/)*", re.S)
_SKIPPABLE = frozenset(" \t\r\n\f\v/")
_SPACES = re.compile(r"[ \t\r]*")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
# Instruction and computation names: `%` is optional (XLA's short form drops it).
_NAME = re.compile(r"%?([A-Za-z0-9_][A-Za-z0-9_.\-]*)")
_INT = re.compile(r"-?[0-9]{1,19}(?![0-9])")
_ELEMENT_TYPE = re.compile(r"([a-z][a-z0-9]*)\[")
# An array shape with at most a flat layout, the spelling `_Parser.shapes` caches.
_ARRAY_SHAPE = re.compile(r"[a-z][a-z0-9]*\[[0-9,<=?]*\](?:\{[^{}]*\})?")
_OPCODE = re.compile(r"[A-Za-z][A-Za-z0-9_\-]*")
# The unrolled form of "(?:[^"\\]|\\.)*" runs in linear time.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
# Everything inside an attribute value that cannot open or close a nesting level or end it.
_PLAIN = re.compile(r'[^{}()\[\],"\n]*')
_DIM_LABELS = re.compile(r"([0-9bf]+)_([0-9io]+)->([0-9bf]+)")
_ESCAPE = re.compile(r"\\(?:([0-7]{1,3})|x([0-9A-Fa-f]{1,2})|(.))", re.S)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "'": "'", "\\": "\\", "?": "?"}
_MODULE_NAME = re.compile(r"[^\s,]+")
_LAYOUT_ITEM = re.compile(r"SC|[A-Z#*]")
_LOC_FIELDS = frozenset(
    {"file_name_id", "function_name_id", "line", "end_line", "column", "end_column"}
)
_FRAME_FIELDS = frozenset({"file_location_id", "parent_frame_id"})
_CLOSERS = {"{": "}", "(": ")", "[": "]"}
# Attributes that name called computations, one name or a `{%a, %b}` list.
_CALL_ATTRS = frozenset(
    {
        "to_apply",
        "calls",
        "condition",
        "body",
        "true_computation",
        "false_computation",
        "branch_computations",
        "called_computations",
        "select",
        "scatter",
    }
)
_MAX_DEPTH = 64  # tuple nesting; deeper input is rejected rather than recursed into


def _match_end(pattern: re.Pattern[str], text: str, pos: int, end: int) -> int:
    """Where `pattern`, which also matches the empty string (so always matches), ends."""
    found = pattern.match(text, pos, end)
    assert found is not None, "the pattern matches the empty string"
    return found.end()


def unescape(body: str) -> str:
    """Undo XLA's C escaping (`absl::CEscape`) of a string literal's body."""
    if "\\" not in body:
        return body
    out = bytearray()
    pos = 0
    for m in _ESCAPE.finditer(body):
        out += body[pos : m.start()].encode()
        octal, hexa, char = m.groups()
        if octal is not None:
            out.append(int(octal, 8) & 0xFF)
        elif hexa is not None:
            out.append(int(hexa, 16))
        else:
            out += _SIMPLE_ESCAPES.get(char, char).encode()
        pos = m.end()
    out += body[pos:].encode()
    # CEscape writes every byte >= 0x80 as octal, so UTF-8 text comes back through bytes.
    return out.decode("utf-8", errors="replace")


def _transposed(values: list[int], dims: list[int], perm: list[int]) -> list[int]:
    """`values` (row-major, shape `dims`) transposed by `perm`, read back row-major."""
    strides = [1] * len(dims)
    for k in range(len(dims) - 2, -1, -1):
        strides[k] = strides[k + 1] * dims[k + 1]
    out_dims = [dims[p] for p in perm]
    out_strides = [strides[p] for p in perm]
    out: list[int] = []
    index = [0] * len(out_dims)
    for _ in range(len(values)):
        out.append(values[sum(i * s for i, s in zip(index, out_strides))])
        for k in range(len(out_dims) - 1, -1, -1):
            index[k] += 1
            if index[k] < out_dims[k]:
                break
            index[k] = 0
    return out


def _chunks(values: list[int], size: int) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(values[k : k + size]) for k in range(0, len(values), size))


# Groups are listed device by device up to MAX_LISTED_DEVICES (a pod has thousands); past it
# only their size is known, by arithmetic (a `[1,100000000]<=[100000000]` list would take
# gigabytes). Over MAX_DEVICES they are not a program's at all.
MAX_LISTED_DEVICES = 1 << 16


def expand_iota(
    num_groups: int, group_size: int, reshape: tuple[int, ...], perm: tuple[int, ...]
) -> tuple[tuple[tuple[int, ...], ...], int]:
    """Replica groups of the iota form `[num_groups,group_size]<=[reshape]T(perm)`, and their
    size (the groups are empty past MAX_LISTED_DEVICES devices).

    iota(prod(reshape)) is reshaped to `reshape`, transposed by `perm` and read row-major as
    `num_groups` groups of `group_size`. Raises ValueError when the pieces do not fit.
    """
    total = math.prod(reshape)
    if (
        total != num_groups * group_size
        or group_size <= 0
        or any(d < 1 for d in reshape)
        or sorted(perm) != list(range(len(reshape)))
    ):
        raise ValueError("iota replica groups do not fit")
    if total > MAX_DEVICES:
        raise ValueError(f"{total} devices: more than any machine has")
    if total > MAX_LISTED_DEVICES:
        return (), group_size
    listed = _chunks(_transposed(list(range(total)), list(reshape), list(perm)), group_size)
    return listed, group_size


# A mesh axis reference: the axis index and, for a sub-axis `'a':(pre)size`, (pre, size).
AxisRef = tuple[int, tuple[int, int] | None]


def expand_mesh_axes(
    sizes: tuple[int, ...], device_ids: tuple[int, ...], refs: tuple[AxisRef, ...]
) -> tuple[tuple[tuple[int, ...], ...], int]:
    """Replica groups of `mesh['x'=4,'y'=2] {'x'}`: the devices that differ only along `refs`,
    and their size (the groups are empty past MAX_LISTED_DEVICES devices).

    Follows XLA's MeshAxesReplicaGroupList: each referenced axis is reshaped so that its
    (sub-)axes are dimensions of their own, those dimensions are moved last (in mesh-axis order)
    and the device array is read row-major in groups. `device_ids` is empty for iota meshes.
    Raises ValueError on references that do not fit the mesh.
    """
    total = math.prod(sizes)
    if any(size < 1 for size in sizes) or total > MAX_DEVICES:
        raise ValueError(f"mesh axes {list(sizes)} are not a machine's")
    if (device_ids and len(device_ids) != total) or not refs:
        raise ValueError("mesh device ids do not fit its axes")
    by_axis: dict[int, list[tuple[int, int] | None]] = {}
    for axis, sub in refs:
        if not 0 <= axis < len(sizes):
            raise ValueError("mesh axis out of range")
        by_axis.setdefault(axis, []).append(sub)
    dims: list[int] = []
    grouped: list[int] = []
    group_size = 1
    for axis, full in enumerate(sizes):
        subs = by_axis.get(axis)
        if subs is None:
            dims.append(full)
            continue
        parts = [sub for sub in subs if sub is not None]
        if len(parts) < len(subs):  # the whole axis
            if len(subs) > 1:
                raise ValueError("a full mesh axis referenced with others on it")
            grouped.append(len(dims))
            dims.append(full)
            group_size *= full
            continue
        # Sub-axes of one axis: split it into [pad, size, pad, size, ..., rest] by pre-size.
        order = sorted(range(len(parts)), key=lambda k: parts[k][0])
        local: list[int] = []
        at: dict[int, int] = {}
        product = 1
        for k in order:
            pre, size = parts[k]
            if pre % product or size < 1:
                raise ValueError("overlapping mesh sub-axes")
            if pre != product:
                local.append(pre // product)
                product = pre
            at[k] = len(local)
            local.append(size)
            product *= size
            group_size *= size
        if full % product:
            raise ValueError("mesh sub-axes do not divide their axis")
        if product != full:
            local.append(full // product)
        grouped += [len(dims) + at[k] for k in range(len(parts))]
        dims += local
    if total > MAX_LISTED_DEVICES:
        return (), group_size
    perm = [d for d in range(len(dims)) if d not in grouped] + grouped
    devices = list(device_ids) if device_ids else list(range(total))
    return _chunks(_transposed(devices, dims, perm), group_size), group_size


class _Parser:
    """A cursor over `text[pos:end]`; sub-parsers share the text so errors point into it."""

    def __init__(self, text: str, pos: int = 0, end: int | None = None) -> None:
        self.text = text
        self.pos = pos
        self.end = len(text) if end is None else end
        self.shapes: dict[str, Shape] = {}  # array shapes by spelling (Shape is immutable)

    # ---- cursor primitives ----

    def error(self, expected: str, pos: int | None = None) -> HloParseError:
        at = self.pos if pos is None else pos
        line = self.text.count("\n", 0, at) + 1
        column = at - self.text.rfind("\n", 0, at)
        snippet = self.text[at : at + 40].split("\n", 1)[0] or "end of input"
        return HloParseError(expected, line=line, column=column, snippet=snippet)

    def skip(self) -> None:
        if self.pos < self.end and self.text[self.pos] in _SKIPPABLE:
            self.pos = _match_end(_SKIP, self.text, self.pos, self.end)

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < self.end else ""

    def at_end(self) -> bool:
        return self.pos >= self.end

    def eat(self, token: str) -> bool:
        if self.text.startswith(token, self.pos, self.end):
            self.pos += len(token)
            return True
        return False

    def expect(self, token: str) -> None:
        if not self.eat(token):
            raise self.error(f"'{token}'")

    def keyword(self, word: str) -> bool:
        """Consume `word` when it stands alone (followed by a space), as `ROOT` and `ENTRY` do."""
        after = self.pos + len(word)
        if (
            self.text.startswith(word, self.pos)
            and after < self.end
            and self.text[after] in " \t\r\n"
        ):
            self.pos = after
            return True
        return False

    def match(self, pattern: re.Pattern[str], expected: str) -> re.Match[str]:
        m = pattern.match(self.text, self.pos, self.end)
        if m is None:
            raise self.error(expected)
        self.pos = m.end()
        return m

    def name(self) -> str:
        return self.match(_NAME, "a name").group(1)

    def integer(self) -> int:
        return int(self.match(_INT, "an integer").group())

    def string(self) -> str:
        return unescape(self.match(_STRING, "a quoted string").group()[1:-1])

    def int_list(self, open_: str = "{", close: str = "}") -> tuple[int, ...]:
        self.expect(open_)
        self.skip()
        out: list[int] = []
        if self.eat(close):
            return ()
        while True:
            self.skip()
            out.append(self.integer())
            self.skip()
            if self.eat(close):
                return tuple(out)
            self.expect(",")

    def done(self, what: str) -> None:
        self.skip()
        if not self.at_end():
            raise self.error(what)

    def balanced_end(self, pos: int, stop_at_comma: bool) -> int:
        """End of a balanced run starting at `pos`, skipping over quoted strings.

        With `stop_at_comma`, a top-level `,`, newline or unmatched closer ends the run (an
        attribute value); otherwise the run is exactly one bracketed group at `pos`.
        """
        text, end = self.text, self.end
        stack: list[str] = []
        while True:
            pos = _match_end(_PLAIN, text, pos, end)
            if pos >= end:
                break
            c = text[pos]
            if c == '"':
                m = _STRING.match(text, pos, end)
                if m is None:
                    raise self.error("a closing '\"'", pos)
                pos = m.end()
            elif c in _CLOSERS:
                stack.append(_CLOSERS[c])
                pos += 1
            elif c in "})]":
                if not stack:
                    break
                if stack.pop() != c:
                    raise self.error("matching brackets", pos)
                pos += 1
            elif not stack and stop_at_comma and not text.startswith(_MESH_IDS, pos):
                break  # a top-level ',' or newline ends the value
            else:
                pos += 1
            if not stack and not stop_at_comma:
                return pos
        if stack:
            raise self.error(f"'{stack[-1]}'", pos)
        return pos

    # ---- shapes ----

    def shape(self, depth: int = 0) -> Shape:
        # Modules repeat a few shapes thousands of times: parse each spelling once.
        m = _ARRAY_SHAPE.match(self.text, self.pos, self.end)
        if m is not None and not self.text.startswith("{", m.end(), self.end):
            shape = self.shapes.get(m.group())
            if shape is None:
                shape = self.shapes[m.group()] = self.array_shape()
            self.pos = m.end()
            return shape
        if depth > _MAX_DEPTH:
            raise self.error("a less deeply nested tuple")
        if self.eat("("):
            elements: list[Shape] = []
            self.skip()
            if self.eat(")"):
                return Shape("tuple")
            while True:
                self.skip()
                elements.append(self.shape(depth + 1))
                self.skip()
                if self.eat(")"):
                    return Shape("tuple", tuple_shapes=tuple(elements))
                self.expect(",")
        return self.array_shape()

    def array_shape(self) -> Shape:
        m = _ELEMENT_TYPE.match(self.text, self.pos, self.end)
        if m is None or m.group(1) not in ELEMENT_BITS:
            raise self.error("a shape")
        self.pos = m.end()
        dims: list[int] = []
        dynamic: list[bool] = []
        if not self.eat("]"):
            while True:
                if self.eat("?"):  # unbounded dynamic dimension
                    dims.append(-1)
                    dynamic.append(True)
                else:
                    is_dynamic = self.eat("<=")
                    at = self.pos
                    size = self.integer()
                    if size < 0:
                        raise self.error("a dimension size of 0 or more", at)
                    dims.append(size)
                    dynamic.append(is_dynamic)
                if self.eat("]"):
                    break
                self.expect(",")
        # A layout is written right after `]`; a `{` after a space opens a computation body.
        layout = None
        if self.peek() == "{":
            at = self.pos
            layout = self.layout()
            if sorted(layout.minor_to_major) != list(range(len(dims))):
                raise self.error(f"a layout listing each of the {len(dims)} dimensions once", at)
        return Shape(
            m.group(1),
            tuple(dims),
            tuple(dynamic) if any(dynamic) else (),
            layout,
        )

    def layout(self) -> Layout:
        self.expect("{")
        minor_to_major: list[int] = []
        if self.peek() and self.peek() not in ":}":
            while True:
                minor_to_major.append(self.integer())
                if not self.eat(","):
                    break
        tiles: list[tuple[int, ...]] = []
        memory_space = 0
        element_bits = 0
        tail_alignment = 1
        extra: list[str] = []
        if self.eat(":"):
            while self.peek() and self.peek() != "}":
                if self.eat("T"):
                    if self.peek() != "(":
                        raise self.error("'(' after T")
                    while self.peek() == "(":
                        tiles.append(self.tile())
                elif self.text.startswith("SC", self.pos) or self.peek() not in "SEL":
                    extra.append(self.layout_item())
                else:
                    letter = self.text[self.pos]
                    self.pos += 1
                    value = self.int_list("(", ")")
                    if len(value) != 1:
                        raise self.error(f"one integer in {letter}(...)")
                    if letter == "S":
                        memory_space = value[0]
                    elif letter == "E":
                        element_bits = value[0]
                    else:
                        tail_alignment = value[0]
        self.expect("}")
        return Layout(
            tuple(minor_to_major),
            tuple(tiles),
            memory_space,
            tuple(extra),
            element_bits,
            tail_alignment,
        )

    def tile(self) -> tuple[int, ...]:
        self.expect("(")
        out: list[int] = []
        while True:
            at = self.pos
            combined = self.eat("*")  # `*` combines dimensions
            out.append(-1 if combined else self.integer())
            if not combined and out[-1] < 1:  # a tile of 0 divides by 0; XLA refuses it
                raise self.error("a tile size of 1 or more (or *)", at)
            if self.eat(")"):
                return tuple(out)
            self.expect(",")

    def layout_item(self) -> str:
        """A layout item kept as written: `D(C,D)`, `#(u32)`, `*(u32)`, `SC(0:1)`, `P(...)`..."""
        start = self.pos
        self.match(_LAYOUT_ITEM, "a layout item")
        if self.peek() != "(":
            raise self.error("'(' in a layout item")
        while self.peek() == "(":
            self.pos = self.balanced_end(self.pos, stop_at_comma=False)
        return self.text[start : self.pos]

    # ---- instructions ----

    def instruction(self) -> tuple[Instruction, int]:
        """One instruction; also returns its metadata `stack_frame_id` (0 when none)."""
        is_root = self.keyword("ROOT")
        self.skip()
        name = self.name()
        self.skip()
        self.expect("=")
        self.skip()
        shape = self.shape()
        self.skip()
        opcode = self.match(_OPCODE, "an opcode").group()
        self.skip()
        self.expect("(")
        inst = Instruction(name=name, opcode=opcode, shape=shape, is_root=is_root)
        if opcode == "constant":
            start = self.pos - 1
            end = self.balanced_end(start, stop_at_comma=False)
            inst.literal = self.text[self.pos : end - 1].strip()
            self.pos = end
        else:
            self.skip()
            if opcode == "parameter":
                inst.parameter_number = self.integer()
                self.skip()
            elif self.peek() != ")":
                self.operands(inst)
            self.expect(")")
        spans = self.attributes(inst)
        frame_id = _TypedAttrs(self, inst).apply(spans)
        if opcode == "transpose":
            self.check_transpose(inst, spans)
        return inst, frame_id

    def check_transpose(self, inst: Instruction, spans: list[tuple[str, int, int]]) -> None:
        """XLA's shape rule for a transpose: `dimensions` a permutation of the operand's
        dimensions, the result the operand's in that order (one that breaks it is invalid
        HLO, never an op to cost)."""
        perm = inst.dimensions
        if perm is None:
            return
        at = next((start for key, start, _ in spans if key == "dimensions"), self.pos)
        result = inst.shape
        operand = inst.operand_shapes[0] if inst.operand_shapes else None
        if operand is not None and operand.is_tuple:
            operand = None
        rank = operand.rank if operand is not None else result.rank
        if result.is_tuple or sorted(perm) != list(range(rank)) or result.rank != rank:
            raise self.error(f"a transpose's dimensions: a permutation of its {rank} dims", at)
        known = operand is not None and min((*operand.dims, *result.dims), default=0) >= 0
        if operand is not None and known and tuple(operand.dims[d] for d in perm) != result.dims:
            raise self.error(
                f"a transpose result of its operand's dimensions {list(operand.dims)} "
                f"in the order {list(perm)}",
                at,
            )

    def operands(self, inst: Instruction) -> None:
        while True:
            self.skip()
            shape: Shape | None = None
            m = _ELEMENT_TYPE.match(self.text, self.pos, self.end)
            if self.peek() == "(" or (m is not None and m.group(1) in ELEMENT_BITS):
                shape = self.shape()
                self.skip()
            inst.operands.append(self.name())
            inst.operand_shapes.append(shape)
            self.skip()
            if self.peek() == ")":
                return
            self.expect(",")

    def attributes(self, inst: Instruction) -> list[tuple[str, int, int]]:
        """`, key=value` pairs after the operands; returns the value spans for typed parsing."""
        spans: list[tuple[str, int, int]] = []
        while True:
            before = self.pos
            self.skip()
            if not self.eat(","):
                self.pos = before
                return spans
            self.skip()
            key_match = _IDENT.match(self.text, self.pos, self.end)
            after_key = key_match.end() if key_match else self.pos
            if key_match is None or not self.text.startswith("=", after_key):
                if self._at_instruction_end():
                    return spans  # a trailing comma, as abbreviated listings write
                raise self.error("an attribute name=value")
            self.pos = after_key + 1
            start = self.pos
            end = self.balanced_end(start, stop_at_comma=True)
            value = self.text[start:end].rstrip()
            if not value:
                raise self.error("an attribute value", start)
            inst.attrs[key_match.group()] = value
            spans.append((key_match.group(), start, start + len(value)))
            self.pos = end

    def _at_instruction_end(self) -> bool:
        if self.at_end() or self.peek() in "%}":
            return True
        if self.text.startswith("ROOT", self.pos):
            return True
        # Short form `name = shape op(...)`: a name followed by `=` and a shape.
        m = _NAME.match(self.text, self.pos, self.end)
        if m is None:
            return False
        rest = _match_end(_SKIP, self.text, m.end(), self.end)
        return self.text.startswith("=", rest)

    # ---- modules ----

    def module(self) -> Module:
        self.skip()
        module = Module(name="")
        if self.keyword("HloModule"):
            self.pos = _match_end(_SPACES, self.text, self.pos, self.end)
            module.name = self.match(_MODULE_NAME, "a module name").group()
            while True:
                self.pos = _match_end(_SPACES, self.text, self.pos, self.end)
                if not self.eat(","):
                    break
                self.pos = _match_end(_SPACES, self.text, self.pos, self.end)
                key = self.match(_IDENT, "a module attribute").group()
                self.expect("=")
                end = self.balanced_end(self.pos, stop_at_comma=True)
                value = self.text[self.pos : end].rstrip()
                if not value:
                    raise self.error("an attribute value")
                module.attrs[key] = value
                self.pos = end
        names: dict[str, tuple[str, ...]] = {}
        locations: tuple[FileLocation, ...] = ()
        stack: tuple[StackFrame, ...] = ()
        pending: list[tuple[Instruction, int]] = []
        seen: set[str] = set()
        while True:
            self.skip()
            if self.at_end():
                break
            word = _IDENT.match(self.text, self.pos, self.end)
            title = word.group() if word else ""
            if title in ("FileNames", "FunctionNames"):
                self.pos += len(title)
                names[title] = self.string_rows(title)
            elif title == "FileLocations":
                self.pos += len(title)
                rows = self.field_rows(title, _LOC_FIELDS)
                locations = tuple(
                    FileLocation(**{"file_name_id": 0, "function_name_id": 0, **f}) for f in rows
                )
            elif title == "StackFrames":
                self.pos += len(title)
                # XLA's text prints parent_frame_id one above the proto's value.
                stack = tuple(
                    StackFrame(
                        f.get("file_location_id", 0), max(f.get("parent_frame_id", 0) - 1, 0)
                    )
                    for f in self.field_rows(title, _FRAME_FIELDS)
                )
            else:
                start = self.pos
                comp = self.computation(pending)
                if comp.name in seen:
                    raise self.error(f"a computation name other than {comp.name!r}", start)
                seen.add(comp.name)
                module.computations.append(comp)
                if comp.is_entry:
                    module.entry = comp.name
        if not module.computations:
            raise self.error("a computation")
        if not module.name:
            module.name = module.entry or module.computations[-1].name
        if names or locations or stack:
            frames = StackFrameIndex(
                names.get("FileNames", ()), names.get("FunctionNames", ()), locations, stack
            )
            module.frames = frames
            for inst, frame_id in pending:
                if inst.source is None:
                    inst.source = frames.source(frame_id)
        return module

    def string_rows(self, title: str) -> tuple[str, ...]:
        """Rows `1 "text"` of a stack-frame table, numbered from 1."""
        rows: list[str] = []
        while self.row_number(title, len(rows) + 1):
            rows.append(self.string())
        return tuple(rows)

    def field_rows(self, title: str, allowed: frozenset[str]) -> list[dict[str, int]]:
        """Rows `1 {key=value ...}` of a stack-frame table, numbered from 1."""
        rows: list[dict[str, int]] = []
        while self.row_number(title, len(rows) + 1):
            self.expect("{")
            fields: dict[str, int] = {}
            while True:
                self.skip()
                if self.eat("}"):
                    break
                at = self.pos
                key = self.match(_IDENT, "a field name").group()
                if key not in allowed:
                    raise self.error(f"one of {', '.join(sorted(allowed))}", at)
                self.expect("=")
                fields[key] = self.integer()
            rows.append(fields)
        return rows

    def row_number(self, title: str, expected: int) -> bool:
        """Reads the number opening a table row; False at the end of the table."""
        self.skip()
        m = _INT.match(self.text, self.pos, self.end)
        if m is None:
            return False
        if int(m.group()) != expected:
            raise self.error(f"row {expected} of {title}")
        self.pos = _match_end(_SPACES, self.text, m.end(), self.end)
        return True

    def computation(self, pending: list[tuple[Instruction, int]]) -> Computation:
        """One computation; appends (instruction, stack_frame_id) pairs to `pending`."""
        is_entry = self.keyword("ENTRY")
        self.skip()
        comp = Computation(name=self.name(), is_entry=is_entry)
        self.skip()
        if self.eat("("):  # the signature `(p: f32[2], ...) -> f32[2]` repeats the parameters
            self.skip()
            if not self.eat(")"):
                while True:
                    self.skip()
                    self.name()
                    self.skip()
                    self.expect(":")
                    self.skip()
                    self.shape()
                    self.skip()
                    if self.eat(")"):
                        break
                    self.expect(",")
            self.skip()
            self.expect("->")
            self.skip()
            self.shape()
            self.skip()
        if self.eat(","):
            self.skip()
            if self.match(_IDENT, "execution_thread").group() != "execution_thread":
                raise self.error("execution_thread")
            self.expect("=")
            comp.execution_thread = self.string()
            self.skip()
        self.expect("{")
        shapes: dict[str, Shape] = {}
        while True:
            self.skip()
            if self.eat("}"):
                break
            if self.at_end():
                raise self.error("'}' closing computation " + comp.name)
            start = self.pos
            inst, frame_id = self.instruction()
            if inst.name in shapes:
                raise self.error(f"an instruction name other than {inst.name!r}", start)
            shapes[inst.name] = inst.shape
            comp.instructions.append(inst)
            if frame_id:
                pending.append((inst, frame_id))
        # Module text writes operands by name only; their shapes are their definitions'.
        for inst in comp.instructions:
            inst.operand_shapes = [
                s if s is not None else shapes.get(n)
                for n, s in zip(inst.operands, inst.operand_shapes)
            ]
        return comp


class _TypedAttrs:
    """Parses the attribute values the cost model reads into the instruction's typed fields."""

    def __init__(self, parser: _Parser, inst: Instruction) -> None:
        self.parser = parser
        self.inst = inst
        self.dot: dict[str, tuple[int, ...]] = {}
        self.frame_id = 0

    def apply(self, spans: list[tuple[str, int, int]]) -> int:
        """Fill the typed fields; returns the metadata's `stack_frame_id` (0 when none)."""
        for key, start, end in spans:
            handler = _HANDLERS.get(key)
            if handler is None:
                continue
            sub = _Parser(self.parser.text, start, end)
            handler(self, sub, key)
            sub.done(f"the end of the {key} value")
        if self.dot:
            self.inst.dot_dims = DotDims(**self.dot)
        return self.frame_id

    def dot_dims(self, p: _Parser, key: str) -> None:
        self.dot[key.removesuffix("_dims")] = p.int_list()

    def integer(self, p: _Parser, key: str) -> None:
        setattr(self.inst, _INT_FIELDS[key], p.integer())

    def dimensions(self, p: _Parser, key: str) -> None:
        self.inst.dimensions = p.int_list()

    def fusion_kind(self, p: _Parser, key: str) -> None:
        self.inst.fusion_kind = p.match(_IDENT, "a fusion kind").group()

    def custom_call_target(self, p: _Parser, key: str) -> None:
        self.inst.custom_call_target = p.string()

    def called(self, p: _Parser, key: str) -> None:
        if not p.eat("{"):
            self.inst.called.append(p.name())
            return
        p.skip()
        if p.eat("}"):
            return
        while True:
            p.skip()
            self.inst.called.append(p.name())
            p.skip()
            if p.eat("}"):
                return
            p.expect(",")

    def dim_labels(self, p: _Parser, key: str) -> None:
        m = p.match(_DIM_LABELS, "dim_labels like b01f_01io->b01f")
        n = len(m.group(1)) - 2

        def positions(group: int, a: str, b: str) -> tuple[int, int, tuple[int, ...]]:
            labels = m.group(group)
            if sorted(labels) != sorted(a + b + "".join(map(str, range(n)))):
                raise p.error(f"each of {a}, {b} and the {n} spatial digits once", m.start(group))
            return labels.index(a), labels.index(b), tuple(labels.index(str(i)) for i in range(n))

        ib, if_, isp = positions(1, "b", "f")
        ki, ko, ksp = positions(2, "i", "o")
        ob, of, osp = positions(3, "b", "f")
        self.inst.conv_dims = ConvDims(ib, if_, isp, ki, ko, ksp, ob, of, osp)

    def window(self, p: _Parser, key: str) -> None:
        start = p.pos
        p.expect("{")
        fields: dict[str, list[str]] = {}
        while True:
            p.skip()
            if p.eat("}"):
                break
            at = p.pos
            name = p.match(_IDENT, "a window field").group()
            if name not in _WINDOW_FIELDS or name in fields:
                raise p.error("size, stride, pad, lhs_dilate, rhs_dilate or rhs_reversal", at)
            p.expect("=")
            fields[name] = p.match(_WINDOW_NUMBERS, "window numbers").group().split("x")
        rank = max((len(v) for v in fields.values()), default=0)
        try:
            if any(len(v) != rank for v in fields.values()):
                raise ValueError
            pads = [tuple(int(x) for x in pad.split("_")) for pad in fields.get("pad", [])]
            if any(len(pad) != 2 for pad in pads):
                raise ValueError

            def ints(name: str, default: int) -> tuple[int, ...]:
                return tuple(int(x) for x in fields[name]) if name in fields else (default,) * rank

            self.inst.window = Window(
                size=ints("size", 1),
                stride=ints("stride", 1),
                pad_low=tuple(lo for lo, _ in pads) or (0,) * rank,
                pad_high=tuple(hi for _, hi in pads) or (0,) * rank,
                lhs_dilate=ints("lhs_dilate", 1),
                rhs_dilate=ints("rhs_dilate", 1),
                rhs_reversal=tuple(bool(x) for x in ints("rhs_reversal", 0)),
            )
        except ValueError:
            raise p.error("a window like {size=3x3 stride=2x2 pad=1_1x1_1}", start) from None

    def slice(self, p: _Parser, key: str) -> None:
        p.expect("{")
        out: list[SliceDim] = []
        p.skip()
        if not p.eat("}"):
            while True:
                p.skip()
                p.expect("[")
                start = p.integer()
                p.expect(":")
                limit = p.integer()
                stride = p.integer() if p.eat(":") else 1
                p.expect("]")
                out.append(SliceDim(start, limit, stride))
                p.skip()
                if p.eat("}"):
                    break
                p.expect(",")
        self.inst.slice = tuple(out)

    def replica_groups(self, p: _Parser, key: str) -> None:
        start = p.pos
        if p.text.startswith("mesh[", p.pos):
            groups, size = _mesh_groups(p)
            self.inst.replica_groups = ReplicaGroups(groups, p.text[start : p.pos], size)
            return
        if p.peek() == "[":  # iota form [groups,size]<=[reshape]T(perm)
            dims = p.int_list("[", "]")
            p.expect("<=")
            reshape, perm = _reshape_transpose(p)
            if len(dims) != 2:
                raise p.error("[num_groups,group_size]", start)
            try:
                groups, size = expand_iota(dims[0], dims[1], reshape, perm)
            except ValueError:
                raise p.error("iota dimensions that fit each other", start) from None
            self.inst.replica_groups = ReplicaGroups(groups, p.text[start : p.pos], size)
            return
        p.expect("{")
        out: list[tuple[int, ...]] = []
        p.skip()
        if not p.eat("}"):
            while True:
                p.skip()
                out.append(p.int_list())
                p.skip()
                if p.eat("}"):
                    break
                p.expect(",")
        self.inst.replica_groups = ReplicaGroups(tuple(out))

    def backend_config(self, p: _Parser, key: str) -> None:
        if p.peek() == '"':
            self.inst.backend_config = p.string()
        else:
            self.inst.backend_config = p.text[p.pos : p.end]
            p.pos = p.end

    def metadata(self, p: _Parser, key: str) -> None:
        p.expect("{")
        fields: dict[str, str | int] = {}
        while True:
            p.skip()
            if p.eat("}"):
                break
            name = p.match(_IDENT, "a metadata field").group()
            p.expect("=")
            if p.peek() == '"':
                fields[name] = p.string()
            elif p.peek() == "{":  # profile_type={...}
                p.pos = p.balanced_end(p.pos, stop_at_comma=False)
            else:
                fields[name] = p.integer()
        # Metadata reaches the outputs as names do: printable (hlogap.units).
        op_name = fields.get("op_name")
        if isinstance(op_name, str):
            self.inst.op_name = printable(op_name)
        source_file = fields.get("source_file")
        if isinstance(source_file, str) and source_file:
            line = fields.get("source_line")
            self.inst.source = printable(f"{source_file}:{line}" if line else source_file)
        frame = fields.get("stack_frame_id")
        self.frame_id = frame if isinstance(frame, int) else 0


def _mesh_groups(p: _Parser) -> tuple[tuple[tuple[int, ...], ...], int]:
    """`mesh['x'=4,'y'=2] {'x'}`, `mesh[...], device_ids=(...) {'y':(1)2}`: mesh-axes groups."""
    start = p.pos
    p.expect("mesh[")
    names: list[str] = []
    sizes: list[int] = []
    while True:
        names.append(_axis_name(p))
        p.expect("=")
        sizes.append(p.integer())
        if p.eat("]"):
            break
        p.expect(",")
    device_ids: tuple[int, ...] = ()
    if p.eat(","):
        p.skip()
        p.expect("device_ids=(")
        device_ids = (
            _mesh_device_ids(p, math.prod(sizes)) if p.peek() == "[" else p.int_list("", ")")
        )
    p.skip()
    p.expect("{")
    refs: list[AxisRef] = []
    while not p.eat("}"):
        if refs:
            p.expect(",")
        at = p.pos
        name = _axis_name(p)
        if name not in names:
            raise p.error(f"one of the mesh axes {names}", at)
        sub = None
        if p.eat(":("):
            pre = p.integer()
            p.expect(")")
            sub = (pre, p.integer())
        refs.append((names.index(name), sub))
    try:
        return expand_mesh_axes(tuple(sizes), device_ids, tuple(refs))
    except ValueError as e:
        raise p.error(f"mesh axes that fit the mesh ({e})", start) from None


def _mesh_device_ids(p: _Parser, total: int) -> tuple[int, ...]:
    """A mesh's device list in the iota form, `[2,4]T(1,0))` (the `device_ids=(` read): the
    devices 0..n-1 reshaped to `[2,4]`, transposed by `(1,0)` and read row-major (XLA prints
    it so for an all-to-all along a mesh axis that is not the major one). Empty (the plain
    iota order) past MAX_LISTED_DEVICES: the groups are not listed then, only their size."""
    start = p.pos
    reshape, perm = _reshape_transpose(p)
    p.expect(")")
    try:  # the list as one group of all the devices: the iota replica groups' own reading
        listed, _ = expand_iota(1, total, reshape, perm)
    except ValueError:
        raise p.error(f"an iota device list of the mesh's {total} devices", start) from None
    return listed[0] if listed else ()


def _reshape_transpose(p: _Parser) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """`[2,4]T(1,0)`, the transpose optional: an iota's reshape and its permutation."""
    reshape = p.int_list("[", "]")
    return reshape, p.int_list("(", ")") if p.eat("T") else tuple(range(len(reshape)))


def _axis_name(p: _Parser) -> str:
    if p.peek() == "'":
        return p.match(_QUOTED_AXIS, "a quoted axis name").group()[1:-1]
    return p.match(_IDENT, "an axis name").group()


# The one top-level comma inside a value: `mesh['x'=2,'y'=2], device_ids=(3,2,1,0) {'y'}`.
_MESH_IDS = ", device_ids=("
_QUOTED_AXIS = re.compile(r"'[^'\n]*'")
_INT_FIELDS = {
    "feature_group_count": "feature_group_count",
    "batch_group_count": "batch_group_count",
    "channel_id": "channel_id",
    "index": "tuple_index",
}
_HANDLERS: dict[str, Callable[[_TypedAttrs, _Parser, str], None]] = {
    **dict.fromkeys(
        ("lhs_batch_dims", "rhs_batch_dims", "lhs_contracting_dims", "rhs_contracting_dims"),
        _TypedAttrs.dot_dims,
    ),
    **dict.fromkeys(_INT_FIELDS, _TypedAttrs.integer),
    **dict.fromkeys(_CALL_ATTRS, _TypedAttrs.called),
    "dimensions": _TypedAttrs.dimensions,
    "kind": _TypedAttrs.fusion_kind,
    "custom_call_target": _TypedAttrs.custom_call_target,
    "dim_labels": _TypedAttrs.dim_labels,
    "window": _TypedAttrs.window,
    "slice": _TypedAttrs.slice,
    "replica_groups": _TypedAttrs.replica_groups,
    "backend_config": _TypedAttrs.backend_config,
    "metadata": _TypedAttrs.metadata,
}
_WINDOW_NUMBERS = re.compile(r"[-0-9_x]+")
_WINDOW_FIELDS = frozenset({"size", "stride", "pad", "lhs_dilate", "rhs_dilate", "rhs_reversal"})


def is_braced(text: str) -> bool:
    """True when `text` is one balanced `{...}` group (strings inside skipped), as XLA checks
    before writing a backend config unquoted."""
    if not text.startswith("{"):
        return False
    try:
        return _Parser(text).balanced_end(0, stop_at_comma=False) == len(text)
    except HloParseError:
        return False


def parse_shape(text: str) -> Shape:
    """`bf16[8,128]{1,0:T(8,128)(2,1)}`, `(f32[2], u32[]{:S(2)})`, `s32[<=16]`, `token[]`."""
    p = _Parser(text)
    p.skip()
    shape = p.shape()
    p.done("the end of the shape")
    return shape


def parse_instruction(text: str) -> Instruction:
    """One instruction, with or without `ROOT` and `%`, operands with or without shapes.

    Standing alone, an instruction's source comes only from `source_file`/`source_line` in its
    metadata (a `stack_frame_id` needs the module's tables).
    """
    p = _Parser(text)
    p.skip()
    inst, _ = p.instruction()
    p.done("the end of the instruction")
    return inst


def parse_module(text: str) -> Module:
    """A module as `compiled.as_text()` or `--xla_dump_to` writes it.

    The `HloModule` header line may be missing (a pasted computation); the module is then named
    after its entry computation. Operand shapes are resolved within each computation, and
    `source` from `stack_frame_id` through the module's stack-frame tables.
    """
    return _Parser(text).module()
