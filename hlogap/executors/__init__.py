"""Executors: where a run's hosts are read and their per-host work runs (base.py); one file
per kind. `open_hosts` picks one from the audit's options."""

from __future__ import annotations

import os

from hlogap.errors import UsageError
from hlogap.executors.base import HostExecutor
from hlogap.source import ProfileSource
from hlogap.trace.reading import Progress


def open_hosts(
    source: ProfileSource,
    *,
    cluster: str | None = None,
    jobs: int | None = None,
    progress: Progress | None = None,
    skip_bad_hosts: bool = False,
) -> HostExecutor:
    """A Dask cluster's workers with `cluster` (an address or `local[:N]`), else this machine's
    processes (`jobs` of them, default one per core)."""
    processes = workers(jobs, len(source.files) if len(source.files) > 1 else 1 << 16)
    if cluster is not None:  # an empty address is refused, never read as none
        from hlogap.executors.dask import DaskHosts

        return DaskHosts(cluster, source, progress, skip_bad_hosts)
    from hlogap.executors.local import LocalHosts

    return LocalHosts(source, processes, progress, skip_bad_hosts)


def workers(jobs: int | None, tasks: int) -> int:
    """Processes to read with: `--jobs` (1 or more, checked with `--cluster` too), default the
    machine's cores; never more than the cores or than there are `tasks` to share (a single
    file's tasks are its planes: no fewer than the cores)."""
    cores = os.cpu_count() or 1
    if jobs is not None and jobs < 1:
        raise UsageError(f"--jobs must be at least 1, not {jobs}")
    return max(1, min(jobs or cores, cores, tasks))
