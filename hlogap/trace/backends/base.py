"""The backend interface: one reader per way a trace stores XLA op executions, found by name.

A backend module (cpu.py, gpu.py, tpu.py, ...) defines a `BackendReader` and passes it to
`register`; `detect` asks each registered reader, in order of `priority`, whether it claims a
file's planes. A new backend is one new module in this package.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from hlogap._plugins import import_all
from hlogap.trace.model import Backend, TraceBuilder
from hlogap.trace.xspace import Plane


class BackendReader(Protocol):
    name: Backend
    priority: int  # lower is asked first: a TPU host also has CPU planes

    def claims(self, planes: Sequence[Plane]) -> bool:
        """Whether this backend's op events are in these planes."""
        ...

    def read(self, planes: Sequence[Plane], builder: TraceBuilder) -> None:
        """Add the op events of `planes` (device planes only, or all) to `builder`."""
        ...


_REGISTRY: dict[str, BackendReader] = {}


def register(reader: BackendReader) -> BackendReader:
    _REGISTRY[reader.name] = reader
    return reader


def registered() -> list[BackendReader]:
    """Every backend of this package, imported on first use, in order of `priority`."""
    import_all("hlogap.trace.backends")
    return sorted(_REGISTRY.values(), key=lambda r: r.priority)


def detect(planes: Sequence[Plane]) -> BackendReader:
    """The first backend that claims the planes; the CPU reader claims every file."""
    for candidate in registered():
        if candidate.claims(planes):
            return candidate
    raise LookupError("no backend claims this file")  # the CPU backend claims everything
