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
from hlogap.cost import OpCost, cost_instruction, executions_per_run
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
    loop_runs: dict[int, dict[str, int | None]] = {}  # per module object
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
        events = int(times.events[i])
        runs = 1
        if inst is not None and resolved.module is not None:
            module = resolved.module
            per_module = loop_runs.get(id(module))
            if per_module is None:
                per_module = loop_runs[id(module)] = executions_per_run(module)
            known = per_module.get(inst.name, 1)
            # A loop of unknown trip count: on CPU and TPU every run of a body op is one event.
            runs = known if known is not None else max(1, round(events / max(occurrences, 1)))
            if known is None and trace.backend == "gpu":
                runs = 1  # GPU ops launch several kernels per run: the kernels do not tell
        per_run = bound  # one run of the op; an occurrence runs it `runs` times
        measured_us = float(times.measured_ps[i]) / 1e6
        rows.append(
            OpRow(
                module=info.key.module,
                program_id=info.key.program_id,
                name=info.key.name,
                opcode=inst.opcode if inst else "unknown",
                category=resolved.category,
                occurrences=occurrences,
                runs_per_occurrence=runs,
                events=events,
                measured_us=measured_us,
                total_us=float(times.duration_ps[i]) / 1e6,
                median_us=float(times.median_ps[i]) / 1e6,
                bound_us=per_run.lower_s * 1e6 * runs * occurrences,
                upper_bound_us=per_run.upper_s * 1e6 * runs * occurrences,
                bound_by=per_run.bound_by,
                flops=cost.flops * runs,
                bytes=cost.hbm_bytes * runs,
                comm_bytes=cost.comm_bytes * runs,
                transcendentals=cost.transcendentals * runs,
                t_compute_us=per_run.t_compute_s * 1e6 * runs,
                t_memory_us=per_run.t_memory_s * 1e6 * runs,
                t_comm_us=per_run.t_comm_s * 1e6 * runs,
                op_name=(inst.op_name or "") if inst else "",
                source=(inst.source or "") if inst else "",
                hlo=info.hlo_text or (print_instruction(inst) if inst else ""),
                fingerprint=fingerprint(inst, resolved.module) if inst else "",
                hints=hints_for(
                    inst,
                    cost,
                    bound,
                    chip,
                    resolved.missing,
                    measured_us=measured_us / max(occurrences * runs, 1),
                ),
            )
        )
    return rows
