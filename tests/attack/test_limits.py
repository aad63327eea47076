"""Class 3b, resource limits: processes and memory are bounded whatever the input asks."""

from __future__ import annotations

import os

import numpy as np
import pytest

from hlogap.errors import InputError, UsageError
from hlogap.executors import workers as reader_processes
from hlogap.trace import model
from hlogap.trace.model import OpKey, TraceBuilder


@pytest.mark.parametrize(("jobs", "tasks"), [(1000, 2), (1000, 10_000), (None, 10_000), (1, 50)])
def test_never_more_processes_than_cores_or_tasks(jobs: int | None, tasks: int) -> None:
    workers = reader_processes(jobs, tasks)
    assert 1 <= workers <= min(os.cpu_count() or 1, tasks)


@pytest.mark.parametrize("jobs", [0, -1, -1000])
def test_jobs_below_one_are_a_usage_error(jobs: int) -> None:
    with pytest.raises(UsageError):
        reader_processes(jobs, 4)


def test_the_memory_guard_holds_for_tiny_events(monkeypatch: pytest.MonkeyPatch) -> None:
    # A file of tiny events: each costs ~60x its bytes once read. The guard counts events, not
    # bytes, and stops with an input error before memory runs out.
    monkeypatch.setattr(model, "available_memory", lambda: 100 << 20)  # 100 MiB left
    builder = TraceBuilder("h")
    device = builder.new_device("/host:CPU", 0, {})
    op = builder.op(OpKey("m", "0", "op"))
    n = model.EVENTS_PER_MEMORY_CHECK
    with pytest.raises(InputError, match="out of memory"):
        builder.add_line(device, np.full(n, op), np.arange(n), np.ones(n, dtype=np.int64), gpu=True)


def test_the_memory_guard_lets_a_normal_machine_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model, "available_memory", lambda: 16 << 30)
    builder = TraceBuilder("h")
    device = builder.new_device("/host:CPU", 0, {})
    op = builder.op(OpKey("m", "0", "op"))
    n = model.EVENTS_PER_MEMORY_CHECK
    builder.add_line(device, np.full(n, op), np.arange(n), np.ones(n, dtype=np.int64), gpu=True)
    assert builder.finish("cpu", []).num_events == n
