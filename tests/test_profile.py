"""Finding a profile: logdir, run directory, file, newest run, hosts, and remote (fsspec) URLs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import fsspec
import pytest

from hlogap import audit
from hlogap.errors import InputError
from hlogap.options import AuditOptions
from hlogap.source import find_profile
from tests.conftest import SAMPLE

SAMPLE_FILE = next(SAMPLE.rglob("*.xplane.pb"))


def _logdir(tmp: Path, runs: dict[str, list[str]]) -> Path:
    for run, hosts in runs.items():
        run_dir = tmp / "plugins" / "profile" / run
        run_dir.mkdir(parents=True)
        for host in hosts:
            shutil.copy(SAMPLE_FILE, run_dir / f"{host}.xplane.pb")
            (run_dir / f"{host}.trace.json.gz").write_bytes(b"derived; ignored")
    return tmp


def test_logdir_picks_newest_run_and_every_host(tmp_path: Path) -> None:
    logdir = _logdir(tmp_path, {"2026_11_21_10_00_00": ["a"], "2026_11_22_04_58_39": ["b", "c"]})
    source = find_profile(logdir)
    assert source.run == "2026_11_22_04_58_39"
    assert source.hosts == ["b", "c"]
    assert find_profile(logdir, run="2026_11_21_10_00_00").hosts == ["a"]
    assert find_profile(logdir, host="c").hosts == ["c"]


def test_run_directory_and_single_file(tmp_path: Path) -> None:
    logdir = _logdir(tmp_path, {"r1": ["h1", "h2"]})
    run_dir = logdir / "plugins" / "profile" / "r1"
    assert find_profile(run_dir).hosts == ["h1", "h2"]
    single = find_profile(run_dir / "h2.xplane.pb")
    assert single.files == (str(run_dir / "h2.xplane.pb"),) and single.run == "r1"


def test_every_host_of_a_run_is_audited(tmp_path: Path, cpu_chip_file: Path) -> None:
    logdir = _logdir(tmp_path, {"r1": ["h1", "h2"]})
    one = audit(logdir, AuditOptions(chip=str(cpu_chip_file), host="h1", jobs=1))
    both = audit(logdir, AuditOptions(chip=str(cpu_chip_file), jobs=2))
    assert both.hosts == ["h1", "h2"]
    assert both.measured_us == pytest.approx(2 * one.measured_us)
    assert both.devices == 2 * one.devices


def test_remote_logdir_through_fsspec(cpu_chip_file: Path) -> None:
    fs = fsspec.filesystem("memory")
    fs.pipe(
        "/bucket/logs/plugins/profile/2026_11_22_04_58_39/vm.xplane.pb", SAMPLE_FILE.read_bytes()
    )
    fs.pipe("/bucket/logs/plugins/profile/2026_11_01_00_00_00/old.xplane.pb", b"junk")
    source = find_profile("memory://bucket/logs")
    assert source.run == "2026_11_22_04_58_39" and source.hosts == ["vm"]
    remote = audit("memory://bucket/logs", AuditOptions(chip=str(cpu_chip_file), jobs=1))
    local = audit(SAMPLE_FILE, AuditOptions(chip=str(cpu_chip_file)))
    assert remote.measured_us == pytest.approx(local.measured_us)
    fs.pipe("/bucket/other/notes.txt", b"no profile here")
    with pytest.raises(InputError, match="no profile found"):
        find_profile("memory://bucket/other")
    with pytest.raises(InputError, match="not found: memory://bucket/missing"):
        find_profile("memory://bucket/missing")


def test_urls_on_the_command_line(
    cpu_chip_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The command line keeps a URL's `//` (a Path argument folded it: "gs:/bucket/tb").
    from tests.test_errors import run_cli

    fs = fsspec.filesystem("memory")
    fs.pipe("/cli/logs/plugins/profile/2026_11_22_04_58_39/vm.xplane.pb", SAMPLE_FILE.read_bytes())
    local = audit(SAMPLE_FILE, AuditOptions(chip=str(cpu_chip_file)))
    for url in ("memory://cli/logs", SAMPLE_FILE.resolve().as_uri()):
        code, out, err = run_cli(
            ["audit", url, "--chip", str(cpu_chip_file), "--format", "json", "--jobs", "1"], capsys
        )
        assert code == 0, err
        assert json.loads(out)["summary"]["measured_us"] == pytest.approx(local.measured_us)
    saved = tmp_path / "base.json"
    saved.write_text(json.dumps(local.to_dict(0)))
    code, out, err = run_cli(
        ["diff", str(saved), "memory://cli/logs", "--chip", str(cpu_chip_file), "-f", "json"],
        capsys,
    )
    assert code == 0, err
    assert json.loads(out)["summary"]["measured_delta_us"] == pytest.approx(0.0, abs=1e-6)
