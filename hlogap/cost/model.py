"""Costs of ops, computations and modules."""

from __future__ import annotations

import math
from collections.abc import Sequence

from msgspec import Struct, field

from hlogap.cost.base import (
    ModuleIndex,
    OpCost,
    Traffic,
    Work,
    bare,
    called,
    config,
    first_leaf,
    index_of,
    logical,
    operand_shapes,
)
from hlogap.cost.collectives import Comm, collective_comm, named_collective_fusion
from hlogap.cost.custom_calls import custom_call
from hlogap.cost.flops import work
from hlogap.cost.shapes import check_shapes
from hlogap.cost.traffic import is_bitcast, op_traffic
from hlogap.hlo.ir import Computation, Instruction, Module
from hlogap.hlo.opcodes import ASYNC_DONE, CONTROL_FLOW, FREE, collective_kind, is_command_buffer

# Why a computation that recursion cannot walk has no cost.
TOO_DEEP = "its computations nest too deeply or call themselves"


def cost_instruction(
    inst: Instruction,
    module: Module | None = None,
    *,
    num_devices: int | None = None,
) -> OpCost:
    """Counts for one execution of `inst` as a timed op, on one device.

    `module` resolves operand shapes and called computations (fused bodies, reducers); without
    it a fusion's FLOPs are unknown. `num_devices` sizes collectives whose replica_groups are
    empty (else the module header's replica_count x num_partitions). Control flow (while,
    conditional, call) costs nothing itself: its bodies' ops are timed as events of their own
    on CPU, GPU and TPU alike; `cost_computation` adds bodies up.
    """
    try:
        check_shapes(inst, index_of(module))
        cost = _cost_instruction(inst, module, num_devices)
    except (ArithmeticError, IndexError, KeyError, ValueError, RecursionError) as exc:
        # HLO that parses but cannot be: a zero stride or tile, a dim out of range, a fusion
        # that calls itself. Such an op is unmodeled with the reason, never a crash.
        return OpCost(unmodeled=f"{inst.opcode} '{inst.name}' cannot be costed: {_why(exc)}")
    numbers = (cost.flops, cost.hbm_bytes, cost.comm_bytes, cost.host_bytes, cost.transcendentals)
    if not all(math.isfinite(n) and n >= 0 for n in numbers):
        return OpCost(unmodeled=f"{inst.opcode} '{inst.name}' has impossible shapes")
    return cost


def _why(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return TOO_DEEP
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _cost_instruction(inst: Instruction, module: Module | None, num_devices: int | None) -> OpCost:
    ix = index_of(module)
    op = inst.opcode
    if op in FREE:
        return OpCost()
    if is_command_buffer(inst) and module is not None:
        # One CUDA graph: the trace times all its ops as this call, so it costs what they do.
        bodies = called(inst, ix)
        if not bodies:
            return OpCost(unmodeled=f"the command buffer '{inst.name}' calls is not available")
        inside = [i.name for i in bodies[0].instructions if i.opcode not in FREE]
        total = cost_computation(bodies[0], module, num_devices=num_devices)
        return total._replace(note=f"command buffer of {len(inside)} ops: {', '.join(inside)}")
    if op in CONTROL_FLOW:
        return OpCost(note=f"{op}: its bodies' ops are timed as ops of their own")
    if op in ASYNC_DONE:
        return OpCost(note=f"{op}: counted on its start")
    if op in ("reshape", "transpose") and is_bitcast(inst, (operand_shapes(inst, ix) or [None])[0]):
        return OpCost(note=f"{op} is a bitcast: no data moves")
    if op == "async-start":
        wrapped = called(inst, ix)
        root = wrapped[0].root if wrapped else None
        if root is None:
            return OpCost(unmodeled=f"the computation wrapped by '{inst.name}' is not available")
        inner = cost_instruction(root, module, num_devices=num_devices)
        return inner._replace(note=inner.note or f"runs {root.opcode} '{root.name}'")
    custom = custom_call(inst, ix) if op == "custom-call" else None
    w = custom.work if custom is not None else work(inst, ix)
    t = Traffic()
    op_traffic(inst, ix, t, custom)
    comm = Comm()
    if w.collective is not None and (op == "fusion" or collective_kind(op)):
        comm = collective_comm(w.collective, ix, num_devices)
    elif op == "fusion" and not called(inst, ix):
        comm = named_collective_fusion(inst, num_devices)
        if comm.kind is not None:
            w.unmodeled = None  # its only FLOPs, a reduction's, are negligible next to the transfer
    elif op in ("send", "recv"):
        sent = [first_leaf(inst.shape)] if op == "recv" else operand_shapes(inst, ix)[:1]
        comm = Comm(float(logical(sent)), op)
    note = (custom.note if custom else None) or comm.note or w.note
    host_bytes = 0.0
    if op in ("copy-start", "copy") and _crosses_host(inst, ix):
        # The array crosses the host link once; its HBM side is in the HBM traffic.
        host_bytes = float(logical(operand_shapes(inst, ix)[:1]))
    elif op == "custom-call" and _crosses_host(inst, ix):
        note = note or "host transfer: only the HBM side is counted"
    out = first_leaf(inst.shape)
    return OpCost(
        flops=w.flops,
        matrix_flops=w.matrix_flops,
        matrix_dtype=w.matrix_dtype,
        vector_dtype=out.element_type if out.element_type not in ("tuple", "token") else None,
        transcendentals=w.transcendentals,
        hbm_read_bytes=float(t.read),
        hbm_write_bytes=float(t.write),
        padding_bytes=float(t.padding),
        comm_bytes=comm.bytes,
        host_bytes=host_bytes,
        collective=comm.kind,
        group_size=comm.group_size,
        unmodeled=w.unmodeled or comm.unmodeled,
        note=note,
    )


def _crosses_host(inst: Instruction, ix: ModuleIndex | None) -> bool:
    shapes = [inst.shape, *(s for s in operand_shapes(inst, ix) if s is not None)]
    return any(leaf.memory_space == 5 for s in shapes for leaf in s.leaves())  # S(5): host


# A trip count past this (a trillion runs of a body) or below 0 is not a count XLA can know of a
# program that ran in a profile: it is treated as unknown. Nested loops multiply their counts:
# past MAX_RUNS an op's runs per occurrence are unknown too.
MAX_TRIP_COUNT = 1 << 40
MAX_RUNS = 1 << 62


def trip_count(inst: Instruction) -> int | None:
    """A while loop's trip count, when XLA knows it (`known_trip_count` in backend_config)."""
    known = config(inst).get("known_trip_count")
    value = known.get("n") if isinstance(known, dict) else None
    try:
        n = int(value) if isinstance(value, (int, str)) else None
    except ValueError:
        return None
    return n if n is not None and 0 <= n <= MAX_TRIP_COUNT else None


def while_parts(inst: Instruction, module: Module) -> tuple[Computation | None, Computation | None]:
    """(body, condition) of a while loop."""
    ix = index_of(module)
    assert ix is not None
    body = ix.computation(inst.attrs["body"]) if "body" in inst.attrs else None
    cond = ix.computation(inst.attrs["condition"]) if "condition" in inst.attrs else None
    if body is None or cond is None:  # the condition is the one returning pred[]
        for comp in called(inst, ix):
            root = comp.root
            if root is not None and root.shape.element_type == "pred" and root.shape.rank == 0:
                cond = comp
            else:
                body = comp
    return body, cond


class _Sum(Struct):
    """A computation's cost being summed over its instructions (loop bodies times their trip
    counts)."""

    w: Work = field(default_factory=Work)
    read: float = 0.0
    write: float = 0.0
    padding: float = 0.0
    comm: float = 0.0
    host: float = 0.0
    unmodeled: list[str] = field(default_factory=list)

    def add(self, c: OpCost, times: float = 1.0) -> None:
        self.w.flops += c.flops * times
        self.w.transcendentals += c.transcendentals * times
        if c.matrix_flops:
            dtype = c.matrix_dtype or "f32"
            self.w.matrix[dtype] = self.w.matrix.get(dtype, 0.0) + c.matrix_flops * times
        self.read += c.hbm_read_bytes * times
        self.write += c.hbm_write_bytes * times
        self.padding += c.padding_bytes * times
        self.comm += c.comm_bytes * times
        self.host += c.host_bytes * times
        if c.unmodeled:
            self.unmodeled.append(c.unmodeled)

    def cost(self) -> OpCost:
        reasons = list(dict.fromkeys(self.unmodeled))
        return OpCost(
            flops=self.w.flops,
            matrix_flops=self.w.matrix_flops,
            matrix_dtype=self.w.matrix_dtype,
            transcendentals=self.w.transcendentals,
            hbm_read_bytes=self.read,
            hbm_write_bytes=self.write,
            padding_bytes=self.padding,
            comm_bytes=self.comm,
            host_bytes=self.host,
            unmodeled=f"{len(self.unmodeled)} op(s) unmodeled: " + "; ".join(reasons[:3])
            if reasons
            else None,
        )


def cost_computation(
    comp: Computation,
    module: Module,
    trip_counts: bool = True,
    *,
    num_devices: int | None = None,
) -> OpCost:
    """Everything a computation runs, control flow included, as one sum.

    A while loop runs its body `known_trip_count` times and its condition once more when
    `trip_counts` is set and XLA knows the count; otherwise once each, which is what XLA's
    HloCostAnalysis (and so `cost_analysis()`) counts. A conditional counts its costliest branch,
    quantity by quantity, as XLA does.
    """
    try:
        return _cost_computation(comp, module, trip_counts, num_devices=num_devices)
    except RecursionError:
        return OpCost(unmodeled=f"computation '{comp.name}': {TOO_DEEP}")


def _cost_computation(
    comp: Computation,
    module: Module,
    trip_counts: bool = True,
    *,
    num_devices: int | None = None,
) -> OpCost:
    total = _Sum()
    ix = index_of(module)
    for inst in comp.instructions:
        if inst.opcode == "while":
            body, cond = while_parts(inst, module)
            n = trip_count(inst) if trip_counts else 1
            if n is None:
                total.unmodeled.append(f"while '{inst.name}': trip count unknown, counted once")
            runs = ((body, n or 1), (cond, n + 1 if trip_counts and n else 1))
            for part, times in runs:
                if part is not None:
                    total.add(
                        _cost_computation(part, module, trip_counts, num_devices=num_devices),
                        times,
                    )
        elif inst.opcode == "call":
            for part in called(inst, ix):
                total.add(_cost_computation(part, module, trip_counts, num_devices=num_devices))
        elif inst.opcode == "conditional":
            branches = [
                _cost_computation(c, module, trip_counts, num_devices=num_devices)
                for c in called(inst, ix)
            ]
            if branches:
                total.add(_max_cost(branches))
        else:
            total.add(cost_instruction(inst, module, num_devices=num_devices))
    return total.cost()


def _max_cost(costs: Sequence[OpCost]) -> OpCost:
    matrix = max(costs, key=lambda c: c.matrix_flops)
    return OpCost(
        flops=max(c.flops for c in costs),
        matrix_flops=matrix.matrix_flops,
        matrix_dtype=matrix.matrix_dtype,
        transcendentals=max(c.transcendentals for c in costs),
        hbm_read_bytes=max(c.hbm_read_bytes for c in costs),
        hbm_write_bytes=max(c.hbm_write_bytes for c in costs),
        padding_bytes=max(c.padding_bytes for c in costs),
        comm_bytes=max(c.comm_bytes for c in costs),
        host_bytes=max(c.host_bytes for c in costs),
        unmodeled=next((c.unmodeled for c in costs if c.unmodeled), None),
    )


def timed_computations(module: Module) -> list[Computation]:
    """The entry and every computation control flow runs: their ops are timed on their own.

    Fused bodies, reducers, comparators, async-wrapped computations and XLA:GPU command buffers
    are not: they run inside one op.
    """
    ix = index_of(module)
    entry = module.entry_computation
    if entry is None or ix is None:
        return []
    seen = {bare(entry.name): entry}
    stack = [entry]
    while stack:
        for inst in stack.pop().instructions:
            if inst.opcode in CONTROL_FLOW and not is_command_buffer(inst):
                for callee in called(inst, ix):
                    if bare(callee.name) not in seen:
                        seen[bare(callee.name)] = callee
                        stack.append(callee)
    return list(seen.values())


def cost_module(module: Module, *, num_devices: int | None = None) -> dict[str, OpCost]:
    """Every instruction of every computation timed on its own, by name."""
    return {
        inst.name: cost_instruction(inst, module, num_devices=num_devices)
        for comp in timed_computations(module)
        for inst in comp.instructions
    }


def executions_per_run(module: Module) -> dict[str, int | None]:
    """How many times each instruction timed on its own runs per execution of the module, as
    far as the HLO tells: the product of the trip counts of the while loops around it; None
    where one is unknown or where a conditional's branch lies between (which branch runs is
    decided at run time: a branch inside a 12-trip loop may run 4 times, or none). Computations
    called otherwise (async-wrapped, a command buffer's) run as often as their caller."""
    ix = index_of(module)
    entry = module.entry_computation
    if entry is None or ix is None:
        return {}
    runs: dict[str, int | None] = {}
    stack: list[tuple[Computation, int | None]] = [(entry, 1)]
    seen: set[str] = set()
    while stack:
        comp, times = stack.pop()
        if bare(comp.name) in seen:
            continue
        seen.add(bare(comp.name))
        for inst in comp.instructions:
            runs[inst.name] = times
            if not inst.called:
                continue
            trips: int | None = 1
            if inst.opcode == "while" and not is_command_buffer(inst):
                trips = trip_count(inst)
            elif inst.opcode == "conditional":
                trips = None
            inner = times * trips if times is not None and trips is not None else None
            if inner is not None and inner > MAX_RUNS:
                inner = None
            stack.extend((callee, inner) for callee in called(inst, ix))
    return runs
