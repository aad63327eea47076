"""A host's events kept on disk between tasks, not in memory: both executors' way to audit a pod.

On a pod the audit comes back to every host several times (summary, transfer pairs, module
spans, allocator peaks, step totals), each time with what the client learnt from all hosts in
between. Holding every host's `TraceData` in memory until the last task made an audit need the
whole pod's events at once (256 hosts of 50 MB: 6 GB in the local process; of 300 MB: ~80 GB
over a cluster). Here a host is read, summarized, and its columns written to a directory (a Dask
worker's local directory, or the local executor's temporary one); each later task maps them
back (read-only, `mmap`: the pages are the kernel's page cache, dropped under pressure and
unmapped when the task ends). Memory is then bounded by the hosts worked on now; the disk holds
the columns (~32 bytes an event). Where the files are not (they could not be written, a Dask
task ran on another machine, or the worker that wrote them is gone) the host file is read
again: the same columns, the same results.
"""

from __future__ import annotations

import mmap
import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np
from msgspec import Struct
from msgspec.structs import fields

from hlogap.trace.model import CACHES, TraceData
from hlogap.trace.reading import SkippedHost, read_host
from hlogap.trace.summary import HostSummary, Selection, summarize

# The prefix of the directory that holds one audit's spilled hosts.
SPILL_PREFIX = "hlogap-spill-"


class SpilledHost(Struct, frozen=True):
    """Where one host's columns lie, and how to read the host again without them."""

    path: str  # the host file, as the audit names it
    host: str
    directory: str


def read_summarize_spill(
    path: str, host: str, skip_bad: bool, selection: Selection, directory: str
) -> HostSummary | SkippedHost:
    """The first task on a host: read it, summarize it, write its columns to `directory` (made
    here) and let its events go."""
    read = read_host(path, host, skip_bad)
    if isinstance(read, SkippedHost):
        return read
    summary = summarize(read, selection, host)
    try:
        write_columns(read, Path(directory))
    except OSError:  # a full disk, say: the later tasks read the host file again instead
        shutil.rmtree(directory, ignore_errors=True)
    return summary


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
        if f.name in CACHES:
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


def load_columns(spilled: SpilledHost, here: bool = True) -> TraceData:
    """The host's `TraceData` with its columns mapped read-only from its directory; read from
    the host file again where they are not (`here` False: the directory is another machine's)."""
    directory = Path(spilled.directory)
    if not here or not (directory / "rest.pickle").is_file():
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
