"""`audit --cluster`: a run's hosts read and reduced on a Dask cluster (docs/pods.md).

A LocalCluster of two worker processes audits a 16-host run made from a committed fixture,
each host's events stretched by its own factor and one host (host11) made slow on purpose.
The oracle is the local audit of the same files: the report must be the same, field for field.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import hlogap
from hlogap.errors import InputError
from hlogap.options import AuditOptions
from tests.conftest import FIXTURES, write_cpu_chip

distributed = pytest.importorskip("distributed")

HOSTS = 16
SLOW_HOST = 11


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    import logging

    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        silence_logs=logging.ERROR,
    )
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


def _stretched(source: bytes, factor: float) -> bytes:
    from hlogap.proto import xplane_pb2

    space = xplane_pb2.XSpace.FromString(source)
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events:
                event.duration_ps = int(event.duration_ps * factor)
    return space.SerializeToString()


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """16 host files of one run: host h's events take (1 + h/100)x as long, host11's 1.6x."""
    source = next((FIXTURES / "mlp_train").rglob("*.xplane.pb")).read_bytes()
    logdir = tmp_path_factory.mktemp("pod") / "tb"
    run = logdir / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    for h in range(HOSTS):
        factor = 1.6 if h == SLOW_HOST else 1 + h / 100
        (run / f"host{h:02d}.xplane.pb").write_bytes(_stretched(source, factor))
    return logdir


@pytest.fixture(scope="module")
def chip(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A CPU chip file (the report names it: both audits use this one)."""
    return str(write_cpu_chip(tmp_path_factory.mktemp("chip")))


@pytest.fixture(scope="module")
def local_report(pod: Path, chip: str) -> dict[str, object]:
    return hlogap.audit(pod, AuditOptions(chip=chip, jobs=2)).to_dict()


def test_cluster_report_equals_the_local_one(
    pod: Path, scheduler: str, local_report: dict[str, object], chip: str
) -> None:
    lines: list[str] = []
    report = hlogap.audit(pod, AuditOptions(chip=chip, cluster=scheduler), progress=lines.append)
    ours = report.to_dict()
    assert ours == local_report
    assert len(report.files) == HOSTS and report.devices == HOSTS
    # Progress: the cluster with its dashboard, then every host once.
    assert lines[1].startswith(f"Dask cluster {scheduler}: 2 workers, dashboard http")
    assert sum(line.startswith("read host ") for line in lines) == HOSTS


def test_skew_names_the_slow_host_overall_by_step_and_by_op(
    local_report: dict[str, object],
) -> None:
    hosts = local_report["hosts"]
    assert isinstance(hosts, dict)
    assert hosts["slowest_host"] == f"host{SLOW_HOST:02d}"
    # The median host is stretched ~1.07x, the slow one 1.6x, but not all of the time in ops
    # grows: async ops run on to `end:` markers whose offsets were not moved.
    assert 15 < hosts["over_median_pct"] < 50
    measured = hosts["measured_us"]
    others = [t for h, t in measured.items() if h != hosts["slowest_host"]]
    assert measured[hosts["slowest_host"]] > 1.1 * max(others)
    steps = hosts["steps"]
    assert isinstance(steps, list) and len(steps) == len(local_report["steps"])  # type: ignore[arg-type]
    assert all(s["slowest_host"] == f"host{SLOW_HOST:02d}" and s["hosts"] == HOSTS for s in steps)
    ops = hosts["ops"]
    assert isinstance(ops, list) and ops
    # Ops whose time is mostly until an unmoved `end:` marker (the async dots) barely differ
    # between hosts; every op that does is slowest on host11, the most skewed first.
    skewed = [o for o in ops if o["over_median_pct"] > 5]
    assert skewed and skewed[0] is ops[0]
    assert all(o["slowest_host"] == f"host{SLOW_HOST:02d}" for o in skewed)


def test_a_worker_killed_mid_audit_changes_nothing(
    pod: Path, scheduler: str, local_report: dict[str, object], chip: str
) -> None:
    with distributed.Client(scheduler) as client:
        pids = client.run(os.getpid)  # worker address -> its process
    killed: list[int] = []

    def kill_one_worker(line: str) -> None:
        # After 4 hosts are summarized, a worker holding read hosts dies: Dask reads them
        # again on a worker that lives when the later tasks need them.
        if line.startswith("read host 4 of") and not killed:
            pid = next(iter(pids.values()))
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    report = hlogap.audit(pod, AuditOptions(chip=chip, cluster=scheduler), progress=kill_one_worker)
    assert killed
    assert report.to_dict() == local_report


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hlogap", *args], capture_output=True, text=True, timeout=120
    )


def test_a_corrupt_host_is_exit_3_naming_it_or_skipped_with_a_warning(
    pod: Path, scheduler: str, chip: str, tmp_path: Path
) -> None:
    run = tmp_path / "tb" / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    for f in sorted((pod / "plugins" / "profile" / "run1").iterdir())[:4]:
        (run / f.name).write_bytes(f.read_bytes())
    (run / "host02.xplane.pb").write_bytes((run / "host02.xplane.pb").read_bytes()[:3000])
    failed = _cli("audit", str(tmp_path / "tb"), "--chip", chip, "--cluster", scheduler)
    assert failed.returncode == 3 and failed.stdout == ""
    assert failed.stderr.count("\n") == 1 and "host02" in failed.stderr
    assert "Traceback" not in failed.stderr
    skipped = _cli(
        "audit",
        str(tmp_path / "tb"),
        "--chip",
        chip,
        "--cluster",
        scheduler,
        "--skip-bad-hosts",
        "-f",
        "json",
    )
    assert skipped.returncode == 0, skipped.stderr
    data = json.loads(skipped.stdout)
    assert any(w.startswith("skipped host host02:") for w in data["warnings"])
    assert data["source"]["hosts"] == ["host00", "host01", "host02", "host03"]
    assert sorted(data["hosts"]["hosts"]) == ["host00", "host01", "host03"]


def _run_with_a_truncated_host(pod: Path, directory: Path) -> Path:
    """A two-host run of the pod whose second host file is cut short."""
    run = directory / "tb" / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    for f in sorted((pod / "plugins" / "profile" / "run1").iterdir())[:2]:
        (run / f.name).write_bytes(f.read_bytes())
    (run / "host01.xplane.pb").write_bytes((run / "host01.xplane.pb").read_bytes()[:3000])
    return directory / "tb"


def test_a_local_clusters_workers_log_no_traceback_of_a_bad_host(
    pod: Path, chip: str, tmp_path: Path
) -> None:
    """`--cluster local:2`: the workers write to hlogap's stderr; a host's failure is still the
    one line (the workers' "Compute Failed" record, with its traceback, is not written)."""
    logdir = _run_with_a_truncated_host(pod, tmp_path)
    failed = _cli("audit", str(logdir), "--chip", chip, "--cluster", "local:2")
    assert failed.returncode == 3 and failed.stdout == ""
    assert failed.stderr.startswith("hlogap: error: corrupt or truncated profile")
    assert failed.stderr.count("\n") == 1 and "host01.xplane.pb" in failed.stderr


def _capture_worker_log(dask_worker: object) -> None:
    """On a worker: keep what its task-error logger lets by, in a buffer on the worker."""
    import logging.handlers

    buffer = logging.handlers.BufferingHandler(10_000)
    logging.getLogger("distributed.worker").addHandler(buffer)
    dask_worker.hlogap_test_log = buffer  # type: ignore[attr-defined]


def _worker_log(dask_worker: object) -> list[str]:
    import logging

    buffer = dask_worker.hlogap_test_log  # type: ignore[attr-defined]
    logging.getLogger("distributed.worker").removeHandler(buffer)
    return [str(r.args[0]) for r in buffer.buffer if str(r.msg).startswith("Compute Failed")]


def _worker_filters(dask_worker: object) -> int:
    import logging

    return len(logging.getLogger("distributed.worker").filters)


def _fails() -> None:
    raise ValueError("another client's task")


def test_a_users_workers_drop_only_hlogaps_task_errors_while_it_runs(
    pod: Path, scheduler: str, chip: str, tmp_path: Path
) -> None:
    """On a user's scheduler: hlogap's failed task is not logged by the worker that ran it,
    another client's is, and the workers' logging is as it was once the audit ends."""
    logdir = _run_with_a_truncated_host(pod, tmp_path)
    with distributed.Client(scheduler) as client:
        before = client.run(_worker_filters)
        client.run(_capture_worker_log)
        with pytest.raises(InputError, match="host01"):
            hlogap.audit(logdir, AuditOptions(chip=chip, cluster=scheduler))
        foreign = client.submit(_fails, pure=False)
        with pytest.raises(ValueError):
            foreign.result()
        logged = [key for keys in client.run(_worker_log).values() for key in keys]
        assert logged == [foreign.key]
        assert client.run(_worker_filters) == before


def test_an_unreachable_scheduler_is_exit_3_in_one_line(
    pod: Path, chip: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr("hlogap.executors.dask.CONNECT_TIMEOUT_S", 1)
    with pytest.raises(
        InputError, match=f"cannot reach the Dask scheduler at tcp://127.0.0.1:{port}"
    ):
        hlogap.audit(pod, AuditOptions(chip=chip, cluster=f"tcp://127.0.0.1:{port}"))


@pytest.mark.parametrize(
    ("failure", "said"),
    [
        (lambda: distributed.KilledWorker("read_host-123", None, 3), "died each time"),
        (lambda: ModuleNotFoundError("No module named 'hlogap'"), "cannot run hlogap"),
    ],
)
def test_cluster_failures_are_input_errors_in_one_line(
    failure: Callable[[], BaseException], said: str
) -> None:
    from hlogap.executors.dask import worker_errors

    with pytest.raises(InputError, match=said) as raised, worker_errors("tcp://s:8786"):
        raise failure()
    assert "\n" not in str(raised.value) and "tcp://s:8786" in str(raised.value)
    # A host's own error is passed on as it is.
    with pytest.raises(InputError, match="host07"), worker_errors("tcp://s:8786"):
        raise InputError("truncated file: host07.xplane.pb")


def test_without_dask_cluster_is_a_usage_error_naming_the_extra(
    pod: Path, chip: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hlogap.errors import UsageError

    monkeypatch.setitem(sys.modules, "distributed", None)  # `import distributed` fails
    with pytest.raises(UsageError, match=r"pip install 'hlogap\[dask\]'"):
        hlogap.audit(pod, AuditOptions(chip=chip, cluster="local:2"))


@pytest.mark.parametrize("address", ["local:0", "local:x", "local:-1"])
def test_a_bad_local_worker_count_is_a_usage_error(pod: Path, chip: str, address: str) -> None:
    from hlogap.errors import UsageError

    with pytest.raises(UsageError, match="local:N needs N >= 1"):
        hlogap.audit(pod, AuditOptions(chip=chip, cluster=address))
