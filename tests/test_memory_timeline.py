"""The allocators' bytes in use over time: the curve the reader gives, point for point against
xprof's own memory-profile timeline, and its buckets, which keep the peak exactly."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hlogap import audit, load_report
from hlogap.memory.runtime import TIMELINE_POINTS, AllocatorPeak, bucket_maxima
from hlogap.memory.static import MemorySection
from tests.conftest import AMD_FILES, SHARED, browse, headless_chromium
from tests.test_memory import xprof_output

V6E = SHARED / "tpu-v6e-offload" / "tpu_inference_2.xplane.pb"
PROFILES = [*AMD_FILES.values(), V6E]

# xprof's memory profile of a file: per allocator its timeline, every snapshot (time from its
# line's start, heap, stack) in time order. Run in a child on a private copy: the converter
# writes a cache beside its input.
_XPROF_TIMELINE = """
import json, sys
from xprof.convert import raw_to_tool_data as convert
data, _ = convert.xspace_to_tool_data([sys.argv[1]], "memory_profile", {})
out = {}
for name, profile in json.loads(data)["memoryProfilePerAllocator"].items():
    out[name] = {
        "points": [
            [int(s["timeOffsetPs"]), int(s["aggregationStats"]["heapAllocatedBytes"]),
             int(s["aggregationStats"]["stackReservedBytes"])]
            for s in profile["sampledTimelineSnapshots"]
        ],
        "peak": int(profile["profileSummary"]["peakStats"]["peakBytesInUse"]),
    }
print(json.dumps(out))
"""
# xprof samples its timeline down to this many snapshots (max box filter over the event
# index); below it, its timeline is every snapshot.
XPROF_MAX_SNAPSHOTS = 1000


def _profile(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(f"{path} absent (../shared not beside the project)")
    return path


def _xprof_timeline(path: Path, tmp_path: Path) -> dict[str, dict]:
    found: dict[str, dict] = xprof_output(_XPROF_TIMELINE, path, tmp_path)
    return found


def _allocator_events(path: Path) -> dict[str, list[tuple[int, int, int, int]]]:
    """Per allocator, by a plain walk of the protobuf's host plane in line order: each
    allocator event's time (its line's start + its offset), its offset in its line (what xprof
    keeps), its heap and its stack."""
    from hlogap.proto import xplane_pb2

    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    host = next(p for p in space.planes if p.name == "/host:CPU")
    stat = {k: v.name for k, v in host.stat_metadata.items()}
    kinds = {k for k, v in host.event_metadata.items() if v.name.startswith("Memory")}
    found: dict[str, list[tuple[int, int, int, int]]] = {}
    for line in host.lines:
        for e in line.events:
            if e.metadata_id not in kinds:
                continue
            values: dict[str, object] = {}
            for s in e.stats:
                kind = s.WhichOneof("value")
                value = stat[s.ref_value] if kind == "ref_value" else getattr(s, kind)
                values[stat[s.metadata_id]] = value
            name = str(values.get("allocator_name", values.get("index_on_host")))
            time = line.timestamp_ns * 1000 + e.offset_ps
            heap, stack = values["bytes_allocated"], values["bytes_reserved"]
            assert isinstance(heap, int) and isinstance(stack, int)
            found.setdefault(name, []).append((time, e.offset_ps, heap, stack))
    return found


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem.split(".")[0])
def test_the_curve_is_xprofs_timeline(path: Path, tmp_path: Path) -> None:
    """Before its buckets, an allocator's curve is its events in time order (time, heap,
    stack), as a plain walk of the protobuf finds them; and they are xprof's memory-profile
    snapshots one for one. xprof times each event from its own line's start (the MI300X's
    allocator events sit on lines that start 869 us apart), so its snapshots are matched by
    (offset in the line, heap, stack), not by their order."""
    from hlogap.trace.xspace import read_allocator_events, read_planes

    xprof = _xprof_timeline(_profile(path), tmp_path)
    walked = _allocator_events(path)
    planes, _ = read_planes(path)
    events = read_allocator_events(planes)
    assert events is not None and set(events.names) == set(xprof) == set(walked)
    for code, name in enumerate(events.names):
        points = xprof[name]["points"]
        assert 0 < len(points) < XPROF_MAX_SNAPSHOTS, "xprof sampled its timeline"
        mine = np.flatnonzero(events.allocator == code)
        curve = np.stack(
            [events.time_ps[mine], events.heap_bytes[mine], events.stack_bytes[mine]], axis=1
        )
        in_time = sorted(walked[name], key=lambda e: e[0])  # stable: a line's order kept
        assert curve.tolist() == [[t, heap, stack] for t, _, heap, stack in in_time], name
        assert sorted(points) == sorted([o, heap, stack] for _, o, heap, stack in in_time), name
        assert int((curve[:, 1] + curve[:, 2]).max()) == xprof[name]["peak"], name


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem.split(".")[0])
def test_the_buckets_keep_the_peak(path: Path, tmp_path: Path) -> None:
    """The audit's timeline: `TIMELINE_POINTS` buckets from the first event to the last, on the
    devices' clock; its most is the in-use peak to the byte (xprof's), in the bucket that holds
    the peak's time, and its heap's most is the heap's most over xprof's snapshots."""
    xprof = _xprof_timeline(_profile(path), tmp_path)
    walked = _allocator_events(path)
    memory = audit(path).memory
    assert memory is not None and memory.allocators is not None
    for a in memory.allocators:
        t = a.timeline
        assert t is not None
        points = xprof[a.name]["points"]
        assert len(t.in_use_bytes) == len(t.heap_bytes) == TIMELINE_POINTS
        assert max(t.in_use_bytes) == a.in_use_peak_bytes == xprof[a.name]["peak"]
        assert max(t.heap_bytes) == max(heap for _, heap, _ in points)
        # From the first event to the last (a TPU's moved onto its device's clock by a fit
        # whose scale is 1 to a few parts per million).
        times = [time for time, _, _, _ in walked[a.name]]
        span_us = (max(times) - min(times)) / 1e6
        assert t.end_us - t.start_us == pytest.approx(span_us, rel=1e-4)
        assert t.start_us <= a.in_use_peak_us <= t.end_us
        at = (a.in_use_peak_us - t.start_us) / (t.end_us - t.start_us) * TIMELINE_POINTS
        near = range(max(0, math.floor(at) - 1), min(TIMELINE_POINTS, math.floor(at) + 2))
        assert a.in_use_peak_bytes in [t.in_use_bytes[k] for k in near]


def _reference_maxima(times: list[int], values: list[int], buckets: int) -> list[int]:
    """Plain Python, one bucket at a time: the most set inside it, or carried in from the
    last value before it while that lasted (until the next value, if later than its start)."""
    start, end = times[0], times[-1]
    count = max(1, min(buckets, end - start))
    edges = [start + (end - start) * k // count for k in range(count + 1)]
    out = []
    for b in range(count):
        lo, hi = edges[b], edges[b + 1]
        last = b == count - 1
        inside = [v for t, v in zip(times, values) if lo <= t and (t < hi or (last and t <= hi))]
        before = [k for k, t in enumerate(times) if t < lo]
        if before and times[before[-1] + 1] > lo:
            inside.append(values[before[-1]])
        out.append(max(inside))
    return out


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem.split(".")[0])
@pytest.mark.parametrize("buckets", [TIMELINE_POINTS, 7, 1])
def test_buckets_of_real_curves(path: Path, buckets: int) -> None:
    from hlogap.trace.xspace import read_allocator_events, read_planes

    planes, _ = read_planes(_profile(path))
    events = read_allocator_events(planes)
    assert events is not None
    for code in range(len(events.names)):
        mine = np.flatnonzero(events.allocator == code)
        time_ps = events.time_ps[mine]
        in_use = events.heap_bytes[mine] + events.stack_bytes[mine]
        edges, (most,) = bucket_maxima(time_ps, [in_use], buckets)
        assert most.tolist() == _reference_maxima(time_ps.tolist(), in_use.tolist(), buckets)
        assert (edges[0], edges[-1]) == (time_ps[0], time_ps[-1])
        assert most.max() == in_use.max()


def test_buckets_by_hand() -> None:
    time_ps = np.array([0, 10, 10, 35, 40], dtype=np.int64)
    values = np.array([5, 9, 2, 1, 3], dtype=np.int64)
    edges, (most,) = bucket_maxima(time_ps, [values], 4)
    assert edges.tolist() == [0, 10, 20, 30, 40]
    # [0, 10): 5. [10, 20): 9, set and undone at once, kept; 5 lasted no time into it.
    # [20, 30): nothing set, 2 carried. [30, 40]: 2 until 35, then 1, then 3 at the end.
    assert most.tolist() == [5, 9, 2, 3]
    one, (alone,) = bucket_maxima(np.array([7], dtype=np.int64), [np.array([4])], 200)
    assert (one.tolist(), alone.tolist()) == ([7, 7], [4])
    short, (three,) = bucket_maxima(np.array([0, 3]), [np.array([1, 2])], 200)
    assert (short.tolist(), three.tolist()) == ([0, 1, 2, 3], [1, 1, 2])  # 1 ps wide at least


def test_the_timeline_prints_saves_and_draws(tmp_path: Path) -> None:
    """`hlogap memory`: a sparkline per allocator within 80 columns ending in its peak, the
    steps' starts marked; JSON: `timeline` per allocator, kept by a saved report; HTML: a
    chart per allocator with the steps, in a real browser."""
    path = _profile(AMD_FILES["mi355x"])
    table = subprocess.run(
        [sys.executable, "-m", "hlogap", "memory", str(path)], capture_output=True, text=True
    )
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    first = next(k for k, line in enumerate(lines) if line.startswith("in use over time"))
    curve, steps, axis = lines[first + 1 : first + 4]
    assert all(len(line) <= 80 for line in lines[first:])
    assert curve.startswith("  GPU_0_bfc") and curve.endswith("663 MB") and "█" in curve
    report = audit(path)
    assert steps.split()[0] == "steps" and steps.count("|") == len(report.steps)
    assert axis.strip().startswith("-") and axis.strip().endswith("ms")

    saved = tmp_path / "r.json"
    saved.write_text(json.dumps(report.to_dict(0)))
    doc = json.loads(saved.read_text())
    (allocator,) = doc["memory"]["allocators"]
    assert len(allocator["timeline"]["in_use_bytes"]) == TIMELINE_POINTS
    loaded = load_report(saved).memory
    assert loaded is not None and report.memory is not None
    assert loaded.allocators == report.memory.allocators
    del allocator["timeline"]  # a report saved before the timeline was kept
    assert AllocatorPeak.from_dict(allocator, "a").timeline is None
    for bad in (
        {"start_us": 0.0, "end_us": 1.0, "heap_bytes": [1], "in_use_bytes": []},
        {"start_us": "x", "end_us": 1.0, "heap_bytes": [1], "in_use_bytes": [1]},
        {"start_us": 0.0, "end_us": 1.0, "heap_bytes": [-1], "in_use_bytes": [1]},
    ):
        with pytest.raises(ValueError):
            MemorySection.from_dict({"modules": [], "allocators": [{**allocator, "timeline": bad}]})

    _draws_in_a_browser(path, tmp_path, len(report.steps))


def _draws_in_a_browser(path: Path, tmp_path: Path, steps: int) -> None:
    headless_chromium()  # skips here, before the audit, where there is none
    page = tmp_path / "report.html"
    done = subprocess.run(
        [sys.executable, "-m", "hlogap", "audit", str(path), "-o", str(page)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    dom = browse(page, "--enable-logging=stderr")
    assert [line for line in dom.stderr.splitlines() if ":CONSOLE" in line] == []
    assert dom.stdout.count('class="allocator-curve"') == 1
    assert dom.stdout.count('class="step-start"') == steps


def test_a_peak_between_steps_says_what_the_steps_held() -> None:
    """A value holds from its event to the next: a step holds the value in force at its start
    and those of its events. Worked by hand: the curve 5 @0, 9 @10, 4 @12, 8 @25, 7 @40."""
    import numpy as np

    from hlogap.memory.runtime import _steps_peak

    time_ps = np.array([0, 10, 12, 25, 40], dtype=np.int64)
    in_use = np.array([5, 9, 4, 8, 7], dtype=np.int64)
    # Step 1 [20, 30) holds 4 (in force at 20) then 8; step 2 [30, 38) holds 8 only; step 3
    # [50, 60) holds 7 carried in; step 4 [-10, -5) is before the first event.
    windows = [(1, 20, 30), (2, 30, 38), (3, 50, 60), (4, -10, -5)]
    assert _steps_peak(time_ps, in_use, windows) == (8, 1)  # the first step to hold 8
    assert _steps_peak(time_ps, in_use, [(7, 11, 13)]) == (9, 7)  # 9 in force at its start
    assert _steps_peak(time_ps, in_use, [(4, -10, -5)]) is None
    assert _steps_peak(time_ps, in_use, []) is None
