"""Reading one profile file into the timeline, with its backend's reader (hlogap.trace.backends).

Readers walk only the lines holding op events; lines are parsed one at a time
(`hlogap.trace.xspace.Plane`). One file is read by one process: since its events are decoded in C
(`hlogap.trace.columnar`), splitting a file's device planes between forked readers made every
measured size slower on 2 cores (0.3 M events 0.9-1.1 s either way, 3 M 3.0 s vs 3.6, 10 M
11.4 s vs 13.0) and always took more memory (10 M: 1.2 GB vs 1.8 GB in all). Several host files
are read in parallel (`in_readers`).
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple, TypeVar, cast

from hlogap.errors import EXIT_INPUT, HlogapError, InputError
from hlogap.source import is_nsys_archive
from hlogap.trace.backends.base import detect
from hlogap.trace.model import TraceBuilder, TraceData
from hlogap.trace.steps import launched_steps
from hlogap.trace.xspace import (
    read_allocator_events,
    read_metadata_plane,
    read_planes,
    read_step_annotations,
)

R = TypeVar("R")
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


def read_trace(path: str | Path, host: str) -> TraceData:
    """Read one .xplane.pb (or nsys-jax archive) and return its op events (backend "none"
    when it has none)."""
    if is_nsys_archive(path):
        # Imported here: an xplane's audit needs neither the nsys-jax reader nor zipfile.
        from hlogap.trace.nsys import read_archive

        return read_archive(path, host)
    planes, warnings = read_planes(path)
    backend = detect(planes)
    builder = TraceBuilder(host)
    builder.steps = read_step_annotations(planes)
    builder.allocations = read_allocator_events(planes)
    for plane in planes:
        if plane.name == "/host:metadata":
            read_metadata_plane(plane, builder)
    backend.read(planes, builder)
    # The planes' lines (about the file's size) are freed before the events are joined and
    # grouped: the peak at 3 M GPU events 500 -> 397 MB.
    del planes
    builder.events_are_runs = builder.events_are_runs or backend.platform.events_are_runs
    trace = builder.finish(backend.name, warnings)
    trace.steps = launched_steps(trace)
    trace.path = str(path)
    return trace


def can_fork() -> bool:
    # JAX (and other multithreaded runtimes) make fork unsafe: a library caller in such a
    # process reads sequentially.
    return hasattr(os, "fork") and "jax" not in sys.modules


Progress = Callable[[str], None]


class SkippedHost(NamedTuple):
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


def in_readers(
    tasks: Sequence[tuple[str, Callable[[], R]]],
    workers: int,
    progress: Progress | None = None,
) -> list[R]:
    """Run each (host, task) pair's task, one per host file, `workers` at a time in forked
    processes when fork is safe here, else one after the other; results in the order of
    `tasks`. `progress` hears of each host done."""
    results: list[R] = []

    def done(result: R) -> None:
        results.append(result)
        if progress is not None:
            host = tasks[len(results) - 1][0]
            progress(f"read host {len(results)} of {len(tasks)} ({host})")

    if workers < 2 or not can_fork():
        for _, task in tasks:
            done(task())
        return results
    running: list[tuple[int, int]] = []
    todo = iter(tasks)
    for _, task in todo:
        running.append(_fork(task))
        if len(running) == workers:
            break
    try:
        while running:
            done(cast(R, _collect(running.pop(0))))
            following = next(todo, None)
            if following is not None:
                running.append(_fork(following[1]))
    except BaseException:  # a bad host file or an interrupt: the other readers end too
        stop_readers()
        raise
    return results


def _fork(task: Callable[[], object]) -> tuple[int, int]:
    """Fork a child that runs `task` and writes its pickled result (or error) to a pipe."""
    read_end, write_end = os.pipe()
    # Held during the fork: one arriving while Python runs its at-fork hooks (logging's) is
    # swallowed there, and the interrupt would be lost; it is delivered once both sides are set.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    pid = os.fork()
    if pid == 0:  # the child: leaves only through os._exit, whatever fails
        try:
            # An interrupt or a kill ends a reader at once: the parent reports it.
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
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
    signal.pthread_sigmask(signal.SIG_SETMASK, held)
    return pid, read_end


def _collect(child: tuple[int, int]) -> object:
    pid, read_end = child
    with os.fdopen(read_end, "rb") as src:
        data = src.read()
    _, status = os.waitpid(pid, 0)
    _READERS.discard(pid)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGINT:
        raise KeyboardInterrupt  # the interrupt reached the readers first: exit 130
    if not data and os.WIFEXITED(status) and os.WEXITSTATUS(status) == EXIT_INPUT:
        # Its file was truncated while mapped: it said so on stderr (hlogap.trace.xspace).
        raise InputError("a profile reader stopped: its file changed while it was read")
    result = pickle.loads(data) if data else RuntimeError("a profile reader process died")
    if isinstance(result, BaseException):
        raise result
    return result
