"""GPU (NVIDIA CUPTI, AMD ROCm): kernel events on `/device:GPU:N` stream lines.

The host plane's launch events (`cudaLaunchKernel`, `hipModuleLaunchKernel`, ...) carry `hlo_op`
too, but they are host time: only device planes are read. One op may launch several kernels;
its time is the sum of its kernels.
"""

from __future__ import annotations

from collections.abc import Sequence

from hlogap.trace.backends.base import register
from hlogap.trace.backends.stat_events import read_stat_events
from hlogap.trace.model import Backend, TraceBuilder
from hlogap.trace.xspace import DEVICE_PLANE, Plane, plane_stats

# Lines xprof derives from the streams when it post-processes a trace; reading them too would
# count every kernel twice.
DERIVED_LINES = frozenset(
    {
        "XLA Modules",
        "XLA Ops",
        "Async XLA Ops",
        "Steps",
        "XLA TraceMe",
        "Framework Ops",
        "Framework Name Scope",
        "Source code",
        "Launch Stats",
    }
)


def _ordinal(plane: Plane) -> int | None:
    m = DEVICE_PLANE.match(plane.name)
    return int(m.group(2)) if m and m.group(1) == "GPU" else None


class GpuReader:
    name: Backend = "gpu"
    priority = 10

    def claims(self, planes: Sequence[Plane]) -> bool:
        return any(_ordinal(p) is not None for p in planes)

    def read(self, planes: Sequence[Plane], builder: TraceBuilder) -> None:
        for plane in planes:
            ordinal = _ordinal(plane)
            if ordinal is None:
                continue
            device = builder.new_device(plane.name, ordinal, plane_stats(plane))
            lines = (ln for ln in plane.raw_lines if ln.name not in DERIVED_LINES)
            read_stat_events(plane, builder, lines, device, True)


register(GpuReader())
