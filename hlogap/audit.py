"""The audit pipeline: profile files -> op timings -> HLO ops -> costs -> bounds -> report."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from hlogap.backends import read_trace
from hlogap.chips import Chip, detect_chip, load_chip
from hlogap.cost.trace_stats import cost_from_trace_stats
from hlogap.costs import OpCost, cost_instruction
from hlogap.errors import InputError, UsageError
from hlogap.fingerprint import fingerprint
from hlogap.hints import hints_for
from hlogap.hlo.printer import print_instruction
from hlogap.hlo_ops import HloIndex
from hlogap.profile import ProfileSource, find_profile
from hlogap.report import SORT_KEYS, AuditReport, OpRow, sort_rows
from hlogap.roofline import async_role, bound_op
from hlogap.timing import OpTimes, time_ops
from hlogap.xplane import TraceData, merge_traces


def _read_one(args: tuple[str, str]) -> TraceData:
    return read_trace(*args)


def read_profile(source: ProfileSource, jobs: int | None = None) -> TraceData:
    """Read every host file of the run: several files in parallel processes, one large file's
    device planes split over `jobs` processes (default: the machine's cores)."""
    pairs = list(zip(source.files, source.hosts))
    cores = jobs or os.cpu_count() or 1
    if len(pairs) == 1:
        return read_trace(*pairs[0], workers=cores)
    workers = min(len(pairs), cores)
    if workers <= 1:
        traces = [_read_one(p) for p in pairs]
    else:
        # Imported here: most audits read one file. Not fork: the caller may be multithreaded
        # (JAX in the same process, say).
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            traces = list(pool.map(_read_one, pairs))
    return merge_traces(traces)


def resolve_chip(spec: str | None, trace: TraceData) -> tuple[Chip, str, str]:
    """(chip, source, reason): `--chip` wins; else detect from device planes; CPU -> calibrated."""
    if spec:
        return load_chip(spec), "user", f"--chip {spec}"
    if trace.backend in ("gpu", "tpu"):
        for dev in trace.devices:
            found = detect_chip(dev.stats, dev.plane)
            if found:
                return found[0], "detected", found[1]
        raise InputError(
            f"cannot tell which {trace.backend.upper()} this profile ran on; "
            "pass --chip NAME (see `hlogap chips`) or --chip FILE.toml"
        )
    from hlogap.calibrate import calibrated_chip, calibrated_path

    chip = calibrated_chip()
    if chip is None:
        raise InputError(
            "a CPU profile needs a CPU chip: run `hlogap calibrate` or pass --chip FILE.toml"
        )
    return chip, "calibrated", f"calibrated CPU chip {calibrated_path()}"


def audit(
    path: str | Path,
    chip: str | None = None,
    *,
    run: str | None = None,
    host: str | None = None,
    device: int | None = None,
    module: str | None = None,
    hlo_dump: str | Path | None = None,
    sort: str = "gap",
    jobs: int | None = None,
) -> AuditReport:
    """Audit a profile (logdir, run directory or .xplane.pb) and return the report."""
    if sort not in SORT_KEYS:
        raise UsageError(f"unknown sort key '{sort}' (use one of: {', '.join(SORT_KEYS)})")
    try:
        module_re = re.compile(module) if module else None
    except re.error as exc:
        raise UsageError(f"bad --module regex '{module}': {exc}") from exc
    dump_dir = Path(hlo_dump) if hlo_dump else None
    if dump_dir is not None and not dump_dir.is_dir():
        raise InputError(f"--hlo-dump is not a directory: {dump_dir}")
    source = find_profile(path, run=run, host=host)
    trace = read_profile(source, jobs)
    if trace.backend == "none":
        raise InputError(f"no XLA op events in {path} (was the jitted program run while tracing?)")
    the_chip, chip_source, reason = resolve_chip(chip, trace)
    times = time_ops(trace, device)
    if device is not None and times.devices == 0:
        raise UsageError(f"no device {device} in this profile")
    rows = _rows(trace, times, the_chip, HloIndex(trace.modules, dump_dir), module_re)
    return AuditReport(
        path=source.path,
        run=source.run,
        files=list(source.files),
        hosts=source.hosts,
        backend=trace.backend,
        chip=the_chip,
        chip_source=chip_source,
        chip_reason=reason,
        devices=times.devices,
        events=int(times.events.sum()),
        ops=sort_rows(rows, sort),
        sort=sort,
        warnings=list(trace.warnings),
    )


def _rows(
    trace: TraceData,
    times: OpTimes,
    chip: Chip,
    index: HloIndex,
    module_re: re.Pattern[str] | None,
) -> list[OpRow]:
    rows: list[OpRow] = []
    num_devices = len({(d.host, d.ordinal) for d in trace.devices}) or None
    for i in np.flatnonzero(times.events):
        info = trace.ops[i]
        if module_re is not None and not module_re.search(info.key.module):
            continue
        resolved = index.resolve(info)
        inst = resolved.instruction
        if inst is None:
            cost = OpCost(unmodeled=resolved.missing or "no HLO")
        else:
            cost = cost_instruction(inst, resolved.module, num_devices=num_devices)
            # XLA's trace FLOPs for a custom call are only the kernel's own estimate.
            if cost.unmodeled and info.xla_flops is not None and inst.opcode != "custom-call":
                cost = cost_from_trace_stats(
                    cost, info.xla_flops, info.xla_bytes, info.key.name, chip.name
                )
        bound = bound_op(cost, chip, async_role(inst.opcode, inst.name) if inst else "")
        occurrences = int(times.occurrences[i])
        rows.append(
            OpRow(
                module=info.key.module,
                program_id=info.key.program_id,
                name=info.key.name,
                opcode=inst.opcode if inst else "unknown",
                category=resolved.category,
                occurrences=occurrences,
                events=int(times.events[i]),
                measured_us=float(times.measured_ps[i]) / 1e6,
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
                    measured_us=float(times.measured_ps[i]) / 1e6 / max(occurrences, 1),
                ),
            )
        )
    return rows
