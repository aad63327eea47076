"""OpCost, the accumulators, the module index and shapes -> HBM bytes."""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Iterable
from typing import NamedTuple

from msgspec import Struct, field

from hlogap.hlo.ir import Computation, Instruction, Module, Shape
from hlogap.hlo.tiling import padded_bytes


class OpCost(NamedTuple):
    """Counts for one execution of an op on one device."""

    flops: float = 0.0  # all FLOPs; transcendentals are counted apart, as XLA does
    matrix_flops: float = 0.0  # the part on the matrix unit
    matrix_dtype: str | None = None  # widest operand type of the matrix work (bf16 x s8 -> bf16)
    vector_dtype: str | None = None  # element type of the non-matrix work (the output's)
    transcendentals: float = 0.0
    hbm_read_bytes: float = 0.0
    hbm_write_bytes: float = 0.0
    padding_bytes: float = 0.0  # part of the HBM bytes that is tile padding
    comm_bytes: float = 0.0  # bytes on the interconnect per device (ring model)
    host_bytes: float = 0.0  # bytes over the device's link to host memory (S(5) copies)
    collective: str | None = None
    group_size: int | None = None
    unmodeled: str | None = None  # why this op cannot be costed (the counts are then 0 or partial)
    note: str | None = None  # how it was costed, where that is not obvious

    @property
    def hbm_bytes(self) -> float:
        return self.hbm_read_bytes + self.hbm_write_bytes

    @property
    def vector_flops(self) -> float:
        return self.flops - self.matrix_flops


class Work(Struct):
    """FLOPs of an op or a computation, accumulated."""

    flops: float = 0.0
    matrix: dict[str, float] = field(default_factory=dict)  # matrix FLOPs by dtype
    transcendentals: float = 0.0
    unmodeled: str | None = None
    note: str | None = None  # an assumption made on the way
    collective: Instruction | None = None  # the first collective inside (TPU wraps them in fusions)

    def add(self, other: Work, times: float = 1.0) -> None:
        self.flops += other.flops * times
        for dtype, flops in other.matrix.items():
            self.matrix[dtype] = self.matrix.get(dtype, 0.0) + flops * times
        self.transcendentals += other.transcendentals * times
        self.unmodeled = self.unmodeled or other.unmodeled
        self.note = self.note or other.note
        self.collective = self.collective or other.collective

    def add_matrix(self, flops: float, dtype: str) -> None:
        self.flops += flops
        self.matrix[dtype] = self.matrix.get(dtype, 0.0) + flops

    @property
    def matrix_flops(self) -> float:
        return sum(self.matrix.values())

    @property
    def matrix_dtype(self) -> str | None:
        return max(self.matrix, key=lambda d: self.matrix[d]) if self.matrix else None


class Traffic(Struct):
    """HBM bytes of one op."""

    read: int = 0
    write: int = 0
    padding: int = 0

    def add_read(self, shape: Shape | None, times: int = 1) -> None:
        size, pad = hbm(shape)
        self.read += size * times
        self.padding += pad * times

    def add_write(self, shape: Shape | None) -> None:
        size, pad = hbm(shape)
        self.write += size
        self.padding += pad


def hbm(shape: Shape | None) -> tuple[int, int]:
    """(bytes in HBM, of which tile padding) of a shape's array leaves."""
    if shape is None:
        return 0, 0
    total = padding = 0
    for leaf in shape.leaves():
        if leaf.memory_space != 0:  # S(1) VMEM, S(2) SMEM, S(5) host, ...: not HBM traffic
            continue
        logical = leaf.byte_size()
        size = padded_bytes(leaf) if leaf.layout is not None and leaf.layout.tiles else logical
        total += size
        padding += size - logical
    return total, padding


def logical(shapes: Iterable[Shape | None]) -> int:
    """Bytes of the data itself: what an interconnect transfer carries."""
    return sum(s.byte_size() for s in shapes if s is not None)


def elements(shape: Shape | None) -> int:
    return shape.num_elements if shape is not None else 0


def first_leaf(shape: Shape) -> Shape:
    leaves = shape.leaves()
    return leaves[0] if leaves else shape


def widest(types: Iterable[str]) -> str | None:
    """The type whose peak applies to mixed operands: the widest; floats win ties."""
    ranked = [
        (Shape(t).element_bits, t.startswith(("f", "bf", "c")), -i, t) for i, t in enumerate(types)
    ]
    return max(ranked)[3] if ranked else None


def ints(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"-?\d+", text)]


def config(inst: Instruction) -> dict[str, object]:
    """backend_config as a dict: JSON, or the MLIR attribute dictionary typed-FFI calls carry."""
    text = (inst.backend_config or "").strip()
    if text.startswith('{"'):
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            value = None
        if isinstance(value, dict):
            return value
    return {k: _number(v) for k, v in re.findall(r"(\w+)\s*=\s*([-\w.+]+)", text)}


def _number(text: str) -> object:
    try:
        return float(text) if re.search(r"[.eE]", text) else int(text)
    except ValueError:
        return text


def bare(name: str) -> str:
    return name[1:] if name.startswith("%") else name


class ModuleIndex:
    """Name lookups over a module; built once per module (operand lookups are the hot path)."""

    def __init__(self, module: Module) -> None:
        self.attrs = dict(module.attrs)
        self.comps = {bare(c.name): c for c in module.computations}
        self.comp_of: dict[int, Computation] = {}
        self.local: dict[str, dict[str, Instruction]] = {}
        for comp in module.computations:
            names: dict[str, Instruction] = {}
            for inst in comp.instructions:
                self.comp_of[id(inst)] = comp
                names[bare(inst.name)] = inst
            self.local[bare(comp.name)] = names
        self._users: dict[str, dict[str, list[Instruction]]] = {}
        self.work: dict[str, Work] = {}  # FLOPs of called computations, memoised

    def computation(self, name: str) -> Computation | None:
        return self.comps.get(bare(name))

    def users(self, comp: Computation) -> dict[str, list[Instruction]]:
        key = bare(comp.name)
        if key not in self._users:
            users: dict[str, list[Instruction]] = {}
            for inst in comp.instructions:
                for op in dict.fromkeys(bare(o) for o in inst.operands):
                    users.setdefault(op, []).append(inst)
            self._users[key] = users
        return self._users[key]

    def producer(self, inst: Instruction, i: int) -> Instruction | None:
        comp = self.comp_of.get(id(inst))
        if comp is None or i >= len(inst.operands):
            return None
        return self.local[bare(comp.name)].get(bare(inst.operands[i]))


_INDEXES: dict[int, tuple[weakref.ref[Module], ModuleIndex]] = {}


def index_of(module: Module | None) -> ModuleIndex | None:
    """The module's index, built on first use and dropped with the module.

    A module is taken as immutable once costed: build it completely first.
    """
    if module is None:
        return None
    key = id(module)
    hit = _INDEXES.get(key)
    if hit is not None and hit[0]() is module:
        return hit[1]
    index = ModuleIndex(module)
    _INDEXES[key] = (weakref.ref(module, lambda _: _INDEXES.pop(key, None)), index)
    return index


def operand_shapes(inst: Instruction, ix: ModuleIndex | None) -> list[Shape | None]:
    """Operand shapes, inline ones first, else resolved through the module."""
    shapes: list[Shape | None] = []
    for i in range(len(inst.operands)):
        shape = inst.operand_shapes[i] if i < len(inst.operand_shapes) else None
        if shape is None and ix is not None:
            producer = ix.producer(inst, i)
            shape = producer.shape if producer is not None else None
        shapes.append(shape)
    return shapes


def called(inst: Instruction, ix: ModuleIndex | None) -> list[Computation]:
    if ix is None:
        return []
    return [c for c in (ix.computation(n) for n in inst.called) if c is not None]


def parameter(comp: Computation, number: int) -> Instruction | None:
    for inst in comp.instructions:
        if inst.opcode == "parameter" and inst.parameter_number == number:
            return inst
    return None
