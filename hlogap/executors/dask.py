"""Hosts read on a Dask cluster (`audit --cluster`, docs/pods.md).

Each host file is read by a worker, where it lives (a local path the worker sees, or an fsspec
URL it opens itself); the worker summarizes it and keeps its columns on its own disk, not in
memory (hlogap.executors.spill), and the audit's later tasks are sent to that worker. Only
summaries and per-step totals come back. A task that runs where the columns are not (the worker
died, or Dask moved the task to another machine) reads the host file again.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hlogap.errors import InputError, UsageError
from hlogap.executors.base import HostExecutor, HostTask, P, T
from hlogap.executors.spill import SPILL_PREFIX, SpilledHost, load_columns, read_summarize_spill
from hlogap.source import ProfileSource
from hlogap.trace.reading import Progress, SkippedHost
from hlogap.trace.summary import HostSummary, Selection

if TYPE_CHECKING:
    from distributed import Client, Future, LocalCluster

# How long a scheduler may take to answer before the audit gives up on it.
CONNECT_TIMEOUT_S = 10


class WorkerSpill(SpilledHost, frozen=True):
    """A host spilled on a worker: which machine's disk holds it, and which worker to ask."""

    machine: str
    worker: str  # the worker's address: later tasks are sent there first


def read_on_worker(
    path: str, host: str, skip_bad: bool, selection: Selection, audit: str
) -> tuple[HostSummary | SkippedHost, WorkerSpill | None]:
    """The first task on a host, run on a worker: its columns spilled to the worker's local
    directory."""
    from distributed import get_worker

    worker = get_worker()
    directory = Path(worker.local_directory) / f"{SPILL_PREFIX}{audit}" / os.urandom(8).hex()
    summary = read_summarize_spill(path, host, skip_bad, selection, str(directory))
    if isinstance(summary, SkippedHost):
        return summary, None
    return summary, WorkerSpill(path, host, str(directory), socket.gethostname(), worker.address)


def on_worker(spilled: WorkerSpill, task: Any, *args: Any, **kwargs: Any) -> Any:
    """`task(trace, *args, **kwargs)` on the spilled host's events, mapped back from disk (or
    the host file read again where the disk is another machine's, or the files are gone)."""
    trace = load_columns(spilled, here=spilled.machine == socket.gethostname())
    return task(trace, *args, **kwargs)


def remove_spills(audit: str, dask_worker: Any) -> None:
    """Run on every worker when the audit ends (`Client.run` passes the worker): its spilled
    hosts' files deleted."""
    shutil.rmtree(Path(dask_worker.local_directory) / f"{SPILL_PREFIX}{audit}", ignore_errors=True)


class DaskHosts(HostExecutor):
    """ADDRESS is a scheduler (`tcp://host:8786`) or `local[:N]`: a cluster of N worker
    processes started here for this audit (default: one per core)."""

    def __init__(
        self,
        address: str,
        source: ProfileSource,
        progress: Progress | None = None,
        skip_bad_hosts: bool = False,
    ) -> None:
        self._progress = progress
        self._closed = False
        self.address = address
        self._cluster: LocalCluster | None = None
        self.client = _connect(address, self)
        if progress is not None:
            workers = len(self.client.scheduler_info().get("workers", {}))
            progress(
                f"Dask cluster {address}: {workers} workers, dashboard {self.client.dashboard_link}"
            )
        self._hosts = list(source.hosts)
        self._files = list(source.files)
        self._skip_bad_hosts = skip_bad_hosts
        self._audit = uuid.uuid4().hex  # names this audit's spill directories on the workers
        self._read: list[WorkerSpill] = []
        # Before any task: a host's failure is one line here, not a traceback in the log of a
        # worker (whose stderr is this one with local[:N]).
        from hlogap.executors.dask_plugin import QuietTaskErrors

        self._quiet = f"hlogap-quiet-{self._audit}"
        try:
            with worker_errors(address):
                self.client.register_plugin(QuietTaskErrors(self._quiet))
        except BaseException:
            self.close()
            raise

    def summaries(self, selection: Selection) -> Iterator[HostSummary | SkippedHost]:
        from distributed import as_completed

        tasks: list[Future] = [
            self.client.submit(
                read_on_worker,
                path,
                host,
                self._skip_bad_hosts,
                selection,
                self._audit,
                pure=False,
            )
            for path, host in zip(self._files, self._hosts)
        ]
        position = {task.key: k for k, task in enumerate(tasks)}
        arrived: dict[int, tuple[HostSummary | SkippedHost, WorkerSpill | None]] = {}
        following = 0
        # Summaries arrive in any order and are handed on in host order: only those that
        # arrive ahead of a slower host wait here.
        for count, task in enumerate(as_completed(tasks), 1):
            k = position[task.key]
            with worker_errors(self.address):
                arrived[k] = task.result()
            task.release()
            if self._progress is not None:
                self._progress(f"read host {count} of {len(tasks)} ({self._hosts[k]})")
            while following in arrived:
                summary, spilled = arrived.pop(following)
                if spilled is not None:
                    self._read.append(spilled)
                following += 1
                yield summary

    def each(self, task: HostTask[P, T], *args: P.args, **kwargs: P.kwargs) -> list[T]:
        shared = self._shared(args)
        futures = [self._submit(spilled, task, shared, kwargs) for spilled in self._read]
        with worker_errors(self.address):
            results: list[T] = self.client.gather(futures)
        return results

    def one(self, host: int, task: HostTask[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        future = self._submit(self._read[host], task, self._shared(args), kwargs)
        with worker_errors(self.address):
            result: T = future.result()
        return result

    def _submit(
        self, spilled: WorkerSpill, task: HostTask[P, T], shared: list[Any], kwargs: Any
    ) -> Any:
        """`task` on one host, sent to the worker whose disk holds its columns first."""
        return self.client.submit(
            on_worker,
            spilled,
            task,
            *shared,
            workers=[spilled.worker],
            allow_other_workers=True,
            pure=False,
            **kwargs,
        )

    def _shared(self, args: tuple[Any, ...]) -> list[Any]:
        """Arguments sent once to the cluster, not once per host (op tables, step windows)."""
        return [
            self.client.scatter([a])[0] if isinstance(a, (dict, list, frozenset)) else a
            for a in args
        ]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._read = []
        # The spilled columns are deleted on every worker that lives; a dead one's local
        # directory goes with it. Best effort: closing after the cluster failed must still
        # close the client and say the failure itself, not this one.
        with suppress(Exception):
            self.client.run(remove_spills, self._audit, on_error="ignore")
        with suppress(Exception):  # the workers' logging as it was (a user's cluster lives on)
            self.client.unregister_worker_plugin(self._quiet)
        self.client.close()
        if self._cluster is not None:
            self._cluster.close()


@contextmanager
def worker_errors(address: str) -> Iterator[None]:
    """Failures of the cluster rather than of a host file, said in one line (exit 3). A host
    file's own errors (`InputError`, naming the host) come back from the worker as they are."""
    from distributed import KilledWorker

    try:
        yield
    except KilledWorker as exc:
        raise InputError(
            f"Dask workers of {address} died each time they ran {exc.task} (out of memory? "
            "see the dashboard and the workers' logs)"
        ) from exc
    except ImportError as exc:  # a task's code could not be loaded on the worker
        raise InputError(
            f"a Dask worker of {address} cannot run hlogap ({exc}): install hlogap, the same "
            "version as here, on every worker"
        ) from exc


def _connect(address: str, hosts: DaskHosts) -> Client:
    if not address.strip():
        raise UsageError("--cluster needs a scheduler address (tcp://host:8786) or local[:N]")
    try:
        from distributed import Client, LocalCluster
    except ImportError as exc:
        raise UsageError(
            "--cluster needs Dask on this machine: pip install 'hlogap[dask]'"
        ) from exc
    if address == "local" or address.startswith("local:"):
        count = address.partition(":")[2]
        if count and (not count.isdigit() or int(count) < 1):
            raise UsageError(f"--cluster local:N needs N >= 1 workers, not '{count}'")
        import logging

        import dask

        # Dask starts workers with MALLOC_TRIM_THRESHOLD_=65536, which also fixes glibc's mmap
        # threshold: every large numpy temporary is then a fresh mmap, and reading a host
        # takes 3.5x as long (measured: 3.9 s instead of 1.1 s for 0.73 M events).
        unset = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}
        with dask.config.set(unset), _workers_ignore_ctrl_c():
            hosts._cluster = LocalCluster(
                n_workers=int(count) if count else None,
                threads_per_worker=1,
                processes=True,
                dashboard_address=":0",  # any free port: two audits at once never collide
                silence_logs=logging.ERROR,
            )
        return Client(hosts._cluster)
    return _remote_client(address)


@contextmanager
def _workers_ignore_ctrl_c() -> Iterator[None]:
    """Local workers started inside ignore SIGINT; this process gets a Ctrl-C pressed meanwhile
    once they are up (and ends, exit 130, closing them).

    A terminal's Ctrl-C goes to every process of its group: workers that took it printed Dask's
    and multiprocessing's tracebacks of an interrupted start. A blocked signal is no help: the
    workers are spawned through `_posixsubprocess`, which clears the child's signal mask. An
    ignored one is kept across fork and exec, so SIGINT is ignored while they start; it is also
    blocked first, in this thread and so in the threads Dask starts from it, and Linux keeps a
    blocked signal pending even while it is ignored: it is delivered when the mask is restored,
    after the handler."""
    _start_resource_tracker()  # first: starting it unblocks SIGINT in the thread that does
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _start_resource_tracker() -> None:
    """multiprocessing's resource tracker, started with its stderr on /dev/null.

    It is the one process of the local cluster that outlives an interrupted audit: the workers'
    queues hold named semaphores, and an audit ended by Ctrl-C exits at once (exit 130,
    `cli/process.exit_now`), leaving them to the tracker, which unlinks them and printed a
    `leaked semaphore objects` warning beside the one line. Starting it ourselves, once and
    before the workers, also keeps its start (which unblocks SIGINT in the calling thread) out
    of `_workers_ignore_ctrl_c`."""
    from multiprocessing import resource_tracker

    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        resource_tracker.ensure_running()
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _remote_client(address: str) -> Client:
    """A client of the scheduler at `address`, or one line naming it (exit 3) within
    CONNECT_TIMEOUT_S: Dask's own timeout does not cover a peer that accepts the connection and
    never answers, so the connection is made in a thread that is left behind if it hangs."""
    from distributed import Client

    found: list[Client | BaseException] = []

    def connect() -> None:
        try:
            found.append(Client(address, timeout=CONNECT_TIMEOUT_S))
        except BaseException as exc:  # whatever the address makes Dask raise (tls, ucx, http)
            found.append(exc)

    thread = threading.Thread(target=connect, name="hlogap-dask-connect", daemon=True)
    thread.start()
    thread.join(CONNECT_TIMEOUT_S + 1)
    if not found:
        raise InputError(f"the Dask scheduler at {address} did not answer in {CONNECT_TIMEOUT_S} s")
    client = found[0]
    if isinstance(client, MemoryError):  # a frame length read from what is not Dask's protocol
        raise InputError(f"{address} does not speak Dask's protocol (is it a Dask scheduler?)")
    if isinstance(client, Exception):
        why = str(client).splitlines()[0] if str(client) else type(client).__name__
        raise InputError(f"cannot reach the Dask scheduler at {address}: {why}") from client
    if isinstance(client, BaseException):
        raise client
    return client
