"""Hosts read on this machine: one file in this process, several files in forked readers
(hlogap.trace.reading); their events stay in this process and tasks run here."""

from __future__ import annotations

from collections.abc import Iterator

from hlogap.executors.base import HostExecutor, HostTask, P, T, summarize_read
from hlogap.source import ProfileSource
from hlogap.trace.model import TraceData
from hlogap.trace.reading import (
    Progress,
    SkippedHost,
    can_fork,
    read_files,
    read_host,
    read_trace,
)
from hlogap.trace.summary import HostSummary, Selection


def _read_one(args: tuple[str, str, bool]) -> TraceData | SkippedHost:
    return read_host(*args)


class LocalHosts(HostExecutor):
    """The hosts are read when it is made: several files `workers` at a time."""

    def __init__(
        self,
        source: ProfileSource,
        workers: int,
        progress: Progress | None = None,
        skip_bad_hosts: bool = False,
    ) -> None:
        self._hosts = list(source.hosts)
        pairs = list(zip(source.files, source.hosts))
        self._reads: list[TraceData | SkippedHost]
        if len(pairs) == 1:  # one file: read here (forked readers of its planes were slower)
            self._reads = [read_trace(*pairs[0])]
        elif workers > 1 and not can_fork():
            # Not fork: the caller is multithreaded (JAX in the same process, say).
            import multiprocessing

            methods = multiprocessing.get_all_start_methods()
            method = "forkserver" if "forkserver" in methods else "spawn"
            with multiprocessing.get_context(method).Pool(workers) as pool:
                tasks = [(path, host, skip_bad_hosts) for path, host in pairs]
                self._reads = list(pool.map(_read_one, tasks, chunksize=1))
        else:
            self._reads = list(read_files(pairs, workers, progress, skip_bad_hosts))
        self._traces: list[TraceData] = []

    def summaries(self, selection: Selection) -> Iterator[HostSummary | SkippedHost]:
        for k, trace in enumerate(self._reads):
            if isinstance(trace, TraceData):
                self._traces.append(trace)
            yield summarize_read(trace, selection, self._hosts[k])

    def each(self, task: HostTask[P, T], *args: P.args, **kwargs: P.kwargs) -> list[T]:
        return [task(trace, *args, **kwargs) for trace in self._traces]

    def one(self, host: int, task: HostTask[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        return task(self._traces[host], *args, **kwargs)

    def close(self) -> None:
        self._reads, self._traces = [], []
