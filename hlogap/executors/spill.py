"""A host's events kept on its worker's disk between tasks, not in the worker's memory.

On a pod the audit comes back to every host several times (summary, transfer pairs, module
spans, allocator peaks, step totals), each time with what the client learnt from all hosts in
between. Holding every host's `TraceData` in memory until the last task made a cluster need the
whole pod's events at once (256 hosts of 300 MB: ~80 GB). Here a worker reads a host, summarizes
it, and writes its columns to its own local directory; each later task maps them back (read-only,
`mmap`: the pages are the kernel's page cache, dropped under pressure and unmapped when the task
ends). A worker's memory is then bounded by the hosts it works on now; its disk holds the
columns (~40 bytes an event). Where the files are not (the task ran on another machine, or
the worker that wrote them is gone) the host file is read again: the same columns, the same
results.
"""

from __future__ import annotations

import mmap
import os
import pickle
import shutil
import socket
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from hlogap.trace.model import TraceData
from hlogap.trace.reading import SkippedHost, read_host
from hlogap.trace.summary import HostSummary, Selection, summarize

# The directory under a worker's own local directory that holds one audit's spilled hosts.
SPILL_PREFIX = "hlogap-spill-"


@dataclass(frozen=True)
class SpilledHost:
    """Where one host's columns lie, and how to read the host again without them."""

    path: str  # the host file, as the client names it
    host: str
    machine: str  # the worker machine whose disk holds `directory`
    worker: str  # the worker's address: later tasks are sent there first
    directory: str


def read_summarize_spill(
    path: str, host: str, skip_bad: bool, selection: Selection, audit: str
) -> tuple[HostSummary | SkippedHost, SpilledHost | None]:
    """The first task on a host, run on a worker: read it, summarize it, write its columns to the
    worker's local directory and let its events go."""
    from distributed import get_worker

    read = read_host(path, host, skip_bad)
    if isinstance(read, SkippedHost):
        return read, None
    summary = summarize(read, selection, host)
    worker = get_worker()
    directory = Path(worker.local_directory) / f"{SPILL_PREFIX}{audit}" / os.urandom(8).hex()
    write_columns(read, directory)
    del read
    return summary, SpilledHost(path, host, socket.gethostname(), worker.address, str(directory))


def on_spilled(spilled: SpilledHost, task: Any, *args: Any, **kwargs: Any) -> Any:
    """`task(trace, *args, **kwargs)` on the spilled host's events, mapped back from disk (or
    the host file read again where the disk is another machine's, or the files are gone)."""
    trace = load_columns(spilled)
    return task(trace, *args, **kwargs)


def write_columns(trace: TraceData, directory: Path) -> None:
    """Each per-event column a raw file; the rest (devices, ops, modules, steps, allocator
    events) one pickle. Columns that are one array (self time is the duration where nothing
    nests) are written once and stay one array when loaded."""
    directory.mkdir(parents=True)
    written: dict[int, str] = {}  # id of an array written -> its field
    layout: dict[str, tuple[str, str, int]] = {}  # field -> (file's field, dtype, length)
    rest: dict[str, Any] = {}
    for f in fields(trace):
        value = getattr(trace, f.name)
        if f.name == "selected":  # a cache: made again by the tasks that need it
            continue
        if not isinstance(value, np.ndarray):
            rest[f.name] = value
            continue
        owner = written.setdefault(id(value), f.name)
        if owner == f.name:
            np.ascontiguousarray(value).tofile(directory / f.name)
        layout[f.name] = (owner, value.dtype.str, len(value))
    with (directory / "rest.pickle").open("wb") as out:
        pickle.dump((layout, rest), out, protocol=pickle.HIGHEST_PROTOCOL)


def load_columns(spilled: SpilledHost) -> TraceData:
    """The host's `TraceData` with its columns mapped read-only from the spill directory."""
    directory = Path(spilled.directory)
    if spilled.machine != socket.gethostname() or not (directory / "rest.pickle").is_file():
        read = read_host(spilled.path, spilled.host)
        assert isinstance(read, TraceData)  # it was read once: a failure now is an error
        return read
    with (directory / "rest.pickle").open("rb") as f:
        layout, rest = pickle.load(f)
    mapped: dict[str, np.ndarray] = {}
    parts: dict[str, Any] = dict(rest)
    for name, (owner, dtype, length) in layout.items():
        if owner not in mapped:
            mapped[owner] = _mapped(directory / owner, np.dtype(dtype), length)
        parts[name] = mapped[owner]
    return TraceData(**parts)


def _mapped(path: Path, dtype: np.dtype[Any], length: int) -> np.ndarray:
    if length == 0:  # an empty file cannot be mapped
        return np.zeros(0, dtype=dtype)
    with path.open("rb") as f:
        pages = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    # The array keeps the mapping open; it is unmapped when the last view of it goes.
    return np.frombuffer(pages, dtype=dtype, count=length)


def remove_spills(audit: str, dask_worker: Any) -> None:
    """Run on every worker when the audit ends (`Client.run` passes the worker): its spilled
    hosts' files deleted."""
    shutil.rmtree(Path(dask_worker.local_directory) / f"{SPILL_PREFIX}{audit}", ignore_errors=True)
