"""The TPU reader on synthetic traces laid out like real libtpu traces (tests/tpu_trace.py).

Every trace is compared with the ground truth its writer returns: the op set, per-op
occurrences, durations and self times, module linkage, HLO text and XLA's costs per op. The v6e
and v5p traces carry real TPU HLO (../shared/fixtures; skipped when absent); the small trace
needs nothing outside the project.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from hlogap import audit
from hlogap.hlo.text import parse_instruction
from hlogap.proto import xplane_pb2
from hlogap.trace.model import TraceData
from hlogap.trace.reading import read_trace
from hlogap.trace.summary import time_ops
from tests import tpu_trace as tt
from tests.conftest import SHARED

HLO_LINES = SHARED / "tpu-text" / "tpu_hlo_ops.txt"
OP_PROFILE = SHARED / "tpu-v5p-xprof" / "op_profile.json.gz"

Trace = tuple[Path, tt.Written]


def _need(path: Path) -> None:
    if not path.is_file():
        pytest.skip(f"{path} absent (../shared not beside the project)")


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Trace:
    path = tmp_path_factory.mktemp("tpu") / "small.xplane.pb"
    return path, tt.write_tpu_trace(path, tt.small_spec())


@pytest.fixture(scope="module")
def v6e(tmp_path_factory: pytest.TempPathFactory) -> Trace:
    _need(HLO_LINES)
    path = tmp_path_factory.mktemp("tpu") / "t1v-n-9bfa07b4-w-0.xplane.pb"
    spec = tt.v6e_spec(tt.read_hlo_lines(HLO_LINES))
    return path, tt.write_tpu_trace(path, spec)


@pytest.fixture(scope="module")
def v5p_profile() -> list[tt.ProfiledOp]:
    _need(OP_PROFILE)
    return tt.read_op_profile(OP_PROFILE)


@pytest.fixture(scope="module")
def v5p(tmp_path_factory: pytest.TempPathFactory, v5p_profile: list[tt.ProfiledOp]) -> Trace:
    path = tmp_path_factory.mktemp("tpu") / "gke-tpu-b309f56b-rq5s.xplane.pb"
    return path, tt.write_tpu_trace(path, tt.v5p_spec(v5p_profile))


@pytest.fixture(params=["small", "v6e", "v5p"])
def trace(request: pytest.FixtureRequest) -> Trace:
    return request.getfixturevalue(request.param)


@cache
def _read(path: Path) -> TraceData:
    """The fixtures' traces, read once (tests do not modify what they get)."""
    return read_trace(path, "host")


def _key(trace: TraceData, i: int) -> tuple[str, str]:
    key = trace.ops[i].key
    return key.program_id, key.name


def _assert_matches(data: TraceData, expected: dict[tuple[str, str], tt.OpTotals]) -> None:
    """Same op set, and per op the same occurrences, durations and self times."""
    times = time_ops(data)
    got = {
        _key(data, i): (
            int(times.occurrences[i]),
            int(times.duration_ps[i]),
            int(times.measured_ps[i]),
        )
        for i in range(len(data.ops))
        if times.events[i]
    }
    want = {k: (t.occurrences, t.duration_ps, t.self_ps) for k, t in expected.items()}
    assert got == want


def _rewrite(src: Path, dst: Path, edit: Callable[[xplane_pb2.XSpace], None]) -> Path:
    space = xplane_pb2.XSpace()
    space.ParseFromString(src.read_bytes())
    edit(space)
    dst.write_bytes(space.SerializeToString())
    return dst


def _stat_id(plane: xplane_pb2.XPlane, name: str) -> int:
    return next(k for k, v in plane.stat_metadata.items() if v.name == name)


def _tpu_planes(space: xplane_pb2.XSpace) -> list[xplane_pb2.XPlane]:
    return [p for p in space.planes if p.name.startswith("/device:TPU:") and " " not in p.name]


# ------------------------------------------------------------------------ the written ground truth


def test_ops_and_sums_are_what_was_written(trace: Trace) -> None:
    path, written = trace
    data = _read(path)
    assert data.backend == "tpu"
    assert data.num_events == written.op_events
    _assert_matches(data, written.ops)


def test_per_device_sums(trace: Trace) -> None:
    path, written = trace
    data = _read(path)
    assert sorted(d.ordinal for d in data.devices) == sorted(written.by_device)
    for ordinal, expected in written.by_device.items():
        keep = np.array([d.ordinal == ordinal for d in data.devices])[data.device_index]
        times = time_ops(data, device=ordinal)
        assert times.devices == 1
        got = {
            _key(data, i): (int(times.occurrences[i]), int(times.measured_ps[i]))
            for i in range(len(data.ops))
            if times.events[i]
        }
        assert got == {k: (t.occurrences, t.self_ps) for k, t in expected.items()}
        # Self times add up to the time the XLA Ops line is busy (the union of its events).
        assert int(data.self_ps[keep].sum()) == written.busy_ps[ordinal]


def test_nested_while_gets_self_time(trace: Trace) -> None:
    path, written = trace
    loops = [k for k, op in written.info.items() if op.category == "while"]
    if not loops:
        pytest.skip("no while in this trace")
    data = _read(path)
    times = time_ops(data)
    for i in range(len(data.ops)):
        key = _key(data, i)
        totals = written.ops[key]
        if key in loops:
            # The loop's self time is what its body leaves: far below its duration.
            assert times.measured_ps[i] == totals.self_ps
            assert 0 < times.measured_ps[i] < times.duration_ps[i] / 100
        else:
            assert times.measured_ps[i] == times.duration_ps[i]


def test_device_clock_not_host_clock(small: Trace) -> None:
    """xprof times TPU ops with device_offset_ps/device_duration_ps; offset_ps/duration_ps
    are the same spans on the host clock, ~0.05% shorter."""
    path, written = small
    data = _read(path)
    times = time_ops(data)
    for i in range(len(data.ops)):
        totals = written.ops[_key(data, i)]
        assert times.duration_ps[i] == totals.duration_ps
        if totals.duration_ps > 1_000_000:
            assert totals.host_duration_ps < totals.duration_ps


# ------------------------------------------------------------------- what each op carries


def test_module_and_program_linkage(trace: Trace) -> None:
    path, written = trace
    data = _read(path)
    for info in data.ops:
        assert info.key.program_id in written.module_names
        assert info.key.module == written.module_names[info.key.program_id]
        assert (info.key.module, info.key.program_id) in data.modules  # /host:metadata HLO


def test_hlo_text_and_xla_costs(trace: Trace) -> None:
    path, written = trace
    data = _read(path)
    for info in data.ops:
        op = written.info[(info.key.program_id, info.key.name)]
        assert info.hlo_text == op.hlo_text
        inst = parse_instruction(info.hlo_text)
        assert inst.name == info.key.name
        assert info.category == op.category
        assert info.xla_flops == op.flops
        assert info.xla_bytes == op.bytes_accessed


def test_async_sparse_core_and_host_events_are_not_op_time(trace: Trace) -> None:
    path, written = trace
    assert written.async_events > 0 and written.host_events > 0
    data = _read(path)
    assert data.num_events == written.op_events
    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    assert len(data.devices) == len(_tpu_planes(space))
    assert all(" SparseCore " not in d.plane for d in data.devices)


def test_plane_stats_reach_the_devices(trace: Trace) -> None:
    path, _ = trace
    data = _read(path)
    for device in data.devices:
        stats = device.stats
        assert stats["device_type_string"] in ("TPU v6 Lite", "TPU v5")
        assert isinstance(stats["peak_teraflops_per_second"], float)
        assert isinstance(stats["peak_hbm_bw_gigabytes_per_second"], float)
        assert "has_megacore" in stats
        assert "core_details" not in stats  # bytes


# ------------------------------------------------------------------------- real run shapes


def test_v6e_run_shape(v6e: Trace) -> None:
    path, written = v6e
    data = _read(path)
    assert [d.plane for d in data.devices] == [f"/device:TPU:{n}" for n in range(4)]
    times = time_ops(data)
    occ = {_key(data, i)[1]: int(times.occurrences[i]) for i in range(len(data.ops))}
    assert occ["broadcast_add_fusion.2"] == 400  # 100 runs of jit_f on 4 chips
    assert occ["all-reduce"] == 12
    assert occ["broadcast.2"] == 1
    assert len(data.ops) == 17
    assert written.async_events == 4 * 100 * 6  # six transfers per run, as on the real trace


def test_v5p_reproduces_xprof_op_profile(v5p: Trace, v5p_profile: list[tt.ProfiledOp]) -> None:
    """Reading the trace gives back xprof's own per-op occurrences and total times."""
    path, _ = v5p
    data = _read(path)
    times = time_ops(data)
    index = {_key(data, i): i for i in range(len(data.ops))}
    for p in v5p_profile:
        i = index[(str(p.program.program_id), p.op.name)]
        # xprof's occurrences are its events; hlogap's are module executions (fewer: loops).
        assert times.events[i] == p.occurrences
        assert times.occurrences[i] <= p.occurrences
        assert times.duration_ps[i] == p.raw_time_ps
        assert data.ops[i].key.module == p.program.name


# ---------------------------------------------------------------- layout variants and fallbacks


def _strip_metadata_stat(name: str) -> Callable[[xplane_pb2.XSpace], None]:
    def edit(space: xplane_pb2.XSpace) -> None:
        for plane in _tpu_planes(space):
            sid = _stat_id(plane, name)
            for md in plane.event_metadata.values():
                keep = [s for s in md.stats if s.metadata_id != sid]
                del md.stats[:]
                md.stats.extend(keep)

    return edit


def test_module_from_enclosing_xla_modules_event(small: Trace, tmp_path: Path) -> None:
    """Without program_id on the metadata, the XLA Modules event around the op names it."""
    path, written = small
    edited = _rewrite(path, tmp_path / "t.xplane.pb", _strip_metadata_stat("program_id"))
    data = read_trace(edited, "host")
    _assert_matches(data, written.ops)
    for info in data.ops:
        assert info.key.module == written.module_names[info.key.program_id]


def test_name_from_text_without_display_name(small: Trace, tmp_path: Path) -> None:
    path, written = small

    def edit(space: xplane_pb2.XSpace) -> None:
        for plane in _tpu_planes(space):
            for md in plane.event_metadata.values():
                md.display_name = ""

    data = read_trace(_rewrite(path, tmp_path / "t.xplane.pb", edit), "host")
    _assert_matches(data, written.ops)
    assert all(info.hlo_text for info in data.ops)


def test_host_spans_when_device_stats_are_missing(small: Trace, tmp_path: Path) -> None:
    path, written = small
    edited = _rewrite(path, tmp_path / "t.xplane.pb", _strip_event_stats("device_duration_ps"))
    data = read_trace(edited, "host")
    times = time_ops(data)
    for i in range(len(data.ops)):
        totals = written.ops[_key(data, i)]
        assert times.occurrences[i] == totals.occurrences
        assert times.duration_ps[i] == totals.host_duration_ps


def _strip_event_stats(name: str) -> Callable[[xplane_pb2.XSpace], None]:
    def edit(space: xplane_pb2.XSpace) -> None:
        for plane in _tpu_planes(space):
            sid = _stat_id(plane, name)
            for line in plane.lines:
                for ev in line.events:
                    keep = [s for s in ev.stats if s.metadata_id != sid]
                    del ev.stats[:]
                    ev.stats.extend(keep)

    return edit


def test_parent_after_child_with_the_same_start(tmp_path: Path) -> None:
    """Event order on the line does not matter, even where a loop and its first body op start
    together and the body op comes first."""
    path = tmp_path / "lead0.xplane.pb"
    written = tt.write_tpu_trace(path, tt.small_spec(loop_lead_ps=0))

    def edit(space: xplane_pb2.XSpace) -> None:
        for plane in _tpu_planes(space):
            for line in plane.lines:
                if line.name == "XLA Ops":
                    events = list(line.events)
                    del line.events[:]
                    line.events.extend(reversed(events))

    data = read_trace(_rewrite(path, tmp_path / "t.xplane.pb", edit), "host")
    _assert_matches(data, written.ops)


def test_plane_split_in_chunks_is_one_device(small: Trace, tmp_path: Path) -> None:
    """A plane cut in chunks (same name and metadata, lines split) is still one device."""
    path, written = small

    def edit(space: xplane_pb2.XSpace) -> None:
        plane = _tpu_planes(space)[0]
        chunk = space.planes.add()
        chunk.CopyFrom(plane)
        for src, dst in zip(plane.lines, chunk.lines, strict=True):
            half = len(src.events) // 2
            # Cut between two top-level events: after a copy-done (the last op of a run).
            while half < len(src.events) and src.name == "XLA Ops":
                md = plane.event_metadata[src.events[half - 1].metadata_id]
                if md.display_name == "copy-done":
                    break
                half += 1
            del src.events[half:]
            del dst.events[:half]

    data = read_trace(_rewrite(path, tmp_path / "t.xplane.pb", edit), "host")
    assert len(data.devices) == len(written.by_device)
    _assert_matches(data, written.ops)


def test_aggregated_line(small: Trace, tmp_path: Path) -> None:
    """tsl's AggregateXPlane form: one event per op with num_occurrences, the summed duration
    and, for ops with nested ops, self_duration_ps."""
    path, written = small

    def edit(space: xplane_pb2.XSpace) -> None:
        for plane in _tpu_planes(space):
            ordinal = int(plane.name.rsplit(":", 1)[1])
            by_name = {md.display_name: md.id for md in plane.event_metadata.values()}
            self_sid = max(plane.stat_metadata) + 1
            plane.stat_metadata[self_sid].id = self_sid
            plane.stat_metadata[self_sid].name = "self_duration_ps"
            line = next(ln for ln in plane.lines if ln.name == "XLA Ops")
            del line.events[:]
            for (_, name), t in written.by_device[ordinal].items():
                ev = line.events.add(metadata_id=by_name[name], num_occurrences=t.events)
                ev.duration_ps = t.duration_ps
                if t.self_ps != t.duration_ps:
                    ev.stats.add(metadata_id=self_sid, int64_value=t.self_ps)

    data = read_trace(_rewrite(path, tmp_path / "t.xplane.pb", edit), "host")
    times = time_ops(data)
    got = {
        _key(data, i): (int(times.occurrences[i]), int(times.measured_ps[i]))
        for i in range(len(data.ops))
    }
    # Without start times there are no executions to tell: each event is an occurrence.
    assert got == {k: (t.events, t.self_ps) for k, t in written.ops.items()}


def test_root_symbol_event_is_dropped(small: Trace, tmp_path: Path) -> None:
    """xprof ignores XLA Ops events whose metadata has symbol_id 0 (the program's root)."""
    path, written = small

    def edit(space: xplane_pb2.XSpace) -> None:
        for plane in _tpu_planes(space):
            md_id = max(plane.event_metadata) + 1
            md = plane.event_metadata[md_id]
            md.id = md_id
            md.name = "main.3"
            md.stats.add(
                metadata_id=_stat_id(plane, "program_id"), uint64_value=tt.JIT_F.program_id
            )
            md.stats.add(metadata_id=_stat_id(plane, "symbol_id"), uint64_value=0)
            line = next(ln for ln in plane.lines if ln.name == "XLA Ops")
            first, last = line.events[0], line.events[len(line.events) - 1]
            root = line.events.add(metadata_id=md_id, offset_ps=first.offset_ps)
            root.duration_ps = last.offset_ps + last.duration_ps - first.offset_ps

    data = read_trace(_rewrite(path, tmp_path / "t.xplane.pb", edit), "host")
    _assert_matches(data, written.ops)


def test_steps_line_gives_the_steps_on_the_device_clock(small: Trace) -> None:
    # Oracle: the `Steps` events (host clock) mapped back through the writer's clock map.
    path, _ = small
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    expected: dict[int, tuple[int, int]] = {}
    for plane in space.planes:
        for line in plane.lines:
            if line.name != "Steps" or not plane.name.startswith("/device:TPU:"):
                continue
            for ev in line.events:
                number = int(plane.event_metadata[ev.metadata_id].name)
                start = tt._DEVICE_T0 + (ev.offset_ps - tt._HOST_T0) * tt._HOST_DEN // tt._HOST_NUM
                end = (
                    tt._DEVICE_T0
                    + (ev.offset_ps + ev.duration_ps - tt._HOST_T0) * tt._HOST_DEN // tt._HOST_NUM
                )
                first, last = expected.get(number, (start, end))
                expected[number] = (min(first, start), max(last, end))
    data = _read(path)
    assert [s.number for s in data.steps] == sorted(expected) == [0, 1, 2]
    for step in data.steps:
        start, end = expected[step.number]
        assert step.source == "tpu-steps"
        assert abs(step.start_ps - start) <= 2_000 and abs(step.end_ps - end) <= 2_000
    report = audit(path)
    assert [s.source for s in report.steps] == ["tpu-steps"] * 3
    for s in report.steps:
        assert s.busy_us + s.idle_us == pytest.approx(s.device_wall_us)
        assert 0 < s.busy_us <= s.wall_us * s.devices


def test_parents_first_order_equals_lexsort() -> None:
    # The oracle is the lexsort the reader did before: by start, longest first where starts
    # tie, ties of equal length in line order. Lines as profiles write them: in host-clock
    # order, a few device-clock starts out of it, ties in either order.
    from hlogap.trace.backends.tpu import _parents_first

    rng = np.random.default_rng(5)
    for _ in range(300):
        n = int(rng.integers(1, 400))
        start = np.cumsum(rng.integers(0, 3, n)).astype(np.int64)  # steps of 0: ties
        swaps = rng.integers(0, n, int(rng.integers(0, 4)))
        start[swaps] -= rng.integers(0, 20, len(swaps))
        dur = rng.integers(0, 4, n).astype(np.int64)
        if rng.random() < 0.5:  # parents already first, as most lines are
            order = np.lexsort((-dur, start))
            start, dur = start[np.argsort(order)], dur[np.argsort(order)]
        assert np.array_equal(_parents_first(start, dur), np.lexsort((-dur, start)))
