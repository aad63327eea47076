"""Backend readers: one module per way a trace stores XLA op executions.

Each module has `read(space, builder)`, which walks only the planes and lines holding op events.
"""

from __future__ import annotations

from pathlib import Path

from hlogap.backends import cpu, gpu, tpu
from hlogap.xplane import TraceBuilder, TraceData, detect_backend, read_metadata_plane, read_xspace

READERS = {"tpu": tpu.read, "gpu": gpu.read, "cpu": cpu.read}


def read_trace(path: str | Path, host: str) -> TraceData:
    """Parse one .xplane.pb and return its op events (backend "none" when it has none)."""
    space = read_xspace(path)
    backend = detect_backend(space)
    builder = TraceBuilder(host)
    for plane in space.planes:
        if plane.name == "/host:metadata":
            read_metadata_plane(plane, builder)
    READERS[backend](space, builder)
    return builder.finish(backend, list(space.warnings))
