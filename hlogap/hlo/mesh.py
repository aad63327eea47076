"""The device mesh a partitioned module ran on, the mesh axes of its collectives, and the global
shapes behind its local matmuls (the seeds' chapter 9: reading a profile back to the program).

A profile holds each device's local program. Two things in it say how the global program was
cut: the `sharding` XLA keeps on entry parameters (and some other instructions), a tile
assignment of device ids (`devices=[4,1,2]<=[8] last_tile_dim_replicate`), and every
collective's `replica_groups`, the sets of devices that talk. Each names sets of device ids that
vary along some mesh axes with the others fixed: a set such as {0,2,4,6} is 4 devices a stride of
2 apart. The mesh is the coarsest cut of the device ids that every such set is a union of whole
axes of (`axis_0` the major one, with the largest stride, as XLA names mesh axes it prints).

Global shapes: the shardings are carried from where they are written (parameters, and any
instruction XLA keeps one on) through the ops that keep or move them (elementwise, transpose,
broadcast, reduce, reshapes and bitcasts that merge or split dims, all-gather, reduce-scatter,
all-to-all, fusions, loop bodies, a conditional's branches) to dots and convolutions; a
dimension whose chain is lost is unknown, never guessed. A dot's paired dims are split alike on
both sides, and a sharding on its result names its operands' dims. An all-reduce of a dot's
result says that the dot's contracting dimension was split over the all-reduce's axes (partial
sums), and that is carried back to the dot that produced its operand; a contracting dim whose
result reaches no collective over an axis it could be split over is unsplit (docs/mesh.md).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np
from msgspec import Struct, field

from hlogap.hlo.ir import Computation, Instruction, Module, Shape
from hlogap.hlo.opcodes import ELEMENTWISE, collective_kind

# Tile assignments and replica groups over more devices than the parser lists
# (MAX_LISTED_DEVICES) are not expanded: no pod has them, and expanding one is memory a
# hostile file would choose.
from hlogap.hlo.text import MAX_LISTED_DEVICES

# The axes that split one dimension of a value (major first); () unsplit; None unknown.
DimAxes = tuple[str, ...] | None
Dims = tuple[DimAxes, ...]
Value = Dims | list["Value | None"] | None  # an array's dims, or a tuple's elements

_KEEPS_SHARDING = ELEMENTWISE | {
    "convert",
    "copy",
    "bitcast-convert",
    "exponential",
    "log",
    "tanh",
    "logistic",
    "sqrt",
    "rsqrt",
    "power",
    "clamp",
    "exponential-minus-one",
    "log-plus-one",
    "cosine",
    "sine",
    "reduce-precision",
    "all-reduce",
    "all-reduce-done",
    "collective-permute",
    "collective-permute-done",
    "optimization-barrier",
}


class MeshAxis(Struct, frozen=True):
    """One axis of a device mesh: its name, its size and the device-id stride along it."""

    name: str
    size: int
    stride: int  # the device-id distance between neighbours along the axis


class Mesh(Struct, frozen=True):
    """The devices of a partitioned module as a mesh of axes, major first."""

    module: str
    devices: int
    axes: tuple[MeshAxis, ...]
    shardings: int  # instructions whose sharding was read
    collectives: int  # collectives whose replica groups were read

    @property
    def evidence(self) -> str:
        parts = [
            f"{n} {what}{'s' if n != 1 else ''}"
            for n, what in ((self.shardings, "sharding"), (self.collectives, "collective"))
            if n
        ]
        return f"from {' and '.join(parts)} of {self.module}"

    def describe(self) -> str:
        shape = " x ".join(f"{a.name} {a.size}" for a in self.axes)
        return f"{self.devices} devices = {shape} ({self.evidence})"

    def size(self, axes: Iterable[str]) -> int:
        """Devices along these axes (`axis_0 (2 of 4)`: part of an axis, 2)."""
        sizes = {a.name: a.size for a in self.axes}
        total = 1
        for axis in axes:
            part = _PART.match(axis)
            total *= int(part.group(1)) if part else sizes.get(axis, 1)
        return total

    def to_dict(self) -> dict[str, object]:
        return {
            "module": self.module,
            "devices": self.devices,
            "axes": [{"name": a.name, "size": a.size, "stride": a.stride} for a in self.axes],
            "evidence": self.evidence,
            "shardings": self.shardings,
            "collectives": self.collectives,
        }

    @classmethod
    def from_dict(cls, raw: object) -> Mesh | None:
        """A saved report's `mesh` (None when absent); ValueError when malformed."""
        if raw is None:
            return None
        if not isinstance(raw, dict) or not isinstance(raw.get("axes"), list):
            raise ValueError("'mesh' is not an object with an 'axes' list")
        try:
            axes = tuple(
                MeshAxis(str(a["name"]), int(a["size"]), int(a.get("stride", 0)))
                for a in raw["axes"]
            )
            return cls(
                str(raw.get("module", "")),
                int(raw["devices"]),
                axes,
                int(raw.get("shardings", 0)),
                int(raw.get("collectives", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"'mesh' is malformed: {exc}") from None


class GlobalView(Struct, frozen=True):
    """A dot's or convolution's global shapes: operands then result, HLO shape strings with
    `?` for a dimension whose split is unknown; `sharding`: the ways each axis splits it."""

    kind: str  # "matmul" or "convolution"
    shapes: tuple[str, ...]
    sharding: dict[str, int]
    complete: bool  # every dimension known

    def describe(self) -> str:
        ways = " x ".join(f"{axis} {n}-way" for axis, n in self.sharding.items())
        sides = " x ".join(self.shapes[:-1])
        unknown = "" if self.complete else " (?: split unknown)"
        return (
            f"local view of a {self.kind} sharded {ways}: global {sides} -> "
            f"{self.shapes[-1]}{unknown}"
        )


class ModuleMesh(Struct):
    """What the mesh says about one module's instructions (by name)."""

    mesh: Mesh
    collective_axes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    global_views: dict[str, GlobalView] = field(default_factory=dict)


def module_mesh(module: Module) -> ModuleMesh | None:
    """The module's mesh and what it says of its collectives and matmuls; None for a module
    on one device, or whose device groups do not fit one mesh."""
    atoms: list[tuple[int, int]] = []  # from shardings: what the program declared
    talk: list[tuple[int, int]] = []  # from collectives
    shardings = collectives = 0
    tiles: dict[int, _Tiling] = {}
    groups: dict[int, tuple[int, ...]] = {}
    counted: list[tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]] = []
    for comp in module.computations:
        for inst in comp.instructions:
            text = inst.attrs.get("sharding")
            tiling = _parse_sharding(text, inst.shape) if text else None
            if tiling is not None:
                tiles[id(inst)] = tiling
                shardings += 1
                atoms += tiling.all_atoms
            group = _group_atoms(inst, module)
            if group is not None:
                counted.append((group[2], group[0]))
                groups[id(inst)] = group[0]
                collectives += 1
                talk += group[1]
    # Without the header's count, the groups' and tile assignments' own (they cover every
    # device): the device count is evidence too, said in the mesh's line.
    devices = _device_count(module) or max(
        [math.prod(n for _, n in t.all_atoms) for t in tiles.values()]
        + [len(inst_groups) * len(g) for inst_groups, g in counted],
        default=0,
    )
    if devices <= 1 or devices > MAX_LISTED_DEVICES or not (atoms or talk):
        return None  # one device, or nothing that says how the devices were used
    # The declared shardings cut the mesh; collectives only where there are none (a collective
    # over part of an axis, XLA's own choice, is that axis's sub-axis, not a new axis).
    cuts = _cuts(devices, atoms or talk)
    if cuts is None:
        return None  # device sets that no one mesh holds: nothing is claimed
    strides = list(reversed(cuts[:-1]))
    mesh = Mesh(
        module.name,
        devices,
        tuple(
            MeshAxis(f"axis_{k}", cuts[cuts.index(s) + 1] // s, s) for k, s in enumerate(strides)
        ),
        shardings,
        collectives,
    )
    found = ModuleMesh(mesh)
    inner: dict[str, tuple[str, ...]] = {}  # per computation: its first collective's axes
    for comp in module.computations:
        for inst in comp.instructions:
            if id(inst) in groups:
                axes = _axes_of(mesh, groups[id(inst)])
                found.collective_axes[inst.name] = axes
                inner.setdefault(comp.name, axes)
    for comp in module.computations:  # a TPU collective fusion runs its collective's axes
        for inst in comp.instructions:
            if inst.opcode == "fusion" and inst.called and inst.called[0] in inner:
                found.collective_axes.setdefault(inst.name, inner[inst.called[0]])
    _Propagation(module, mesh, tiles, groups, found).run()
    return found


def _cuts(devices: int, atoms: Sequence[tuple[int, int]]) -> list[int] | None:
    """The axes' strides and the device count, ascending; None when some (stride, size) set
    crosses another's axis boundary."""
    cuts = sorted({1, devices, *(s for s, _ in atoms), *(s * n for s, n in atoms)})
    if cuts[-1] != devices or any(b % a for a, b in itertools.pairwise(cuts)):
        return None
    return cuts


def _device_count(module: Module) -> int | None:
    total = 1
    for key in ("replica_count", "num_partitions"):
        value = module.attrs.get(key, "").strip()
        if value.isdigit():
            total *= int(value)
    return total if total > 1 else None


class _Tiling(NamedTuple):
    """A parsed `sharding`: per tensor dimension, the (stride, size) device sets splitting it;
    `other_atoms`: those of the replicated or manual trailing tile dimensions."""

    dim_atoms: tuple[tuple[tuple[int, int], ...], ...]
    other_atoms: tuple[tuple[int, int], ...]
    tuple_elements: tuple[_Tiling | None, ...] | None = None

    @property
    def all_atoms(self) -> tuple[tuple[int, int], ...]:
        return (*(a for dim in self.dim_atoms for a in dim), *self.other_atoms)


_DEVICES = re.compile(
    r"devices=\[([\d,\s]+)\]\s*(?:<=\[([\d,\s]+)\](?:T\(([\d,\s]+)\))?|([\d,\s]+))"
)
_LAST_DIMS = re.compile(r"last_tile_dims=\{([^}]*)\}")
_PART = re.compile(r"^\S+ \((\d+) of \d+\)$")  # `axis_0 (2 of 4)`: part of an axis


def _parse_sharding(text: str, shape: Shape) -> _Tiling | None:
    """A `{devices=...}` sharding (or a tuple of them); None for replicated, maximal, manual or
    unreadable ones, which split nothing."""
    body = text.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1].strip()
    if body.startswith("{") and shape.is_tuple:
        elements = _top_level(body)
        parsed = tuple(
            _parse_sharding(e, s) for e, s in zip(elements, shape.tuple_shapes, strict=False)
        )
        if not any(parsed):
            return None
        atoms = tuple(a for p in parsed if p for a in p.other_atoms)
        return _Tiling((), atoms, parsed)
    m = _DEVICES.search(body)
    if m is None or shape.is_tuple:
        return None
    dims = _ints(m.group(1))
    count = math.prod(dims) if dims else 0
    if not dims or not 0 < count <= MAX_LISTED_DEVICES:
        return None
    if m.group(2) is not None:
        reshape = _ints(m.group(2))
        perm = _ints(m.group(3)) if m.group(3) else tuple(range(len(reshape)))
        if math.prod(reshape) != count or sorted(perm) != list(range(len(reshape))):
            return None
        ids = np.arange(count).reshape(reshape).transpose(perm).reshape(dims)
    else:
        listed = _ints(m.group(4))
        if len(listed) != count:
            return None
        ids = np.array(listed, dtype=np.int64).reshape(dims)
    trailing = 1 if "last_tile_dim_replicate" in body else 0
    last = _LAST_DIMS.search(body)
    if last is not None:
        trailing = len([t for t in last.group(1).split(",") if t.strip()])
    rank = len(dims) - trailing
    if rank != shape.rank:
        return None
    lines = [_line_atoms(ids, d) for d in range(len(dims))]
    if any(line is None for line in lines):
        return None
    return _Tiling(
        tuple(line or () for line in lines[:rank]),
        tuple(a for line in lines[rank:] for a in line or ()),
    )


def _top_level(body: str) -> list[str]:
    """The comma-separated `{...}` elements of a tuple sharding's body."""
    out: list[str] = []
    depth = start = 0
    for k, ch in enumerate(body):
        if ch == "{":
            if depth == 0:
                start = k
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                out.append(body[start : k + 1])
    return out


def _ints(text: str | None) -> tuple[int, ...]:
    return tuple(int(t) for t in (text or "").replace(" ", "").split(",") if t)


def _line_atoms(ids: np.ndarray, dim: int) -> tuple[tuple[int, int], ...] | None:
    """The devices along tile dimension `dim` from the first tile, as (stride, size) sets."""
    if ids.shape[dim] == 1:
        return ()
    index: list[int | slice] = [0] * ids.ndim
    index[dim] = slice(None)
    line = ids[tuple(index)].astype(np.int64)
    return _atoms(line - int(line.min()))


def _atoms(ids: Sequence[int] | np.ndarray) -> tuple[tuple[int, int], ...] | None:
    """A set of device ids holding 0, as a product of (stride, size) progressions: {0,1,4,5} is
    (1, 2) x (4, 2). None when it is no such product."""
    members = {int(i) for i in ids}
    if 0 not in members or len(members) != len(ids):
        return None
    span = {0}
    found: list[tuple[int, int]] = []
    while len(span) < len(members):
        stride = min(members - span)
        size = 1
        while all(b + size * stride in members for b in span):
            size += 1
        if size == 1:  # {0,2,3}: 3 is in no progression from the span, which cannot grow
            return None
        found.append((stride, size))
        span = {b + k * stride for b in span for k in range(size)}
    return tuple(found) if span == members else None


def _group_atoms(
    inst: Instruction, module: Module
) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...], tuple[tuple[int, ...], ...]] | None:
    """A collective's group holding device 0, its (stride, size) sets and all its groups; None
    where the groups are not read (not a collective, replica ids of a partitioned module,
    unreadable)."""
    kind = collective_kind(inst.opcode)
    if kind == "collective-permute":
        groups = _permute_groups(inst.attrs.get("source_target_pairs", ""))
    elif kind is not None and inst.replica_groups is not None:
        groups = inst.replica_groups.groups
    else:
        return None
    if not groups:
        return None
    replicas = module.attrs.get("replica_count", "1").strip()
    partitions = module.attrs.get("num_partitions", "1").strip()
    if (
        replicas not in ("", "1")
        and partitions not in ("", "1")
        and inst.attrs.get("use_global_device_ids") != "true"
    ):
        return None  # replica ids within each partition: not the devices' ids
    group = next((g for g in groups if 0 in g), None)
    if group is None or len(group) > MAX_LISTED_DEVICES:
        return None
    atoms = _atoms(group)
    return (tuple(group), atoms, tuple(groups)) if atoms is not None else None


def _permute_groups(pairs: str) -> tuple[tuple[int, ...], ...]:
    """The devices a collective-permute's `{{0,2},{2,4},...}` pairs connect, as groups (the
    rings or chains the data moves along)."""
    ids = _ints(pairs.replace("{", "").replace("}", ""))
    if len(ids) % 2 or len(ids) > 2 * MAX_LISTED_DEVICES:
        return ()
    parent: dict[int, int] = {}

    def root(d: int) -> int:
        while parent.setdefault(d, d) != d:
            parent[d] = parent[parent[d]]
            d = parent[d]
        return d

    for a, b in zip(ids[::2], ids[1::2], strict=True):
        parent[root(a)] = root(b)
    members: dict[int, list[int]] = {}
    for d in list(parent):
        members.setdefault(root(d), []).append(d)
    return tuple(tuple(sorted(g)) for g in members.values())


def _axes_of(mesh: Mesh, group: Iterable[int]) -> tuple[str, ...]:
    """The mesh axes a set of device ids (holding 0) spans, major first."""
    return _axes_spanned(mesh, _atoms(sorted(group)) or ())


def _axes_spanned(mesh: Mesh, atoms: Sequence[tuple[int, int]]) -> tuple[str, ...]:
    """The mesh axes (stride, size) device sets span, major first; part of an axis is named as
    such (`axis_0 (2 of 4)`: a collective's sub-axis; a declared sharding's sets cut the mesh,
    so they span whole axes)."""
    names: list[str] = []
    for axis in mesh.axes:
        end = axis.stride * axis.size
        ways = 1
        for s, n in atoms:
            # The part of this axis the set spans: its strides inside [axis.stride, end).
            low, high = max(s, axis.stride), min(s * n, end)
            if low < high:
                ways *= high // low
        if ways == axis.size:
            names.append(axis.name)
        elif ways > 1:
            names.append(f"{axis.name} ({ways} of {axis.size})")
    return tuple(names)


def _value_of(mesh: Mesh, tiling: _Tiling) -> Value:
    if tiling.tuple_elements is not None:
        return [None if t is None else _value_of(mesh, t) for t in tiling.tuple_elements]
    return tuple(_axes_spanned(mesh, atoms) for atoms in tiling.dim_atoms)


class _Dot(Struct):
    """A dot or convolution met while carrying shardings: its operands' dims (kept mutable so
    that an all-reduce of its result can fill in the contracting ones)."""

    inst: Instruction
    owner: str  # the instruction whose row it belongs to (its fusion, or itself)
    lhs: list[DimAxes]
    rhs: list[DimAxes]
    sources: list[_Dot | None]  # the dots whose results its operands are

    def pairs(self) -> list[tuple[int, int]]:
        """The (lhs, rhs) dims a dot pairs: batch and contracting."""
        dims = self.inst.dot_dims
        if self.inst.opcode != "dot" or dims is None:
            return []
        return [
            *zip(dims.lhs_batch, dims.rhs_batch, strict=False),
            *zip(dims.lhs_contracting, dims.rhs_contracting, strict=False),
        ]

    def sync(self) -> None:
        """A dot's paired dims are split alike on both sides (its local sizes agree, and a
        local product pairs elements on the same devices): one side's known split is the
        other's."""
        for a, b in self.pairs():
            if 0 <= a < len(self.lhs) and 0 <= b < len(self.rhs):
                if self.lhs[a] is None:
                    self.lhs[a] = self.rhs[b]
                elif self.rhs[b] is None:
                    self.rhs[b] = self.lhs[a]

    def declare_result(self, result: Dims) -> None:
        """The program names the result's sharding: the operand dims that became each result
        dim are split so, where unknown."""
        dims = self.inst.dot_dims
        if self.inst.opcode != "dot" or dims is None:
            return
        lhs_free, rhs_free = _free_dims(self)
        sides: list[list[tuple[list[DimAxes], int]]] = [
            [(self.lhs, a), (self.rhs, b)]
            for a, b in zip(dims.lhs_batch, dims.rhs_batch, strict=False)
        ]
        sides += [[(self.lhs, d)] for d in lhs_free] + [[(self.rhs, d)] for d in rhs_free]
        for axes, targets in zip(result, sides, strict=False):
            for side, d in targets:
                if axes is not None and 0 <= d < len(side) and side[d] is None:
                    side[d] = axes


# The mark of a dim that a dim of size 1 a device (split: a local batch of 1) was folded into
# by a reshape ([1,32,60,104] -> 199680): its split is that dim's, which a later reshape gives
# back to the dim of size 1 it makes, not to the major part of the others. Weighs 1 in sizes.
_FOLDED = "|1"
# (dot, True): a value is that dot's result, dims as the dot made them; (dot, False): its
# result moved (reshaped, transposed), the partial sums all the same; None: no dot's.
_Made = tuple[_Dot, bool] | None
# Ops whose sharding attribute names their result but whose work is still carried through
# (the dots inside a fusion, a dot's own operands).
_CARRIED_THROUGH = frozenset({"custom-call", "dot", "convolution", "fusion", "call"})
# Ops whose dims of unchanged size keep their split (a slice, pad or concatenation along one
# dim leaves the others as they were); a dim whose size changes is unknown.
_SAME_SIZE_KEEPS = frozenset(
    {"slice", "dynamic-slice", "pad", "concatenate", "dynamic-update-slice", "reverse"}
)


class _Propagation:
    """Carries shardings through the module's computations in program order."""

    def __init__(
        self,
        module: Module,
        mesh: Mesh,
        tiles: dict[int, _Tiling],
        groups: dict[int, tuple[int, ...]],
        found: ModuleMesh,
    ) -> None:
        self.module = module
        self.mesh = mesh
        self.tiles = tiles
        self.groups = groups
        self.found = found
        self.dots: list[_Dot] = []
        # The dot whose result each value is (through ops that keep shardings), per value.
        self.made_by: dict[int, _Dot] = {}
        self.seen: set[str] = set()
        # Instructions by (computation, name), each one's computation, the fusion or call of
        # each called computation: the all-to-all's operand is looked up through them.
        self.by_name: dict[tuple[str, str], Instruction] = {}
        self.owner_of: dict[int, str] = {}
        self.fused_by: dict[str, Instruction] = {}
        # A module with manual shardings (shard_map) holds code as the user wrote it per
        # device, whose partial sums may leave it as they are: nothing is concluded from
        # where they are summed.
        self.manual = any(
            "manual" in inst.attrs.get("sharding", "")
            for comp in module.computations
            for inst in comp.instructions
        )

    def run(self) -> None:
        entry = self.module.entry_computation
        if entry is None:
            return
        self._computation(entry, {}, {}, None)
        for dot in self.dots:
            dot.sync()
        if not self.manual:
            reached = _Reach(self.module)
            for dot in self.dots:
                self._unsummed(dot, reached)
        for dot in self.dots:
            view = self._view(dot)
            if view is not None:
                self.found.global_views.setdefault(dot.owner, view)

    def _computation(
        self,
        comp: Computation,
        params: dict[int, Value],
        param_dots: dict[int, _Made],
        owner: str | None,
    ) -> tuple[Value, _Made]:
        """The root's value and the dot that made it, given the parameters' values."""
        if len(self.seen) > 10_000:  # a call graph this deep is not a program: stop carrying
            return None, None
        self.seen.add(comp.name)
        env: dict[str, Value] = {}
        made: dict[str, tuple[_Dot, bool]] = {}
        for inst in comp.instructions:
            value, dot = self._instruction(inst, env, made, params, param_dots, owner)
            env[inst.name] = value
            if dot is not None:
                made[inst.name] = dot
        root = comp.root
        if root is None:
            return None, None
        return env.get(root.name), made.get(root.name)

    def _instruction(
        self,
        inst: Instruction,
        env: dict[str, Value],
        made: dict[str, tuple[_Dot, bool]],
        params: dict[int, Value],
        param_dots: dict[int, _Made],
        owner: str | None,
    ) -> tuple[Value, _Made]:
        """An instruction's value, and the dot whose result it is: (dot, True) through ops that
        keep its dims, (dot, False) through ops that move them (its partial sums all the same)."""
        ops = [env.get(o) for o in inst.operands]
        op = inst.opcode
        declared = self._declared(inst)
        if declared is not None and op not in _CARRIED_THROUGH:
            return declared, None
        if op == "parameter":
            number = inst.parameter_number or 0
            return params.get(number), param_dots.get(number)
        if op in ("dot", "convolution") or (op == "custom-call" and inst.conv_dims):
            sources = [made.get(o) for o in inst.operands[:2]]
            exact = [m[0] if m and m[1] else None for m in sources]
            value, product = self._dot(inst, ops, exact, owner or inst.name, declared)
            its = (product, True) if product else None
            return ([value] if inst.shape.is_tuple else value), its
        if op in ("while", "conditional", "fusion", "call") and inst.called:
            return self._called(inst, ops, made, owner, declared)
        from_first = made.get(inst.operands[0]) if inst.operands else None
        kept = self._kept(inst, ops, from_first)
        if kept is not None:
            return kept
        return self._reshaped_data(inst, ops), None

    def _kept(
        self, inst: Instruction, ops: list[Value], from_first: tuple[_Dot, bool] | None
    ) -> tuple[Value, _Made] | None:
        """The ops whose result holds their operand's data (re-typed, moved, re-tupled):
        its value and the dot it still is; None for the others."""
        op = inst.opcode
        first = ops[0] if ops else None
        moved = (from_first[0], False) if from_first else None
        if op in ("constant", "iota", "rng", "rng-bit-generator"):
            return tuple(() for _ in inst.shape.dims), None
        if op == "get-tuple-element":
            index = inst.tuple_index or 0
            if isinstance(first, list) and index < len(first):
                return first[index], None
            return None, None
        if op == "tuple":
            return list(ops), None
        if op in ("bitcast", "reshape") and not _same_dims(inst, physical=op == "bitcast"):
            return _reshaped(first, inst, physical=op == "bitcast"), moved
        if op in _KEEPS_SHARDING or op in ("bitcast", "reshape"):
            value = next((v for v in ops if _rank(v) == inst.shape.rank), None)
            if op.startswith("all-reduce"):
                self._partial_sums(inst, from_first[0] if from_first else None)
                return value, None
            return value, from_first if value is first else None
        if op == "transpose" and isinstance(first, tuple) and inst.dimensions is not None:
            if sorted(inst.dimensions) == list(range(len(first))):
                return tuple(first[d] for d in inst.dimensions), moved
            return None, None
        return None

    def _reshaped_data(self, inst: Instruction, ops: list[Value]) -> Value:
        """The ops whose result is their operand's data cut, grown, reduced or exchanged
        between devices; what the program declares of the others."""
        op = inst.opcode
        first = ops[0] if ops else None
        if op == "reduce" and isinstance(first, tuple) and not inst.shape.is_tuple:
            gone = set(inst.dimensions or ())
            kept = tuple(a for d, a in enumerate(first) if d not in gone)
            return kept if len(kept) == inst.shape.rank else None
        if op in _SAME_SIZE_KEEPS and isinstance(first, tuple):
            return _same_size_dims(first, inst)
        if op == "broadcast" and isinstance(first, tuple) and inst.dimensions is not None:
            out: list[DimAxes] = [() for _ in inst.shape.dims]
            for j, d in enumerate(inst.dimensions):
                if j < len(first) and 0 <= d < len(out):
                    out[d] = first[j]
            return tuple(out)
        if op in ("all-gather", "reduce-scatter") and isinstance(first, tuple):
            return self._regathered(inst, first)
        if op == "all-to-all":
            return self._exchanged(inst, ops)
        return self._declared(inst)

    def _called(
        self,
        inst: Instruction,
        ops: list[Value],
        made: dict[str, tuple[_Dot, bool]],
        owner: str | None,
        declared: Value,
    ) -> tuple[Value, _Made]:
        """A loop's, a conditional's, a fusion's or a call's value, its computations carried
        from its operands'."""
        first = ops[0] if ops else None
        if inst.opcode == "while":
            # A partitioned loop keeps one sharding for its operand, the body's parameter and
            # root, and its result: the body's dots are carried from the operand's.
            body = self.module.computation(inst.attrs.get("body", "").lstrip("%"))
            if isinstance(first, list) and body is not None and body.name not in self.seen:
                self._computation(body, {0: first}, {}, owner)
            return (first if isinstance(first, list) else declared), None
        if inst.opcode == "conditional":
            return self._branches(inst, ops, made, owner), None
        called = self.module.computation(inst.called[0])
        if called is None or (called.name in self.seen and inst.opcode == "call"):
            return declared, None
        dots = {k: made.get(o) for k, o in enumerate(inst.operands)}
        value, dot = self._computation(called, dict(enumerate(ops)), dots, owner or inst.name)
        if isinstance(declared, tuple):  # what the program says of the result
            if dot is not None and dot[1]:
                dot[0].declare_result(declared)
            return declared, dot
        return value, dot

    def _branches(
        self,
        inst: Instruction,
        ops: list[Value],
        made: dict[str, tuple[_Dot, bool]],
        owner: str | None,
    ) -> Value:
        """A conditional: branch k runs on operand k + 1 (operand 0 picks it); each branch's
        dots are carried from its operand's. Its value is the branches' where they agree
        (every branch makes the same split of the same result), else unknown."""
        results: list[Value] = []
        for k, name in enumerate(inst.called):
            branch = self.module.computation(name)
            if branch is None or branch.name in self.seen or k + 1 >= len(ops):
                return self._declared(inst)
            dots = {0: made.get(inst.operands[k + 1])}
            results.append(self._computation(branch, {0: ops[k + 1]}, dots, owner)[0])
        agreed = results[0] if results and all(r == results[0] for r in results) else None
        return agreed if agreed is not None else self._declared(inst)

    def _exchanged(self, inst: Instruction, ops: list[Value]) -> Value:
        """An all-to-all over a group's axes: each device cuts its operand into pieces (along
        `dimensions`, or the tuple's operands: slices along one dim), sends one to each device
        of the group and keeps what it receives. The dim those axes split now holds every
        device's block (XLA puts the received pieces side by side along the cut dim), and the
        axes split the data that was cut: XLA cut it from a dim it reshaped into [pieces,
        rest], so `rest`, the dim after the cut one, now holds the device's own block of it.
        Where the cut is not seen so, every unsplit dim is unknown, never guessed."""
        group = self.groups.get(id(inst))
        arrays = [v for v in ops if isinstance(v, tuple)]
        shape = _result_shape(inst)
        unknown = tuple(None for _ in shape.dims)
        axes = _axes_of(self.mesh, group) if group is not None else ()
        if not axes or any(" " in a for a in axes) or len(arrays) != len(ops) or not arrays:
            return [unknown for _ in ops] if inst.shape.is_tuple else unknown
        cut = self._cut_dim(inst)
        values: list[Value | None] = [
            _moved_split(v, shape.dims, axes, inst.dimensions, cut, len(group or ()))
            for v in arrays
        ]
        return values if inst.shape.is_tuple else values[0]

    def _cut_dim(self, inst: Instruction) -> int | None:
        """The dim an all-to-all's pieces are cut along, where the operand shows it was split
        off the front of one dim by a reshape (its rest the next dim): the array form's
        `dimensions`, or the dim the tuple form's pieces slice to 1, made by a reshape (or a
        bitcast in the default layout) inside or before the fusion that slices it."""
        first: Instruction | None = self._producer(inst.operands[0]) if inst.operands else None
        if first is not None and first.opcode == "fusion" and first.called:
            body = self.module.computation(first.called[0])
            first = body.root if body is not None else None
        if first is None:
            return None
        made: Instruction | None = first
        if inst.dimensions:
            cut = inst.dimensions[0]
        else:
            shapes = first.operand_shapes
            if first.opcode != "slice" or not shapes or shapes[0] is None:
                return None
            cuts = [
                d
                for d, (n, m) in enumerate(zip(shapes[0].dims, first.shape.dims, strict=False))
                if n != m
            ]
            if len(cuts) != 1 or first.shape.dims[cuts[0]] != 1:
                return None
            cut, made = cuts[0], self._producer(first.operands[0], within=first)
        return cut if made is not None and _splits_front(made, cut) else None

    def _producer(self, name: str, within: Instruction | None = None) -> Instruction | None:
        """The instruction of that name (in `within`'s computation where given); through a
        fused computation's parameter, the fusion's operand it is."""
        if not self.by_name:
            for computation in self.module.computations:
                for i in computation.instructions:
                    self.by_name[(computation.name, i.name)] = i
                    self.owner_of[id(i)] = computation.name
                    for called in i.called:
                        self.fused_by.setdefault(called, i)
        comp = self.owner_of.get(id(within)) if within is not None else None
        found = (
            self.by_name.get((comp, name))
            if comp is not None
            else next((i for (_, n), i in self.by_name.items() if n == name), None)
        )
        if found is not None and found.opcode == "parameter" and comp in self.fused_by:
            fusion = self.fused_by[comp]
            number = found.parameter_number or 0
            if number < len(fusion.operands):
                return self._producer(fusion.operands[number], within=fusion)
        return found

    def _declared(self, inst: Instruction) -> Value:
        """What the program says of an instruction's result: its tiled sharding's split, or
        every dim unsplit where it is replicated (or on one device); None where it says
        nothing."""
        tiling = self.tiles.get(id(inst))
        if tiling is not None:
            return _value_of(self.mesh, tiling)
        text = inst.attrs.get("sharding", "").strip().strip("{}").strip()
        if (text == "replicated" or text.startswith("maximal")) and not inst.shape.is_tuple:
            return tuple(() for _ in inst.shape.dims)
        return None

    def _regathered(self, inst: Instruction, value: Dims) -> Dims:
        """An all-gather unsplits its dimension over its group's axes; a reduce-scatter splits
        it."""
        group = self.groups.get(id(inst))
        dims = inst.dimensions or ()
        if group is None or len(dims) != 1 or not 0 <= dims[0] < len(value):
            return tuple(None for _ in inst.shape.dims)
        axes = _axes_of(self.mesh, group)
        d = dims[0]
        before = value[d]
        if before is None or any(" " in a for a in axes):  # part of an axis: not followed
            return (*value[:d], None, *value[d + 1 :])
        folded, before = _unfold(before)
        if inst.opcode == "all-gather":
            after: DimAxes = tuple(a for a in before if a not in axes)
        else:
            after = tuple(sorted({*before, *axes}, key=self._order))
        if folded and after:
            after = (_FOLDED, *after)
        return (*value[:d], after, *value[d + 1 :])

    def _order(self, axis: str) -> int:
        return next((k for k, a in enumerate(self.mesh.axes) if a.name == axis), 0)

    def _dot(
        self,
        inst: Instruction,
        ops: list[Value],
        sources: list[_Dot | None],
        owner: str,
        declared: Value = None,
    ) -> tuple[Value, _Dot | None]:
        lhs, rhs = ([*ops, None, None])[:2]
        shapes = inst.operand_shapes
        if len(shapes) < 2 or shapes[0] is None or shapes[1] is None:
            return None, None
        unknown: list[DimAxes] = [None] * max(shapes[0].rank, shapes[1].rank)
        left = list(lhs) if isinstance(lhs, tuple) else unknown[: shapes[0].rank]
        right = list(rhs) if isinstance(rhs, tuple) else unknown[: shapes[1].rank]
        dot = _Dot(inst, owner, left, right, sources)
        dot.sync()
        if isinstance(declared, tuple):
            dot.declare_result(declared)
            dot.sync()
        self.dots.append(dot)
        return (declared if isinstance(declared, tuple) else _result_dims(dot)), dot

    def _unsummed(self, dot: _Dot, reached: _Reach) -> None:
        """A dot's contracting dim split over some axes makes partial sums, which the program
        must sum over those axes (a collective over them) before it uses or returns them. The
        axes a contracting dim can be split over are thus those of the collectives its result
        reaches, less the axes that split the operands' other dims (an axis splits one dim of
        an array); where none is left, it is not split."""
        dims = dot.inst.dot_dims
        if dot.inst.opcode != "dot" or dims is None:
            return
        pairs = [
            (a, b)
            for a, b in zip(dims.lhs_contracting, dims.rhs_contracting, strict=False)
            if 0 <= a < len(dot.lhs) and 0 <= b < len(dot.rhs)
        ]
        if not any(dot.lhs[a] is None for a, _ in pairs):
            return
        axes = reached.collective_axes(dot.inst, self.groups, self.mesh)
        if axes is None:
            return  # it reaches a collective whose devices are not read
        used = {x for side in (dot.lhs, dot.rhs) for dim in side for x in dim or ()}
        if axes - {_whole(x) for x in used}:
            return
        for a, b in pairs:
            if dot.lhs[a] is None:
                dot.lhs[a] = dot.rhs[b] = ()

    def _partial_sums(self, reduce: Instruction, dot: _Dot | None) -> None:
        """An all-reduce of a dot's result: the dot summed partial products, its contracting
        dimension split over the all-reduce's axes. Filled in where unknown, and carried back
        to the dot that made its operand along that dimension."""
        group = self.groups.get(id(reduce))
        if dot is None or group is None or dot.inst.dot_dims is None:
            return
        dims = dot.inst.dot_dims
        if len(dims.lhs_contracting) != 1 or len(dims.rhs_contracting) != 1:
            return
        axes = _axes_of(self.mesh, group)
        for side, d in ((dot.lhs, dims.lhs_contracting[0]), (dot.rhs, dims.rhs_contracting[0])):
            if 0 <= d < len(side) and side[d] is None:
                side[d] = axes
        for producer, contracting in zip(
            dot.sources, (dims.lhs_contracting[0], dims.rhs_contracting[0]), strict=False
        ):
            if producer is not None:
                _set_result_dim(producer, contracting, axes)

    def _view(self, dot: _Dot) -> GlobalView | None:
        shapes = dot.inst.operand_shapes
        if len(shapes) < 2 or shapes[0] is None or shapes[1] is None:
            return None
        lhs, rhs = shapes[0], shapes[1]
        result = _result_dims(dot)
        ways: dict[str, int] = {}
        for axes in (*dot.lhs, *dot.rhs):
            for a in _unfold(axes)[1]:
                ways[a] = self.mesh.size([a])
        if not ways:
            return None  # not split at all (or nothing known): the local view is the global one
        texts = (
            _global(lhs, dot.lhs, self.mesh),
            _global(rhs, dot.rhs, self.mesh),
            _global(_result_shape(dot.inst), list(result), self.mesh),
        )
        known = all(a is not None for a in (*dot.lhs, *dot.rhs))
        ordered = dict(sorted(ways.items(), key=lambda kv: self._order(kv[0])))
        kind = "matmul" if dot.inst.opcode == "dot" else "convolution"
        return GlobalView(kind, texts, ordered, known)


def _set_result_dim(producer: _Dot, result_dim: int, axes: tuple[str, ...]) -> None:
    """A dot's result dim `result_dim` is split over `axes`: set the operand dim that became
    it, where unknown."""
    dims = producer.inst.dot_dims
    if dims is None or producer.inst.operand_shapes[0] is None:
        return
    lhs_rank = len(producer.lhs)
    batch = len(dims.lhs_batch)
    lhs_free = [d for d in range(lhs_rank) if d not in (*dims.lhs_batch, *dims.lhs_contracting)]
    rhs_free = [
        d for d in range(len(producer.rhs)) if d not in (*dims.rhs_batch, *dims.rhs_contracting)
    ]
    k = result_dim - batch
    if 0 <= k < len(lhs_free) and producer.lhs[lhs_free[k]] is None:
        producer.lhs[lhs_free[k]] = axes
    elif 0 <= k - len(lhs_free) < len(rhs_free):
        d = rhs_free[k - len(lhs_free)]
        if producer.rhs[d] is None:
            producer.rhs[d] = axes


def _result_shape(inst: Instruction) -> Shape:
    """The array a dot or convolution makes (a cuDNN call's first tuple element)."""
    shape = inst.shape
    return shape.tuple_shapes[0] if shape.is_tuple and shape.tuple_shapes else shape


def _result_dims(dot: _Dot) -> Dims:
    """A dot's result dims from its operands': batch, then lhs free, then rhs free; a
    convolution's: batch from the input's, feature from the kernel's output feature, spatial
    from the input's."""
    conv = dot.inst.conv_dims
    rank = _result_shape(dot.inst).rank
    if conv is not None:
        out: list[DimAxes] = [None] * rank
        pairs = [
            (conv.output_batch, dot.lhs, conv.input_batch),
            (conv.output_feature, dot.rhs, conv.kernel_output_feature),
            *zip(conv.output_spatial, [dot.lhs] * rank, conv.input_spatial, strict=False),
        ]
        for at, side, src in pairs:
            if 0 <= at < rank and 0 <= src < len(side):
                out[at] = side[src]
        return tuple(out)
    dims = dot.inst.dot_dims
    if dot.inst.opcode != "dot" or dims is None:
        return tuple(None for _ in range(rank))
    lhs_free = [d for d in range(len(dot.lhs)) if d not in (*dims.lhs_batch, *dims.lhs_contracting)]
    rhs_free = [d for d in range(len(dot.rhs)) if d not in (*dims.rhs_batch, *dims.rhs_contracting)]
    out = [dot.lhs[d] for d in dims.lhs_batch]
    out += [dot.lhs[d] for d in lhs_free] + [dot.rhs[d] for d in rhs_free]
    return tuple(out)


def _global(shape: Shape, dims: Sequence[DimAxes], mesh: Mesh) -> str:
    """A local shape scaled to the global one: `?` after a dimension whose split is unknown."""
    parts = []
    for k, size in enumerate(shape.dims):
        axes = dims[k] if k < len(dims) else None
        parts.append(f"{size}*?" if axes is None else str(size * mesh.size(axes)))
    return f"{shape.element_type}[{','.join(parts)}]"


def _same_dims(inst: Instruction, physical: bool = False) -> bool:
    """The operand's dims are the result's (`physical`: in the same memory order too, as a
    bitcast reinterprets memory)."""
    shapes = inst.operand_shapes
    if not shapes or shapes[0] is None or shapes[0].dims != inst.shape.dims:
        return False
    return not physical or _major_first(shapes[0]) == _major_first(inst.shape)


def _major_first(shape: Shape) -> list[int]:
    """A shape's dims in memory order, major first (its layout's minor_to_major reversed)."""
    order = list(shape.layout.minor_to_major) if shape.layout else []
    if sorted(order) != list(range(shape.rank)):
        return list(range(shape.rank))
    return order[::-1]


def _reshaped(value: Value, inst: Instruction, physical: bool) -> Dims | None:
    """A reshape's (or a bitcast's, in memory order) dims from its operand's. Dims map in
    groups of equal size (XLA merged [2,32] into 64, split 128 into [4,32]). Each device holds
    one block of the group: a merge is split as its one split dim when the dims before it are
    1 locally and those after it unsplit (else the block is not one run of the merged dim:
    unknown); a split dim's axes go to its major part when that part is more than 1 locally
    (the block then holds whole rows of the minor parts), else which part is split is unknown."""
    shapes = inst.operand_shapes
    if not isinstance(value, tuple) or not shapes or shapes[0] is None:
        return None
    src, dst = shapes[0], inst.shape
    if len(value) != src.rank or src.is_tuple or dst.is_tuple:
        return None
    src_order = _major_first(src) if physical else list(range(src.rank))
    dst_order = _major_first(dst) if physical else list(range(dst.rank))
    sizes_in = [src.dims[d] for d in src_order]
    axes_in = [value[d] for d in src_order]
    sizes_out = [dst.dims[d] for d in dst_order]
    groups = _reshape_groups(sizes_in, sizes_out)
    if groups is None:
        return None
    out_phys: list[DimAxes] = [None] * dst.rank
    folded: list[tuple[tuple[str, ...], list[int]]] = []
    for ins, outs in groups:
        if [sizes_in[k] for k in ins] == [sizes_out[k] for k in outs]:
            for k, j in zip(ins, outs, strict=True):  # the same dims: kept as they were
                out_phys[j] = axes_in[k]
            continue
        merged = _merged([axes_in[k] for k in ins], [sizes_in[k] for k in ins])
        if merged is None or not outs:
            continue
        if not merged:
            for j in outs:
                out_phys[j] = ()
        elif len(outs) == 1:  # a merge: one dim, the mark kept
            out_phys[outs[0]] = merged
        elif _FOLDED in merged:
            folded.append((_unfold(merged)[1], outs))
        elif sizes_out[outs[0]] > 1:
            out_phys[outs[0]] = merged
            for j in outs[1:]:
                out_phys[j] = ()
    # A folded dim (1 a device, split) comes back as the one dim of size 1 of the result (a
    # dim of size 1 has no place in memory: the bitcast may put it anywhere); with no such dim
    # the block is whole rows of the major part; with several, which one is unknown.
    ones = [j for j in range(dst.rank) if sizes_out[j] == 1]
    for axes, outs in folded:
        if len(folded) == 1 and len(ones) == 1:
            out_phys[ones[0]] = axes
            for j in outs:
                if j != ones[0]:
                    out_phys[j] = ()
        elif not ones and sizes_out[outs[0]] > 1:
            out_phys[outs[0]] = axes
            for j in outs[1:]:
                out_phys[j] = ()
        else:
            for j in {*outs, *ones}:
                out_phys[j] = None
    out: list[DimAxes] = [None] * dst.rank
    for k, d in enumerate(dst_order):
        out[d] = out_phys[k]
    return tuple(out)


def _merged(axes: Sequence[DimAxes], sizes: Sequence[int]) -> DimAxes:
    """The split of dims merged into one (major first); None when unknown or when each
    device's block is not one run of it."""
    if any(a is None for a in axes):
        return None
    split = [k for k, a in enumerate(axes) if a]
    if not split:
        return ()
    first = split[0]
    if len(split) > 1 or any(sizes[k] != 1 for k in range(first)):
        return None
    folded, plain = _unfold(axes[first])
    if folded or (sizes[first] == 1 and any(n != 1 for n in sizes[first + 1 :])):
        return (_FOLDED, *plain)  # a dim 1 a device (a batch of 1) folded into the next ones
    return plain


def _unfold(axes: DimAxes) -> tuple[bool, tuple[str, ...]]:
    """Whether a dim's split is a folded dim's (see _FOLDED), and its axes without the mark."""
    if axes is None:
        return False, ()
    return _FOLDED in axes, tuple(a for a in axes if a != _FOLDED)


def _reshape_groups(a: Sequence[int], b: Sequence[int]) -> list[tuple[list[int], list[int]]] | None:
    """Consecutive dims of two shapes of one size, grouped where their running products meet
    (size-1 dims join the group after them, trailing ones the last); None if they never do."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        ins, outs, pa, pb = [i], [j], a[i], b[j]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb and i < len(a):
                ins.append(i)
                pa, i = pa * a[i], i + 1
            elif pb < pa and j < len(b):
                outs.append(j)
                pb, j = pb * b[j], j + 1
            else:
                return None
        groups.append((ins, outs))
    rest_a, rest_b = list(range(i, len(a))), list(range(j, len(b)))
    if any(a[k] != 1 for k in rest_a) or any(b[k] != 1 for k in rest_b):
        return None
    if rest_a or rest_b:
        if not groups:
            return [(rest_a, rest_b)]
        groups[-1][0].extend(rest_a)
        groups[-1][1].extend(rest_b)
    return groups


def _same_size_dims(value: Dims, inst: Instruction) -> Dims | None:
    """A slice's, pad's or concatenation's dims (as its first operand's)."""
    shapes = inst.operand_shapes
    if not shapes or shapes[0] is None or shapes[0].rank != len(value) != inst.shape.rank:
        return None
    src = shapes[0].dims
    if len(src) != inst.shape.rank:
        return None
    # A dim of unchanged size keeps its split; an unsplit dim stays unsplit whatever is cut
    # from it (every device cuts the same); a split dim cut or grown is unknown.
    return tuple(
        a if n == m or a == () else None
        for a, n, m in zip(value, src, inst.shape.dims, strict=True)
    )


def _moved_split(
    value: Dims,
    sizes: Sequence[int],
    axes: tuple[str, ...],
    dimensions: Sequence[int] | None,
    cut: int | None,
    devices: int,
) -> Dims:
    """An all-to-all's result dims (see _Propagation._exchanged): `axes` leave the dim they
    split and split `cut + 1`, the rest of the dim the pieces were cut from; the array form's
    cut dim holds a piece from each device (whole when 1 a device: its blocks side by side)."""
    unknown = tuple(None for _ in sizes)
    holding = [d for d, a in enumerate(value) if a and set(axes) <= set(_unfold(a)[1])]
    if len(value) != len(sizes) or len(holding) != 1 or _FOLDED in (value[holding[0]] or ()):
        return unknown
    out: list[DimAxes] = list(value)
    held = holding[0]
    out[held] = tuple(a for a in value[held] or () if a not in axes)
    if dimensions:
        c = dimensions[0]
        if not 0 <= c < len(out):
            return unknown
        out[c] = () if value[c] == () and sizes[c] == devices else None
    rest = cut + 1 if cut is not None else None
    if rest is not None and rest < len(out) and rest != held and value[rest] == ():
        out[rest] = axes
    else:  # which dim holds the device's block is not seen: any unsplit one could
        for d, a in enumerate(value):
            if a == () and d != held and sizes[d] > 1 and not (dimensions and d == dimensions[0]):
                out[d] = None
    return tuple(out)


def _splits_front(made: Instruction, cut: int) -> bool:
    """Whether `made` (a reshape, or a bitcast in the default layout) split one of its
    operand's dims into dims `cut` and `cut + 1`, and others."""
    shapes = made.operand_shapes
    if made.opcode not in ("reshape", "bitcast") or not shapes or shapes[0] is None:
        return False
    src, dst = shapes[0], made.shape
    if made.opcode == "bitcast" and (
        _major_first(src) != list(range(src.rank)) or _major_first(dst) != list(range(dst.rank))
    ):
        return False
    groups = _reshape_groups(src.dims, dst.dims) or []
    return any(
        len(ins) == 1 and cut in outs and cut + 1 in outs and src.dims[ins[0]] > 1
        for ins, outs in groups
    )


def _free_dims(dot: _Dot) -> tuple[list[int], list[int]]:
    dims = dot.inst.dot_dims
    if dims is None:
        return [], []
    lhs = [d for d in range(len(dot.lhs)) if d not in (*dims.lhs_batch, *dims.lhs_contracting)]
    rhs = [d for d in range(len(dot.rhs)) if d not in (*dims.rhs_batch, *dims.rhs_contracting)]
    return lhs, rhs


def _whole(axis: str) -> str:
    """`axis_0 (2 of 4)` -> `axis_0`."""
    return axis.split(" (", 1)[0]


class _Reach:
    """Where a value flows in a module: the collectives it reaches through any op (into the
    computations an op calls, out of a computation's root to its callers' users and back to
    its parameters, a loop's next trip)."""

    LIMIT = 50_000  # instructions visited for one value: past it, nothing is concluded

    def __init__(self, module: Module) -> None:
        self.users: dict[tuple[str, str], list[tuple[Computation, Instruction]]] = {}
        self.callers: dict[str, list[tuple[Computation, Instruction]]] = {}
        self.comps = {c.name: c for c in module.computations}
        self.owner: dict[int, Computation] = {}
        for comp in module.computations:
            for inst in comp.instructions:
                self.owner[id(inst)] = comp
                for o in inst.operands:
                    self.users.setdefault((comp.name, o), []).append((comp, inst))
                for called in inst.called:
                    self.callers.setdefault(called, []).append((comp, inst))

    def collective_axes(
        self, start: Instruction, groups: dict[int, tuple[int, ...]], mesh: Mesh
    ) -> set[str] | None:
        """The mesh axes of every collective `start`'s value reaches (whole axes); None when
        one of them has no device groups read, or past the limit."""
        comp = self.owner.get(id(start))
        if comp is None:
            return None
        axes: set[str] = set()
        seen: set[tuple[str, str]] = set()
        todo: list[tuple[Computation, Instruction]] = [(comp, start)]
        entered: set[str] = set()
        while todo:
            comp, inst = todo.pop()
            if (comp.name, inst.name) in seen:
                continue
            seen.add((comp.name, inst.name))
            if len(seen) > self.LIMIT:
                return None
            if inst is not start and collective_kind(inst.opcode) is not None:
                group = groups.get(id(inst))
                if group is None:
                    if not inst.opcode.endswith("-done"):
                        return None
                else:
                    axes |= {_whole(a) for a in _axes_of(mesh, group)}
            for called in inst.called if inst is not start else ():
                if called not in entered and called in self.comps:
                    entered.add(called)
                    inner = self.comps[called]
                    todo += [(inner, i) for i in inner.instructions]
            todo += self.users.get((comp.name, inst.name), [])
            if inst.is_root or inst is comp.root:
                todo += self.callers.get(comp.name, [])
                todo += [(comp, i) for i in comp.instructions if i.opcode == "parameter"]
        return axes


def _rank(value: Value) -> int:
    return len(value) if isinstance(value, tuple) else -1
