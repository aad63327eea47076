"""Class 6, signals: SIGINT and SIGTERM end a multi-host audit and every process it started,
within a second, with exit 130 / 143 and no traceback, and leave no spilled host behind."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.attack.harness import FIXTURES, chip_file, leftover_processes

HOSTS = 24


def _many_hosts(tmp: Path) -> Path:
    source = next((FIXTURES / "sharded_train").rglob("*.xplane.pb"))
    run_dir = tmp / "tb" / "plugins" / "profile" / "run1"
    run_dir.mkdir(parents=True)
    for h in range(HOSTS):
        shutil.copy(source, run_dir / f"h{h:02d}.xplane.pb")
    return tmp / "tb"


def _interruptible() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# preexec_fn makes Popen fork this process, which exec()s at once: JAX's warning that a fork
# may deadlock its threads (where this test process imported JAX before: a test of it ran
# earlier on the same worker) is not about the child, which runs no JAX.
@pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
@pytest.mark.parametrize("command", ["audit", "check"])
def test_a_signal_ends_every_process(sig: int, code: int, command: str, tmp_path: Path) -> None:
    logdir = _many_hosts(tmp_path)
    chip = chip_file(tmp_path)
    marker = uuid.uuid4().hex
    temp = tmp_path / "tmp"  # where the audit spills its hosts' columns (TMPDIR)
    temp.mkdir()
    args = (
        ["audit", str(logdir)]
        if command == "audit"
        else ["check", str(logdir), "--baseline", str(logdir)]
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "hlogap", *args, "--chip", str(chip)],
        cwd=tmp_path,
        env={**os.environ, "HLOGAP_ATTACK_MARKER": marker, "TMPDIR": str(temp)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # As a terminal's foreground job: a run started in the background (`cmd &` in a
        # script, nohup) inherits SIGINT ignored, and Python then rightly leaves it ignored.
        preexec_fn=_interruptible,
    )
    # Wait until readers run beside the parent, then interrupt.
    deadline = time.monotonic() + 10
    while len(leftover_processes(marker)) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    if proc.poll() is not None:
        pytest.skip("the audit finished before it could be interrupted")
    sent = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=10)
    took = time.monotonic() - sent
    assert proc.returncode == code, (proc.returncode, err)
    assert "Traceback" not in err and err.strip().startswith("hlogap:"), err
    assert took < 1.5, took
    time.sleep(0.5)
    assert leftover_processes(marker) == []
    assert list(temp.iterdir()) == []


@pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")
@pytest.mark.parametrize(
    ("processes", "after_s"),
    [(2, 0.0), (3, 0.0), (3, 0.6)],
    ids=["as-the-first-child-starts", "as-the-worker-starts", "while-the-worker-reads"],
)
def test_ctrl_c_while_a_local_cluster_starts(
    processes: int, after_s: float, tmp_path: Path
) -> None:
    """Ctrl-C as a terminal sends it (to the whole process group) once the run has
    `processes` processes (itself, multiprocessing's resource tracker, the Dask worker), and
    `after_s` later: the one line and exit 130, or, where the audit had already finished, its
    output and exit 0; never a worker's traceback (the workers took it mid-start) or the
    tracker's `leaked semaphore` warning, and no process left behind."""
    pytest.importorskip("distributed")
    marker = uuid.uuid4().hex
    args = ["audit", str(FIXTURES / "documented_sharded"), "--chip", str(chip_file(tmp_path))]
    proc = subprocess.Popen(
        [sys.executable, "-m", "hlogap", *args, "--cluster", "local:1"],
        cwd=tmp_path,
        env={**os.environ, "HLOGAP_ATTACK_MARKER": marker},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group, as a terminal's foreground job
        preexec_fn=_interruptible,
    )
    deadline = time.monotonic() + 60
    while len(leftover_processes(marker)) < processes and time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        time.sleep(0.005)
    time.sleep(after_s)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    if proc.returncode == 0:
        assert err == "" and "ops, device-time" in out, err
    else:
        assert (proc.returncode, err) == (130, "hlogap: interrupted\n")
    time.sleep(0.5)
    assert leftover_processes(marker) == []
