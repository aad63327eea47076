"""The audit pipeline: profile files -> op timings -> HLO ops -> costs -> bounds -> report."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from msgspec.structs import replace

from hlogap.chips import Chip, detect_chip, load_chip
from hlogap.errors import InputError
from hlogap.memory.runtime import allocator_peaks, on_run
from hlogap.memory.static import memory_section
from hlogap.options import AuditOptions
from hlogap.report.model import (
    SORT_KEYS,
    AuditReport,
    ChipSource,
    OutsideSteps,
    load_json,
    refuse_truncated,
    sort_rows,
    warmup_steps,
)
from hlogap.rows.groups import GROUP_KEYS, axis_groups, group_rows
from hlogap.rows.steps import op_step_costs, step_rows
from hlogap.source import ProfileSource, Remote, find_profile, is_url, regular_file
from hlogap.trace.backends.base import platform_of
from hlogap.trace.host_activity import GapActivity
from hlogap.trace.model import Backend, OpKey, Step, merge_steps
from hlogap.trace.reading import Progress, SkippedHost
from hlogap.trace.steps import (
    FIRST_NONE,
    LARGEST_GAPS,
    CollectiveTimes,
    StepTotals,
    collective_times,
    module_spans,
    module_steps,
    step_totals,
)
from hlogap.trace.summary import (
    RunMerger,
    RunSummary,
    Selection,
    StepFrame,
    merge_summaries,
    module_pattern,
    modules_of,
    outside_steps,
    summarize_framed,
    transfer_pairs,
)
from hlogap.trace.timeline import Timeline, host_events
from hlogap.trace.timing import AsyncPairs
from hlogap.trace.unauditable import no_xla_ops
from hlogap.units import printable

# Clocks and late arrivals are judged on the first occurrences of the busiest collectives:
# what travels back is per host this many numbers twice, however long the run.
COLLECTIVES_TIMED = 16
COLLECTIVE_OCCURRENCES = 64

if TYPE_CHECKING:
    from hlogap.advice.base import Finding
    from hlogap.bounds.measured import RaisedFigure
    from hlogap.executors.base import HostExecutor
    from hlogap.hlo.index import HloIndex
    from hlogap.hlo.mesh import Mesh
    from hlogap.memory.static import MemorySection
    from hlogap.report.model import OpRow
    from hlogap.rows.hosts import ClockOffsets


def chip_from_trace(run: RunSummary) -> tuple[Chip, ChipSource, str]:
    """(chip, source, reason) without `--chip`: detected from device planes; CPU: calibrated."""
    if platform_of(run.backend).device_planes:
        # Every device is detected (once per kind of plane and stats): hosts of different
        # chips judged under one chip's peaks read wrong (an MI355X op at 120% of an MI300X).
        seen: dict[tuple[str, str], tuple[Chip, str] | None] = {}
        chips: dict[str, tuple[Chip, str, set[str]]] = {}
        for dev in run.devices:
            kind = (dev.plane.rstrip("0123456789"), repr(sorted(dev.stats.items())))
            if kind not in seen:
                seen[kind] = detect_chip(dev.stats, dev.plane)
            found = seen[kind]
            if found:
                chips.setdefault(found[0].name, (*found, set()))[2].add(dev.host)
        if len(chips) > 1:
            mixed = "; ".join(f"{n} on {', '.join(sorted(h))}" for n, (_, _, h) in chips.items())
            raise InputError(
                f"the hosts of this run are different chips ({mixed}): audit each chip's "
                "hosts apart with --host NAME, or judge them all against one with --chip NAME"
            )
        if chips:
            detected, why, _ = next(iter(chips.values()))
            return detected, "detected", why
        raise InputError(
            f"cannot tell which {run.backend.upper()} this profile ran on; "
            "pass --chip NAME (see `hlogap chips`) or --chip FILE.toml"
        )
    from hlogap.chips.calibrate import calibrated_chip
    from hlogap.chips.database import calibrated_path

    chip = calibrated_chip()
    if chip is None:
        raise InputError(
            "a CPU profile needs a CPU chip: run `hlogap calibrate` or pass --chip FILE.toml"
        )
    return chip, "calibrated", f"calibrated CPU chip {calibrated_path()}"


def audit(
    path: str | Path,
    options: AuditOptions | None = None,
    progress: Progress | None = None,
) -> AuditReport:
    """Audit a profile (logdir, run directory, .xplane.pb or nsys-jax archive) and return the
    report; `progress` hears what is being done (a line at a time). The options are checked
    before anything is read; the audit then runs its stages in order: read, chip, steps,
    frame, cost rows, clocks, memory, advice, step pass, idle host, assemble."""
    options = (options or AuditOptions()).checked()
    selection = Selection(options.device, options.module)
    # A user's chip is checked before the profile is read: a typo fails at once.
    chosen: tuple[Chip, ChipSource, str] | None = (
        (load_chip(options.chip), "user", f"--chip {options.chip}") if options.chip else None
    )
    others = [load_chip(name) for name in options.what_if]  # a typo fails before reading too
    source = find_profile(path, run=options.run, host=options.host)
    if progress is not None:
        progress(f"reading {len(source.files)} host file(s) of {source.path}")
    from hlogap.executors import open_hosts

    with open_hosts(
        source,
        cluster=options.cluster,
        jobs=options.jobs,
        progress=progress,
        skip_bad_hosts=options.skip_bad_hosts,
    ) as hosts:
        report = _audit_hosts(hosts, selection, source, chosen, options, others, progress)
    sort_key = next(k for k in SORT_KEYS if k == options.sort)
    report.ops, report.sort = sort_rows(report.ops, sort_key), sort_key
    report.model_flops = options.model_flops
    group_key = next((k for k in GROUP_KEYS if k == options.group_by), None)
    if group_key:
        report.group_by = group_key
        report.groups = group_rows(
            report.ops, group_key, options.depth, sort_key, report.exposed_by_axis
        )
    if options.cross_check:
        from hlogap.rows.crosscheck import cross_check as run_cross_check

        if progress is not None:
            progress("running xprof's converter on a copy of the profile")
        selected = options.device is not None or options.module is not None
        report.cross_check = run_cross_check(report, selected)
    return report


def _audit_hosts(
    hosts: HostExecutor,
    selection: Selection,
    source: ProfileSource,
    chosen: tuple[Chip, ChipSource, str] | None,
    options: AuditOptions,
    what_if: Sequence[Chip],
    progress: Progress | None,
) -> AuditReport:
    """The audit's stages over the hosts: each host's summary merged in host order, the ops
    costed here, the steps summed on the hosts (re-timed with each named scenario: an action's
    change, another chip's bounds, a mesh axis's collectives gone), the report assembled."""
    from hlogap.hlo.index import HloIndex

    run = _read(hosts, selection, source)
    chip, chip_source, reason = chosen or chip_from_trace(run)
    if chosen is not None:
        run.warnings += _other_chip(run, chip)
    if progress is not None:
        progress(f"costing {int((run.times.events > 0).sum())} ops against {chip.name}")
    modules = _modules(hosts, run)
    steps = _find_steps(hosts, run, selection)
    framed = _frame(hosts, run, selection, steps, options.all_steps)
    # One index: the ops' rows and the memory section share each module's decoded HLO.
    index = HloIndex(modules, Path(options.hlo_dump) if options.hlo_dump else None)
    rows, chip, raised = _cost_rows(hosts, framed, index, chip, what_if)
    clocks = _clocks(hosts, selection, framed.run, rows, steps)
    memory, memory_warnings = _memory(hosts, selection, run, modules, index, chip, steps)
    scenarios = (
        _scenarios(rows, chip, run.backend, index, memory, what_if) if options.advice else None
    )
    totals = (
        [
            host_totals.on_clock(clocks.offsets.of(h))
            for h, host_totals in enumerate(
                hosts.each(
                    step_totals,
                    selection,
                    steps.windows,
                    op_step_costs(rows),
                    steps.dominant,
                    list(scenarios.changes.values()) if scenarios else [],
                    steps.warmup,
                )
            )
        ]
        if steps.steps
        else []
    )
    # What the hosts did in the devices' longest idle gaps (the device idle advice's).
    idle_host = _idle_host(hosts, totals, steps.warmup) if scenarios and totals else {}
    events = (
        Timeline(
            run.hosts,
            hosts.each(host_events, selection),
            min([run.origin_ps or 0, *(s.start_ps for s in steps.steps)]),
        )
        if options.timeline
        else None
    )
    hosts.close()  # the last task is done: the events are freed before the report is built
    report = AuditReport(
        steps=step_rows(framed.run, clocks.aligned_steps, totals),
        path=printable(source.path),
        run=None if source.run is None else printable(source.run),
        files=[printable(f) for f in source.files],
        hosts=source.hosts,
        backend=run.backend,
        chip=chip,
        chip_source=chip_source,
        chip_reason=reason,
        devices=framed.run.times.devices,
        events=int(framed.run.times.events.sum()),
        ops=rows,
        warnings=[*run.warnings, *memory_warnings],
        memory=memory,
        raised=raised,
    )
    report.timeline = events
    _assemble(report, framed, index, clocks, scenarios, totals, steps.warmup, what_if, idle_host)
    return report


def _idle_host(
    hosts: HostExecutor, totals: list[StepTotals], warmup: int
) -> dict[OpKey, tuple[GapActivity, ...]]:
    """Stage idle-host: for each op the devices waited for long enough to be advised on (the
    device idle cause's share of the steady steps' device time), its longest gaps over every
    host and what each one's host threads did meanwhile (`host_activity`, run only on the
    hosts that hold those gaps)."""
    from hlogap.advice.causes.idle import IDLE_SHARE, MAX_OPS
    from hlogap.trace.host_activity import host_activity

    stacked = StepTotals.stacked(totals)
    ran = stacked.first_ps != FIRST_NONE
    wall = int(np.where(ran, stacked.last_ps - stacked.first_ps, 0)[:, warmup:].sum())
    waited = sorted(stacked.waits.idle_before_ps.items(), key=lambda kv: -kv[1])[:MAX_OPS]
    keys = [k for k, ps in waited if wall > 0 and ps >= IDLE_SHARE * wall]
    # Per key: its longest gaps over the hosts, with the host that holds each.
    asked: dict[int, list[tuple[int, int]]] = {}
    chosen: dict[OpKey, list[tuple[int, tuple[int, int]]]] = {}
    for key in keys:
        spans = [(h, s) for h, t in enumerate(totals) for s in t.waits.largest.get(key, ())]
        spans.sort(key=lambda hs: hs[1][0] - hs[1][1])
        chosen[key] = spans[:LARGEST_GAPS]
        for h, span in chosen[key]:
            asked.setdefault(h, []).append(span)
    found = {
        (h, (a.start_ps, a.end_ps)): a
        for h, spans in asked.items()
        for a in hosts.one(h, host_activity, spans)
    }
    return {key: tuple(found[(h, span)] for h, span in spans) for key, spans in chosen.items()}


def _read(hosts: HostExecutor, selection: Selection, source: ProfileSource) -> RunSummary:
    """Stage read: every host's summary (or why it was skipped) merged in host order."""
    merger = RunMerger()
    skipped: list[SkippedHost] = []
    for summary in hosts.summaries(selection):
        if isinstance(summary, SkippedHost):
            skipped.append(summary)
        else:
            merger.add(summary)
    if not merger.summary.hosts:
        raise InputError(f"no host file of {source.path} could be read: {skipped[0].reason}")
    run = merger.finish()
    run.warnings += [f"skipped host {s.host}: {s.reason}" for s in skipped]
    if run.backend == "none":
        raise InputError(
            no_xla_ops(source.files)
            or f"no XLA op events in {source.path} (was the jitted program run while tracing?)"
        )
    if selection.module and not run.times.events.any():  # a typo would pass a CI gate
        raise InputError(_no_module_match(selection.module, {o.key.module for o in run.ops}))
    if selection.device is not None and run.times.devices == 0:
        raise InputError(f"no device {selection.device} in this profile")
    return run


class FoundSteps(NamedTuple):
    """The run's steps on the first host's clock as read (`steps`), and each host's on its
    own (`host_steps`, the windows the host tasks sum in); the module whose executions are the
    steps where no annotation gave them (`dominant`); how many lead as warm-up."""

    steps: list[Step]
    host_steps: list[list[Step]]
    dominant: str | None
    warmup: int

    @property
    def windows(self) -> list[tuple[int, int]]:
        return [(s.start_ps, s.end_ps) for s in self.steps]


def _find_steps(hosts: HostExecutor, run: RunSummary, selection: Selection) -> FoundSteps:
    """Stage steps: the annotated steps, else each execution of the module that took most
    device time (never an autotuning candidate's: nsys-jax's measurements)."""
    steps, host_steps = run.steps, run.host_steps
    dominant: str | None = None
    programs = [m for m in run.module_ps if m not in run.autotuning_modules]
    if not steps and programs:
        dominant = max(programs, key=lambda m: run.module_ps[m])
        spans = hosts.each(module_spans, selection, dominant)
        steps = module_steps([s for on_host in spans for s in on_host.values()])
        host_steps = [module_steps(list(on_host.values())) for on_host in spans]
    # The warm-up steps by the summary's rule, from the steps' windows.
    warmup = warmup_steps([(s.end_ps - s.start_ps) / 1e6 for s in steps])
    return FoundSteps(steps, host_steps, dominant, warmup)


class FramedRun(NamedTuple):
    """The run as the op rows count it (`run`: the steady steps' events, or every event),
    the selection that gives those events, what lay outside the steady steps (ps, [steady,
    warm-up, autotuning, other]; None without steps) and each module's op time over every
    event (ps)."""

    run: RunSummary
    selection: Selection
    outside: np.ndarray | None
    module_ps: dict[tuple[str, str], float]

    @property
    def steady_only(self) -> bool:
        return self.selection.frame is not None


def _frame(
    hosts: HostExecutor,
    run: RunSummary,
    selection: Selection,
    steps: FoundSteps,
    all_steps: bool,
) -> FramedRun:
    """Stage frame: the op rows in the steady steps' frame (warm-up, autotuning and other
    work outside the steps set apart), unless every step is asked for or nothing lies
    outside them: then the run as read."""
    frame = _step_frame(run, steps.steps, steps.host_steps, steps.warmup)
    outside = (
        np.sum(hosts.each(outside_steps, selection._replace(frame=frame)), axis=0)
        if frame is not None
        else None
    )
    # The mesh of a module that ran only outside the steady steps (a jit__psum before them)
    # is still the program's.
    module_ps: dict[tuple[str, str], float] = {}
    for info, ps in zip(run.ops, run.times.measured_ps.tolist(), strict=True):
        key = (info.key.module, info.key.program_id)
        module_ps[key] = module_ps.get(key, 0.0) + ps
    if outside is None or not outside[0] > 0 or all_steps or not outside[1:].any():
        return FramedRun(run, selection, outside, module_ps)
    framed = selection._replace(frame=frame)
    steady = merge_summaries(hosts.each(summarize_framed, framed))
    steady.warnings = run.warnings
    return FramedRun(steady, framed, outside, module_ps)


def _cost_rows(
    hosts: HostExecutor, framed: FramedRun, index: HloIndex, chip: Chip, what_if: Sequence[Chip]
) -> tuple[list[OpRow], Chip, list[RaisedFigure]]:
    """Stage cost rows: each op that ran costed once, a calibrated chip raised to what the
    ops reached, and the ops' rows bounded on the chip (and each `what_if` chip)."""
    from hlogap.bounds.measured import raise_to_ops
    from hlogap.rows.analysis import op_costs, op_rows, timed_costs

    run = framed.run

    def pairs_on_hosts(pairs: list[tuple[OpKey, OpKey]]) -> list[AsyncPairs]:
        per_host = hosts.each(transfer_pairs, framed.selection, pairs)
        return [
            AsyncPairs(
                *(
                    np.concatenate(
                        [
                            (getattr(h[k], name) + offset)
                            if name == "device"
                            else getattr(h[k], name)
                            for h, offset in zip(per_host, run.device_offsets, strict=True)
                        ]
                    )
                    for name in ("device", "begin_ps", "end_ps", "window_ps", "wait_ps")
                )
            )
            for k in range(len(pairs))
        ]

    costed = op_costs(run, index, chip)
    # A calibrated chip's figures are what the machine reached once: an op that ran faster
    # measured it better (a calibration taken while the machine was busy reads low).
    chip, raised = raise_to_ops(chip, timed_costs(run, costed))
    return op_rows(run, index, chip, costed, pairs_on_hosts, what_if), chip, raised


class Clocks(NamedTuple):
    """The hosts' clock offsets (judged on the busiest collectives' first occurrences, whose
    starts and ends `arrivals` holds per host) and the steps laid on the first host's clock."""

    offsets: ClockOffsets
    collectives: list[OpKey]
    arrivals: list[CollectiveTimes]
    aligned_steps: list[Step]


def _clocks(
    hosts: HostExecutor,
    selection: Selection,
    run: RunSummary,
    rows: list[OpRow],
    steps: FoundSteps,
) -> Clocks:
    """Stage clocks: each host's offset from the first, and the steps on one clock."""
    from hlogap.rows.hosts import clock_offsets

    collectives = _busiest_collectives(rows) if len(run.hosts) > 1 else []
    arrivals = (
        hosts.each(collective_times, selection, collectives, COLLECTIVE_OCCURRENCES)
        if collectives
        else []
    )
    offsets = clock_offsets(arrivals, [{s.number: s.start_ps for s in h} for h in steps.host_steps])
    aligned = (
        merge_steps(
            [
                Step(s.number, s.source, s.start_ps - offsets.of(h), s.end_ps - offsets.of(h))
                for h, on_host in enumerate(steps.host_steps)
                for s in on_host
            ]
        )
        if any(offsets.offset_ps)
        else steps.steps
    )
    return Clocks(offsets, collectives, arrivals, aligned)


def _memory(
    hosts: HostExecutor,
    selection: Selection,
    run: RunSummary,
    modules: dict[tuple[str, str], bytes],
    index: HloIndex,
    chip: Chip,
    steps: FoundSteps,
) -> tuple[MemorySection | None, list[str]]:
    """Stage memory: each module that ran (in any step or none), its buffers against the
    device's memory, and the allocators' peaks at run time."""
    ran = {(o.key.module, o.key.program_id) for o, n in zip(run.ops, run.times.events) if n > 0}
    numbered = [(s.number, s.start_ps, s.end_ps) for s in steps.steps]
    # Allocator times count from where the steps' `start_us` count: the first op or step.
    origin_ps = min([run.origin_ps or 0, *(s.start_ps for s in steps.steps)])
    allocators = [
        on_run(peak, host, offset)
        for peaks, host, offset in zip(
            hosts.each(allocator_peaks, selection, origin_ps, numbered),
            run.hosts,
            run.device_offsets,
            strict=True,
        )
        for peak in peaks
    ]
    # The device's own memory where the trace says it (an H100 SXM reports 79.6 GiB, not the
    # data sheet's 80 GB), else the chip's.
    on_device = _device_memory(run)
    memory, warnings = memory_section(modules, ran, on_device or chip.hbm_bytes, index, allocators)
    if on_device and memory is not None and memory.capacity_source == "chip":
        memory = replace(memory, capacity_source="device")
    return memory, warnings


class Scenarios(NamedTuple):
    """What the step pass re-times, by name: each action's change (`action N`), each other
    chip's bounds (`what-if CHIP`), each mesh axis's collectives gone (`axis NAME`): the
    fraction of its time each op would take. `found` are the actions' findings, in order."""

    found: list[Finding]
    changes: dict[str, Mapping[OpKey, float]]


# How the names of `Scenarios.changes` begin (module level: a NamedTuple holds fields only).
SCENARIO_ACTION, SCENARIO_WHAT_IF, SCENARIO_AXIS = "action ", "what-if ", "axis "


def _scenarios(
    rows: list[OpRow],
    chip: Chip,
    backend: Backend,
    index: HloIndex,
    memory: MemorySection | None,
    what_if: Sequence[Chip],
) -> Scenarios:
    """Stage advice: the causes' findings and the changes the step pass re-times."""
    from hlogap.advice.actions import changes, findings
    from hlogap.advice.base import Context
    from hlogap.advice.what_if import ceiling_change

    found = findings(Context(rows, chip, backend, index, memory))
    named: dict[str, Mapping[OpKey, float]] = {
        f"{SCENARIO_ACTION}{k}": change for k, change in enumerate(changes(found), 1)
    }
    for other in what_if:
        ceiling = ceiling_change(rows, other.name)
        if ceiling is not None:
            named[f"{SCENARIO_WHAT_IF}{other.name}"] = ceiling
    # Each mesh axis's collectives shrunk to nothing: what that saves is the time they ran
    # alone (exposed), per device and step.
    for axis, keys in axis_groups(rows).items():
        named[f"{SCENARIO_AXIS}{axis}"] = dict.fromkeys(keys, 0.0)
    return Scenarios(found, named)


def _assemble(
    report: AuditReport,
    framed: FramedRun,
    index: HloIndex,
    clocks: Clocks,
    scenarios: Scenarios | None,
    totals: list[StepTotals],
    warmup: int,
    what_if: Sequence[Chip],
    idle_host: Mapping[OpKey, tuple[GapActivity, ...]] | None = None,
) -> None:
    """Stage assemble: the frame's figures, the hosts, the mesh, the actions and the what-ifs,
    each scenario's saving read by its name (`idle_host`: what the hosts did in the longest
    idle gaps, for the device idle advice)."""
    from hlogap.advice.actions import findings, point_hints, ranked, step_savings
    from hlogap.advice.base import Context
    from hlogap.advice.what_if import what_if as advise_what_if
    from hlogap.rows.hosts import host_skew
    from hlogap.rows.steps import attribute_waits

    rows, steps, chip = report.ops, report.steps, report.chip
    assert chip is not None, "an audited profile always has a chip"
    if framed.outside is not None:
        in_steps, everything = int(framed.outside[:2].sum()), int(framed.outside.sum())
        report.steps_cover_fraction = in_steps / everything if everything else None
        warmup_ps, autotuning_ps, other_ps = framed.outside[1:].tolist()
        report.outside_steps = OutsideSteps(
            warmup_us=warmup_ps / 1e6, autotuning_us=autotuning_ps / 1e6, other_us=other_ps / 1e6
        )
        report.ops_frame = "steady steps" if framed.steady_only else "all"
    report.host_skew = host_skew(
        framed.run, rows, steps, totals, clocks.offsets, clocks.collectives, clocks.arrivals
    )
    stacked = StepTotals.stacked(totals) if totals else None
    names = list(scenarios.changes) if scenarios else []
    # Wall time each action and what-if saves, per step; each axis's device time.
    saved: dict[str, np.ndarray] = {}
    if stacked is not None:
        attribute_waits(rows, stacked.waits)
        axes = {k: n for k, n in enumerate(names) if n.startswith(SCENARIO_AXIS)}
        walled = [k for k in range(len(names)) if k not in axes]
        saved = {names[k]: s for k, s in zip(walled, step_savings(stacked, walled), strict=True)}
        report.exposed_by_axis = {
            n.removeprefix(SCENARIO_AXIS): float(stacked.change_saving_ps[k].sum()) / 1e6
            for k, n in axes.items()
        }
    report.mesh = _busiest_mesh(rows, index, framed.module_ps)
    if report.beats_bounds:
        report.warnings.append(
            f"the ops took less time in all than their bounds on {chip.name} (efficiency "
            f"{report.bound_us / report.measured_us:.0%}): its figures are too low for this "
            "profile; no speedup is claimed"
            if report.measured_us > 0
            else "the ops took no time in all (every event of 0 duration): no speedup is claimed"
        )
    if scenarios is None:  # the advice stage was not asked for (`hlogap memory`)
        return
    # Causes that read the step pass (the ops' idle before them) claim no re-timed saving.
    context = Context(
        rows, chip, report.backend, index, report.memory, steps[warmup:], idle_host=idle_host or {}
    )
    found = scenarios.found
    actions = [f"{SCENARIO_ACTION}{k}" for k in range(1, len(found) + 1)]
    steady_from = report.step_summary.warmup_steps
    report.actions = ranked(
        found,
        np.array([saved[n] for n in actions]).reshape(len(actions), len(steps)) if saved else None,
        steps,
        steady_from,
        findings(context, True),
        steady_only=framed.steady_only,
    )
    point_hints(rows, report.actions)
    report.what_if = [
        advise_what_if(
            rows, other.name, steps, steady_from, saved.get(f"{SCENARIO_WHAT_IF}{other.name}")
        )
        for other in what_if
    ] or None


def _step_frame(
    run: RunSummary, steps: list[Step], host_steps: list[list[Step]], warmup: int
) -> StepFrame | None:
    """Each host's steady and warm-up steps (the first `warmup` of the run's `steps`) as
    windows on its own clock (overlapping steps joined), and the modules that only
    compile-time autotuning ran; None without steps."""
    if not any(host_steps):
        return None

    def joined(steps: list[Step]) -> tuple[tuple[int, int], ...]:
        found: list[tuple[int, int]] = []
        for s in sorted(steps, key=lambda s: s.start_ps):
            if found and s.start_ps <= found[-1][1]:
                found[-1] = (found[-1][0], max(found[-1][1], s.end_ps))
            else:
                found.append((s.start_ps, s.end_ps))
        return tuple(found)

    # The run's warm-up steps by number: every host's steps of those numbers are warm-up.
    early = {s.number for s in steps[:warmup]}
    return StepFrame(
        steady=tuple(
            (name, joined([s for s in on_host if s.number not in early]))
            for name, on_host in zip(run.hosts, host_steps, strict=True)
        ),
        warmup=tuple(
            (name, joined([s for s in on_host if s.number in early]))
            for name, on_host in zip(run.hosts, host_steps, strict=True)
        ),
        outside_modules=frozenset(run.autotuning_modules),
    )


def _device_memory(run: RunSummary) -> float | None:
    """The smallest memory size (bytes) the run's device planes report (`memory_size`), None
    where none does."""
    sizes = [
        float(size)
        for d in run.devices
        for size in [d.stats.get("memory_size")]
        if isinstance(size, (int, float)) and not isinstance(size, bool) and size > 0
    ]
    return min(sizes) if sizes else None


def _other_chip(run: RunSummary, chosen: Chip) -> list[str]:
    """A warning where `--chip` names another chip than the trace's devices say they are (the
    user may mean it: judging a profile against another chip's peaks; `--what-if` is made
    for that)."""
    if not platform_of(run.backend).device_planes:
        return []
    try:
        detected, _, _ = chip_from_trace(run)
    except InputError:  # not detected, or hosts of several chips: nothing to compare with
        return []
    if detected.name == chosen.name:
        return []
    return [
        f"the trace's devices are {detected.display} [{detected.name}], judged against "
        f"--chip {chosen.name} as asked (`--what-if {chosen.name}` compares the two)"
    ]


def _busiest_collectives(rows: list[OpRow]) -> list[OpKey]:
    """The collectives that took the most time (`COLLECTIVES_TIMED` of them): their starts tell
    who arrived last, their ends are events the hosts share. An async collective's start op
    returns at once: its done op is where a host waits."""
    from hlogap.hlo.opcodes import COLLECTIVE_OPCODES

    found = sorted(
        (
            r
            for r in rows
            if r.opcode.removesuffix("-done") in COLLECTIVE_OPCODES and r.measured_us > 0
        ),
        key=lambda r: -r.measured_us,
    )
    return [OpKey(r.module, r.program_id, r.name) for r in found[:COLLECTIVES_TIMED]]


def _busiest_mesh(
    rows: list[OpRow], index: HloIndex, ran: dict[tuple[str, str], float]
) -> Mesh | None:
    """The mesh of the partitioned module that took the most time in the op rows, else of
    the one that took the most time in the whole profile (`ran`: ps by module; None: none ran
    so)."""
    time: dict[tuple[str, str], float] = {}
    for r in rows:
        time[(r.module, r.program_id)] = time.get((r.module, r.program_id), 0.0) + r.measured_us
    ranked = sorted(time, key=lambda k: -time[k])
    for key in [*ranked, *sorted(set(ran) - set(time), key=lambda k: -ran[k])]:
        found = index.mesh(*key)
        if found is not None:
            return found.mesh
    return None


def _modules(hosts: HostExecutor, run: RunSummary) -> dict[tuple[str, str], bytes]:
    """The run's HLO modules, each fetched from the first host that has it."""
    wanted: dict[int, list[tuple[str, str]]] = {}
    for key, host in run.module_hosts.items():
        wanted.setdefault(host, []).append(key)
    modules: dict[tuple[str, str], bytes] = {}
    for host, keys in sorted(wanted.items()):
        modules.update(hosts.one(host, modules_of, keys))
    return modules


def is_json_report(path: str | Path) -> bool:
    """A saved report: a `.json` file or URL, or any file (not `.pb`) whose content starts with
    `{` (a URL's first bytes read through fsspec; a remote logdir is no file and reads none)."""
    name = str(path).split("::", 1)[0].lower()  # a chained URL's first part names the file
    if name.endswith(".json"):
        return True
    if name.endswith(".pb"):
        return False
    if is_url(path):
        remote = Remote(str(path))
        if not remote.call("isfile", remote.path):
            return False
        head: bytes = remote.call("cat_file", remote.path, 0, 64)
        return head.lstrip().startswith(b"{")
    local = Path(path)
    if not local.is_file():
        return False
    try:
        with local.open("rb") as f:
            return f.read(64).lstrip().startswith(b"{")
    except OSError:
        return False


def load_report(
    path: str | Path,
    role: str = "report",
    *,
    chip: str | None = None,
    run: str | None = None,
    host: str | None = None,
    device: int | None = None,
    module: str | None = None,
    progress: Progress | None = None,
    whole: bool = False,
) -> AuditReport:
    """A saved JSON report (a local path or a URL), or a profile audited. `role` ("baseline",
    "BASE"...) names it in errors. `module` (a regex) also filters the ops of a saved report.
    `whole`: refuse a saved report that lists only some of its ops (`check`, `diff`)."""
    if not is_url(path):
        local = Path(path)
        if not local.exists():
            raise InputError(f"{role} not found: {local}")
        if not local.is_dir():
            regular_file(local, role)
    if not is_json_report(path):
        options = AuditOptions(chip=chip, run=run, host=host, device=device, module=module)
        return audit(path, options, progress)
    module_re = module_pattern(module)
    report = load_json(path, role)
    if whole:  # before --module's filter, which forgets what the summary counted
        refuse_truncated(report, role)
    if module_re is None:
        return report
    matched = [o for o in report.ops if module_re.search(o.module)]
    if report.ops and not matched:
        raise InputError(_no_module_match(module or "", {o.module for o in report.ops}))
    return report.only_modules(matched)


def _no_module_match(pattern: str, modules: set[str]) -> str:
    names = sorted(modules)
    listed = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    return f"no op matches --module '{pattern}' (modules: {listed or 'none'})"


def load_pair(
    base: tuple[str, str], new: tuple[str, str], **selection: Any
) -> tuple[AuditReport, AuditReport]:
    """BASE and NEW, each a (path or URL, role): local ones are checked to exist before either
    is audited, so a typo in the second fails at once, for the reason the user can act on. A
    saved report that lists only some of its ops is refused (`report.model.refuse_truncated`)."""
    for path, role in (base, new):
        if not is_url(path) and not Path(path).exists():
            raise InputError(f"{role} not found: {path}")
    return (
        load_report(*base, **selection, whole=True),
        load_report(*new, **selection, whole=True),
    )
