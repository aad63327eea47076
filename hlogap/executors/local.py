"""Hosts read on this machine, tasks run here. One file is read and kept in this process.
Several files are read in forked readers (hlogap.trace.reading), each summarizing its host and
spilling its columns to a temporary directory of this audit (hlogap.executors.spill); each later
task maps one host's columns back at a time, so this process never holds the pod's events
(the bench's 256 hosts of 50 MB: 6 GB when it did, docs/pods.md)."""

from __future__ import annotations

import functools
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hlogap.executors.base import HostExecutor, HostTask, P, T, summarize_read
from hlogap.executors.spill import (
    SPILL_PREFIX,
    SpilledHost,
    load_columns,
    read_summarize_spill,
)
from hlogap.source import ProfileSource
from hlogap.trace.model import TraceData
from hlogap.trace.reading import Progress, SkippedHost, can_fork, in_readers, read_trace
from hlogap.trace.summary import HostSummary, Selection


def in_pool(task: Callable[..., T], tasks: list[tuple[Any, ...]], workers: int) -> list[T]:
    """`task(*t)` for each of `tasks`, in a pool of `workers` processes started without fork:
    the caller is multithreaded (JAX in the same process, say). A worker that dies (a crash in
    a C reader) fails the run as a forked reader's death does, where `multiprocessing.Pool`
    waited for its answer forever."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    methods = multiprocessing.get_all_start_methods()
    start = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    with ProcessPoolExecutor(workers, mp_context=start) as pool:
        try:
            return list(pool.map(task, *zip(*tasks, strict=True)))
        except BrokenProcessPool as exc:
            raise RuntimeError("a profile reader process died") from exc


class LocalHosts(HostExecutor):
    """The hosts are read when their summaries are asked for: several files `workers` at a
    time."""

    def __init__(
        self,
        source: ProfileSource,
        workers: int,
        progress: Progress | None = None,
        skip_bad_hosts: bool = False,
    ) -> None:
        self._pairs = list(zip(source.files, source.hosts))
        self._workers = workers
        self._progress = progress
        self._skip_bad_hosts = skip_bad_hosts
        # One file's events, held here: spilling it would only add the write and the mapping.
        self._traces: list[TraceData] = []
        self._spilled: list[SpilledHost] = []
        self._directory: str | None = None  # the spilled hosts' columns, deleted at close

    def summaries(self, selection: Selection) -> Iterator[HostSummary | SkippedHost]:
        if len(self._pairs) == 1:  # one file: read here (forked readers of its planes were slower)
            trace = read_trace(*self._pairs[0])
            self._traces.append(trace)
            yield summarize_read(trace, selection, self._pairs[0][1])
            return
        # Under the system's temporary directory (TMPDIR), never the profile's.
        self._directory = tempfile.mkdtemp(prefix=SPILL_PREFIX)
        spills = [
            SpilledHost(path, host, str(Path(self._directory) / str(k)))
            for k, (path, host) in enumerate(self._pairs)
        ]
        tasks = [(s.path, s.host, self._skip_bad_hosts, selection, s.directory) for s in spills]
        summaries: list[HostSummary | SkippedHost]
        if self._workers > 1 and not can_fork():
            summaries = in_pool(read_summarize_spill, tasks, self._workers)
        else:
            summaries = in_readers(
                [(t[1], functools.partial(read_summarize_spill, *t)) for t in tasks],
                self._workers,
                self._progress,
            )
        for spilled, summary in zip(spills, summaries, strict=True):
            if not isinstance(summary, SkippedHost):
                self._spilled.append(spilled)
            yield summary

    def each(self, task: HostTask[P, T], *args: P.args, **kwargs: P.kwargs) -> list[T]:
        hosts = len(self._traces) + len(self._spilled)
        return [self.one(k, task, *args, **kwargs) for k in range(hosts)]

    def one(self, host: int, task: HostTask[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        if self._traces:
            return task(self._traces[host], *args, **kwargs)
        # Mapped for this task only: the columns are unmapped when the trace goes.
        return task(load_columns(self._spilled[host]), *args, **kwargs)

    def close(self) -> None:
        self._traces, self._spilled = [], []
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None
