"""Class 3, hangs: special files wherever a path goes, a catastrophic regex, a kernel window of
1e8 taps, a trace that claims 1e9 occurrences. Every case has a deadline (harness.run)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from hlogap.proto import xplane_pb2
from tests.attack.harness import assert_clean, chip_file, logdir_copy, run

# (arguments, with FIFO standing for a named pipe nobody writes to) -> the exit codes allowed.
FIFO_CASES: dict[str, tuple[Callable[[Path, Path, Path], list[str]], tuple[int, ...]]] = {
    "profile": (lambda logdir, chip, fifo: ["audit", str(fifo), "--chip", str(chip)], (3,)),
    "chip file": (lambda logdir, chip, fifo: ["audit", str(logdir), "--chip", str(fifo)], (2, 3)),
    "baseline": (
        lambda logdir, chip, fifo: [
            "check",
            str(logdir),
            "--baseline",
            str(fifo),
            "--chip",
            str(chip),
        ],
        (3,),
    ),
    "diff side": (
        lambda logdir, chip, fifo: ["diff", str(fifo), str(logdir), "--chip", str(chip)],
        (3,),
    ),
    "-o": (
        lambda logdir, chip, fifo: ["audit", str(logdir), "--chip", str(chip), "-o", str(fifo)],
        (2,),
    ),
    "hlo dump file": (
        lambda logdir, chip, fifo: [
            "audit",
            str(logdir),
            "--chip",
            str(chip),
            "--hlo-dump",
            str(fifo.parent),
        ],
        (0,),
    ),
    "calibrate -o": (lambda logdir, chip, fifo: ["calibrate", "-o", str(fifo)], (2,)),
}


@pytest.mark.parametrize("where", sorted(FIFO_CASES))
def test_a_fifo_never_blocks(where: str, tmp_path: Path) -> None:
    logdir = logdir_copy(tmp_path)
    chip = chip_file(tmp_path)
    dumps = tmp_path / "dump"
    dumps.mkdir()
    fifo = dumps / "module_0001.jit_x.cpu_after_optimizations.txt"
    os.mkfifo(fifo)
    build, codes = FIFO_CASES[where]
    assert_clean(run(build(logdir, chip, fifo), tmp_path, timeout=20), codes)


@pytest.mark.parametrize("device", ["/dev/null", "/dev/zero", "/dev/stdin"])
def test_a_device_as_profile_is_refused(device: str, tmp_path: Path) -> None:
    result = run(
        ["audit", device, "--chip", str(chip_file(tmp_path))], tmp_path, stdin="", timeout=20
    )
    assert_clean(result, (3,))
    assert "not a regular file" in result.err


@pytest.mark.parametrize("pattern", ["(a+)+$", "(x*)*y", "(.*a){20}", "((a|aa)+)+b"])
def test_a_catastrophic_module_regex_runs_in_linear_time(pattern: str, tmp_path: Path) -> None:
    logdir = logdir_copy(tmp_path)
    result = run(
        ["audit", str(logdir), "--chip", str(chip_file(tmp_path)), "--module", pattern],
        tmp_path,
        timeout=20,
    )
    # Quick, whatever it finds: a pattern that matches no module is exit 3 (no op matches).
    assert_clean(result, (0, 2, 3))


def test_a_huge_kernel_window_is_bounded(tmp_path: Path) -> None:
    conv = (
        "%c = f32[1,1,1,1]{3,2,1,0} convolution(f32[1,1,100000000,1]{3,2,1,0} %x, "
        "f32[1,100000000,1,1]{3,2,1,0} %w), window={size=1x100000000}, dim_labels=b01f_01io->b01f"
    )
    result = run(["bound", conv, "--chip", "h100-sxm", "-f", "json"], tmp_path, timeout=20)
    assert_clean(result, (0,))
    assert '"flops": 200000000' in result.out  # every tap reads a real element: 2 x 1e8


def _aggregated_tpu_trace(path: Path, occurrences: int) -> None:
    """A TPU plane whose one op event claims `occurrences` executions (tsl AggregateXPlane)."""
    space = xplane_pb2.XSpace()
    plane = space.planes.add(id=1, name="/device:TPU:0")
    plane.event_metadata[1].id = 1
    plane.event_metadata[1].name = "%fusion.1 = f32[8]{0} add(f32[8]{0} %a, f32[8]{0} %b)"
    plane.event_metadata[1].display_name = "fusion.1"
    line = plane.lines.add(id=1, name="XLA Ops")
    line.events.add(metadata_id=1, num_occurrences=occurrences, duration_ps=10**12)
    path.write_bytes(space.SerializeToString())


def test_a_trace_claiming_a_billion_occurrences_is_refused(tmp_path: Path) -> None:
    trace = tmp_path / "agg.xplane.pb"
    _aggregated_tpu_trace(trace, 10**9)
    result = run(["audit", str(trace), "--chip", "tpu-v6e"], tmp_path, timeout=20)
    assert_clean(result, (3,))
    assert "occurrences" in result.err
