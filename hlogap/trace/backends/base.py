"""The backend interface: one reader per way a trace stores XLA op executions, found by name.

A backend module (cpu.py, gpu.py, tpu.py, ...) defines a `BackendReader` and passes it to
`register`; `detect` asks each registered reader, in order of `priority`, whether it claims a
file's planes. A new backend is one new module in this package.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

from hlogap._plugins import import_all
from hlogap.trace.model import Backend, TraceBuilder
from hlogap.trace.xspace import Plane


class Platform(NamedTuple):
    """What a backend's profiles hold and how its ops run: each question a later stage asks of
    a backend, answered by the backend's own module (a new backend answers them there)."""

    # The devices are planes of their own that name the chip (detection; `--chip` checked).
    device_planes: bool = False
    # Each op event is one run of the op (XLA:CPU thunks, TPU ops), not one of its kernels.
    events_are_runs: bool = False
    # Op events are on the host's clock, beside the step annotations: a step can be stretched
    # to the device work it launched.
    ops_on_host_clock: bool = False
    # The start of an async collective launches its kernels (NCCL, RCCL) on their own stream:
    # its events are the transfer itself.
    collective_start_is_transfer: bool = False
    # A cache whose bandwidth no data sheet gives (a GPU's L2) lets an op beat its HBM bound.
    unpublished_cache: bool = False
    # XLA can run a program's ops as command buffers (CUDA graphs): fewer launches.
    command_buffers: bool = False
    # xprof's hlo_stats lists the backend's ops (it reads device planes only).
    xprof_lists_ops: bool = True


# A run with no op events: no backend has spoken for it.
NO_PLATFORM = Platform(xprof_lists_ops=False)


class BackendReader(Protocol):
    name: Backend
    priority: int  # lower is asked first: a TPU host also has CPU planes
    platform: Platform

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


def platform_of(backend: Backend) -> Platform:
    """The capabilities of the backend named `backend` (NO_PLATFORM for "none")."""
    reader = next((r for r in registered() if r.name == backend), None)
    return reader.platform if reader is not None else NO_PLATFORM


def detect(planes: Sequence[Plane]) -> BackendReader:
    """The first backend that claims the planes; the CPU reader claims every file."""
    for candidate in registered():
        if candidate.claims(planes):
            return candidate
    raise LookupError("no backend claims this file")  # the CPU backend claims everything
