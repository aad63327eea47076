"""The worker plugin that keeps hlogap's failed tasks out of the Dask workers' logs.

A task that raises is logged by its worker ("Compute Failed", with the task's traceback) on the
worker's stderr, which for `--cluster local[:N]` is hlogap's own. The error itself comes back to
hlogap's client and is said there in one line (a traceback only with `--debug`), so the workers'
record of it is dropped: for hlogap's own tasks only, on every worker of the cluster (those that
join later too), and only while the audit runs (a user's scheduler gets its workers' logging
back as it was). Imported only where Dask is installed (hlogap.executors.dask).
"""

from __future__ import annotations

import logging
from typing import Any

from distributed import WorkerPlugin

# The logger a worker reports a failed task on, and the tasks hlogap sends (their keys start
# with the function's name).
WORKER_LOGGER = "distributed.worker"
TASKS = ("read_on_worker-", "on_worker-")


class OwnTaskErrors(logging.Filter):
    """Drops a worker's "Compute Failed" record of one of hlogap's tasks; lets all else by."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Compute Failed"):
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        return not (args and str(args[0]).startswith(TASKS))


# distributed is taken as Any (pyproject.toml's mypy overrides): a subclass of it is allowed here.
class QuietTaskErrors(WorkerPlugin):  # type: ignore[misc]
    """Registered by name for one audit; removed (teardown) when the audit closes its client."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._filter = OwnTaskErrors()

    def setup(self, worker: Any) -> None:
        logging.getLogger(WORKER_LOGGER).addFilter(self._filter)

    def teardown(self, worker: Any) -> None:
        logging.getLogger(WORKER_LOGGER).removeFilter(self._filter)
