"""Pods (issue 33, docs/pods.md): 64 small hosts on a Dask cluster that the test starts itself
(`dask scheduler` and two `dask worker` processes), each host's clock shifted by its own offset
and three hosts made slow. The local audit of the same files is the oracle; the offsets are
known, so are the slow hosts."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import hlogap
from hlogap.options import AuditOptions
from hlogap.trace.model import TraceData
from tests.conftest import FIXTURES, write_cpu_chip

distributed = pytest.importorskip("distributed")

HOSTS = 64
SLOW_HOSTS = {"host07", "host33", "host58"}
SCHEDULER = [sys.executable, "-m", "distributed.cli.dask_scheduler", "--dashboard-address", ":0"]
WORKER = [sys.executable, "-m", "distributed.cli.dask_worker", "--local-directory"]


def _offset_ns(host: int) -> int:
    """Host h's clock runs this far ahead of host00's: not a multiple of anything round, and
    larger than a step's ops on some hosts, negative on others."""
    return (host * 7919) % 50_000 - 20_000


def _host_file(source: bytes, host: int) -> bytes:
    from hlogap.proto import xplane_pb2

    space = xplane_pb2.XSpace.FromString(source)
    slow = f"host{host:02d}" in SLOW_HOSTS
    for plane in space.planes:
        for line in plane.lines:
            line.timestamp_ns += _offset_ns(host)
            if slow and plane.name != "/host:metadata":
                for event in line.events:
                    event.duration_ps = int(event.duration_ps * 1.5)
    return space.SerializeToString()


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = next((FIXTURES / "mlp_train").rglob("*.xplane.pb")).read_bytes()
    logdir = tmp_path_factory.mktemp("pod64") / "tb"
    run = logdir / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    for h in range(HOSTS):
        (run / f"host{h:02d}.xplane.pb").write_bytes(_host_file(source, h))
    return logdir


@pytest.fixture(scope="module")
def chip(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(write_cpu_chip(tmp_path_factory.mktemp("chip")))


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A scheduler and two workers, each its own process, as on a real cluster."""
    where = tmp_path_factory.mktemp("dask")
    address_file = where / "scheduler.json"
    started = [
        subprocess.Popen(
            [*SCHEDULER, "--scheduler-file", str(address_file), "--port", "0"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        deadline = time.monotonic() + 60
        while not address_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        for _ in range(2):
            started.append(
                subprocess.Popen(
                    [*WORKER, str(where), "--scheduler-file", str(address_file), "--nthreads", "1"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        with distributed.Client(scheduler_file=str(address_file), timeout=60) as client:
            client.wait_for_workers(2, timeout=60)
        yield json.loads(address_file.read_text())["address"]
    finally:
        for process in reversed(started):
            process.terminate()
            process.wait(timeout=30)


@pytest.fixture(scope="module")
def local_report(pod: Path, chip: str) -> dict[str, object]:
    return hlogap.audit(pod, AuditOptions(chip=chip, jobs=2)).to_dict()


def _traces_held(dask_worker: object) -> int:
    import gc

    return sum(isinstance(o, TraceData) for o in gc.get_objects())


def test_a_64_host_cluster_audit_equals_the_local_one_and_workers_hold_no_events(
    pod: Path, chip: str, scheduler: str, local_report: dict[str, object]
) -> None:
    held: list[dict[str, int]] = []

    def after_reading(line: str) -> None:
        # Every host is read and summarized: no worker holds a host's events any more.
        if line.startswith(f"read host {HOSTS} of {HOSTS} "):
            with distributed.Client(scheduler) as client:
                held.append(client.run(_traces_held))

    report = hlogap.audit(pod, AuditOptions(chip=chip, cluster=scheduler), progress=after_reading)
    assert report.to_dict() == local_report
    assert held and len(held[0]) == 2 and set(held[0].values()) == {0}


def test_injected_clock_offsets_are_recovered_within_1_us(local_report: dict[str, object]) -> None:
    hosts = local_report["hosts"]
    assert isinstance(hosts, dict)
    offsets = hosts["clock_offset_us"]
    assert hosts["clock_offset_from"] == ["steps"] * HOSTS
    for h, found in enumerate(offsets):
        assert abs(found - (_offset_ns(h) - _offset_ns(0)) / 1e3) < 1.0, (h, found)


def test_skew_is_measured_after_the_offsets_are_removed(local_report: dict[str, object]) -> None:
    # Every host starts each step at the same instant once its clock is aligned: the steps'
    # device skew is then zero, where the offsets alone would make it ~50 us.
    steps = local_report["steps"]
    assert isinstance(steps, list) and steps
    assert all(abs(s["skew_us"]) < 1.0 for s in steps)
    spread = max(_offset_ns(h) for h in range(HOSTS)) - min(_offset_ns(h) for h in range(HOSTS))
    assert spread > 40_000


def test_the_slow_hosts_are_named(local_report: dict[str, object]) -> None:
    hosts = local_report["hosts"]
    assert isinstance(hosts, dict)
    slowest = hosts["slowest_hosts"]
    assert {s["host"] for s in slowest[: len(SLOW_HOSTS)]} == SLOW_HOSTS
    assert all(s["over_median_pct"] > 10 for s in slowest[: len(SLOW_HOSTS)])
    step_time = hosts["step_time"]
    assert step_time["hosts"] == HOSTS and step_time["max_host"] in SLOW_HOSTS
    assert step_time["median_us"] <= step_time["p90_us"] <= step_time["max_us"]


def _late_at_collectives(source: bytes, host: int, collectives: set[str]) -> bytes:
    """A host file of the sharded fixture, its clock shifted; each event of `collectives`
    starts later (by half its time), ending when it did: the host the others wait for."""
    from hlogap.proto import xplane_pb2

    space = xplane_pb2.XSpace.FromString(source)
    for plane in space.planes:
        for line in plane.lines:
            line.timestamp_ns += _offset_ns(host)
            for event in line.events:
                if plane.event_metadata[event.metadata_id].name in collectives:
                    event.offset_ps += event.duration_ps // 2
                    event.duration_ps -= event.duration_ps // 2
    return space.SerializeToString()


def test_the_host_that_arrives_last_at_collectives_is_named(tmp_path: Path, chip: str) -> None:
    from hlogap.hlo.opcodes import COLLECTIVE_OPCODES

    fixture = FIXTURES / "sharded_train"
    alone = hlogap.audit(fixture, AuditOptions(chip=chip, hlo_dump=fixture / "dump"))
    collectives = {
        o.name for o in alone.ops if o.opcode.removesuffix("-done") in COLLECTIVE_OPCODES
    }
    source = next(fixture.rglob("*.xplane.pb")).read_bytes()
    run = tmp_path / "tb" / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    for h in range(4):
        late = collectives if h == 2 else set()
        (run / f"host{h:02d}.xplane.pb").write_bytes(_late_at_collectives(source, h, late))
    report = hlogap.audit(
        tmp_path / "tb", AuditOptions(chip=chip, hlo_dump=fixture / "dump", jobs=2)
    )
    hosts = report.host_skew
    assert hosts is not None
    for h, offset in enumerate(hosts.clock_offset_us):
        assert offset is not None and abs(offset - (_offset_ns(h) - _offset_ns(0)) / 1e3) < 1.0
    found = hosts.collectives
    assert found
    for entry in found:
        last = entry.last_hosts[0]
        assert last.host == "host02" and last.times_last == entry.occurrences
        assert last.median_wait_us > 0
    # The header says it in a line each: the hosts' step spread, the offsets, the last arrivals.
    from hlogap.render.text import header_lines

    header = "\n".join(header_lines(report))
    assert "each host's own step, its first op to its last (wall, median over the steps; " in header
    assert "4 hosts): median" in header
    assert "clock offsets removed: 4 of 4 hosts" in header
    assert f"last to arrive at {found[0].name}: host02 (" in header


def test_without_steps_in_common_the_collective_ends_give_the_offsets() -> None:
    import numpy as np

    from hlogap.rows.hosts import clock_offsets
    from hlogap.trace.steps import NOT_RUN, CollectiveTimes

    def times(ends: list[int]) -> CollectiveTimes:
        end = np.array([ends], dtype=np.int64)
        return CollectiveTimes(np.where(end != NOT_RUN, end - 500, NOT_RUN), end)

    # The second host's clock is 70 ps ahead (its late start does not count: ends only); the
    # third ran none of the first host's collectives.
    hosts = [times([1000, 2000, NOT_RUN]), times([1070, 2070, 3070]), times([NOT_RUN] * 3)]
    clocks = clock_offsets(hosts, [{}, {0: 5}, {}])
    assert clocks.offset_ps == [0, 70, None]
    assert clocks.found_from[:2] == ["collectives"] * 2
    assert "no collective or step in common" in clocks.found_from[2]


def test_identical_hosts_name_no_slowest(tmp_path: Path) -> None:
    """Copies of one host: no host is slower than the median, and the header says so rather
    than name one (it named the first at +0%)."""
    import shutil

    from hlogap.render.text import header_lines

    source = next((FIXTURES / "sharded_train").rglob("*.xplane.pb"))
    run = tmp_path / "pod" / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    for h in range(3):
        shutil.copy(source, run / f"worker-{h:02d}.xplane.pb")
    report = hlogap.audit(tmp_path / "pod", AuditOptions(chip=str(write_cpu_chip(tmp_path))))
    assert report.host_skew is not None and report.host_skew.over_median_pct == 0.0
    header = "\n".join(header_lines(report))
    assert "hosts alike: none spends 1% more time in ops than the median host" in header
    assert "slowest host" not in header
