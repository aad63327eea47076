"""The timeline export's tracks are the profile's own lines (streams, threads, `XLA Ops`).

The exported JSON is loaded back and every op event is found on the track of the line it sits
on in the `.xplane.pb`, read here with nothing but the protobuf module (the oracle): same
device, same line name, same op, same start. A line's events are split onto more tracks
(`<line> (running at once 2)`) only where they overlap, as few as their deepest overlap needs,
and no two events of one track overlap.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hlogap.proto import xplane_pb2
from tests.conftest import FIXTURES, SHARED, run_cli
from tests.test_trace_export import _check_format

US = 1_000_000  # ps
EXTRA_TRACK = re.compile(r"^(.*) \(running at once (\d+)\)$")
# (process, line, op) -> the starts of its events, ps
Placed = dict[tuple[str, str, str], list[int]]


def _oracle(pb: Path) -> Placed:
    """Every op event of the file (an event whose stats or metadata name an `hlo_op`), by the
    process the export names for its device, its line's name and its op."""
    space = xplane_pb2.XSpace()
    space.ParseFromString(pb.read_bytes())
    host = pb.name.removesuffix(".xplane.pb")
    placed: Placed = defaultdict(list)
    for plane in space.planes:
        gpu = plane.name.startswith("/device:GPU:")
        if not gpu and plane.name != "/host:CPU":
            continue
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            name = line.display_name or line.name
            for event in line.events:
                seen = _stats(plane.event_metadata[event.metadata_id], names) | _stats(event, names)
                if not seen.get("hlo_op"):
                    continue
                ordinal = int(seen.get("device_ordinal", 0) or 0)
                process = f"{host} {plane.name}" + ("" if gpu else f" device {ordinal}")
                start = line.timestamp_ns * 1000 + event.offset_ps
                placed[(process, name, seen["hlo_op"])].append(start)
    return placed


def _stats(holder: Any, names: dict[int, str]) -> dict[str, Any]:
    """An event's (or its metadata's) stats by name, a reference read as the name it refers to."""
    found: dict[str, Any] = {}
    for s in holder.stats:
        kind = s.WhichOneof("value")
        value: Any = getattr(s, kind) if kind else None
        found[names[s.metadata_id]] = names[int(value)] if kind == "ref_value" else value
    return found


def _exported(events: list[dict[str, Any]]) -> tuple[Placed, dict[tuple[str, str], int]]:
    """The export's op events by (process, the line their track stands for, op), their starts
    in ps from the first; and how many tracks each (process, line) has."""
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    placed: Placed = defaultdict(list)
    count: dict[tuple[str, str], int] = defaultdict(int)
    for (pid, _), track in tracks.items():
        extra = EXTRA_TRACK.match(track)
        count[(processes[pid], extra.group(1) if extra else track)] += 1
    for e in events:
        if e["ph"] == "X" and e["cat"].startswith("op,"):
            track = tracks[(e["pid"], e["tid"])]
            extra = EXTRA_TRACK.match(track)
            line = extra.group(1) if extra else track
            placed[(processes[e["pid"]], line, e["name"])].append(round(e["ts"] * US))
    return placed, count


def _deepest_overlap(spans: list[tuple[int, int]]) -> int:
    """The most events of `spans` running at one instant (an end before a start at a tie)."""
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    depth = deepest = 0
    for _, step in edges:
        depth += step
        deepest = max(deepest, depth)
    return deepest


def _check(pb: Path, events: list[dict[str, Any]], oracle_spans: dict[Any, Any]) -> None:
    _check_format(events)
    expected, (got, tracks) = _oracle(pb), _exported(events)
    assert sorted(got) == sorted(expected)  # every op on its own line's tracks, no other
    origin = min(min(v) for v in expected.values())
    first = min(min(v) for v in got.values())
    for key, starts in expected.items():
        mine = np.sort(np.array(got[key]) - first)
        assert np.allclose(mine, np.sort(np.array(starts) - origin), atol=1000), key  # 1 ns
    # One track per line, and more only as deep as the line's events overlap.
    lines = {(process, line) for process, line, _ in expected}
    for process, line in lines:
        assert tracks[(process, line)] == max(1, oracle_spans.get((process, line), 1)), line


def _spans(pb: Path) -> dict[tuple[str, str], int]:
    """The deepest overlap of each (process, line)'s op events, as the file's lines give it
    (XLA:CPU's async ops, which last to their `end:` marker, are not in the synthetic files
    this is asked of)."""
    space = xplane_pb2.XSpace()
    space.ParseFromString(pb.read_bytes())
    host = pb.name.removesuffix(".xplane.pb")
    depth = {}
    for plane in space.planes:
        for line in plane.lines:
            spans = [(e.offset_ps, e.offset_ps + e.duration_ps) for e in line.events]
            depth[(f"{host} {plane.name}", line.display_name or line.name)] = _deepest_overlap(
                spans
            )
    return depth


def _export(logdir: Path, out: Path, capsys: pytest.CaptureFixture[str], *chip: str) -> Any:
    code, _, err = run_cli(["audit", str(logdir), *chip, "-o", str(out)], capsys)
    assert code == 0, err
    with gzip.open(out, "rt") as f:
        return json.load(f)["traceEvents"]


def _gpu_file(directory: Path, kernels: list[tuple[str, str, float, float]]) -> Path:
    """A `/device:GPU:0` plane of CUPTI kernel events, `(stream line, op, start us, dur us)`."""
    space = xplane_pb2.XSpace()
    space.hostnames.append("gpu-host")
    plane = space.planes.add()
    plane.id, plane.name = 1, "/device:GPU:0"
    ids: dict[str, int] = {}

    def stat_id(name: str) -> int:
        if name not in ids:
            ids[name] = len(ids) + 1
            plane.stat_metadata[ids[name]].id = ids[name]
            plane.stat_metadata[ids[name]].name = name
        return ids[name]

    streams: dict[str, xplane_pb2.XLine] = {}
    for k, (stream, op, at_us, dur_us) in enumerate(kernels, 1):
        if stream not in streams:
            streams[stream] = plane.lines.add()
            streams[stream].id = len(streams)
            streams[stream].display_name = stream
            streams[stream].name = f"stream {len(streams)}"
        plane.event_metadata[k].id = k
        plane.event_metadata[k].name = f"kernel_{k}"
        event = streams[stream].events.add()
        event.metadata_id, event.offset_ps, event.duration_ps = k, int(at_us * US), int(dur_us * US)
        for key, ref in (("hlo_op", op), ("hlo_module", "jit_step")):
            stat = event.stats.add()
            stat.metadata_id, stat.ref_value = stat_id(key), stat_id(ref)
        stat = event.stats.add()
        stat.metadata_id, stat.uint64_value = stat_id("program_id"), 1
    run = directory / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    (run / "gpu-host.xplane.pb").write_bytes(space.SerializeToString())
    return run / "gpu-host.xplane.pb"


def test_gpu_streams_are_tracks_of_their_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A compute stream, an NCCL stream running beside it, a memcpy stream; two kernels of the
    compute stream overlap (clock jitter): a second compute track, and only there."""
    kernels = [
        ("Stream #7(Compute)", "fusion.1", 0.0, 10.0),
        ("Stream #13(NCCL)", "all-reduce-start", 2.0, 30.0),
        ("Stream #7(Compute)", "fusion.2", 9.5, 10.0),  # overlaps fusion.1
        ("Stream #7(Compute)", "fusion.3", 20.0, 5.0),
        ("Stream #15(MemcpyD2H)", "copy-start", 21.0, 4.0),
        ("Stream #13(NCCL)", "all-gather-start", 40.0, 8.0),
    ]
    pb = _gpu_file(tmp_path / "logdir", kernels)
    events = _export(tmp_path / "logdir", tmp_path / "t.json.gz", capsys, "--chip", "h100-sxm")
    _check(pb, events, _spans(pb))
    names = [e["args"]["name"] for e in events if e["name"] == "thread_name" and e["pid"] == 1]
    assert names == [
        "Stream #7(Compute)",
        "Stream #7(Compute) (running at once 2)",
        "Stream #13(NCCL)",
        "Stream #15(MemcpyD2H)",
        "idle",
        "exposed communication",
        "exposed host transfers",
    ]


@pytest.mark.parametrize("fixture", ["mlp_train", "sharded_train"])
def test_cpu_threads_are_tracks_of_their_own(
    fixture: str, cpu_chip_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Real XLA:CPU profiles: each device's ops on the worker threads that ran them."""
    (pb,) = (FIXTURES / fixture).rglob("*.xplane.pb")
    events = _export(
        FIXTURES / fixture, tmp_path / "t.json.gz", capsys, "--chip", str(cpu_chip_file)
    )
    expected, (got, tracks) = _oracle(pb), _exported(events)
    _check_format(events)
    assert sorted(got) == sorted(expected)
    for key, starts in expected.items():
        assert len(got[key]) == len(starts), key
    assert len({line for _, line in tracks}) > 3  # several threads, not one "ops" track


@pytest.mark.parametrize(
    ("profile", "line"),
    [
        (SHARED / "tpu-v6e-offload" / "tpu_inference_2.xplane.pb", r"XLA Ops"),
        # nsys-jax has no streams: a thunk range's line is the host thread that opened it.
        (SHARED / "nvidia-h100-nsys-jax" / "maxtext_fsdp4_test_data.zip", r"thread \d+"),
    ],
    ids=["tpu", "nsys"],
)
def test_real_tpu_and_nsys_ops_are_on_their_lines(
    profile: Path, line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if not profile.is_file():
        pytest.skip(f"{profile} absent (../shared not beside the project)")
    if profile.suffix == ".zip":
        pytest.importorskip("pyarrow")
    events = _export(profile, tmp_path / "t.json.gz", capsys)
    _check_format(events)
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    on = {tracks[(e["pid"], e["tid"])] for e in events if e.get("cat", "").startswith("op,")}
    assert on and all(re.fullmatch(rf"{line}( \(running at once \d+\))?", t) for t in on), on
