"""A module's memory from its buffer assignment (`BufferAssignmentProto`, carried beside the
module in the trace's `Hlo Proto` stat).

XLA sizes a program's memory in allocations: entry parameters (arguments), live-out ones
(outputs), parameters that are also live out (aliased: donated inputs written in place),
constants, thread-local ones, and the rest (temporaries). Their sums are what
`compiled.memory_analysis()` reports (`argument_size_in_bytes`, `output_size_in_bytes`,
`alias_size_in_bytes`, `temp_size_in_bytes`); the static peak is arguments + outputs +
temporaries - aliased. Which buffers hold the peak comes from the heap simulator's trace of the
temporary allocations: logical buffers allocated, freed and shared in program order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from google.protobuf.message import DecodeError
from msgspec import Struct
from msgspec.structs import replace

from hlogap.errors import InputError
from hlogap.hlo.index import HloIndex
from hlogap.hlo.ir import Module, Shape
from hlogap.hlo.printer import print_shape
from hlogap.memory.runtime import AllocatorPeak
from hlogap.proto import hlo_pb2
from hlogap.units import printable

# XLA's memory space ("color") of host memory: `S(5)` in TPU layouts.
HOST_MEMORY_SPACE = 5
# Heap simulator event kinds (xla/service/hlo.proto, HeapSimulatorTrace.Event.Kind).
ALLOC, FREE, SHARE_WITH = 0, 1, 2
# No device or host memory holds this much (1 PiB): a buffer, or a sum of them, outside 0 to
# this is a corrupt buffer assignment, refused before any figure is shown; every figure then fits
# the 64-bit integers JSON carries.
MAX_BYTES = 1 << 50
# `HeldBuffer.kind` of the bytes of the temporary allocations that no buffer live at the peak
# holds.
GAPS = "gaps"
# What `MemorySection.batch_scale` assumes, said wherever it is shown.
BATCH_ASSUMPTION = (
    "temporaries and outputs (less those written over donated inputs) grow in proportion to "
    "the batch; arguments (weights, optimizer state; the input batch is taken as small beside "
    "them) do not"
)


class HeldBuffer(Struct, frozen=True):
    """A buffer live at the module's peak."""

    instruction: str  # the HLO instruction that defines it ("" where the module lacks it)
    shape: str  # its HLO shape
    # parameter, aliased (a parameter donated to an output), output, temporary, or GAPS: the
    # temporary allocations' bytes no live buffer holds at the peak
    kind: str
    bytes: int
    op_name: str = ""
    source: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "instruction": self.instruction,
            "shape": self.shape,
            "kind": self.kind,
            "bytes": self.bytes,
            "op_name": self.op_name,
            "source": self.source,
        }


class ModuleMemory(Struct, frozen=True):
    """One module's static memory on one device (bytes)."""

    module: str
    program_id: str
    peak_bytes: int  # arguments + outputs + temporaries - aliased
    arguments_bytes: int
    outputs_bytes: int
    temporaries_bytes: int
    aliased_bytes: int
    constants_bytes: int
    at_peak: tuple[HeldBuffer, ...]  # largest first
    # Live temporary bytes after each heap event, in program order (the HTML curve).
    live_curve: tuple[int, ...] = ()
    # (memory space, bytes) of allocations outside device memory (XLA's `color`; TPU S(5) is
    # host memory): not in the sums above.
    other_spaces: tuple[tuple[int, int], ...] = ()

    @property
    def host_bytes(self) -> int:
        return sum(size for space, size in self.other_spaces if space == HOST_MEMORY_SPACE)

    def to_dict(self, buffers: int = 0) -> dict[str, object]:
        held = self.at_peak if buffers <= 0 else self.at_peak[:buffers]
        return {
            "module": self.module,
            "program_id": self.program_id,
            "peak_bytes": self.peak_bytes,
            "arguments_bytes": self.arguments_bytes,
            "outputs_bytes": self.outputs_bytes,
            "temporaries_bytes": self.temporaries_bytes,
            "aliased_bytes": self.aliased_bytes,
            "constants_bytes": self.constants_bytes,
            "other_memory_spaces": {str(space): size for space, size in self.other_spaces},
            "at_peak": [b.to_dict() for b in held],
            "live_curve": list(self.live_curve),
        }


class _Defined(NamedTuple):
    """The instruction that defines a logical buffer (its name, shape and source), as the
    memory breakdown names it."""

    name: str
    shape: Shape | None
    op_name: str
    source: str


def module_memory(
    name: str, program_id: str, hlo_proto: bytes, module: Module | None
) -> ModuleMemory | None:
    """The module's memory from its serialized `HloProto`; None when it has no buffer
    assignment (an HLO dump, a trace that did not keep it). `module` (the decoded IR) names
    the buffers' instructions, shapes and source lines."""
    try:
        assignment = hlo_pb2.HloProtoBufferAssignment.FromString(hlo_proto).buffer_assignment
        ids = _instruction_ids(hlo_proto)
    except DecodeError:
        return None
    if not assignment.buffer_allocations:
        return None
    try:
        return _module_memory(name, program_id, assignment, _definitions(ids, module))
    except _CorruptAssignment as exc:
        raise InputError(
            f"corrupt profile: the buffer assignment of module {printable(name)} "
            f"(program {printable(program_id)}) {exc}"
        ) from None


class _CorruptAssignment(ValueError):
    """A buffer assignment no program has: what is wrong, as the end of a sentence."""


def _byte_count(value: int, what: str) -> int:
    if not 0 <= value <= MAX_BYTES:
        raise _CorruptAssignment(f"gives {what} {value:,} bytes (a size is 0 to 2^50)")
    return value


def _module_memory(
    name: str,
    program_id: str,
    assignment: hlo_pb2.BufferAssignmentProto,
    defined: dict[int, _Defined],
) -> ModuleMemory:
    for a in assignment.buffer_allocations:
        _byte_count(a.size, f"allocation {a.index} a size of")
    for b in assignment.logical_buffers:
        _byte_count(b.size, f"logical buffer {b.id} a size of")
    sizes = {b.id: b.size for b in assignment.logical_buffers}
    where = {
        b.id: (b.defined_at.instruction_id, tuple(b.defined_at.shape_index))
        for b in assignment.logical_buffers
    }
    arguments = outputs = aliased = temporaries = constants = 0
    held: list[HeldBuffer] = []
    temporary_buffers: set[int] = set()
    other: dict[int, int] = {}
    for a in assignment.buffer_allocations:
        if a.color != 0:
            # Another memory space (TPU: 1 VMEM, 2 SMEM, 5 host memory): not the device's HBM.
            other[a.color] = other.get(a.color, 0) + a.size
            continue
        kind = _kind(a)
        if a.is_entry_computation_parameter:
            arguments += a.size
        if a.maybe_live_out:
            outputs += a.size
        if kind == "aliased":
            aliased += a.size
        if kind == "constant":
            constants += a.size
        if kind == "temporary":
            temporaries += a.size
            temporary_buffers.update(x.logical_buffer_id for x in a.assigned)
            continue
        # Constants are outside the peak as memory_analysis() counts it (constants_bytes).
        if kind in ("thread-local", "constant") or not a.size:
            continue
        # A whole allocation is live for the whole program: named by its largest buffer.
        largest = max(a.assigned, key=lambda x: x.size, default=None)
        at = where.get(largest.logical_buffer_id) if largest else None
        held.append(_held(defined, at, kind, a.size))
    peak_live, curve = _heap_peak(assignment, temporary_buffers, sizes)
    live = [_held(defined, where.get(b), "temporary", sizes.get(b, 0)) for b in peak_live]
    # The temporary allocations hold more than the buffers live at the heaps' peaks: alignment
    # between buffers, space freed but not reused, scalars and tuple tables the heap simulation
    # leaves out. Listed as one entry, so that the list adds up to the peak exactly.
    gaps = temporaries - sum(b.bytes for b in live)
    if gaps < 0:  # the heaps' peaks past their allocations: only the allocations are certain
        live, gaps = [], temporaries
    held += live
    if gaps:
        held.append(HeldBuffer("", "", GAPS, gaps))
    held.sort(key=lambda b: (-b.bytes, b.instruction))
    totals = {
        "arguments": arguments,
        "outputs": outputs,
        "temporaries": temporaries,
        "constants": constants,
        "live temporaries": max(curve, default=0),
        **{f"memory space {space}": size for space, size in other.items()},
    }
    for what, total in totals.items():
        _byte_count(total, f"{what} adding up to")
    return ModuleMemory(
        module=name,
        program_id=program_id,
        peak_bytes=arguments + outputs + temporaries - aliased,
        arguments_bytes=arguments,
        outputs_bytes=outputs,
        temporaries_bytes=temporaries,
        aliased_bytes=aliased,
        constants_bytes=constants,
        at_peak=tuple(held),
        live_curve=tuple(curve),
        other_spaces=tuple(sorted(other.items())),
    )


def _kind(a: hlo_pb2.BufferAllocationProto) -> str:
    if a.is_entry_computation_parameter:
        return "aliased" if a.maybe_live_out else "parameter"
    if a.maybe_live_out:
        return "output"
    if a.is_constant:
        return "constant"
    if a.is_thread_local:
        return "thread-local"
    return "temporary"


def _held(
    defined: dict[int, _Defined], at: tuple[int, tuple[int, ...]] | None, kind: str, size: int
) -> HeldBuffer:
    """A held buffer, named by the instruction that defines it and the shape at its index
    (a tuple's element: `copy-start`'s destination buffer, not the whole tuple)."""
    found = defined.get(at[0]) if at is not None else None
    if found is None or at is None:
        return HeldBuffer("", "", kind, size)
    shape = found.shape
    for i in at[1]:
        if shape is None or not shape.is_tuple or i >= len(shape.tuple_shapes):
            break
        shape = shape.tuple_shapes[i]
    text = print_shape(shape) if shape is not None else ""
    return HeldBuffer(found.name, text, kind, size, found.op_name, found.source)


def _instruction_ids(hlo_proto: bytes) -> dict[int, str]:
    """Instruction id -> name (buffers name their defining instruction by id)."""
    proto = hlo_pb2.HloProto.FromString(hlo_proto)
    return {
        inst.id: inst.name for comp in proto.hlo_module.computations for inst in comp.instructions
    }


def _definitions(ids: dict[int, str], module: Module | None) -> dict[int, _Defined]:
    instructions = module.instructions() if module is not None else {}
    found: dict[int, _Defined] = {}
    for ident, name in ids.items():
        inst = instructions.get(name)
        found[ident] = _Defined(
            name,
            inst.shape if inst else None,
            (inst.op_name or "") if inst else "",
            (inst.source or "") if inst else "",
        )
    return found


def _heap_peak(
    assignment: hlo_pb2.BufferAssignmentProto, temporaries: set[int], sizes: dict[int, int]
) -> tuple[list[int], list[int]]:
    """The logical buffers live at the peak of each heap simulator trace of temporaries (heaps
    coexist, so each has its own peak), and the live bytes after each event of the longest.
    A trace is told by its buffers, not its `buffer_allocation_index` (XLA:CPU's names another
    allocation than the one its buffers are assigned to)."""
    held: list[int] = []
    curve: list[int] = []
    for trace in assignment.heap_simulator_traces:
        if not any(e.buffer_id in temporaries for e in trace.events):
            continue
        at_peak, live_curve = _simulate(trace, sizes)
        held += at_peak
        if len(live_curve) > len(curve):
            curve = live_curve
    return held, curve


def _simulate(
    trace: hlo_pb2.HeapSimulatorTrace, sizes: dict[int, int]
) -> tuple[list[int], list[int]]:
    """One heap: the buffers live at its peak and the live bytes after each event.

    A buffer shared with a canonical one (SHARE_WITH) takes no memory of its own while the
    canonical region is live, and keeps the region live until every sharer is freed; XLA may
    record the canonical's free before the share, so a share of a freed region makes it live
    again."""
    region_of: dict[int, int] = {}  # buffer -> its region (the canonical buffer)
    users: dict[int, set[int]] = {}  # region -> buffers live in it
    live, peak = 0, -1
    at_peak: list[int] = []
    curve: list[int] = []
    for event in trace.events:
        buffer = event.buffer_id
        if event.kind in (ALLOC, SHARE_WITH):
            region = event.share_with_canonical_id if event.kind == SHARE_WITH else buffer
            region = region_of.get(region, region)
            region_of[buffer] = region
            if not users.get(region):
                live += sizes.get(region, 0)
            users.setdefault(region, set()).add(buffer)
        elif event.kind == FREE:
            # A trace replayed backwards, or cut short: its live bytes would go below 0.
            if buffer not in region_of:
                raise _CorruptAssignment(
                    f"frees logical buffer {buffer} in its heap trace while it is not allocated"
                )
            region = region_of.pop(buffer)
            holders = users.get(region, set())
            holders.discard(buffer)
            if not holders:
                live -= sizes.get(region, 0)
                users.pop(region, None)
        curve.append(live)
        if live > peak:
            peak, at_peak = live, list(users)
    return at_peak, curve


class MemorySection(Struct, frozen=True):
    """The report's `memory`: each module's static memory, and the headroom on the device."""

    modules: tuple[ModuleMemory, ...]
    capacity_bytes: float | None  # the device's memory (the chip's `hbm_bytes`), when known
    # What each device's allocator held while the profile ran; None: no allocator events.
    allocators: tuple[AllocatorPeak, ...] | None = None
    capacity_source: str = "chip"  # or the allocator whose capacity (in use + free) it is

    @property
    def runtime_peak(self) -> AllocatorPeak | None:
        """The device allocator that held the most while the profile ran."""
        found = [a for a in self.allocators or () if a.device is not None]
        return max(found, key=lambda a: a.in_use_peak_bytes, default=None)

    @property
    def peak(self) -> ModuleMemory | None:
        """The module that needs the most memory."""
        return max(self.modules, key=lambda m: m.peak_bytes, default=None)

    @property
    def headroom_bytes(self) -> float | None:
        """Capacity left at the most a device held: the larger of the largest module's static
        peak (modules run one at a time) and an allocator's in-use peak (which also counts
        arrays kept between programs)."""
        held = [m.peak_bytes for m in (self.peak,) if m is not None]
        held += [a.in_use_peak_bytes for a in (self.runtime_peak,) if a is not None]
        if not held or not self.capacity_bytes:
            return None
        return self.capacity_bytes - max(held)

    @property
    def batch_scale(self) -> float | None:
        """How many times its batch the module that needs the most memory could take before
        the headroom runs out, if its temporaries and its outputs not written over donated
        inputs grow in proportion to the batch and its arguments do not (`BATCH_ASSUMPTION`;
        a train step's new weights then count as growing: the figure errs low). None without
        a headroom or anything that grows."""
        peak, headroom = self.peak, self.headroom_bytes
        growing = 0 if peak is None else peak.temporaries_bytes + peak.outputs_bytes
        growing -= 0 if peak is None else peak.aliased_bytes
        if peak is None or headroom is None or growing <= 0:
            return None
        return max(1.0, 1.0 + headroom / growing)

    def to_dict(self, buffers: int = 0) -> dict[str, object]:
        peak, scale = self.peak, self.batch_scale
        return {
            "batch_headroom": None
            if peak is None or scale is None
            else {"module": peak.module, "scale": scale, "assumes": BATCH_ASSUMPTION},
            "modules": [m.to_dict(buffers) for m in self.modules],
            "allocators": None
            if self.allocators is None
            else [a.to_dict() for a in self.allocators],
            "capacity_bytes": self.capacity_bytes,
            "capacity_source": self.capacity_source,
            "headroom_bytes": self.headroom_bytes,
        }

    @classmethod
    def from_dict(cls, raw: object) -> MemorySection | None:
        """A saved report's section (None when absent); ValueError when malformed."""
        if raw is None:
            return None
        if not isinstance(raw, dict) or not isinstance(raw.get("modules"), list):
            raise ValueError("'memory' is not an object with a 'modules' list")
        capacity = raw.get("capacity_bytes")
        allocators = raw.get("allocators")
        if allocators is not None and not isinstance(allocators, list):
            raise ValueError("'memory.allocators' is not a list")
        return cls(
            modules=tuple(
                _module_from_dict(m, f"memory.modules[{i}]") for i, m in enumerate(raw["modules"])
            ),
            capacity_bytes=float(capacity) if isinstance(capacity, (int, float)) else None,
            capacity_source=str(raw.get("capacity_source", "chip")),
            allocators=None
            if allocators is None
            else tuple(
                AllocatorPeak.from_dict(a, f"memory.allocators[{i}]")
                for i, a in enumerate(allocators)
            ),
        )


def _module_from_dict(raw: object, where: str) -> ModuleMemory:
    if not isinstance(raw, dict):
        raise ValueError(f"{where} is not an object")

    def count(key: str) -> int:
        value = raw.get(key)
        # 0 to 2^50 as a profile's are (not NaN, inf or past int64, which JSON cannot carry).
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not 0 <= value <= MAX_BYTES
        ):
            raise ValueError(f"{where}.{key} is {value!r}, not a byte count")
        return int(value)

    held = raw.get("at_peak", [])
    spaces = raw.get("other_memory_spaces", {})
    if not isinstance(held, list) or not isinstance(spaces, dict):
        raise ValueError(f"{where}.at_peak or other_memory_spaces is malformed")
    curve = raw.get("live_curve", [])  # absent in reports older than the HTML curve
    if not isinstance(curve, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_BYTES for v in curve
    ):
        raise ValueError(f"{where}.live_curve is not a list of byte counts")
    return ModuleMemory(
        module=str(raw.get("module", "")),
        program_id=str(raw.get("program_id", "")),
        peak_bytes=count("peak_bytes"),
        arguments_bytes=count("arguments_bytes"),
        outputs_bytes=count("outputs_bytes"),
        temporaries_bytes=count("temporaries_bytes"),
        aliased_bytes=count("aliased_bytes"),
        constants_bytes=count("constants_bytes"),
        at_peak=tuple(
            HeldBuffer(
                str(b.get("instruction", "")),
                str(b.get("shape", "")),
                str(b.get("kind", "")),
                int(b.get("bytes", 0)),
                str(b.get("op_name", "")),
                str(b.get("source", "")),
            )
            for b in held
            if isinstance(b, dict)
        ),
        live_curve=tuple(curve),
        other_spaces=tuple(
            (int(k), int(v)) for k, v in spaces.items() if str(k).isdigit() and isinstance(v, int)
        ),
    )


# A static peak above this share of the device's memory is worth a warning.
OOM_RISK_FRACTION = 0.9


def memory_section(
    modules: dict[tuple[str, str], bytes],
    ran: set[tuple[str, str]],
    capacity: float | None,
    index: HloIndex,
    allocators: Sequence[AllocatorPeak],
) -> tuple[MemorySection | None, list[str]]:
    """The memory of the modules that ran (`ran`: (name, program id)), from their serialized
    `HloProto`s (`index` holds them decoded, for the buffers' names and sources), beside what
    the allocators held at run time, and warnings for what is missing or at risk."""
    found: list[ModuleMemory] = []
    for (name, program_id), data in sorted(modules.items()):
        if (name, program_id) not in ran:
            continue
        memory = module_memory(name, program_id, data, index.module(name, program_id))
        if memory is not None:
            found.append(memory)
    warnings: list[str] = []
    if not found:
        warnings.append(
            "memory: no module that ran carries a buffer assignment in this profile "
            "(static memory unavailable)"
        )
    if not allocators:
        warnings.append("memory: no allocator events in this profile (runtime memory unavailable)")
    if not found and not allocators:
        return None, warnings
    section = MemorySection(tuple(found), capacity, tuple(allocators) if allocators else None)
    held = section.runtime_peak
    if held is not None and held.capacity_bytes:
        # What the runtime may use (a GPU's allocator takes a fraction of the HBM by default):
        # the headroom is against it, not the chip's total.
        section = replace(
            section, capacity_bytes=float(held.capacity_bytes), capacity_source=held.name
        )
    peak = section.peak
    if peak is not None and capacity and peak.peak_bytes > OOM_RISK_FRACTION * capacity:
        warnings.append(
            f"memory: {peak.module} needs {peak.peak_bytes / capacity:.0%} of the device's "
            f"{capacity / 1e9:.1f} GB at its static peak: close to running out"
        )
    if held is not None and held.in_use_peak_bytes > OOM_RISK_FRACTION * held.capacity_bytes:
        warnings.append(
            f"memory: allocator {held.name} held {held.in_use_peak_bytes / held.capacity_bytes:.0%}"
            f" of its {held.capacity_bytes / 1e9:.1f} GB at run time: close to running out"
        )
    return section, warnings


class ModuleMemoryChange(Struct, frozen=True):
    """One module's static memory in two runs (`diff`), and the buffers that tell why."""

    module: str
    base_peak_bytes: int
    new_peak_bytes: int
    base_aliased_bytes: int
    new_aliased_bytes: int
    appeared: tuple[HeldBuffer, ...]  # held at NEW's peak, not at BASE's (largest first)
    base_program_id: str = ""
    new_program_id: str = ""

    @property
    def delta_bytes(self) -> int:
        return self.new_peak_bytes - self.base_peak_bytes

    @property
    def changed(self) -> bool:
        """The static peak or the donated bytes differ (what a diff's text reports)."""
        return self.delta_bytes != 0 or self.new_aliased_bytes != self.base_aliased_bytes

    def to_dict(self) -> dict[str, object]:
        return {
            "module": self.module,
            "base_program_id": self.base_program_id,
            "new_program_id": self.new_program_id,
            "base_peak_bytes": self.base_peak_bytes,
            "new_peak_bytes": self.new_peak_bytes,
            "delta_bytes": self.delta_bytes,
            "base_aliased_bytes": self.base_aliased_bytes,
            "new_aliased_bytes": self.new_aliased_bytes,
            "appeared": [b.to_dict() for b in self.appeared],
        }


# A buffer held at the peak is named in a diff when it is at least this share of NEW's peak.
APPEARED_MIN_SHARE = 0.01


def memory_changes(
    base: MemorySection | None, new: MemorySection | None
) -> list[ModuleMemoryChange]:
    """The modules both runs have (`pair_modules`): their peaks and donated bytes, and the
    buffers held at NEW's peak that BASE did not hold (matched by what they are, op path or
    instruction, shape and kind, so a renamed instruction of the same op is the same buffer)."""
    if base is None or new is None:
        return []

    def key(b: HeldBuffer) -> tuple[str, str, str]:
        return (b.op_name or b.instruction, b.shape, b.kind)

    changes: list[ModuleMemoryChange] = []
    for old, m in pair_modules(base.modules, new.modules):
        held_before = {key(b) for b in old.at_peak}
        appeared = tuple(
            b
            for b in m.at_peak
            if key(b) not in held_before
            and b.kind != GAPS  # no buffer
            and b.bytes >= APPEARED_MIN_SHARE * max(m.peak_bytes, 1)
        )
        changes.append(
            ModuleMemoryChange(
                m.module,
                old.peak_bytes,
                m.peak_bytes,
                old.aliased_bytes,
                m.aliased_bytes,
                appeared,
                old.program_id,
                m.program_id,
            )
        )
    return changes


def pair_modules(
    base: Sequence[ModuleMemory], new: Sequence[ModuleMemory]
) -> list[tuple[ModuleMemory, ModuleMemory]]:
    """BASE's and NEW's modules paired, in NEW's order: by (name, program id) where both runs
    have it (a module compiled twice in one run, `jit_add` 34 and 37, is two modules), then by
    name among the rest: those of the same sizes first (the same program, recompiled under
    another id), the others in program-id (compile) order."""
    left = sorted(base, key=_compile_order)
    found: dict[int, ModuleMemory] = {}
    later = sorted(range(len(new)), key=lambda k: _compile_order(new[k]))
    passes: list[tuple[Iterable[int], Callable[[ModuleMemory, ModuleMemory], bool]]] = [
        (range(len(new)), lambda o, m: (o.module, o.program_id) == (m.module, m.program_id)),
        (later, lambda o, m: o.module == m.module and _sizes(o) == _sizes(m)),
        (later, lambda o, m: o.module == m.module),
    ]
    for order, same in passes:
        for k in order:
            old = None if k in found else next((o for o in left if same(o, new[k])), None)
            if old is not None:
                found[k] = old
                left = [o for o in left if o is not old]
    return [(found[k], m) for k, m in enumerate(new) if k in found]


def _sizes(m: ModuleMemory) -> tuple[int, ...]:
    return (m.peak_bytes, m.arguments_bytes, m.outputs_bytes, m.temporaries_bytes, m.aliased_bytes)


def _compile_order(m: ModuleMemory) -> tuple[bool, int, str]:
    """Program ids count compiles (XLA numbers them in order); others after, by name."""
    numbered = m.program_id.isdigit()
    return (not numbered, int(m.program_id) if numbered else 0, m.program_id)
