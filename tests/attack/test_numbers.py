"""Class 5, wrong numbers: impossible values are refused or left out, never reported."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from hlogap.proto import xplane_pb2
from tests.attack.harness import FIXTURES, assert_clean, chip_file, logdir_copy, run


def _mutated_trace(tmp: Path, mutate: object) -> Path:
    """The mlp fixture's trace, with `mutate(space)` applied, in a run directory of its own."""
    source = next((FIXTURES / "mlp").rglob("*.xplane.pb"))
    space = xplane_pb2.XSpace.FromString(source.read_bytes())
    mutate(space)  # type: ignore[operator]
    out = tmp / "tb" / "plugins" / "profile" / "run1" / "vm.xplane.pb"
    out.parent.mkdir(parents=True)
    out.write_bytes(space.SerializeToString())
    return tmp / "tb"


def _negate_durations(space: xplane_pb2.XSpace) -> None:
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events[::3]:
                event.duration_ps = -abs(event.duration_ps) - 1


def _empty_gpu_plane(space: xplane_pb2.XSpace) -> None:
    space.planes.add(id=99, name="/device:GPU:0")


def test_negative_durations_are_left_out(tmp_path: Path) -> None:
    logdir = _mutated_trace(tmp_path, _negate_durations)
    result = run(
        ["audit", str(logdir), "--chip", str(chip_file(tmp_path)), "-f", "json", "--top", "0"],
        tmp_path,
    )
    assert_clean(result, (0,))
    report = json.loads(result.out)
    assert all(op["measured_us"] >= 0 and op["median_us"] >= 0 for op in report["ops"])
    assert any("negative duration" in w for w in report["warnings"])


def test_an_empty_gpu_plane_does_not_hide_cpu_events(tmp_path: Path) -> None:
    logdir = _mutated_trace(tmp_path, _empty_gpu_plane)
    result = run(["audit", str(logdir), "--chip", str(chip_file(tmp_path)), "-f", "json"], tmp_path)
    assert_clean(result, (0,))
    assert json.loads(result.out)["ops"]


@pytest.mark.parametrize(
    "hlo",
    [
        "%a = f32[-5,3] add(f32[-5,3] %x, f32[-5,3] %y)",
        "%t = f32[3,2]{1,0} transpose(f32[2,3]{1,0} %x), dimensions={0}",
        "%c = f32[1,1,4,1]{3,2,1,0} convolution(f32[1,1,8,1]{3,2,1,0} %x, "
        "f32[1,3,1,1]{3,2,1,0} %w), window={size=1x3 stride=1x0}, dim_labels=b01f_01io->b01f",
        "%r = f32[8]{0} all-reduce(f32[8]{0} %x), replica_groups={{}}, to_apply=%add",
        "%d = f32[8,8]{1,0} dot(f32[8,8]{1,0} %x, f32[8,8]{1,0} %y), "
        "lhs_contracting_dims={7}, rhs_contracting_dims={0}",
        "%c = f32[8,128]{1,0:T(0,128)} copy(f32[8,128]{1,0:T(8,128)} %x)",
    ],
    ids=[
        "negative dim",
        "short permutation",
        "zero stride",
        "empty group",
        "dim out of range",
        "zero tile",
    ],
)
def test_impossible_hlo_is_refused_or_unmodeled(hlo: str, tmp_path: Path) -> None:
    result = run(["bound", hlo, "--chip", "h100-sxm", "-f", "json"], tmp_path)
    assert_clean(result, (0, 3))  # 3: malformed HLO, corrupt input (docs/cli.md)
    if result.code == 0:
        bound = json.loads(result.out)
        numbers = [bound[k] for k in ("flops", "bytes", "bound_us")]
        assert all(math.isfinite(n) and n >= 0 for n in numbers), bound
        # a cost it could not compute is said so, not made up
        assert bound["bound_by"] == "unmodeled" or bound["bytes"] > 0, bound


@pytest.mark.parametrize("jobs", ["-1", "0", "abc"])
def test_jobs_must_be_a_positive_count(jobs: str, tmp_path: Path) -> None:
    logdir = logdir_copy(tmp_path)
    result = run(
        ["audit", str(logdir), "--chip", str(chip_file(tmp_path)), "--jobs", jobs], tmp_path
    )
    assert_clean(result, (2,))


def test_many_jobs_never_start_more_processes_than_hosts(tmp_path: Path) -> None:
    logdir = logdir_copy(tmp_path, hosts=2)
    result = run(
        ["audit", str(logdir), "--chip", str(chip_file(tmp_path)), "--jobs", "1000"], tmp_path
    )
    assert_clean(result, (0,))


def test_a_nan_report_is_corrupt_for_diff(tmp_path: Path) -> None:
    logdir = logdir_copy(tmp_path)
    chip = chip_file(tmp_path)
    report = json.loads(
        run(["audit", str(logdir), "--chip", str(chip), "-f", "json"], tmp_path).out
    )
    report["ops"][0]["measured_us"] = math.nan
    bad = tmp_path / "nan.json"
    bad.write_text(json.dumps(report))
    result = run(["diff", str(bad), str(logdir), "--chip", str(chip)], tmp_path)
    assert_clean(result, (3,))
    assert "nan us" not in result.out


@pytest.mark.parametrize("name", ["new\nline", "esc\x1b[31mred", "bell\x07", "tab\there"])
def test_control_characters_in_paths_are_escaped(name: str, tmp_path: Path) -> None:
    result = run(["audit", str(tmp_path / name)], tmp_path)
    assert_clean(result, (3,))
    assert result.err.count("\n") == 1 and "\x1b" not in result.err and "\x07" not in result.err
