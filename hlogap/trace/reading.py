"""Reading one profile file into the timeline, with its backend's reader (hlogap.trace.backends).

Readers walk only the lines holding op events; lines are parsed one at a time
(`hlogap.trace.xspace.Plane`). A large file's device planes are split between forked processes
(the file's bytes are shared copy-on-write, nothing is read twice); their events are merged like
extra hosts.
"""

from __future__ import annotations

import functools
import os
import pickle
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hlogap.errors import HlogapError
from hlogap.trace.backends.base import BackendReader, detect
from hlogap.trace.model import Step, TraceBuilder, TraceData, merge_traces
from hlogap.trace.xspace import (
    HOST_PLANE,
    Plane,
    read_metadata_plane,
    read_planes,
    read_step_annotations,
)

# Below this many bytes of device lines (~100k events) a fork costs more than it saves.
PARALLEL_MIN_BYTES = 6_000_000
_READERS: set[int] = set()  # forked readers not yet collected, by pid


def stop_readers() -> None:
    """Kill the forked readers still running (the caller was interrupted) and reap them."""
    for pid in list(_READERS):
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        _READERS.discard(pid)


class PendingTrace:
    """A file being read by forked processes; `result()` waits for them and merges."""

    def __init__(self, own: TraceData, children: list[tuple[int, int]]) -> None:
        self._own = own
        self._children = children

    def result(self) -> TraceData:
        parts = [_collect(child) for child in self._children]  # planes of one file: never skipped
        return merge_traces([self._own, *(p for p in parts if isinstance(p, TraceData))])


def start_reading(path: str | Path, host: str, workers: int = 1) -> TraceData | PendingTrace:
    """Read one .xplane.pb, or with `workers` > 1, when the file is large and fork is safe
    here, start forked processes reading its device planes and return them pending."""
    planes, warnings = read_planes(path)
    backend = detect(planes)
    metadata = [p for p in planes if p.name == "/host:metadata"]
    groups = _plane_groups(planes, workers) if backend.name != "cpu" and can_fork() else []
    if len(groups) < 2:
        return _read_planes(
            backend, host, metadata, planes, warnings, read_step_annotations(planes)
        )
    # Every reader of device planes also gets the host plane: GPU kernels find their module
    # execution through the host's launch events.
    hosts = [p for p in planes if p.name == HOST_PLANE]
    children = [_fork_reader(backend, host, metadata, group + hosts) for group in groups]
    # This process keeps the modules, the steps and the file's warnings; the children have the
    # events.
    steps = read_step_annotations(planes)
    return PendingTrace(_read_planes(backend, host, metadata, [], warnings, steps), children)


def read_trace(path: str | Path, host: str, workers: int = 1) -> TraceData:
    """Read one .xplane.pb and return its op events (backend "none" when it has none)."""
    reading = start_reading(path, host, workers)
    return reading.result() if isinstance(reading, PendingTrace) else reading


def _read_planes(
    backend: BackendReader,
    host: str,
    metadata: list[Plane],
    planes: Sequence[Plane],
    warnings: list[str],
    steps: list[Step],
) -> TraceData:
    builder = TraceBuilder(host)
    builder.steps = steps
    for plane in metadata:
        read_metadata_plane(plane, builder)
    backend.read(planes, builder)
    return builder.finish(backend.name, warnings)


def can_fork() -> bool:
    # JAX (and other multithreaded runtimes) make fork unsafe: a library caller in such a
    # process reads sequentially.
    return hasattr(os, "fork") and "jax" not in sys.modules


def _plane_groups(planes: list[Plane], workers: int) -> list[list[Plane]]:
    """Device planes in `workers` groups of about equal size (chunks of one plane, which share
    its name, stay together); [] when the file is too small to be worth splitting."""
    by_name: dict[str, list[Plane]] = {}
    sizes: dict[str, int] = {}
    for plane in planes:
        if plane.name.startswith("/device:"):
            by_name.setdefault(plane.name, []).append(plane)
            sizes[plane.name] = sizes.get(plane.name, 0) + plane.size
    if workers < 2 or sum(sizes.values()) < PARALLEL_MIN_BYTES or len(by_name) < 2:
        return []
    groups: list[list[Plane]] = [[] for _ in range(min(workers, len(by_name)))]
    loads = [0] * len(groups)
    for name in sorted(by_name, key=lambda n: -sizes[n]):
        k = loads.index(min(loads))
        groups[k].extend(by_name[name])
        loads[k] += sizes[name]
    return groups


Progress = Callable[[str], None]


@dataclass(frozen=True)
class SkippedHost:
    """A host file left out (`--skip-bad-hosts`), and why."""

    host: str
    reason: str


def read_host(path: str, host: str, skip_bad: bool = False) -> TraceData | SkippedHost:
    """One host's file; with `skip_bad`, a file that cannot be read is skipped with the reason
    instead of failing the whole run."""
    try:
        return read_trace(path, host)
    except HlogapError as exc:
        if not skip_bad:
            raise
        return SkippedHost(host, str(exc))


def read_files(
    pairs: Sequence[tuple[str, str]],
    workers: int,
    progress: Progress | None = None,
    skip_bad: bool = False,
) -> list[TraceData | SkippedHost]:
    """Read whole files ((path, host) each), `workers` at a time in forked processes when fork
    is safe here, else one after the other; results in the order of `pairs`. `progress` hears
    of each file read; `skip_bad`: see `read_host`."""
    results: list[TraceData | SkippedHost] = []

    def done(trace: TraceData | SkippedHost) -> None:
        results.append(trace)
        if progress is not None:
            host = pairs[len(results) - 1][1]
            progress(f"read host {len(results)} of {len(pairs)} ({host})")

    if workers < 2 or not can_fork():
        for path, host in pairs:
            done(read_host(path, host, skip_bad))
        return results
    running: list[tuple[int, int]] = []
    tasks = iter(pairs)
    for pair in tasks:
        running.append(_fork(functools.partial(read_host, *pair, skip_bad)))
        if len(running) == workers:
            break
    try:
        while running:
            done(_collect(running.pop(0)))
            following = next(tasks, None)
            if following is not None:
                running.append(_fork(functools.partial(read_host, *following, skip_bad)))
    except BaseException:  # a bad host file or an interrupt: the other readers end too
        stop_readers()
        raise
    return results


def _fork_reader(
    backend: BackendReader,
    host: str,
    metadata: list[Plane],
    planes: list[Plane],
) -> tuple[int, int]:
    """Fork a child that reads `planes` and writes its pickled result to a pipe."""
    # The file's warnings travel with the parent's part only.
    return _fork(lambda: _read_planes(backend, host, metadata, planes, [], []))


def _fork(task: Callable[[], TraceData | SkippedHost]) -> tuple[int, int]:
    """Fork a child that runs `task` and writes its pickled result (or error) to a pipe."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: leaves only through os._exit, whatever fails
        try:
            # An interrupt or a kill ends a reader at once: the parent reports it.
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.close(read_end)
            try:
                result: object = task()
            except (HlogapError, MemoryError) as exc:  # the user's to act on: raised as is
                result = exc
            except BaseException as exc:  # a bug: reported to the parent, which raises it
                result = RuntimeError(f"{type(exc).__name__}: {exc}")
            with os.fdopen(write_end, "wb") as out:
                out.write(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
        finally:
            os._exit(0)
    os.close(write_end)
    _READERS.add(pid)
    return pid, read_end


def _collect(child: tuple[int, int]) -> TraceData | SkippedHost:
    pid, read_end = child
    with os.fdopen(read_end, "rb") as src:
        data = src.read()
    os.waitpid(pid, 0)
    _READERS.discard(pid)
    result = pickle.loads(data) if data else RuntimeError("a profile reader process died")
    if isinstance(result, BaseException):
        raise result
    return result  # type: ignore[no-any-return]
