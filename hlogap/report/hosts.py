"""Per-host skew: which host is slowest, op by op, step by step and in all, against the median
host.

On a pod every host runs the same program; the one that takes longest holds everyone back at
the next collective. For each op that ran on two hosts or more: its measured time on the
slowest host and on the median host; for each step: the hosts' time in ops that start in it;
for the whole run: each host's time in ops. Time is the ops' self time on the host's devices
(the events' sums, as `measured_us`), from the selected events only.
"""

from __future__ import annotations

import numpy as np

from hlogap.report.model import OpRow, StepRow
from hlogap.trace.model import OpKey
from hlogap.trace.steps import StepTotals
from hlogap.trace.summary import RunSummary


def host_skew(
    run: RunSummary, rows: list[OpRow], steps: list[StepRow], totals: list[StepTotals]
) -> dict[str, object]:
    """The `hosts` section (docs/json.md); {} when the events come from fewer than two hosts.
    `totals` are the hosts' step totals, in `run.hosts` order."""
    names = sorted(set(run.hosts))
    if len(names) < 2:
        return {}
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
    ops: list[tuple[float, dict[str, object]]] = []  # (excess over the median, the op's entry)
    for row in rows:
        i = op_ids[OpKey(row.module, row.program_id, row.name)]
        times = per_op_host[i][ran[i]] / 1e6
        if len(times) < 2:
            continue
        on = np.flatnonzero(ran[i])
        entry = _slowest(names, on, times)
        ops.append(
            (
                float(times.max()) - float(np.median(times)),
                {"module": row.module, "program_id": row.program_id, "name": row.name, **entry},
            )
        )
    ops.sort(key=lambda entry: -entry[0])
    return {
        "hosts": names,
        "measured_us": {h: float(t) for h, t in zip(names, per_host, strict=True)},
        "slowest_host": names[slowest],
        "slowest_us": float(per_host[slowest]),
        "median_us": median_host,
        "over_median_pct": _over(float(per_host[slowest]), median_host),
        "steps": _step_skew(names, of_name, steps, totals),
        "ops": [entry for _, entry in ops],
    }


def _step_skew(
    names: list[str], of_name: np.ndarray, steps: list[StepRow], totals: list[StepTotals]
) -> list[dict[str, object]]:
    """Per step: the slowest and the median host by time in ops starting in the step."""
    if not steps or len(totals) != len(of_name):
        return []
    per_step_host = np.zeros((len(steps), len(names)))
    for k, host_totals in enumerate(totals):
        per_step_host[:, of_name[k]] += host_totals.measured_ps.sum(axis=0) / 1e6
    everyone = np.arange(len(names))
    return [
        {"step": step.step, **_slowest(names, everyone, per_step_host[k])}
        for k, step in enumerate(steps)
    ]


def _slowest(names: list[str], on: np.ndarray, times: np.ndarray) -> dict[str, object]:
    worst = int(on[np.argmax(times)])
    median = float(np.median(times))
    return {
        "hosts": len(times),
        "slowest_host": names[worst],
        "slowest_us": float(times.max()),
        "median_us": median,
        "over_median_pct": _over(float(times.max()), median),
    }


def _over(value: float, median: float) -> float | None:
    return 100.0 * (value - median) / median if median > 0 else None
