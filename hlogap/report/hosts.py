"""Per-host skew: which host is slowest, op by op and in all, against the median host.

On a pod every host runs the same program; the one that takes longest holds everyone back at
the next collective. For each op that ran on two hosts or more: its measured time on the
slowest host and on the median host; for the whole run: each host's time in ops. Time is the
ops' self time on the host's devices (the events' sums, as `measured_us`), from the selected
events only.
"""

from __future__ import annotations

import numpy as np

from hlogap.report.model import OpRow
from hlogap.trace.model import TraceData


def host_skew(trace: TraceData, selected: np.ndarray, rows: list[OpRow]) -> dict[str, object]:
    """The `hosts` section (docs/json.md); {} when the events come from fewer than two hosts."""
    names = sorted({d.host for d in trace.devices})
    if len(names) < 2:
        return {}
    host_of_device = np.array([names.index(d.host) for d in trace.devices], dtype=np.int64)
    index = np.flatnonzero(selected)
    host = host_of_device[trace.device_index[index]]
    op = trace.op_index[index].astype(np.int64)
    n_hosts, n_ops = len(names), len(trace.ops)
    per_op_host = np.bincount(
        op * n_hosts + host, weights=trace.self_ps[index], minlength=n_ops * n_hosts
    ).reshape(n_ops, n_hosts)
    ran = np.bincount(op * n_hosts + host, minlength=n_ops * n_hosts).reshape(n_ops, n_hosts) > 0
    per_host = per_op_host.sum(axis=0) / 1e6
    median_host = float(np.median(per_host))
    slowest = int(np.argmax(per_host))
    op_ids = {(o.key.module, o.key.program_id, o.key.name): i for i, o in enumerate(trace.ops)}
    ops: list[tuple[float, dict[str, object]]] = []  # (excess over the median, the op's entry)
    for row in rows:
        i = op_ids[(row.module, row.program_id, row.name)]
        times = per_op_host[i][ran[i]] / 1e6
        if len(times) < 2:
            continue
        on = np.flatnonzero(ran[i])
        worst = int(on[np.argmax(times)])
        median = float(np.median(times))
        ops.append(
            (
                float(times.max()) - median,
                {
                    "module": row.module,
                    "program_id": row.program_id,
                    "name": row.name,
                    "hosts": len(times),
                    "slowest_host": names[worst],
                    "slowest_us": float(times.max()),
                    "median_us": median,
                    "over_median_pct": _over(float(times.max()), median),
                },
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
        "ops": [entry for _, entry in ops],
    }


def _over(value: float, median: float) -> float | None:
    return 100.0 * (value - median) / median if median > 0 else None
