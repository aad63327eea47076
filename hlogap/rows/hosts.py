"""Per-host skew: which host is slowest, op by op, step by step and in all, against the median
host.

On a pod every host runs the same program; the one that takes longest holds everyone back at
the next collective. For each op that ran on two hosts or more: its measured time on the
slowest host and on the median host; for each step: the hosts' time in ops that start in it;
for the whole run: each host's time in ops. Time is the ops' self time on the host's devices
(the events' sums, as `measured_us`), from the selected events only.

Each host's clock is its own: before hosts' times are compared they are moved onto the first
host's clock, by an offset estimated from events every host shares (`clock_offsets`). At 256
hosts the section stays readable: the slowest few hosts, the spread of per-host step time, and
for each collective the hosts the others waited for.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from hlogap.report.model import OpRow, StepRow
from hlogap.report.sections import (
    CollectiveArrivals,
    HostSkew,
    HostSpread,
    LastArrival,
    OpSkew,
    SlowHost,
    StepSkew,
)
from hlogap.trace.model import OpKey
from hlogap.trace.steps import FIRST_NONE, NOT_RUN, CollectiveTimes, StepTotals
from hlogap.trace.summary import RunSummary

# Hosts listed by name in `slowest_hosts`, and per collective in `last_hosts`: the rest are in
# the distribution (and in `measured_us`).
SLOWEST_SHOWN = 8
LAST_SHOWN = 3


class ClockOffsets(NamedTuple):
    """Per host (the run's files, in order): its clock's offset from the first host's in ps
    (its time minus the first host's at the same instant), or None where no event is shared;
    what each was estimated from ("collectives", "steps"), or why not."""

    offset_ps: list[int | None]
    found_from: list[str]

    def of(self, host: int) -> int:
        """The host's offset, 0 where it is not known: its times are left as they are."""
        return self.offset_ps[host] or 0


def clock_offsets(
    collectives: Sequence[CollectiveTimes], step_starts: Sequence[dict[int, int]]
) -> ClockOffsets:
    """Each host's offset: the median, over the events it shares with the first host, of the
    difference of their times. Shared events are, in this order of preference, the starts of
    steps (a synchronous program starts step k on every host at once, matched by number) and
    the ends of collectives (every host leaves one together, however late it came: matched by
    their order). Steps come first: every host has them, while a collective may span a group
    of hosts only. A host that shares neither has no offset."""
    offsets: list[int | None] = []
    found_from: list[str] = []
    for host in range(len(step_starts)):
        steps = sorted(set(step_starts[host]) & set(step_starts[0]))
        difference = np.array(
            [step_starts[host][k] - step_starts[0][k] for k in steps], dtype=np.int64
        )
        source = "steps"
        if not len(difference) and collectives:
            mine, first = collectives[host].end_ps, collectives[0].end_ps
            shared = (mine != NOT_RUN) & (first != NOT_RUN)
            difference, source = mine[shared] - first[shared], "collectives"
        if not len(difference):
            offsets.append(None)
            found_from.append("no collective or step in common with the first host")
            continue
        offsets.append(int(np.rint(np.median(difference))))
        found_from.append(source)
    return ClockOffsets(offsets, found_from)


def host_skew(
    run: RunSummary,
    rows: list[OpRow],
    steps: list[StepRow],
    totals: list[StepTotals],
    clocks: ClockOffsets,
    collectives: Sequence[OpKey] = (),
    collective_times: Sequence[CollectiveTimes] = (),
) -> HostSkew | None:
    """The `hosts` section (docs/json.md); None when the events come from fewer than two hosts.
    `totals` (on the first host's clock), `clocks` and `collective_times` (of `collectives`)
    are per host, in `run.hosts` order."""
    names = sorted(set(run.hosts))
    if len(names) < 2:
        return None
    # Files of one host name (rare) count as one host.
    of_name = np.array([names.index(h) for h in run.hosts])
    n_hosts, n_ops = len(names), len(run.ops)
    per_op_host = np.zeros((n_ops, n_hosts))
    events = np.zeros((n_ops, n_hosts), dtype=np.int64)
    for k, (measured, count) in enumerate(zip(run.host_measured_ps, run.host_events, strict=True)):
        per_op_host[:, of_name[k]] += measured
        events[:, of_name[k]] += count
    ran = events > 0
    per_host = per_op_host.sum(axis=0) / 1e6
    median_host = float(np.median(per_host))
    slowest = int(np.argmax(per_host))
    op_ids = {o.key: i for i, o in enumerate(run.ops)}
    ops: list[tuple[float, OpSkew]] = []  # (excess over the median, the op's entry)
    for row in rows:
        i = op_ids[OpKey(row.module, row.program_id, row.name)]
        times = per_op_host[i][ran[i]] / 1e6
        if len(times) < 2:
            continue
        on = np.flatnonzero(ran[i])
        entry = OpSkew(row.module, row.program_id, row.name, *_slowest(names, on, times))
        ops.append((entry.slowest_us - entry.median_us, entry))
    ops.sort(key=lambda entry: -entry[0])
    # A name of several files (rare) takes its first file's offset.
    first_file = {name: run.hosts.index(name) for name in names}
    step_time = _host_step_time(names, of_name, totals)
    slowest_first = np.argsort(-per_host, kind="stable")[:SLOWEST_SHOWN]
    ran_steps = np.isfinite(step_time)
    return HostSkew(
        hosts=names,
        clock_offset_us=[
            None if (o := clocks.offset_ps[first_file[h]]) is None else o / 1e6 for h in names
        ],
        clock_offset_from=[clocks.found_from[first_file[h]] for h in names],
        slowest_hosts=[
            SlowHost(
                host=names[h],
                measured_us=float(per_host[h]),
                over_median_pct=_over(float(per_host[h]), median_host),
                step_median_us=float(step_time[h]) if ran_steps[h] else None,
            )
            for h in slowest_first.tolist()
        ],
        step_time=_spread(names, step_time) if ran_steps.any() else None,
        collectives=_last_arrivals(run.hosts, clocks, collectives, collective_times),
        measured_us={h: float(t) for h, t in zip(names, per_host, strict=True)},
        slowest_host=names[slowest],
        slowest_us=float(per_host[slowest]),
        median_us=median_host,
        over_median_pct=_over(float(per_host[slowest]), median_host),
        steps=_step_skew(names, of_name, steps, totals),
        ops=[entry for _, entry in ops],
    )


def _step_skew(
    names: list[str], of_name: np.ndarray, steps: list[StepRow], totals: list[StepTotals]
) -> list[StepSkew]:
    """Per step: the slowest and the median host by time in ops starting in the step."""
    if not steps or len(totals) != len(of_name):
        return []
    per_step_host = np.zeros((len(steps), len(names)))
    for k, host_totals in enumerate(totals):
        per_step_host[:, of_name[k]] += host_totals.measured_ps.sum(axis=0) / 1e6
    everyone = np.arange(len(names))
    return [
        StepSkew(step.step, *_slowest(names, everyone, per_step_host[k]))
        for k, step in enumerate(steps)
    ]


def _host_step_time(names: list[str], of_name: np.ndarray, totals: list[StepTotals]) -> np.ndarray:
    """Per host name, the median over steps of its step time: from its first device's first op
    start to its last device's last op end in the step (NaN: no step ran on it)."""
    wall = np.full(len(names), np.nan)
    if len(totals) != len(of_name):
        return wall
    for k, t in enumerate(totals):
        ran = t.first_ps != FIRST_NONE
        if not ran.any():
            continue
        begin = np.where(ran, t.first_ps, np.iinfo(np.int64).max).min(axis=0)
        end = np.where(ran, t.last_ps, np.iinfo(np.int64).min).max(axis=0)
        stepped = ran.any(axis=0)
        median = float(np.median(end[stepped] - begin[stepped])) / 1e6
        wall[of_name[k]] = np.fmax(wall[of_name[k]], median)
    return wall


def _spread(names: list[str], times: np.ndarray) -> HostSpread:
    """Median, 90th percentile and maximum over the hosts that ran steps, and the host of it."""
    ran = np.flatnonzero(np.isfinite(times))
    values = times[ran]
    worst = int(ran[np.argmax(values)])
    return HostSpread(
        hosts=len(ran),
        median_us=float(np.median(values)),
        p90_us=float(np.percentile(values, 90)),
        max_us=float(values.max()),
        max_host=names[worst],
    )


def _last_arrivals(
    hosts: list[str],
    clocks: ClockOffsets,
    collectives: Sequence[OpKey],
    times: Sequence[CollectiveTimes],
) -> list[CollectiveArrivals]:
    """Per collective, the hosts that arrived last (on the first host's clock; hosts without a
    clock offset are left out) and how long the others waited for them: the latest arrival
    minus the median one, per occurrence that two hosts or more ran."""
    aligned = [h for h in range(len(times)) if clocks.offset_ps[h] is not None]
    if len(aligned) < 2:
        return []
    found: list[tuple[float, CollectiveArrivals]] = []
    for row, key in enumerate(collectives):
        start = np.stack([times[h].start_ps[row] for h in aligned])  # (hosts, occurrences)
        ran = start != NOT_RUN
        arrival = np.where(ran, start - np.array([[clocks.of(h)] for h in aligned]), 0)
        matched = np.flatnonzero(ran.sum(axis=0) >= 2)
        if not len(matched):
            continue
        late = np.where(ran, arrival, np.iinfo(np.int64).min)[:, matched]
        last = late.argmax(axis=0)
        waits = np.array(
            [
                float(late[last[j], j] - np.median(arrival[ran[:, m], m]))
                for j, m in enumerate(matched.tolist())
            ]
        )
        # Where every host arrived at once nobody waited: no host is named for it.
        counts = Counter(last[waits > 0].tolist())
        found.append(
            (
                float(waits.sum()),
                CollectiveArrivals(
                    module=key.module,
                    program_id=key.program_id,
                    name=key.name,
                    occurrences=len(matched),
                    median_wait_us=float(np.median(waits)) / 1e6,
                    last_hosts=[
                        LastArrival(
                            host=hosts[aligned[h]],
                            times_last=n,
                            median_wait_us=float(np.median(waits[last == h])) / 1e6,
                        )
                        for h, n in counts.most_common(LAST_SHOWN)
                    ],
                ),
            )
        )
    found.sort(key=lambda entry: -entry[0])
    return [entry for _, entry in found]


def _slowest(
    names: list[str], on: np.ndarray, times: np.ndarray
) -> tuple[int, str, float, float, float | None]:
    """Over the hosts `on` (their `times`): how many, the slowest, its time, the median time
    and the slowest's excess over it (the last five fields of `OpSkew` and `StepSkew`)."""
    worst = int(on[np.argmax(times)])
    median = float(np.median(times))
    slowest = float(times.max())
    return len(times), names[worst], slowest, median, _over(slowest, median)


def _over(value: float, median: float) -> float | None:
    return 100.0 * (value - median) / median if median > 0 else None
