"""The analysis stage: each timed op -> its HLO -> its cost -> its bound and hints -> a row.

Kept apart from `hlogap.pipeline` so that the heavy modules it needs (HLO parsing and decoding,
the cost model) are imported while a large profile is still being read by other processes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from hlogap.bounds.hints import FASTER_THAN_ROOF, counters_hint, hints_for, host_wait_hint
from hlogap.bounds.measured import TimedCost
from hlogap.bounds.roofline import Bound, bound_op, wait_bound_s
from hlogap.chips import Chip
from hlogap.cost import OpCost, cost_instruction, executions_per_run
from hlogap.cost.trace_stats import cost_from_trace_stats
from hlogap.hlo.fingerprint import fingerprint
from hlogap.hlo.index import HloIndex, ResolvedOp
from hlogap.hlo.ir import Instruction, Module
from hlogap.hlo.mesh import ModuleMesh
from hlogap.hlo.opcodes import AsyncRole, async_role, collective_kind
from hlogap.hlo.printer import print_instruction
from hlogap.report.model import OpRow
from hlogap.rows.command_buffers import command_buffer, estimated_rows, split_hint
from hlogap.trace.backends.base import platform_of
from hlogap.trace.model import Backend, OpInfo, OpKey, devices_in
from hlogap.trace.summary import RunSummary
from hlogap.trace.timing import AsyncPairs, merged_intervals
from hlogap.units import fmt_si

# The executions of (start, done) op pairs on every host, as one `AsyncPairs` per pair with
# device indices into the run's devices (an executor's `transfer_pairs`, hosts concatenated).
PairsOnHosts = Callable[[list[tuple[OpKey, OpKey]]], list[AsyncPairs]]


class CostedOp(NamedTuple):
    """One timed op's HLO, its counts for one run, and its runs per occurrence (their mean
    over the occurrences, when the trace's events count them and they differ)."""

    resolved: ResolvedOp
    cost: OpCost
    runs: float
    # Why the runs are not known (counted once per occurrence), or how they vary; None when
    # they are known and the same in every occurrence.
    runs_note: str | None = None


def runs_per_occurrence(
    events_are_runs: bool, events: int, occurrences: int, from_hlo: int | None, inside: bool
) -> tuple[float, str | None]:
    """An op's runs in one occurrence and what to say of them (`CostedOp`).

    `from_hlo`: the product of the trip counts of the loops around the op, None where one is
    unknown or a conditional's branch lies between (which branch runs is decided at run time);
    `inside`: whether the op lies in a computation the entry reaches at all. Where
    the HLO knows, it is exact: an op can leave several events in one run (an XLA:CPU sort, an
    XLA:GPU copy fusion done as one memcpy thunk per output), so its events can only say more.
    Where it does not, the runs are the trace's events when each run leaves one
    (`RunSummary.events_are_runs`: XLA:CPU thunks, TPU ops, nsys-jax thunk ranges): a branch
    inside a 12-trip loop runs as often as it was taken. Otherwise (GPU kernels, several per
    run) they cannot be known: counted once per occurrence, and said so.
    """
    if inside and from_hlo is not None:
        return max(from_hlo, 1), None
    if events_are_runs and occurrences > 0 and events > 0:
        if events % occurrences == 0:
            return events // occurrences, None
        mean = events / occurrences
        return mean, (
            f"runs {events:,} times over {occurrences:,} occurrences ({mean:.3g} per "
            "occurrence on average: a conditional's branch or a loop of unknown trip count "
            "runs a varying number of times), per the trace's events"
        )
    return 1, (
        "runs per occurrence unknown (a conditional's branch or a loop of unknown trip count "
        "around it, and the trace's events do not count runs): counted once per occurrence"
    )


def op_costs(run: RunSummary, index: HloIndex, chip: Chip) -> dict[int, CostedOp]:
    """Each op that ran (among the selected events), by its index in `run.ops`: its HLO found
    once (TPU ops parse their own text) and costed once."""
    loop_runs: dict[int, dict[str, int | None]] = {}  # per module object
    times = run.times
    num_devices = len({(d.host, d.ordinal) for d in run.devices}) or None
    ops = {int(i): index.resolve(run.ops[i]) for i in np.flatnonzero(times.events)}
    fusion_kernels = _fusion_kernels(run.ops, ops)
    costed: dict[int, CostedOp] = {}
    for i, resolved in ops.items():
        info = run.ops[i]
        inst = resolved.instruction
        if inst is None:
            cost = OpCost(unmodeled=resolved.missing or "no HLO")
        elif i in fusion_kernels:
            cost = OpCost(
                note=f"a kernel of fusion '{fusion_kernels[i]}', which is timed and costed "
                "as an op of its own (XLA:GPU initializes a reduction's output apart)"
            )
        else:
            cost = cost_instruction(inst, resolved.module, num_devices=num_devices)
            # XLA's trace FLOPs for a custom call are only the kernel's own estimate.
            if cost.unmodeled and info.xla_flops is not None and inst.opcode != "custom-call":
                cost = cost_from_trace_stats(
                    cost, info.xla_flops, info.xla_bytes, info.key.name, chip.cores_per_device
                )
        occurrences = int(times.occurrences[i])
        events = int(times.events[i])
        from_hlo: int | None = 1
        inside = False
        if inst is not None and resolved.module is not None:
            module = resolved.module
            per_module = loop_runs.get(id(module))
            if per_module is None:
                per_module = loop_runs[id(module)] = executions_per_run(module)
            inside = inst.name in per_module
            from_hlo = per_module.get(inst.name, 1)
        runs, note = runs_per_occurrence(run.events_are_runs, events, occurrences, from_hlo, inside)
        costed[i] = CostedOp(resolved, cost, runs, note)
    return costed


def timed_costs(run: RunSummary, costed: dict[int, CostedOp]) -> list[TimedCost]:
    """Each costed op's counts with the time one run took (its measured time over its runs):
    what a measured chip's figures are raised to (`hlogap.bounds.measured`)."""
    timed: list[TimedCost] = []
    for i, op in costed.items():
        inst = op.resolved.instruction
        runs = op.runs * int(run.times.occurrences[i])
        if inst is None or op.cost.unmodeled or runs <= 0:
            continue
        seconds = float(run.times.measured_ps[i]) / 1e12 / runs
        key = run.ops[i].key
        timed.append(
            TimedCost(key.module, key.name, op.cost, seconds, _timed_role(inst, run.backend))
        )
    return timed


def op_rows(
    run: RunSummary,
    index: HloIndex,
    chip: Chip,
    costed: dict[int, CostedOp],
    pairs_on_hosts: PairsOnHosts,
    what_if: Sequence[Chip] = (),
) -> list[OpRow]:
    """One row per costed op, bounded on `chip` and on each `what_if` chip."""
    rows: list[OpRow] = []
    num_devices = len({(d.host, d.ordinal) for d in run.devices}) or None
    host_waits = _host_waits(
        run.ops, {i: op.resolved for i, op in costed.items()}, chip, pairs_on_hosts
    )
    timed: dict[tuple[str, str], set[str]] = {}  # the ops timed on their own, per module
    for i in costed:
        key = run.ops[i].key
        timed.setdefault((key.module, key.program_id), set()).add(key.name)
    for i, op in costed.items():
        info, inst = run.ops[i], op.resolved.instruction
        role = _timed_role(inst, run.backend) if inst else ""
        buffer = (
            command_buffer(
                inst,
                op.resolved.module,
                chip,
                lambda timed_op: _timed_role(timed_op, run.backend),
                timed[(info.key.module, info.key.program_id)],
                num_devices,
            )
            if inst is not None
            else None
        )
        # A CUDA graph is bounded by the sum of its ops' bounds.
        bound = buffer.bound if buffer is not None else bound_op(op.cost, chip, role)
        row = _row(run, i, op, bound, chip, host_waits.get(i))
        if buffer is not None:
            row.command_buffer_ops = estimated_rows(row, buffer, chip)
            row.hints.append(split_hint(row))
        if inst is not None:
            _place_on_mesh(row, inst, index.mesh(info.key.module, info.key.program_id))
        if what_if:
            other = {
                c.name: buffer.on(c).bound if buffer else bound_op(op.cost, c, role)
                for c in what_if
            }
            row.what_if_us = {
                name: b.lower_s * 1e6 * op.runs * row.occurrences
                for name, b in other.items()
                if b.bound_by != "unmodeled"
            }
        rows.append(row)
    return rows


def _row(
    run: RunSummary,
    i: int,
    op: CostedOp,
    bound: Bound,
    chip: Chip,
    wait: tuple[Bound, float, str] | None,
) -> OpRow:
    """The row of `run.ops[i]`: its times, its bound (`wait`: a done waiting for a host
    transfer, bounded by the link), its counts per occurrence and its hints."""
    info, times, cost, runs = run.ops[i], run.times, op.cost, op.runs
    inst = op.resolved.instruction
    occurrences = int(times.occurrences[i])
    per_run = bound  # one run of the op; an occurrence runs it `runs` times
    measured_us = float(times.measured_ps[i]) / 1e6
    bound_us = per_run.lower_s * 1e6 * runs * occurrences
    host_hint: list[str] = []
    if wait is not None:
        per_run, bound_us, hint = wait
        host_hint.append(hint)
    cache_hint = _cached_hint(
        run.backend, per_run, bound_us, measured_us, cost, chip
    ) or _estimate_hint(inst, bound_us, measured_us)
    if cache_hint:
        bound_us = measured_us  # a floor the op beat: what it did is the floor
    counters = info.utilisation()
    hints = host_hint or [
        *cache_hint,
        *(
            h
            for h in hints_for(
                inst,
                cost,
                bound,
                chip,
                op.resolved.missing,
                measured_us=measured_us / max(occurrences * runs, 1),
            )
            if not (cache_hint and h.startswith(FASTER_THAN_ROOF))
        ),
    ]
    return OpRow(
        module=info.key.module,
        program_id=info.key.program_id,
        name=info.key.name,
        opcode=inst.opcode if inst else "unknown",
        category=op.resolved.category,
        occurrences=occurrences,
        runs_per_occurrence=max(round(runs), 1),
        events=int(times.events[i]),
        measured_us=measured_us,
        total_us=float(times.duration_ps[i]) / 1e6,
        median_us=float(times.median_ps[i]) / 1e6,
        bound_us=bound_us,
        upper_bound_us=per_run.upper_s * 1e6 * runs * occurrences,
        bound_by=per_run.bound_by,
        flops=cost.flops * runs,
        bytes=cost.hbm_bytes * runs,
        comm_bytes=cost.comm_bytes * runs,
        transcendentals=cost.transcendentals * runs,
        dtype=(cost.matrix_dtype or cost.vector_dtype or "") if cost.flops else "",
        t_compute_us=per_run.t_compute_s * 1e6 * runs,
        t_memory_us=per_run.t_memory_s * 1e6 * runs,
        t_comm_us=per_run.t_comm_s * 1e6 * runs,
        op_name=(inst.op_name or "") if inst else "",
        source=(inst.source or "") if inst else "",
        hlo=info.hlo_text or (print_instruction(inst) if inst else ""),
        fingerprint=fingerprint(inst, op.resolved.module) if inst else "",
        counters=counters,
        hints=[
            *hints,
            *([op.runs_note] if op.runs_note else []),
            *([counters_hint(counters)] if counters else []),
        ],
    )


def _place_on_mesh(row: OpRow, inst: Instruction, on_mesh: ModuleMesh | None) -> None:
    """A partitioned module's row: its collective's mesh axes, its matmul's global shapes."""
    if on_mesh is None:
        return
    axes = on_mesh.collective_axes.get(inst.name)
    if axes is not None:
        row.mesh_axes = list(axes)
        mesh = on_mesh.mesh
        if axes:
            over = " x ".join(axes)
            row.hints.append(f"runs over mesh {over}: {mesh.size(axes)} of {mesh.devices} devices")
        else:  # a permutation of the devices: no axis, each sends to another
            row.hints.append("permutes data between devices (a re-layout), along no one mesh axis")
    view = on_mesh.global_views.get(inst.name)
    if view is not None:
        row.global_shapes = list(view.shapes)
        row.sharding = dict(view.sharding)
        row.hints.append(view.describe())


def _cached_hint(
    backend: Backend, bound: Bound, bound_us: float, measured_us: float, cost: OpCost, chip: Chip
) -> list[str]:
    """Why a GPU op beat its HBM bound, when it did: a GPU's L2 cache (50 MB on an H100)
    keeps what the op before wrote and takes writes it flushes later, so part of the bytes
    need not cross HBM while the op runs. The bound is then the measured time (a floor can
    be no higher than what was done), and this hint says so; [] otherwise."""
    if (
        not platform_of(backend).unpublished_cache
        or bound.bound_by != "memory"
        or not 0 < measured_us < bound_us
    ):
        return []
    return [
        f"beats the HBM roof by {bound_us / measured_us - 1:.1%}: part of its "
        f"{fmt_si(cost.hbm_bytes, 'B')} did not cross HBM while it ran (the GPU's L2 cache "
        f"holds recent data and defers writes); bounded by its measured time on {chip.name}"
    ]


def _estimate_hint(inst: Instruction | None, bound_us: float, measured_us: float) -> list[str]:
    """Why a Pallas kernel beat the bound its own cost_estimate gives, when it did: the
    estimate is its author's, and block-sparse kernels (splash attention) skip blocks it
    counts. The bound is then the measured time, and this hint says so; [] otherwise."""
    if inst is None or inst.custom_call_target != "tpu_custom_call":
        return []
    if not 0 < measured_us < bound_us:
        return []
    return [
        f"beats the bound of its own cost_estimate by {bound_us / measured_us - 1:.1%}: the "
        "estimate claims more work than the kernel did (check the flops and bytes_accessed "
        "passed to pallas_call); bounded by its measured time"
    ]


def _timed_role(inst: Instruction, backend: Backend) -> AsyncRole:
    """The op's async role as its events time it. On GPUs the start of an async collective
    launches the collective's kernels (NCCL, RCCL) on their own stream: its events are the
    transfer itself, bounded by the link like a synchronous collective."""
    role = async_role(inst.opcode, inst.name)
    if (
        platform_of(backend).collective_start_is_transfer
        and role == "start"
        and collective_kind(inst.opcode)
    ):
        return ""
    return role


def _fusion_kernels(infos: list[OpInfo], ops: dict[int, ResolvedOp]) -> dict[int, str]:
    """Ops named after an instruction inside a fusion that also ran (by op index: the
    fusion's name). XLA:GPU launches a reduction's output initialization as a kernel of its
    own, named after the reduce in the fused computation; the fusion's cost counts that
    output, so the kernel's time is overhead, not unbounded work."""
    ran: dict[tuple[str, str], set[str]] = {}
    for i in ops:
        key = infos[i].key
        ran.setdefault((key.module, key.program_id), set()).add(key.name)
    fused_in: dict[int, dict[str, str]] = {}  # per module object: instruction -> its fusion
    found: dict[int, str] = {}
    for i, resolved in ops.items():
        inst, module = resolved.instruction, resolved.module
        if inst is None or module is None or inst.opcode == "fusion":
            continue
        owners = fused_in.get(id(module))
        if owners is None:
            owners = fused_in[id(module)] = _fusion_of_instructions(module)
        fusion = owners.get(inst.name)
        key = infos[i].key
        if fusion is not None and fusion in ran[(key.module, key.program_id)]:
            found[i] = fusion
    return found


def _fusion_of_instructions(module: Module) -> dict[str, str]:
    """Each instruction of a fused computation -> the fusion instruction that calls it."""
    caller = {
        called: inst.name
        for comp in module.computations
        for inst in comp.instructions
        if inst.opcode == "fusion"
        for called in inst.called
    }
    return {
        inst.name: caller[comp.name]
        for comp in module.computations
        if comp.name in caller
        for inst in comp.instructions
    }


class _HostTransfer(NamedTuple):
    """An async start/done pair whose start moves data over the device's host link."""

    start: Bound  # the transfer's own bound (overlapped)
    host_bytes: float
    to_device: bool  # host -> device; the link's two directions are separate (PCIe is duplex)
    pairs: AsyncPairs


def _host_waits(
    infos: list[OpInfo], ops: dict[int, ResolvedOp], chip: Chip, pairs_on_hosts: PairsOnHosts
) -> dict[int, tuple[Bound, float, str]]:
    """(bound, bound in us, hint) of each done (by op) that waits for a host transfer.

    The start only issues the transfer; the device waits for it at the done. Each transfer's
    bound is its own bytes over the host link at full rate, never more than the wait it
    caused (`wait_bound_s`). Transfers in flight together share the link: the hint says how
    many did and what the link carried in all.
    """
    if not chip.host_bw:
        return {}
    op_ids = {o.key: i for i, o in enumerate(infos)}
    found_transfers: dict[int, tuple[OpKey, Bound, float, bool]] = {}
    for done, found in ops.items():
        key = infos[done].key
        inst = found.instruction
        if inst is None or async_role(inst.opcode, inst.name) != "done" or not inst.operands:
            continue
        start_key = OpKey(key.module, key.program_id, inst.operands[0])
        start = op_ids.get(start_key)
        resolved = ops.get(start) if start is not None else None  # a start that ran
        if resolved is None or resolved.instruction is None:
            continue
        cost = cost_instruction(resolved.instruction, resolved.module)
        if cost.host_bytes:
            to_device = inst.shape.memory_space != 5
            found_transfers[done] = (
                start_key,
                bound_op(cost, chip, "start"),
                cost.host_bytes,
                to_device,
            )
    if not found_transfers:
        return {}
    pairs = pairs_on_hosts(
        [(start, infos[done].key) for done, (start, *_) in found_transfers.items()]
    )
    transfers = {
        done: _HostTransfer(bound, host_bytes, to_device, executions)
        for (done, (_, bound, host_bytes, to_device)), executions in zip(
            found_transfers.items(), pairs, strict=True
        )
    }
    # Per direction: all bytes moved over the time any transfer was in flight, device by device.
    link_rate: dict[bool, float] = {}
    for direction in (True, False):
        same = [t for t in transfers.values() if t.to_device == direction]
        if not same:
            continue
        device = np.concatenate([t.pairs.device for t in same])
        begin = np.concatenate([t.pairs.begin_ps for t in same])
        end = np.concatenate([t.pairs.end_ps for t in same])
        moved = sum(t.host_bytes * len(t.pairs.device) for t in same)
        in_flight_ps = 0
        for d in devices_in(device):  # the time any transfer of the device was in flight, once
            starts, ends = merged_intervals(begin[device == d], end[device == d])
            in_flight_ps += int((ends - starts).sum())
        link_rate[direction] = moved / (in_flight_ps * 1e-12) if in_flight_ps else 0.0
    out: dict[int, tuple[Bound, float, str]] = {}
    for done, t in transfers.items():
        bound_us = wait_bound_s(t.start, t.pairs.wait_ps * 1e-12) * 1e6
        per_run = Bound(0.0, 0.0, 0.0, "host", t_host_s=t.start.t_host_s)
        sharing = sum(
            1
            for other, u in transfers.items()
            if other != done and u.to_device == t.to_device and _overlap(t.pairs, u.pairs)
        )
        hint = host_wait_hint(
            t.host_bytes,
            t.pairs.span_ps * 1e-12,
            t.pairs.wait_ps * 1e-12,
            t.start.work_s,
            link_rate.get(t.to_device, 0.0),
            chip,
            sharing,
        )
        out[done] = (per_run, bound_us, hint)
    return out


def _overlap(a: AsyncPairs, b: AsyncPairs) -> bool:
    """Whether a transfer of `a` was in flight on a device while one of `b` was."""
    for d in devices_in(a.device):
        b_start, b_end = merged_intervals(b.begin_ps[b.device == d], b.end_ps[b.device == d])
        if not len(b_start):
            continue
        mine = a.device == d
        after = np.searchsorted(b_end, a.begin_ps[mine], side="right")  # first b ending after
        hit = after < len(b_start)
        if (b_start[np.minimum(after, len(b_start) - 1)][hit] < a.end_ps[mine][hit]).any():
            return True
    return False
