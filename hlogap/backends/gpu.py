"""GPU (NVIDIA CUPTI, AMD ROCm): kernel events on `/device:GPU:N` stream lines.

The host plane's launch events (`cudaLaunchKernel`, `hipModuleLaunchKernel`, ...) carry `hlo_op`
too, but they are host time: only device planes are read. One op may launch several kernels;
its time is the sum of its kernels.
"""

from __future__ import annotations

from collections.abc import Sequence

from hlogap.backends.stat_events import read_stat_events
from hlogap.xplane import DEVICE_PLANE, Plane, TraceBuilder

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


def read(planes: Sequence[Plane], builder: TraceBuilder) -> None:
    for plane in planes:
        m = DEVICE_PLANE.match(plane.name)
        if not m or m.group(1) != "GPU":
            continue
        lines = (ln for ln in plane.raw_lines if ln.name not in DERIVED_LINES)
        read_stat_events(plane, builder, lines, builder.new_device(plane, int(m.group(2))), True)
