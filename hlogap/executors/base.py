"""Where a run's hosts are read and their per-host work runs.

An executor reads each host file once and keeps its events where they were read (in this
process for a single file; otherwise on the disk of the machine that read them, this one or a
Dask worker's: hlogap.executors.spill); the audit then sends it small tasks, each a function of
one host's `TraceData` (hlogap.trace.summary, hlogap.trace.steps), and gets their small results
back in host order. The audit merges them the same way whichever executor ran them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Concatenate, ParamSpec, TypeVar

from hlogap.trace.model import TraceData
from hlogap.trace.reading import SkippedHost
from hlogap.trace.summary import HostSummary, Selection, summarize

P = ParamSpec("P")
T = TypeVar("T")
HostTask = Callable[Concatenate[TraceData, P], T]


def summarize_read(
    read: TraceData | SkippedHost, selection: Selection, host: str
) -> HostSummary | SkippedHost:
    """The first task on every host: its summary, or why it was skipped."""
    return read if isinstance(read, SkippedHost) else summarize(read, selection, host)


class HostExecutor(ABC):
    """Runs tasks on the hosts of one run; a context manager that frees them on exit."""

    @abstractmethod
    def summaries(self, selection: Selection) -> Iterator[HostSummary | SkippedHost]:
        """Every host's summary (or why it was skipped), in the run's host order. The hosts
        skipped are left out of `each` and `one` from then on."""

    @abstractmethod
    def each(self, task: HostTask[P, T], *args: P.args, **kwargs: P.kwargs) -> list[T]:
        """`task(trace, *args)` on every host read, results in host order."""

    @abstractmethod
    def one(self, host: int, task: HostTask[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`task(trace, *args)` on the `host`-th host read."""

    @abstractmethod
    def close(self) -> None:
        """Free what the hosts hold; closing again does nothing."""

    def __enter__(self) -> HostExecutor:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
