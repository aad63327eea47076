"""XLA:CPU: one thunk event per executed HLO instruction on `/host:CPU` worker-thread lines.

Thunks carry `hlo_op`, `hlo_module`, `program_id` and `device_ordinal` (with
`--xla_force_host_platform_device_count=N` one process runs N devices on one plane). Marker
events (`end: <op>`, `ThreadpoolListener::*`) carry no `hlo_op` and are skipped. A while thunk
encloses its body's thunks on the same thread, so the while gets self time.
"""

from __future__ import annotations

from collections.abc import Sequence

from hlogap.trace.backends.base import Platform, register
from hlogap.trace.backends.stat_events import read_stat_events
from hlogap.trace.model import Backend, TraceBuilder
from hlogap.trace.xspace import Plane

HOST_PLANE = "/host:CPU"


class CpuReader:
    name: Backend = "cpu"
    priority = 100  # the fallback: a file with no device planes
    # XLA:CPU's thunks run on the host's threads, one event per run; xprof lists none of them.
    platform = Platform(events_are_runs=True, ops_on_host_clock=True, xprof_lists_ops=False)

    def claims(self, planes: Sequence[Plane]) -> bool:
        return True

    def read(self, planes: Sequence[Plane], builder: TraceBuilder) -> None:
        for plane in planes:
            if plane.name == HOST_PLANE:
                read_stat_events(plane, builder, plane.raw_lines, None, False)


register(CpuReader())
