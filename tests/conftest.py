"""Shared test paths. ../shared data is read in place; tests using it skip when it is absent."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hlogap.report.model import StepRow

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "fixtures"
AMD = SHARED / "amd-gpu"
AMD_FILES = {
    "mi300x": AMD / "mi300x_conv3d.xplane.pb",
    "mi355x": AMD / "mi355x_te_attention.xplane.pb",
}
FIXTURES = ROOT / "tests" / "fixtures"
SAMPLE = ROOT / "hlogap" / "data" / "sample"


def cpu_fixtures() -> list[Path]:
    """Every committed CPU fixture logdir (one per program made by scripts/make_fixtures.py)."""
    return sorted(p for p in FIXTURES.iterdir() if (p / "oracle.json").is_file())


def oracle(program_dir: Path) -> dict:
    return json.loads((program_dir / "oracle.json").read_text())


@pytest.fixture(params=sorted(AMD_FILES), ids=sorted(AMD_FILES))
def amd_file(request: pytest.FixtureRequest) -> Path:
    path = AMD_FILES[request.param]
    if not path.is_file():
        pytest.skip(f"{path} absent (../shared not beside the project)")
    return path


def write_cpu_chip(directory: Path) -> Path:
    """A user chip file for CPU profiles in `directory`, so tests never depend on a
    calibration cache."""
    path = directory / "testcpu.toml"
    path.write_text(
        'name = "testcpu"\n[peak_flops]\nf32 = 1.0e11\nbf16 = 1.0e11\n[memory]\nhbm_bw = 2.0e10\n'
    )
    return path


@pytest.fixture
def cpu_chip_file(tmp_path: Path) -> Path:
    return write_cpu_chip(tmp_path)


def headless_chromium() -> list[str]:
    """The command that runs a headless Chromium; the test is skipped where there is none
    (`apt-get install chromium`)."""
    browser = next(
        (b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None
    )
    if browser is None:
        pytest.skip("no Chromium here (apt-get install chromium)")
    return [browser, "--headless", "--no-sandbox", "--disable-gpu"]


def browse(page: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """The page's DOM once its scripts ran (stdout), and the browser's log (stderr)."""
    return subprocess.run(
        [*headless_chromium(), *flags, "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )


def step_row(number: int, wall: float, bound_wall: float, idle: float) -> StepRow:
    """A one-device step of `wall` us (of it `idle` idle, the rest busy in ops at twice their
    bound) whose wall with every op at its bound is `bound_wall`."""
    busy = wall - idle
    return StepRow(
        step=number,
        source="module",
        start_us=number * 1e4,
        wall_us=wall,
        devices=1,
        busy_us=busy,
        measured_us=busy,
        bound_us=busy / 2,
        exposed_comm_us=0.0,
        idle_us=idle,
        device_wall_us=wall,
        bound_wall_us=bound_wall,
        flops=1e9,
    )


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """The command line in this process: (exit code, stdout, stderr)."""
    from hlogap.cli import main

    old = sys.argv
    sys.argv = ["hlogap", *args]
    try:
        with pytest.raises(SystemExit) as exc:
            main()
    finally:
        sys.argv = old
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say how many tests skipped because the real AMD GPU and TPU data is not here."""
    skipped = terminalreporter.stats.get("skipped", [])
    shared = [r for r in skipped if "../shared" in str(getattr(r, "longrepr", ""))]
    if shared:
        terminalreporter.write_line(
            f"{len(shared)} tests skipped: they read the real AMD GPU and TPU profiles in "
            f"{SHARED}, which is not beside this checkout"
        )


@pytest.fixture(params=["c", "without-c"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Lines and planes read with the C extension (hlogap/trace/_xline.c), and as an install
    without it reads them (upb splits, numpy decodes). Not reset between hypothesis inputs:
    every input of a test runs with the same decoder."""
    from hlogap.trace import columnar

    if request.param == "without-c":
        monkeypatch.setattr(columnar, "_xline", None)
    elif columnar._xline is None:
        pytest.fail("hlogap was installed without its C decoder (hlogap/trace/_xline.c)")
    return str(request.param)


# The test files that take longest (seconds on a quiet 2-core machine, serial), first. `make
# test` hands whole files to its workers in collection order (--dist loadfile): a long file
# dealt last would leave the other workers idle while it runs alone.
LONGEST_FILES = (
    "test_trust3.py",  # 55
    "attack/test_round4.py",  # 48
    "test_columnar.py",  # 39
    "attack/test_input_errors.py",  # 29
    "test_remote_s3.py",  # 28
    "test_hlo_roundtrip.py",  # 24
    "test_check.py",  # 24
    "test_html_page.py",  # 17
    "test_gate_fixtures.py",  # 16+
    "test_cluster.py",  # 16
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist only: the longest files first, the others in their usual order (one
    process runs them in the order they have always run)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    rank = {ROOT / "tests" / name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path, len(rank)))  # stable: order kept within
