"""The analysis stage: each timed op -> its HLO -> its cost -> its bound and hints -> a row.

Kept apart from `hlogap.pipeline` so that the heavy modules it needs (HLO parsing and decoding,
the cost model) are imported while a large profile is still being read by other processes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hlogap.bounds.hints import hints_for
from hlogap.bounds.roofline import bound_op
from hlogap.chips import Chip
from hlogap.cost import OpCost, cost_instruction
from hlogap.cost.trace_stats import cost_from_trace_stats
from hlogap.hlo.fingerprint import fingerprint
from hlogap.hlo.index import HloIndex
from hlogap.hlo.opcodes import async_role
from hlogap.hlo.printer import print_instruction
from hlogap.report.model import OpRow
from hlogap.trace.model import TraceData
from hlogap.trace.timing import OpTimes


def op_rows(
    trace: TraceData,
    times: OpTimes,
    chip: Chip,
    hlo_dump: Path | None,
) -> list[OpRow]:
    """One row per op that ran (among the events `times` selected); each op is costed once."""
    index = HloIndex(trace.modules, hlo_dump)
    rows: list[OpRow] = []
    num_devices = len({(d.host, d.ordinal) for d in trace.devices}) or None
    for i in np.flatnonzero(times.events):
        info = trace.ops[i]
        resolved = index.resolve(info)
        inst = resolved.instruction
        if inst is None:
            cost = OpCost(unmodeled=resolved.missing or "no HLO")
        else:
            cost = cost_instruction(inst, resolved.module, num_devices=num_devices)
            # XLA's trace FLOPs for a custom call are only the kernel's own estimate.
            if cost.unmodeled and info.xla_flops is not None and inst.opcode != "custom-call":
                cost = cost_from_trace_stats(
                    cost, info.xla_flops, info.xla_bytes, info.key.name, chip.cores_per_device
                )
        bound = bound_op(cost, chip, async_role(inst.opcode, inst.name) if inst else "")
        occurrences = int(times.occurrences[i])
        measured_us = float(times.measured_ps[i]) / 1e6
        rows.append(
            OpRow(
                module=info.key.module,
                program_id=info.key.program_id,
                name=info.key.name,
                opcode=inst.opcode if inst else "unknown",
                category=resolved.category,
                occurrences=occurrences,
                events=int(times.events[i]),
                measured_us=measured_us,
                total_us=float(times.duration_ps[i]) / 1e6,
                median_us=float(times.median_ps[i]) / 1e6,
                bound_us=bound.lower_s * 1e6 * occurrences,
                upper_bound_us=bound.upper_s * 1e6 * occurrences,
                bound_by=bound.bound_by,
                flops=cost.flops,
                bytes=cost.hbm_bytes,
                comm_bytes=cost.comm_bytes,
                transcendentals=cost.transcendentals,
                t_compute_us=bound.t_compute_s * 1e6,
                t_memory_us=bound.t_memory_s * 1e6,
                t_comm_us=bound.t_comm_s * 1e6,
                hlo=info.hlo_text or (print_instruction(inst) if inst else ""),
                fingerprint=fingerprint(inst, resolved.module) if inst else "",
                hints=hints_for(
                    inst,
                    cost,
                    bound,
                    chip,
                    resolved.missing,
                    measured_us=measured_us / max(occurrences, 1),
                ),
            )
        )
    return rows
