"""The words the human-readable renderers share: an audit's header lines (source, chip, steps,
memory, mesh, hosts), the steps' cells, and the lines and cells of diff and check. An audit's
sections are assembled from them once, in hlogap.render.sections."""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING

from hlogap.render.cells import op_totals_line, step_bound_text, step_shares_text
from hlogap.units import fmt_eff, fmt_si, fmt_us, si_scale

if TYPE_CHECKING:
    from hlogap.report.compare import Diff, DiffRow
    from hlogap.report.gate import CheckResult
    from hlogap.report.model import (
        AuditReport,
        StepRow,
    )
    from hlogap.report.schema import AllocatorPeak, Chip
    from hlogap.report.sections import HostSkew


def header_lines(report: AuditReport) -> list[str]:
    """The report's header: where it came from, then the step (wall time) first, then the ops'
    totals, labelled as device time (summed over devices)."""
    chip = report.chip
    assert chip is not None, "an audited profile always has a chip"
    summed = f" x {report.devices} devices" if report.devices > 1 else ""
    return [
        f"profile: {report.path}"
        + (f" (run {report.run})" if report.run else "")
        + f", {report.backend.upper()}, hosts: {', '.join(report.hosts)}",
        f"chip: {chip.display} [{chip.name}], {report.chip_reason}; "
        f"{peaks_text(report)}, HBM {fmt_si(chip.hbm_bw, 'B/s')}",
        *raised_lines(report),
        f"devices: {report.devices}, ops: {len(report.ops)}, events: {report.events}",
        *mesh_lines(report),
        *step_lines(report),
        *frame_lines(report),
        *memory_lines(report),
        op_totals_line(report, summed),
        *skew_lines(report),
    ]


def peaks_text(report: AuditReport) -> str:
    """The chip's matrix peaks by type (`peak f32 43.4 / bf16 41 GFLOP/s`): the types the
    profile's ops were bounded at first, most op time first, then bf16 (or the chip's highest)
    for reference. An op counts where its bound used a matrix peak (its FLOPs over its compute
    time equal it): vector work, and ops mixing both, name no matrix type."""
    chip = report.chip
    assert chip is not None, "an audited profile always has a chip"
    time_by_key: dict[str, float] = {}
    for r in report.ops:
        if r.flops <= 0 or r.t_compute_us <= 0 or not r.dtype:
            continue
        key = chip.matrix_key(r.dtype)
        if math.isclose(r.flops / (r.t_compute_us * 1e-6), chip.peak_flops[key], rel_tol=1e-6):
            time_by_key[key] = time_by_key.get(key, 0.0) + r.measured_us
    keys = sorted(time_by_key, key=lambda k: -time_by_key[k])
    reference = (
        "bf16"
        if "bf16" in chip.peak_flops
        else max(chip.peak_flops, key=chip.peak_flops.__getitem__)
    )
    if reference not in keys:
        keys.append(reference)
    scale, prefix = si_scale(max(chip.peak_flops[k] for k in keys))
    shown = " / ".join(f"{k} {chip.peak_flops[k] / scale:.3g}" for k in keys)
    return f"peak {shown} {prefix}FLOP/s"


def raised_lines(report: AuditReport) -> list[str]:
    """The calibrated figures this profile's ops beat, and what they were raised to."""
    if not report.raised:
        return []
    return [
        "raised to what this profile's ops reached (the calibration measured less: rerun "
        "`hlogap calibrate` on an idle machine): " + "; ".join(r.describe() for r in report.raised)
    ]


def what_if_lines(report: AuditReport) -> list[str]:
    """`--what-if`: each other chip's ceiling, the ops it would spend longest on, the ops at
    this chip's roof already."""
    lines = []
    for w in report.what_if or []:
        ops = (
            "the ops cannot be compared (no op time)"
            if w.speedup is None
            else f"the ops would run {faster_or_slower(w.speedup)} than measured here "
            f"(device time; speedup {w.speedup:.2f})"
        )
        step = (
            f", the step {faster_or_slower(w.step_speedup)} (wall, median)"
            if w.step_speedup is not None
            else f"; step not re-timed: {w.step_unavailable}"
            if w.step_unavailable
            else ""
        )
        line = (
            f"what if on {w.chip}: with every op at its bound there, {ops}{step}; "
            f"longest there: {', '.join(w.new_top_ops[:3])}"
        )
        if w.capped_by:
            line += f"; near this chip's roof already: {', '.join(w.capped_by)}"
        if w.unmodeled_us:
            line += f"; {fmt_us(w.unmodeled_us)} of ops neither chip bounds kept as measured"
        lines.append(line)
    return lines


def faster_or_slower(speedup: float) -> str:
    """A speedup (time now over time then) the way it reads: 1.33 -> "1.33x faster",
    0.65 -> "1.54x slower"."""
    if speedup >= 1:
        return f"{speedup:.2f}x faster"
    return f"{1 / speedup:.2f}x slower" if speedup > 0 else "no faster (nothing measured here)"


def mesh_lines(report: AuditReport) -> list[str]:
    """The mesh the devices ran the busiest partitioned module on, or that none is known."""
    if report.mesh is not None:
        line = f"mesh: {report.mesh.describe()}"
        if 0 < report.devices < report.mesh.devices:  # a host or a selection of a larger run
            line += f"; this profile holds {report.devices} of them"
        return [line]
    if report.devices > 1:
        return [
            "mesh: none found (no sharding or collective in the modules that ran says how the "
            "devices share a program)"
        ]
    return []


def outside_steps(peak: AllocatorPeak) -> str:
    """Where an in-use peak fell between steps, and how near the steps came to it."""
    if peak.steps_peak_bytes is None or peak.steps_peak_step is None:
        return "outside the steps"
    less = peak.in_use_peak_bytes - peak.steps_peak_bytes
    if less <= 0:  # reached before a step began, and still held while it ran
        return f"reached between steps, held into step {peak.steps_peak_step}"
    return (
        f"between steps; step {peak.steps_peak_step} held "
        f"{fmt_si(peak.steps_peak_bytes, 'B')}, {fmt_si(less, 'B')} less"
    )


def capacity_source(source: str, chip: Chip | None = None) -> str:
    """Where a memory capacity comes from, in words (a CPU's memory is the machine's RAM)."""
    if source == "device":
        return "the device's memory, as the trace reports it"
    if source != "chip":
        return f"allocator {source}: in use + free"
    return "this machine's RAM" if chip is not None and chip.vendor == "cpu" else "the chip's HBM"


def memory_lines(report: AuditReport) -> list[str]:
    """The static memory peak of the module that needs most, what makes it up, the largest
    buffer held at it, and the headroom on the device."""
    memory = report.memory
    if memory is None:
        return []
    lines: list[str] = []
    peak = memory.peak
    if peak is not None:
        line = (
            f"memory: static peak {fmt_si(peak.peak_bytes, 'B')} per device ({peak.module}: "
            f"arguments {fmt_si(peak.arguments_bytes, 'B')} + outputs "
            f"{fmt_si(peak.outputs_bytes, 'B')} + temporaries "
            f"{fmt_si(peak.temporaries_bytes, 'B')} - aliased {fmt_si(peak.aliased_bytes, 'B')})"
        )
        if peak.host_bytes:
            line += f"; besides, in host memory: {fmt_si(peak.host_bytes, 'B')}"
        if peak.at_peak:
            top = peak.at_peak[0]
            line += (
                f"; largest held: {top.instruction or '?'} ({top.kind}, {fmt_si(top.bytes, 'B')})"
            )
        lines.append(line)
    held = memory.runtime_peak
    if held is not None:
        when = f"step {held.step}" if held.step is not None else outside_steps(held)
        lines.append(
            f"memory at run time: device {held.device}'s allocator {held.name} held "
            f"{fmt_si(held.in_use_peak_bytes, 'B')} at most "
            f"({', '.join(filter(None, (allocator_parts(held), when)))}); "
            f"its heap's own lifetime peak {fmt_si(held.peak_bytes, 'B')}"
            + (" (the heap alone, no stack)" if held.in_use_stack_bytes else "")
        )
    headroom, capacity = memory.headroom_bytes, memory.capacity_bytes
    if lines and headroom is not None and capacity:
        lines[-1] += (
            f"; capacity {fmt_si(capacity, 'B')} "
            f"({capacity_source(memory.capacity_source, report.chip)}): "
            f"{fmt_si(headroom, 'B')} free"
        )
        scale = memory.batch_scale
        if scale is not None and peak is not None:
            times = f"{scale:.1f}" if scale < 10 else f"{scale:,.0f}"  # 2.5x, 1,998x
            lines[-1] += (
                f"; room for {times}x the batch of {peak.module} "
                f"(if its temporaries and outputs grow with the batch, its arguments not)"
            )
    return lines


def allocator_parts(held: AllocatorPeak) -> str:
    """The in-use peak split into heap and reserved stack (`heap 959 kB + reserved stack
    21.5 GB`; "" without a stack): what reconciles it with the heap's own lifetime peak,
    which counts no stack."""
    stack = held.in_use_stack_bytes
    if not stack:
        return ""
    heap = held.in_use_peak_bytes - stack
    return f"heap {fmt_si(heap, 'B')} + reserved stack {fmt_si(stack, 'B')}"


SKEW_WORTH_PCT = 1.0  # an op slower by less than this on its slowest host is not named


def skew_lines(report: AuditReport) -> list[str]:
    """Several hosts: the slowest one, the step most skewed and the op that is slowest on some
    host."""
    skew = report.host_skew
    if skew is None:
        return []
    over = skew.over_median_pct
    if over is not None and over < SKEW_WORTH_PCT:
        line = (
            f"hosts alike: none spends {SKEW_WORTH_PCT:g}% more time in ops than the median "
            f"host ({fmt_us(skew.median_us)}, device time)"
        )
    else:
        line = (
            f"slowest host: {skew.slowest_host}, "
            f"{fmt_us(skew.slowest_us)} in ops (device time), "
            f"{_pct_text(over)} over the median host"
        )
    steps = [s for s in skew.steps if s.over_median_pct is not None]
    if steps:
        worst_step = max(steps, key=lambda s: s.over_median_pct or 0.0)
        line += (
            f"; most skewed step: {worst_step.step} on {worst_step.slowest_host}, "
            f"{_pct_text(worst_step.over_median_pct)}"
        )
    if skew.ops:
        worst = skew.ops[0]
        if worst.over_median_pct is None or worst.over_median_pct < SKEW_WORTH_PCT:
            line += f"; no op is {SKEW_WORTH_PCT:g}% slower on one host than its median"
        else:
            line += (
                f"; most skewed op: {worst.name} on {worst.slowest_host}, "
                f"{_pct_text(worst.over_median_pct)} over its median host"
            )
    return [line, *_pod_lines(skew)]


SHOWN_HOSTS = 3


def _pod_lines(skew: HostSkew) -> list[str]:
    """The hosts' step times (spread and the slowest), their clock offsets, and who arrives
    last at the busiest collective: what stays readable at hundreds of hosts."""
    lines: list[str] = []
    spread = skew.step_time
    if spread is not None:
        # Listed by time in ops only where one is slower than the median host at all.
        over = skew.over_median_pct
        slow = [f"{h.host} {fmt_us(h.measured_us)}" for h in skew.slowest_hosts[:SHOWN_HOSTS]]
        lines.append(
            f"each host's own step, its first op to its last (wall, median over the steps; "
            f"{spread.hosts} hosts): median {fmt_us(spread.median_us)}, "
            f"p90 {fmt_us(spread.p90_us)}, max "
            f"{fmt_us(spread.max_us)} on {spread.max_host}"
            + (
                f"; slowest hosts by time in ops (device time): {', '.join(slow)}"
                if slow and over is not None and over >= SKEW_WORTH_PCT
                else ""
            )
        )
    offsets = skew.clock_offset_us
    if len(offsets) > 1:
        known = [abs(o) for o in offsets if o is not None]
        sources = set(skew.clock_offset_from)
        text = f"clock offsets removed: {len(known)} of {len(offsets)} hosts"
        if known:
            text += f", largest {fmt_us(max(known))}"
        lines.append(text + (f" (from {', '.join(sorted(sources))})" if sources else ""))
    if skew.collectives:
        top = skew.collectives[0]
        last = [f"{h.host} ({h.times_last}x, {fmt_us(h.median_wait_us)})" for h in top.last_hosts]
        if last:
            lines.append(
                f"last to arrive at {top.name}: {', '.join(last)} "
                "(times last, median wait it caused)"
            )
    return lines


def _pct_text(value: float | None) -> str:
    return f"{value:+.0f}%" if value is not None else "?"


def step_lines(report: AuditReport) -> list[str]:
    """The steps: the median step's wall time and what it would be with every op at its bound,
    where each device's own step time goes, and the FLOP rate achieved."""
    steps = report.steps
    if not steps:
        return ["steps: none found (no step annotation, no module execution to count)"]
    summary = report.step_summary

    def share(time_us: float) -> str:
        wall = summary.device_wall_us
        return fmt_eff(time_us / wall if wall > 0 else None)

    median, skew = summary.step_us, summary.skew_us
    assert median is not None and skew is not None  # there are steps
    step_speedup = report.step_speedup
    span = summary.device_span_fraction
    warmup = summary.warmup_steps
    left_out = (
        f"; {_step_list([s.step for s in steps[:warmup]])} left out: warm-up, "
        f"{fmt_us(sum(s.wall_us for s in steps[:warmup]))}"
        if warmup
        else ""
    )
    first = (
        f"step: {fmt_us(median)} wall (median of {summary.steps}, {steps[0].source}"
        f"{left_out})"
        + (f", device start skew {fmt_us(skew)}" if report.devices > 1 else "")
        + (
            # Each device's first op to last op over the step's wall: a span, not busy time.
            f", each device's first op to last op spans {fmt_eff(span)} of it"
            if span is not None and span < 0.995
            else ""
        )
        + (
            # The median step over the steps' own median ratio: one frame for both figures.
            step_bound_text(report, fmt_us(median / step_speedup), step_speedup)
            if step_speedup
            else ""
        )
    )
    lines = [
        first,
        f"each device's step time: "
        f"{step_shares_text(report, share(summary.at_bound_us), share(summary.lost_in_ops_us))}, "
        f"{share(summary.idle_us)} idle; exposed: collectives {share(summary.exposed_comm_us)}, "
        f"host transfers {share(summary.exposed_host_us)}",
    ]
    rate = report.flops_per_s
    if rate:
        hfu, dtype, mfu = report.hfu, report.flops_dtype, report.mfu
        text = f"achieved {fmt_si(rate, 'FLOP/s')} per device"
        if hfu is not None and dtype and report.chip is not None:
            # The peak the ratio is over: a chip without the type's own runs it on another's
            # (a TPU's f32 dots at its bf16 peak).
            key = report.chip.matrix_key(dtype)
            text += f", HFU {fmt_util(hfu)} of the {key} peak" + (
                f" ({dtype} work)" if key != dtype else ""
            )
        if mfu is not None:
            text += f", MFU {fmt_util(mfu)}"
        lines.append(text)
    return lines


def frame_lines(report: AuditReport) -> list[str]:
    """What the op rows count (the steady steps, or every event) and what lies outside the
    steady steps, in device time; a line when the steps hold under 90% of the op time."""
    outside = report.outside_steps
    lines: list[str] = []
    if outside is not None and outside.total_us > 0:
        parts = [
            f"{what} {fmt_us(us)}"
            for what, us in (
                ("warm-up steps", outside.warmup_us),
                ("compile-time autotuning", outside.autotuning_us),
                ("compilation", outside.compile_us),
                ("outside every step", outside.other_us),
            )
            if us > 0
        ]
        if report.ops_frame == "steady steps":
            lines.append(
                f"ops: the steady steps only; left out, device time: {', '.join(parts)} "
                "(--all-steps counts them)"
            )
        else:
            lines.append(f"ops: every event, outside the steady steps too ({', '.join(parts)})")
    cover = report.steps_cover_fraction
    if cover is not None and cover < 0.9 and outside is not None:
        why = (
            "compile-time autotuning, not the program's steps"
            if outside.autotuning_us > outside.other_us
            else "work no step covers (before the first step, between steps or after the last: "
            "an eval, a checkpoint, or steps the annotations miss)"
        )
        lines.append(
            f"the steps hold only {fmt_eff(cover)} of the devices' op time: most of the rest "
            f"is {why}"
        )
    return lines


def _step_list(numbers: list[int]) -> str:
    """`step 0`, `steps 0-1`."""
    if len(numbers) == 1:
        return f"step {numbers[0]}"
    return f"steps {numbers[0]}-{numbers[-1]}"


def fmt_util(value: float) -> str:
    """A utilisation: one decimal below 10% (0.4% is not 0%), and under 0.05% not 0.0%."""
    if 0 < value < 0.0005:
        return "<0.1%"
    return f"{value:.1%}" if value < 0.1 else f"{value:.0%}"


def steps_overview(report: AuditReport) -> list[str]:
    """What `--steps` prints before its table: how many steps, how long (wall time: median,
    p10, p90), the slowest step and its slowest device, and the drift from first to last."""
    if not report.steps:
        return ["steps: none found (no step annotation, no module execution to count)"]
    import statistics

    # The summary's frame: the steady steps; the warm-up ones are named apart.
    warmup = report.steps[: report.step_summary.warmup_steps]
    steps = report.steady_steps
    walls = sorted(s.wall_us for s in steps)

    def quantile(q: float) -> float:
        return walls[min(int(q * len(walls)), len(walls) - 1)]

    slowest = max(steps, key=lambda s: s.wall_us)
    first, last = steps[0].wall_us, steps[-1].wall_us
    drift = f" ({(last - first) / first:+.1%})" if first > 0 else ""
    device = (
        f", slowest device {slowest.slowest_device}"
        if slowest.slowest_device is not None and report.devices > 1
        else ""
    )
    left_out = (
        f"; {_step_list([s.step for s in warmup])}, "
        f"{fmt_us(sum(s.wall_us for s in warmup))}, left out as warm-up"
        if warmup
        else ""
    )
    return [
        f"steps: {len(report.steps)} ({steps[0].source}{left_out}); wall time of the "
        f"{len(steps)} steady: median {fmt_us(statistics.median(walls))}, p10 "
        f"{fmt_us(quantile(0.1))}, p90 {fmt_us(quantile(0.9))}",
        f"slowest: step {slowest.step}, {fmt_us(slowest.wall_us)}{device}; drift: first steady "
        f"step {fmt_us(first)} -> last {fmt_us(last)}{drift}",
        "columns: wall, at bound (the step with every op at its bound), skew (latest device "
        "start - earliest): wall time; idle, coll, host: share of the devices' own step time "
        "idle, in exposed collectives, in exposed host transfers; dev: the device with the "
        "longest own step",
    ]


STEP_COLUMNS = ("step", "start", "wall", "at bound", "skew", "idle", "coll", "host", "dev")


def step_cells(s: StepRow) -> dict[str, str]:
    """A step's cells: times are wall time, shares are of the devices' own step time."""

    def share(value: float) -> str:
        return fmt_eff(value / s.device_wall_us if s.device_wall_us > 0 else None)

    return {
        "step": str(s.step),
        "start": fmt_us(s.start_us),
        "wall": fmt_us(s.wall_us),
        "at bound": "-" if s.bound_wall_us is None else fmt_us(s.bound_wall_us),
        "skew": fmt_us(s.skew_us),
        "idle": share(s.idle_us),
        "coll": share(s.exposed_comm_us),
        "host": share(s.exposed_host_us),
        "dev": "-" if s.slowest_device is None else str(s.slowest_device),
    }


CHECK_ROWS = 15  # failing ops listed by `check` (one screen); JSON lists them all
DIFF_COLUMNS = (
    "status",
    "op",
    "match",
    "n",
    "base/occ",
    "new/occ",
    "Δ/occ",
    "Δ total",
    "Δ bound",
    "Δ gap",
)
# What the columns mean: status and the /occ columns per occurrence, the rest over all of them.
DIFF_LEGEND = (
    "status, base/occ, new/occ, Δ/occ: one occurrence (the median); "
    "Δ total, Δ bound, Δ gap: all occurrences, NEW - ratio x BASE, where ratio = NEW's "
    "occurrences / BASE's (median over matched ops); mixed: per occurrence and in total "
    "the op moved opposite ways"
)


def signed_us(us: float) -> str:
    return ("+" if us >= 0 else "") + fmt_us(us)


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def occ(row: DiffRow) -> str:
    b = str(row.base.occurrences) if row.base else "-"
    n = str(row.new.occurrences) if row.new else "-"
    return b if b == n else f"{b} -> {n}"


def opt_us(us: float | None) -> str:
    return "-" if us is None else fmt_us(us)


def diff_cells(row: DiffRow, with_module: bool) -> list[str]:
    from hlogap.report.compare import MATCH_METHODS

    name = f"{row.pair.module}/{row.name}" if with_module else row.name
    return [
        row.status,
        name,
        row.pair.method if row.pair.method in MATCH_METHODS else "-",
        occ(row),
        opt_us(row.base_measured_per_occ_us),
        opt_us(row.new_measured_per_occ_us),
        pct(row.measured_per_occ_delta_pct),
        signed_us(row.measured_delta_us),
        signed_us(row.bound_delta_us),
        signed_us(row.gap_delta_us),
    ]


def side_line(label: str, r: AuditReport) -> str:
    chip = r.chip.name if r.chip else "?"
    return (
        f"{label}: {r.path} ({r.kind}, chip {chip}): measured {fmt_us(r.measured_us)}, "
        f"bound {fmt_us(r.bound_us)}, gap {fmt_us(r.gap_us)}, efficiency {fmt_eff(r.efficiency)}"
    )


def diff_step_lines(diff: Diff) -> list[str]:
    """The step first (steady median before -> after), then what each action of BASE promised
    a step and what NEW realized."""
    steps = diff.steps
    if steps is None:
        return []
    speedup = steps.speedup
    how = (
        f"{speedup:.2f}x faster"
        if speedup is not None and speedup >= 1
        else f"{1 / speedup:.2f}x slower"
        if speedup
        else "no step after"
    )
    lines = [
        f"step: {fmt_us(steps.base_step_us)} -> {fmt_us(steps.new_step_us)} "
        f"(steady median, {how}, {pct(None if steps.change is None else steps.change * 100)})"
    ]
    for r in diff.actions_realized():
        promised = r.action.step_saving_us
        realized = r.realized_step_saving_us
        lines.append(
            f"  action {r.rank}, {r.action.cause}: promised "
            f"{'n/a' if promised is None else fmt_us(promised)} a step, realized "
            f"{'n/a' if realized is None else fmt_us(realized)}"
            + (
                " (not realized)"
                if promised and realized is not None and realized < 0.5 * promised
                else ""
            )
        )
    return lines


def diff_header(diff: Diff) -> list[str]:
    from hlogap.report.compare import MATCH_METHODS

    counts = diff.counts()
    matched = sum(counts[m] for m in MATCH_METHODS)
    how = ", ".join(f"{counts[m]} by {m}" for m in MATCH_METHODS if counts[m])
    return [
        *diff_step_lines(diff),
        side_line("base", diff.base),
        side_line("new ", diff.new),
        f"change: measured {signed_us(diff.measured_delta_us)} "
        f"({pct(diff.measured_delta_pct)}), bound {signed_us(diff.bound_delta_us)}, "
        f"gap {signed_us(diff.gap_delta_us)}, efficiency {fmt_eff(diff.base.efficiency)} -> "
        f"{fmt_eff(diff.new.efficiency)}",
        f"ops: {matched} matched"
        + (f" ({how})" if how else "")
        + f", {counts['appeared']} appeared, {counts['vanished']} vanished",
        *memory_change_lines(diff),
        *(f"warning: {w}" for w in diff.warnings),
    ]


def memory_change_lines(diff: Diff) -> list[str]:
    """Each module whose static memory peak (or donation) changed: by how much, a donation
    gained or lost, and the largest buffers now held at the peak that were not before. A module
    compiled more than once is named with its program ids."""
    lines: list[str] = []
    names = Counter(m.module for m in diff.memory)
    for m in diff.memory:
        if not m.changed:
            continue
        name = m.module
        if names[name] > 1:
            ids = m.new_program_id
            if m.base_program_id != m.new_program_id:
                ids = f"{m.base_program_id} -> {ids}"
            name += f" (program {ids})"
        line = (
            f"memory: {name} static peak {fmt_si(m.base_peak_bytes, 'B')} -> "
            f"{fmt_si(m.new_peak_bytes, 'B')} ({'+' if m.delta_bytes >= 0 else '-'}"
            f"{fmt_si(abs(m.delta_bytes), 'B')})"
        )
        if m.new_aliased_bytes < m.base_aliased_bytes:
            lost = m.base_aliased_bytes - m.new_aliased_bytes
            line += f"; donation lost: {fmt_si(lost, 'B')} of inputs no longer reused as outputs"
        elif m.new_aliased_bytes > m.base_aliased_bytes:
            line += f"; donated: {fmt_si(m.new_aliased_bytes - m.base_aliased_bytes, 'B')} more"
        if m.appeared:
            named = ", ".join(
                f"{b.instruction or '?'} ({b.kind}, {fmt_si(b.bytes, 'B')}, {b.shape})"
                for b in m.appeared[:3]
            )
            line += f"; newly held: {named}"
        lines.append(line)
    return lines


def multi_module(rows: list[DiffRow]) -> bool:
    return len({r.pair.module for r in rows}) > 1


def more_line(shown: int, total: int, hint: str, what: str = "ops") -> list[str]:
    return [f"({shown} of {total} {what}; {hint})"] if shown < total else []


def thresholds_line(result: CheckResult) -> str:
    t = result.thresholds
    return f"thresholds: {t.describe()}" + (f" (config: {t.config})" if t.config else "")


def appeared_lines(result: CheckResult) -> list[str]:
    """The ops only one side has (not tiny), each with its share of its side's time."""
    lines = []
    for rows, report, what in (
        (result.appeared, result.diff.new, "new ops"),
        (result.vanished, result.diff.base, "ops gone since the baseline"),
    ):
        if not rows:
            continue
        names = ", ".join(
            f"{r.name} ({r.op.measured_us / report.measured_us:.0%} of the time)" for r in rows[:5]
        )
        extra = len(rows) - 5
        lines.append(
            f"{what} (counted in the totals, not gated one by one): "
            + names
            + (f" and {extra} more" if extra > 0 else "")
        )
    return lines


CROSS_CHECK_ROWS = 10  # differing ops listed under the table; JSON lists them all


def cross_check_lines(report: AuditReport) -> list[str]:
    """`audit --cross-check`: the verdict, then the ops where xprof counts differently."""
    check = report.cross_check
    if check is None:
        return []
    lines = [check.summary()]
    by_reason: dict[str, list[str]] = {}
    for r in check.differing:
        by_reason.setdefault(r.why, []).append(r.name)
    shown = 0
    for why, names in by_reason.items():
        if len(names) > 3:  # one reason for many ops: said once
            lines.append(f"  {len(names)} ops ({', '.join(names[:3])}, ...): {why}")
            shown += 1
            continue
        for name in names:
            if shown < CROSS_CHECK_ROWS:
                lines.append(f"  {name}: {why}")
            shown += 1
    if shown > CROSS_CHECK_ROWS:
        lines.append(f"  ({shown - CROSS_CHECK_ROWS} more in --format json)")
    return lines


def check_notes(result: CheckResult) -> list[str]:
    """What a check's verdict rests on, after its table: new ops, warnings, thresholds, files."""
    diff = result.diff
    return [
        *appeared_lines(result),
        *result.notes,
        *(f"warning: {w}" for w in diff.warnings),
        thresholds_line(result),
        f"baseline: {diff.base.path}; checked: {diff.new.path}",
    ]
