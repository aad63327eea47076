"""The local executor on several hosts (docs/pods.md): each host read in a forked reader,
summarized there, its columns spilled to a temporary directory and mapped back one host at a
time for each later task. The oracle is the host read here, in this process: the summaries, the
columns and the tasks' results must be the same, exactly; and once every host is summarized
this process holds no host's events."""

from __future__ import annotations

import errno
import gc
import multiprocessing.util
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

import hlogap
from hlogap.errors import InputError
from hlogap.executors import open_hosts
from hlogap.executors.spill import SPILL_PREFIX
from hlogap.options import AuditOptions
from hlogap.source import find_profile
from hlogap.trace import reading
from hlogap.trace.model import CACHES, TraceData
from hlogap.trace.reading import read_trace
from hlogap.trace.summary import Selection, summarize
from hlogap.trace.timeline import host_events
from tests.conftest import FIXTURES, write_cpu_chip

HOSTS = 6


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six hosts of the sharded run (collectives, nested ops, allocator events), each host's
    clock moved by its own offset and host03's events made 1.5x as long."""
    from hlogap.proto import xplane_pb2

    source = next((FIXTURES / "sharded_train").rglob("*.xplane.pb")).read_bytes()
    logdir = tmp_path_factory.mktemp("pod") / "tb"
    run = logdir / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    for h in range(HOSTS):
        space = xplane_pb2.XSpace.FromString(source)
        for plane in space.planes:
            for line in plane.lines:
                line.timestamp_ns += (h * 7919) % 50_000 - 20_000
                if h == 3 and plane.name != "/host:metadata":
                    for event in line.events:
                        event.duration_ps = int(event.duration_ps * 1.5)
        (run / f"host{h:02d}.xplane.pb").write_bytes(space.SerializeToString())
    return logdir


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """TMPDIR for this test only: the spill directory must go there and be gone after."""
    # This process's own multiprocessing directory is made first, under the system's: a pool
    # started meanwhile puts its forkserver's socket there, and under pytest's deep tmp_path
    # the socket's path could pass the 107 bytes one may have ("AF_UNIX path too long",
    # where no earlier test of the worker had started a pool).
    multiprocessing.util.get_temp_dir()
    where = tmp_path / "tmp"
    where.mkdir()
    monkeypatch.setenv("TMPDIR", str(where))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    yield where


def _same(a: Any, b: Any) -> bool:
    """Equal to the last bit: arrays by dtype and values, records field by field (but for
    TraceData's caches)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and np.array_equal(a, b)
        )
    if isinstance(a, msgspec.Struct):
        return type(a) is type(b) and all(
            _same(getattr(a, f.name), getattr(b, f.name))
            for f in msgspec.structs.fields(a)
            if f.name not in CACHES
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _spills(where: Path) -> list[Path]:
    """The audits' spill directories in `where` (a multiprocessing pool keeps its own there)."""
    return [p for p in where.iterdir() if p.name.startswith(SPILL_PREFIX)]


def _itself(trace: TraceData) -> TraceData:
    return trace


def _traces_held() -> int:
    return sum(isinstance(o, TraceData) for o in gc.get_objects())


@pytest.mark.parametrize("readers", ["forked", "pool", "this process"])
def test_spilled_hosts_give_the_summaries_columns_and_results_of_hosts_read_here(
    pod: Path, temp_dir: Path, readers: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if readers == "pool":  # what a multithreaded caller (JAX loaded) gets instead of fork
        monkeypatch.setattr("hlogap.executors.local.can_fork", lambda: False)
    source = find_profile(pod)
    selection = Selection(None, None)
    here = [read_trace(f, h) for f, h in zip(source.files, source.hosts)]
    before = _traces_held()
    with open_hosts(source, jobs=1 if readers == "this process" else 2) as hosts:
        summaries = list(hosts.summaries(selection))
        assert _traces_held() == before  # none of the executor's
        assert len(_spills(temp_dir)) == 1
        for summary, trace, host in zip(summaries, here, source.hosts, strict=True):
            assert _same(summary, summarize(trace, selection, host))
        for k, trace in enumerate(here):
            mapped = hosts.one(k, _itself)
            assert _same(mapped, trace)
            assert not mapped.start_ps.flags.writeable  # the pages of the spilled file
        assert _same(hosts.each(host_events, selection), [host_events(t, selection) for t in here])
    assert _spills(temp_dir) == []


# A pool whose second task kills its worker, in a process of its own (were the pool to wait
# for the dead worker's answer, the timeout ends it, not the suite).
WORKER_DIES = """
import os, sys
from hlogap.executors.local import in_pool

def read(k):
    if k == 1:
        os._exit(9)  # as a crash in a C reader ends a worker
    return k

if __name__ == "__main__":
    assert in_pool(read, [(0,), (2,)], 2) == [0, 2]
    try:
        in_pool(read, [(0,), (1,), (2,)], 2)
    except RuntimeError as exc:
        print(exc)
"""


def test_a_pool_worker_that_dies_fails_the_read_and_never_hangs(tmp_path: Path) -> None:
    """The readers' process pool (what a multithreaded caller gets, not fork): a worker that
    dies mid-read is the error a dead forked reader is, where multiprocessing's Pool waited for
    it forever."""
    import subprocess
    import sys

    script = tmp_path / "worker_dies.py"
    script.write_text(WORKER_DIES)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "a profile reader process died"


def test_one_host_is_read_here_and_never_spilled(pod: Path, temp_dir: Path) -> None:
    source = find_profile(next(pod.rglob("host00.xplane.pb")))
    with open_hosts(source, jobs=2) as hosts:
        list(hosts.summaries(Selection(None, None)))
        assert hosts.one(0, _itself).start_ps.flags.writeable
        assert _spills(temp_dir) == []


def test_a_pod_audit_holds_no_host_events_once_summarized(pod: Path, temp_dir: Path) -> None:
    chip = str(write_cpu_chip(temp_dir.parent))
    held: list[int] = []

    def after_reading(line: str) -> None:
        if line.startswith("costing "):  # every host summarized and merged
            held.append(_traces_held())

    before = _traces_held()
    report = hlogap.audit(pod, AuditOptions(chip=chip, jobs=2), progress=after_reading)
    assert held == [before]
    assert report.to_dict() == hlogap.audit(pod, AuditOptions(chip=chip, jobs=1)).to_dict()
    assert _spills(temp_dir) == []


def test_hosts_whose_columns_cannot_be_written_are_read_again(
    pod: Path, temp_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chip = str(write_cpu_chip(temp_dir.parent))
    expected = hlogap.audit(pod, AuditOptions(chip=chip, jobs=2)).to_dict()
    written: list[Path] = []

    def disk_full(trace: TraceData, directory: Path) -> None:
        directory.mkdir(parents=True)
        (directory / "op_index").write_bytes(b"partial")
        written.append(directory)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("hlogap.executors.spill.write_columns", disk_full)
    assert hlogap.audit(pod, AuditOptions(chip=chip, jobs=1)).to_dict() == expected
    assert len(written) == HOSTS and not any(d.exists() for d in written)


# An interrupt while the readers run, in a process of its own: the forked readers run as on
# the command line (where an earlier test imported JAX into this one, a library caller reads in
# a process pool instead: `reading.can_fork`).
INTERRUPTED = """
import sys
import hlogap
from hlogap.trace import reading

def interrupt(line):
    if line.startswith("read host 3 "):
        raise KeyboardInterrupt

try:
    hlogap.audit(sys.argv[1], hlogap.AuditOptions(chip=sys.argv[2], jobs=2), interrupt)
except KeyboardInterrupt:
    sys.exit(0 if not reading._READERS else 5)
sys.exit(6)
"""


def test_a_bad_host_or_an_interrupt_leaves_no_spill_and_no_reader(
    pod: Path, temp_dir: Path, tmp_path: Path
) -> None:
    import subprocess
    import sys

    chip = str(write_cpu_chip(tmp_path))
    child = subprocess.run(
        [sys.executable, "-c", INTERRUPTED, str(pod), chip],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TMPDIR": str(temp_dir)},
    )
    assert child.returncode == 0, child.stderr
    assert _spills(temp_dir) == []
    bad = tmp_path / "bad" / "plugins" / "profile" / "run1"
    bad.mkdir(parents=True)
    hosts = sorted(pod.rglob("*.xplane.pb"))[:3]
    for f in hosts:
        os.link(f, bad / f.name)
    (bad / "host99.xplane.pb").write_bytes(hosts[0].read_bytes()[:3000])
    with pytest.raises(InputError, match="host99"):
        hlogap.audit(bad.parents[2], AuditOptions(chip=chip, jobs=2))
    assert _spills(temp_dir) == [] and not reading._READERS
