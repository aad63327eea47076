"""Steps in the user's frame: each device's own step (wall, busy, idle) counted from the trace's
events, skew kept out of idle, and a step speedup a user can bank."""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict
from pathlib import Path

import msgspec
import numpy as np
import pytest

from hlogap import audit
from hlogap.options import AuditOptions
from hlogap.proto import xplane_pb2
from hlogap.report.codec import encode
from hlogap.report.model import AuditReport, StepRow
from hlogap.report.summary import StepSummary
from hlogap.trace.model import TraceData
from hlogap.trace.reading import read_trace
from hlogap.trace.steps import OpStepCosts, _DeviceEvents, _Segments, step_totals
from hlogap.trace.summary import Selection
from tests.conftest import AMD_FILES, FIXTURES, SAMPLE, SHARED, cpu_fixtures, step_row
from tests.test_steps import _union_in

V6E = SHARED / "tpu-v6e-offload" / "tpu_inference_2.xplane.pb"

Events = dict[int, list[tuple[int, int, str]]]  # device -> (start, end, module) in ps


def _gpu_events(path: Path) -> Events:
    """Oracle: every kernel event naming an `hlo_op` (on itself or its metadata) on each
    `/device:GPU:N` plane, with its `hlo_module`."""
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    found: Events = defaultdict(list)
    for plane in space.planes:
        if not plane.name.startswith("/device:GPU:"):
            continue
        device = int(plane.name.rsplit(":", 1)[1])
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            for ev in line.events:
                stats = [*plane.event_metadata[ev.metadata_id].stats, *ev.stats]
                named = {names.get(s.metadata_id): s for s in stats}
                if "hlo_op" not in named:
                    continue
                module = named["hlo_module"]
                start = line.timestamp_ns * 1000 + ev.offset_ps
                text = names.get(module.ref_value, "") if module.ref_value else module.str_value
                found[device].append((start, start + ev.duration_ps, text))
    return found


def _tpu_events(path: Path) -> Events:
    """Oracle: every `XLA Ops` event of each TensorCore plane, on the device's own clock
    (`device_offset_ps`, `device_duration_ps`, the way xprof times TPU ops), with the module
    of the `XLA Modules` event that encloses it on the host clock."""
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    found: Events = defaultdict(list)
    for plane in space.planes:
        if not plane.name.startswith("/device:TPU:") or "SparseCore" in plane.name:
            continue
        device = int(plane.name.rsplit(":", 1)[1])
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        lines = {line.name: line for line in plane.lines}
        modules_line = lines["XLA Modules"]
        modules = sorted(
            (
                modules_line.timestamp_ns * 1000 + ev.offset_ps,
                modules_line.timestamp_ns * 1000 + ev.offset_ps + ev.duration_ps,
                plane.event_metadata[ev.metadata_id].name.split("(")[0],
            )
            for ev in modules_line.events
        )
        ops = lines["XLA Ops"]
        for ev in ops.events:
            stats = {names.get(s.metadata_id): s for s in ev.stats}
            host = ops.timestamp_ns * 1000 + ev.offset_ps
            module = next((m for a, b, m in modules if a <= host < b), "")
            offset, duration = stats["device_offset_ps"], stats["device_duration_ps"]
            start = offset.int64_value or offset.uint64_value
            found[device].append(
                (start, start + (duration.int64_value or duration.uint64_value), module)
            )
    return found


def _check_devices(report: AuditReport, events: Events, module: str) -> None:
    """Each device's part of each step, counted with plain Python from its events. Steps here
    are executions of `module`: a device's part of step k holds exactly its k-th execution
    (each holds some of the module's events, all of them are in some step, parts are in
    order on each device); it runs from the first event starting in it to the last end, and
    its busy time is the union of the device's events over that span."""
    origin = min(a for spans in events.values() for a, _, _ in spans)
    parts: dict[int, list[tuple[int, int]]] = defaultdict(list)
    assert report.steps and {s.source for s in report.steps} == {"module"}
    for step in report.steps:
        firsts, lasts, idle_sum = [], [], 0.0
        for part in step.per_device:
            lo = origin + round(part.start_us * 1e6)
            hi = lo + round(part.wall_us * 1e6)
            parts[part.device].append((lo, hi))
            inside = [(a, b) for a, b, _ in events[part.device] if lo <= a < hi]
            assert min(a for a, _ in inside) == lo and max(b for _, b in inside) == hi
            busy = _union_in([(a, b) for a, b, _ in events[part.device]], lo, hi)
            assert part.busy_us == pytest.approx(busy / 1e6, abs=1e-6)
            assert part.idle_us == pytest.approx((hi - lo - busy) / 1e6, abs=1e-6)
            firsts.append(lo)
            lasts.append(hi)
            idle_sum += (hi - lo - busy) / 1e6
        # The step runs from its earliest device start to its latest device end; skew is the
        # spread of the starts, and the step's idle is its devices' own idle: never the skew.
        assert step.wall_us == pytest.approx((max(lasts) - min(firsts)) / 1e6, abs=1e-6)
        assert step.skew_us == pytest.approx((max(firsts) - min(firsts)) / 1e6, abs=1e-6)
        assert step.idle_us == pytest.approx(idle_sum, abs=1e-5)
    for device, spans in parts.items():
        assert all(b <= c for (_, b), (c, _) in itertools.pairwise(spans))
        of_module = [a for a, _, m in events[device] if m == module]
        counts = [sum(lo <= a < hi for a in of_module) for lo, hi in spans]
        # (The MI300X trace lost one kernel of one execution: counts may differ, never be 0.)
        assert sum(counts) == len(of_module) and min(counts) > 0


def test_mi300x_devices_step_bystep_row() -> None:
    path = AMD_FILES["mi300x"]
    if not path.is_file():
        pytest.skip(f"{path} absent (../shared not beside the project)")
    report = audit(path)
    _check_devices(report, _gpu_events(path), "jit_forward_3d_conv")
    # Step 0's devices start up to 21.9 ms apart, each running ~1 ms: that is skew, not idle.
    first = report.steps[0]
    assert first.skew_us > 20_000
    assert first.idle_us < 0.5 * first.device_wall_us
    summary = report.summary_dict()
    assert isinstance(summary["idle_fraction"], float) and summary["idle_fraction"] < 0.5


def test_v6e_devices_step_bystep_row() -> None:
    if not V6E.is_file():
        pytest.skip(f"{V6E} absent (../shared not beside the project)")
    report = audit(V6E)
    _check_devices(report, _tpu_events(V6E), "jit_f")
    # The host-offload waits are host transfers, not collectives.
    summary = report.summary_dict()
    assert isinstance(summary["exposed_host_us"], float)
    assert summary["exposed_host_us"] > 0.9 * summary["busy_us"]  # type: ignore[operator]
    assert summary["exposed_comm_us"] < 0.05 * summary["busy_us"]  # type: ignore[operator]
    # Each host transfer has its own bound: its bytes over the host link.
    for name in ("copy-done.2", "copy-done.4"):
        row = next(r for r in report.ops if r.name == name)
        assert row.bound_by == "host" and row.bound_us > 0
        assert row.efficiency is not None and 0.3 <= row.efficiency <= 1.0


def _all_profiles() -> list[tuple[str, Path]]:
    found = [(p.name, p) for p in cpu_fixtures()] + [("sample", SAMPLE)]
    found += [(name, path) for name, path in AMD_FILES.items()] + [("v6e", V6E)]
    return found


@pytest.mark.parametrize(("name", "path"), _all_profiles(), ids=lambda v: str(v))
def test_step_speedup_never_exceeds_the_op_time_speedup(
    name: str, path: Path, cpu_chip_file: Path
) -> None:
    if not path.exists():
        pytest.skip(f"{path} absent (../shared not beside the project)")
    cpu = path.is_relative_to(FIXTURES) or path == SAMPLE
    report = audit(path, AuditOptions(chip=str(cpu_chip_file) if cpu else None))
    summary = report.summary_dict()
    step_speedup, speedup = summary["step_speedup"], summary["speedup"]
    assert isinstance(step_speedup, float) and isinstance(speedup, float)
    assert 1.0 <= step_speedup <= speedup + 1e-12
    for step in report.steps:
        assert step.bound_wall_us is not None and 0 < step.bound_wall_us <= step.wall_us + 1e-9
        for part in step.per_device:
            assert 0 <= part.bound_wall_us <= part.wall_us + 1e-9


def _costs(trace: TraceData, at_bound: dict[int, float]) -> OpStepCosts:
    """Costs where only the ops in `at_bound` (by index) lose time against their bound."""
    keys = [o.key for o in trace.ops]
    return OpStepCosts(
        bound_us={k: 0.0 for k in keys},
        flops={k: 0.0 for k in keys},
        at_bound={k: at_bound.get(i, 1.0) for i, k in enumerate(keys)},
        collective=frozenset(),
        host=frozenset(),
    )


def _isolated_op(trace: TraceData, device: int, lo: int, hi: int) -> int:
    """An op of `device` whose events in [lo, hi) run with nothing else beside them."""
    on = np.flatnonzero(
        (trace.device_index == device) & (trace.start_ps >= lo) & (trace.start_ps < hi)
    )
    start, end = trace.start_ps[on], trace.start_ps[on] + trace.duration_ps[on]
    alone: dict[int, bool] = {}
    for i in range(len(on)):
        overlaps = ((start < end[i]) & (end > start[i])).sum() > 1
        op = int(trace.op_index[on[i]])
        alone[op] = alone.get(op, True) and not overlaps and end[i] > start[i]
    candidates = [op for op, ok in alone.items() if ok]
    assert candidates, "no op runs alone in the step"
    # The longest such op: its events' total time.
    return max(
        candidates, key=lambda op: int(trace.duration_ps[on][trace.op_index[on] == op].sum())
    )


def test_removing_one_ops_gap_shortens_the_step_by_its_critical_path_saving() -> None:
    """A CPU step (mlp_train, XLA:CPU's thread pool: ops overlap): edit the timeline so one op
    that runs alone takes half its time, moving everything after it earlier; the step's wall
    shrinks by exactly what the critical path predicted, and its wall at the bound stays."""
    path = next((FIXTURES / "mlp_train").rglob("*.xplane.pb"))
    trace = read_trace(path, "vm")
    assert trace.steps
    windows = [(s.start_ps, s.end_ps) for s in trace.steps]
    device = 0
    lo, hi = windows[0]
    op = _isolated_op(trace, device, lo, hi)
    before = step_totals(trace, Selection(), windows, _costs(trace, {op: 0.5}))
    predicted = before.saving_ps[device, 0]
    on_op = (trace.device_index == device) & (trace.op_index == op)
    in_step = on_op & (trace.start_ps >= lo) & (trace.start_ps < hi)
    assert predicted == pytest.approx(trace.duration_ps[in_step].sum() / 2)
    # The edit: each of the op's events in the step loses half its time, and every later
    # event of the device starts that much earlier.
    start = trace.start_ps.copy()
    duration = trace.duration_ps.copy()
    self_ps = trace.self_ps.copy()
    for i in sorted(np.flatnonzero(in_step), key=lambda i: -int(trace.start_ps[i])):
        cut = int(duration[i]) // 2
        end = trace.start_ps[i] + trace.duration_ps[i]
        later = (trace.device_index == device) & (trace.start_ps >= end)
        start[later] -= cut
        duration[i] -= cut
        self_ps[i] -= cut
    edited = msgspec.structs.replace(
        trace, start_ps=start, duration_ps=duration, self_ps=self_ps, selected={}
    )
    after = step_totals(edited, Selection(), windows, _costs(edited, {}))
    wall_before = before.last_ps[device, 0] - before.first_ps[device, 0]
    wall_after = after.last_ps[device, 0] - after.first_ps[device, 0]
    assert wall_before - wall_after == pytest.approx(predicted, abs=len(np.flatnonzero(in_step)))
    # Nothing is left to save once the op runs at its bound.
    assert after.saving_ps[device, 0] == 0
    assert wall_after == pytest.approx(wall_before - predicted, abs=len(np.flatnonzero(in_step)))


def _plain_saving(
    start: np.ndarray,
    end: np.ndarray,
    leaf: np.ndarray,
    ratio: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
) -> list[float]:
    """Oracle: the time cut at every edge of the events and windows, piece by piece; a piece
    lies in the last window to begin at or before it, where that one ends after it, and
    shrinks to the largest ratio of the leaf events running through it (none: kept)."""
    leaves = [(s, e, r) for s, e, r, is_leaf in zip(start, end, ratio, leaf) if is_leaf]
    edges = sorted({*start.tolist(), *end.tolist(), *lo.tolist(), *hi.tolist()})
    found = [0.0] * len(lo)
    for a, b in itertools.pairwise(edges):
        running = [r for s, e, r in leaves if s <= a and e >= b]
        begun = [k for k in range(len(lo)) if lo[k] <= a]
        if running and begun and a < hi[begun[-1]]:
            found[begun[-1]] += (b - a) * (1 - max(running))
    return found


def _segments(
    op: np.ndarray, start: np.ndarray, end: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> _Segments:
    duration = end - start
    return _Segments.of(_DeviceEvents(op, start, duration, duration), lo, hi)


def test_concurrent_ops_shrink_no_further_than_the_slowest_of_them() -> None:
    """The critical path of overlapping ops, against a plain-Python sweep of the segments."""
    rng = np.random.default_rng(7)
    start = np.sort(rng.integers(0, 10_000, 300)).astype(np.int64)
    end = start + rng.integers(1, 400, 300)
    end[5] = start[5] + 9_000  # a long event spanning many segments
    ratio = rng.random(300)
    lo = np.array([0, 3_000, 7_000], dtype=np.int64)
    hi = np.array([3_000, 7_000, 11_000], dtype=np.int64)
    got = _segments(np.arange(300), start, end, lo, hi).saving(ratio)
    leaf = np.ones(300, dtype=bool)
    assert got.tolist() == pytest.approx(_plain_saving(start, end, leaf, ratio, lo, hi))


def test_utilisation_shares_and_sort(cpu_chip_file: Path, tmp_path: Path) -> None:
    """HFU is the ops' FLOPs over the steps' wall time, devices and the peak; MFU takes the
    user's model FLOPs; shares add up in the rows' order; `--sort efficiency` starts with the
    least efficient op."""
    report = audit(
        FIXTURES / "mlp", AuditOptions(chip=str(cpu_chip_file), model_flops=2e8, sort="efficiency")
    )
    # Every op of the mlp fixture runs inside a step: the steps' FLOPs are the ops' own.
    flops = sum(r.flops * r.occurrences for r in report.ops)
    assert sum(s.flops for s in report.steps) == pytest.approx(flops)
    steady = report.steady_steps
    flops = sum(s.flops for s in steady)
    device_seconds = sum(s.wall_us * s.devices for s in steady) * 1e-6
    summary = report.summary_dict()
    assert summary["flops_per_s"] == pytest.approx(flops / device_seconds)
    assert summary["flops_dtype"] == "f32"
    assert summary["hfu"] == pytest.approx(flops / device_seconds / 1e11)  # the test chip's f32
    assert summary["mfu"] == pytest.approx(2e8 * len(steady) / device_seconds / 1e11)
    # The model's FLOPs per step equal to the hardware's: MFU is HFU (one frame for both).
    report.model_flops = flops / len(steady)
    assert report.mfu == pytest.approx(report.hfu)
    effs = [r.efficiency for r in report.ops]
    assert effs == sorted(effs)  # type: ignore[type-var]
    doc = report.to_dict(0)
    rows = doc["ops"]
    assert isinstance(rows, list)
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    running = 0.0
    for r in rows:
        running += r["share"]
        assert r["cum_share"] == pytest.approx(running)


def test_a_saved_report_keeps_the_devices_and_a_version_2_one_still_reads(
    cpu_chip_file: Path, tmp_path: Path
) -> None:
    import json

    from hlogap import load_report

    report = audit(FIXTURES / "sharded_train", AuditOptions(chip=str(cpu_chip_file)))
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps(report.to_dict(0)))
    loaded = load_report(saved)
    assert loaded.steps == report.steps
    assert loaded.steps[0].per_device == report.steps[0].per_device
    assert len(loaded.steps[0].per_device) == 8
    flat = [
        {k: v for k, v in r.summary_dict().items() if k != "outside_steps"}
        for r in (loaded, report)
    ]
    assert flat[0] == pytest.approx(flat[1])
    # A version-2 report: no device parts; its idle was `wall * devices - busy`.
    old = report.to_dict(0)
    old["schema"] = "hlogap.audit/2"
    for step in old["steps"]:  # type: ignore[union-attr]
        for key in ("per_device", "device_wall_us", "skew_us", "slowest_device", "bound_wall_us"):
            del step[key]
        step["idle_us"] = step["wall_us"] * step["devices"] - step["busy_us"]
    saved.write_text(json.dumps(old))
    v2 = load_report(saved)
    first = v2.steps[0]
    assert first.per_device == [] and first.bound_wall_us is None
    assert first.device_wall_us == pytest.approx(first.wall_us * first.devices)
    assert v2.step_speedup is None


def test_model_flops_must_be_positive(cpu_chip_file: Path) -> None:
    from hlogap.errors import UsageError

    with pytest.raises(UsageError, match="--model-flops"):
        audit(FIXTURES / "mlp", AuditOptions(chip=str(cpu_chip_file), model_flops=-1.0))


def test_json_written_a_block_of_steps_at_a_time_is_the_report(
    cpu_chip_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The JSON writer adds the steps a block at a time (a 40 k-step report's device parts are
    never all in memory as objects): the document is the report's own, whatever the block."""
    import json

    from hlogap.render import json as json_renderer
    from hlogap.render.base import RenderOptions

    report = audit(FIXTURES / "sharded_train", AuditOptions(chip=str(cpu_chip_file)))
    expected = json.loads(json.dumps(report.to_dict(0)))
    for per_chunk in (1, 2, 1000):
        monkeypatch.setattr(json_renderer, "STEPS_PER_CHUNK", per_chunk)
        chunks = list(json_renderer.JsonRenderer().render_chunks(report, RenderOptions(top=0)))
        assert json.loads(b"".join(chunks)) == expected
        assert len(chunks) == 2 + -(-len(report.steps) // per_chunk)


def _timeline(rng: np.random.Generator, shape: str) -> tuple[np.ndarray, np.ndarray]:
    """Random (start, end) of one device's events, built to break the segments: zero-length,
    touching and same-start events, overlaps, kernels that overlap nothing, long events."""
    n = int(rng.integers(1, 80))
    if shape == "stream":  # one stream: gaps, touching and zero-length kernels
        duration = rng.integers(0, 50, n)
        gap = rng.integers(0, 3, n) * rng.integers(0, 20, n)
        start = np.cumsum(gap + np.r_[0, duration[:-1]]).astype(np.int64)
        return start, start + duration
    if shape == "overlapping":
        start = np.cumsum(rng.integers(0, 60, n)).astype(np.int64)
        return start, start + rng.integers(1, 50, n)
    if shape == "same starts":
        start = np.sort(rng.integers(0, 200, n)).astype(np.int64)
        return start, start + rng.integers(0, 30, n)
    start = np.sort(rng.integers(0, 10_000, n)).astype(np.int64)
    end = start + rng.integers(1, 300, n)
    end[0] = start[0] + 9_000  # wide: one event over many segments (`LONG_EVENT_SEGMENTS`)
    return start, end


def _windows(rng: np.random.Generator, kind: str, top: int) -> tuple[np.ndarray, np.ndarray]:
    """Random sorted windows [lo, hi) over [0, top]: tiling the time as steps do, apart with
    gaps between them (and empty ones), or each running past the next one's start."""
    cuts = np.sort(rng.integers(0, top + 1, 6)).astype(np.int64)
    if kind == "tiling":
        return np.r_[0, cuts[:2]], np.r_[cuts[:2], top]
    if kind == "gaps":  # some empty (equal cuts), some starting inside an event
        return cuts[0::2], cuts[1::2]
    return cuts[:3], cuts[:3] + rng.integers(0, top // 2 + 1, 3)


@pytest.mark.parametrize("kind", ["tiling", "gaps", "overlapping"])
@pytest.mark.parametrize("shape", ["stream", "overlapping", "same starts", "wide"])
def test_every_ratio_column_is_the_plain_sweep(shape: str, kind: str) -> None:
    """`_Segments` (the segments found once, each ratio column a gather, a maximum per segment
    and a sum per window): the bound saving and each change's (`savings`: only its ops
    shortened, the others kept) are the plain sweep's over every piece of time, on random
    timelines (columns out of start order, enclosing non-leaf events among them) and windows.
    A change's saving is exactly `saving`'s with its ratios: the same sums."""
    rng = np.random.default_rng(["stream", "overlapping", "same starts", "wide"].index(shape))
    for _ in range(60):
        start, end = _timeline(rng, shape)
        n = len(start)
        op = rng.integers(0, 6, n)
        # An enclosing op's event (its body nested in it: self time below its duration) is
        # no leaf; the columns come in any order.
        self_ps = np.where(rng.random(n) < 0.1, (end - start) // 2, end - start)
        leaf = self_ps == end - start
        shuffled = rng.permutation(n)
        op, start, end, self_ps, leaf = (c[shuffled] for c in (op, start, end, self_ps, leaf))
        lo, hi = _windows(rng, kind, int(end.max()) + 1)
        segments = _Segments.of(_DeviceEvents(op, start, end - start, self_ps), lo, hi)
        at_bound = rng.random(6)
        want = _plain_saving(start, end, leaf, at_bound[op], lo, hi)
        assert segments.saving(at_bound).tolist() == pytest.approx(want, abs=1e-6)
        changes = [np.where(rng.random(6) < 0.4, rng.random(6), 1.0) for _ in range(3)]
        for ratio, got in zip(changes, segments.savings(changes), strict=True):
            want = _plain_saving(start, end, leaf, ratio[op], lo, hi)
            assert got.tolist() == pytest.approx(want, abs=1e-6)
            assert got.tolist() == segments.saving(ratio).tolist()


def test_the_c_sums_are_numpys_to_the_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The C extension's one pass (`_windowsums`) gives numpy's doubles exactly, for the bound
    column in blocks (made small here: several a device) and the changes' in one, on the
    random timelines and windows; both are the plain sweep's."""
    from hlogap.trace import steps

    if steps._windowsums is None:
        pytest.skip("hlogap.trace._windowsums not built")
    monkeypatch.setattr(steps, "BLOCK_ROWS", 8)
    rng = np.random.default_rng(11)
    for shape, kind in itertools.product(
        ["stream", "overlapping", "same starts", "wide"], ["tiling", "gaps", "overlapping"]
    ):
        for _ in range(15):
            start, end = _timeline(rng, shape)
            op = rng.integers(0, 6, len(start))
            lo, hi = _windows(rng, kind, int(end.max()) + 1)
            segments = _segments(op, start, end, lo, hi)
            at_bound = rng.random(6)
            changes = [np.where(rng.random(6) < 0.4, rng.random(6), 1.0) for _ in range(3)]
            with_c = [segments.saving(at_bound), *segments.savings(changes)]
            with monkeypatch.context() as numpy_only:
                numpy_only.setattr(steps, "_windowsums", None)
                with_numpy = [segments.saving(at_bound), *segments.savings(changes)]
            assert [s.tolist() for s in with_c] == [s.tolist() for s in with_numpy]
            leaf = np.ones(len(start), dtype=bool)
            for ratio, got in zip([at_bound, *changes], with_c, strict=True):
                want = _plain_saving(start, end, leaf, ratio[op], lo, hi)
                assert got.tolist() == pytest.approx(want, abs=1e-6)


def test_the_c_sums_refuse_what_is_out_of_range() -> None:
    from hlogap.trace import steps

    if steps._windowsums is None:
        pytest.skip("hlogap.trace._windowsums not built")
    sums = steps._windowsums.window_sums
    window, op = np.array([0, 2], dtype=np.int32), np.array([0, 1], dtype=np.int32)
    ps, kept, out = np.ones(2), np.ones((1, 2)), np.zeros((1, 2))
    with pytest.raises(IndexError, match="out of range"):
        sums(window, ps, op, kept, out, np.zeros(1, dtype=np.int64), 1)
    with pytest.raises(ValueError, match="block_starts"):
        sums(window, ps, op, kept, out, np.array([1], dtype=np.int64), 1)
    with pytest.raises(ValueError, match="differ in length"):
        sums(window[:1], ps, op, kept, out, np.zeros(1, dtype=np.int64), 1)


def test_each_ops_longest_gaps_are_the_same_in_c_and_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    """`_longest_per_op`: each op's LARGEST_GAPS longest gaps, by op, longest first, a tie the
    earlier first; the C pass and numpy's sort pick the same ones in the same order, and both
    are the plain per-op sort's (lengths from a few values: many ties)."""
    from hlogap.trace import steps

    if steps._windowsums is None:
        pytest.skip("hlogap.trace._windowsums not built")
    rng = np.random.default_rng(5)
    for _ in range(200):
        gaps = int(rng.integers(1, 300))
        op = rng.integers(0, int(rng.integers(1, 12)), gaps).astype(np.int32)
        length = rng.integers(0, int(rng.integers(1, 6)), gaps).astype(np.int64) * 1000
        want = [
            i
            for o in sorted(set(op.tolist()))
            for i in sorted(np.flatnonzero(op == o).tolist(), key=lambda i: -length[i])[
                : steps.LARGEST_GAPS
            ]
        ]
        with_c = steps._longest_per_op(op, length).tolist()
        with monkeypatch.context() as numpy_only:
            numpy_only.setattr(steps, "_windowsums", None)
            with_numpy = steps._longest_per_op(op, length).tolist()
        assert with_c == with_numpy == want


def test_the_c_longest_gaps_refuse_what_is_out_of_range() -> None:
    from hlogap.trace import steps

    if steps._windowsums is None:
        pytest.skip("hlogap.trace._windowsums not built")
    longest = steps._windowsums.longest_per_op
    op, length = np.array([0, 2], dtype=np.int32), np.array([5, 6], dtype=np.int64)
    with pytest.raises(IndexError, match="out of range"):
        longest(op, length, np.zeros(6, dtype=np.int64), 3)  # room for ops 0 and 1
    with pytest.raises(ValueError, match="differ in length"):
        longest(op[:1], length, np.zeros(9, dtype=np.int64), 3)


@pytest.mark.parametrize("shape", ["stream", "overlapping", "same starts", "wide"])
def test_spans_found_a_block_at_a_time_are_the_whole_arrays(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A device's busy spans and its events that overlap no other (`SortedSpans`), found a few
    events at a time with the latest end carried from block to block, are the whole arrays'
    (a running maximum of the ends over every event), in any order of the columns."""
    from hlogap.trace import timing

    rng = np.random.default_rng(["stream", "overlapping", "same starts", "wide"].index(shape))
    for _ in range(40):
        start, end = _timeline(rng, shape)
        shuffled = rng.permutation(len(start))
        start, end = start[shuffled], end[shuffled]
        # The whole arrays: the stable order by start, the running maximum of the ends, a
        # span beginning where an event starts after every earlier one ended.
        by_start = np.argsort(start, kind="stable")
        whole_start, whole_end = start[by_start], end[by_start]
        reach = np.maximum.accumulate(whole_end)
        whole_at = np.flatnonzero(np.r_[True, whole_start[1:] > reach[:-1]])
        whole_span_end = reach[np.append(whole_at[1:], len(start)) - 1]
        # Every event's latest end before it: an event overlaps no other where it starts at
        # or after that, and the next one starts at or after its own.
        opens = np.r_[True, whole_start[1:] >= reach[:-1], True]
        with monkeypatch.context() as small:
            small.setattr(timing, "BLOCK_ROWS", 3)
            spans = timing.SortedSpans.of(start, end - start)
        order = np.arange(len(start)) if spans.order is None else spans.order
        assert order.tolist() == by_start.tolist()
        assert spans.start.tolist() == whole_start.tolist()
        assert (spans.start + spans.duration).tolist() == whole_end.tolist()
        assert spans.at.tolist() == whole_at.tolist()
        assert spans.span_end.tolist() == whole_span_end.tolist()
        assert spans.alone.tolist() == (opens[:-1] & opens[1:]).tolist()
        assert [a.tolist() for a in timing.merged_intervals(start, end)] == [
            whole_start[whole_at].tolist(),
            whole_span_end.tolist(),
        ]


@pytest.mark.parametrize("program", ["mlp_train", "amd"])
def test_the_step_pass_a_few_events_at_a_time_is_the_whole_arrays(
    program: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step pass over blocks of a few events (each device's steps, spans and blocks of
    alone pieces found a block at a time) gives every column of the whole arrays' pass to
    the bit: overlapping CPU ops with enclosing ones, and several GPU devices."""
    from hlogap.trace import timing

    path = (
        next((FIXTURES / "mlp_train").rglob("*.xplane.pb"))
        if program == "mlp_train"
        else AMD_FILES["mi300x"]
    )
    if not path.is_file():
        pytest.skip(f"{path} absent (../shared not beside the project)")
    trace = read_trace(path, "vm")
    first, last = int(trace.start_ps.min()), int((trace.start_ps + trace.duration_ps).max())
    cuts = np.linspace(first, last, 5).astype(np.int64).tolist()
    windows = [(a, b) for a, b in itertools.pairwise(cuts)]
    costs = _costs(trace, {i: 0.25 + 0.5 * (i % 2) for i in range(len(trace.ops))})
    keys = [o.key for o in trace.ops]
    changes = [{keys[0]: 0.5}, {k: 0.3 for k in keys[1::3]}]
    whole = step_totals(trace, Selection(), windows, costs, changes=changes, waits_from=1)
    monkeypatch.setattr(timing, "BLOCK_ROWS", 7)
    blocked = step_totals(trace, Selection(), windows, costs, changes=changes, waits_from=1)
    for name in ("first_ps", "last_ps", "busy_ps", "measured_ps", "saving_ps"):
        assert getattr(blocked, name).tolist() == getattr(whole, name).tolist(), name
    assert blocked.change_saving_ps.tolist() == whole.change_saving_ps.tolist()
    assert blocked.waits == whole.waits
    assert whole.saving_ps.any() and whole.waits.gaps


def test_a_lone_event_saves_in_every_window_its_time_lies_in() -> None:
    """An event that overlaps no other and runs from one window into the next saves in each
    the time it spends there, as overlapping events' segments do: never more than a window's
    busy time. (Once counted whole in the window it starts in, cut at that one's end.)"""
    op = np.array([0, 1], dtype=np.int64)
    start = np.array([0, 150], dtype=np.int64)
    end = np.array([100, 250], dtype=np.int64)
    lo = np.array([0, 50], dtype=np.int64)
    hi = np.array([40, 300], dtype=np.int64)
    got = _segments(op, start, end, lo, hi).saving(np.array([0.5, 1.0]))
    # 40 ps of the first event in [0, 40), 50 in [50, 300): each at half its time.
    assert got.tolist() == [20.0, 25.0]


def test_a_step_starting_inside_a_lone_event_counts_its_part_of_it() -> None:
    """The device's part of step 1 begins with an enclosing op (a while loop: not a leaf)
    while a kernel of step 0 still runs: that kernel's time inside step 1 saves there, and
    the step saves no more than it was busy."""
    from hlogap.trace.model import Device, OpInfo, OpKey

    keys = [OpKey("m", "1", name) for name in ("kernel", "loop", "body")]
    # kernel [0, 100) alone among the leaves; loop [50, 300) holds body [120, 220).
    start = np.array([0, 50, 120], dtype=np.int64)
    duration = np.array([100, 250, 100], dtype=np.int64)
    trace = TraceData(
        backend="gpu",
        devices=[Device("host", "/device:GPU:0", 0, {})],
        ops=[OpInfo(k) for k in keys],
        modules={},
        op_index=np.arange(3, dtype=np.int32),
        device_index=np.zeros(3, dtype=np.int32),
        start_ps=start,
        duration_ps=duration,
        self_ps=np.array([100, 150, 100], dtype=np.int64),
        execution=np.zeros(3, dtype=np.int32),
        occurrence=np.arange(3, dtype=np.int32),
        occurrence_first=np.arange(3, dtype=np.int32),
    )
    totals = step_totals(trace, Selection(), [(0, 50), (50, 400)], _costs(trace, {0: 0.5, 2: 0.5}))
    assert totals.busy_ps.tolist() == [[50.0, 250.0]]
    # Step 0: the kernel's first 50 ps at half. Step 1: its last 50 and the body's 100.
    assert totals.saving_ps.tolist() == [[25.0, 75.0]]


def test_warmup_left_out_and_each_step_against_itself() -> None:
    """A first step of compilation and autotuning (20x the others) is left out of the
    summary and named; the step speedup is the median of each step's own ratio (the median
    step's wall over the median at-bound wall mixes two steps)."""
    steps = [
        step_row(0, 2480.0, 2400.0, 2356.0),
        step_row(1, 125.0, 50.0, 1.0),
        step_row(2, 126.0, 63.0, 1.0),
        step_row(3, 124.0, 31.0, 2.0),
        step_row(4, 130.0, 65.0, 1.0),
    ]
    summary = encode(StepSummary.of_steps(steps))
    assert summary["warmup_steps"] == 1 and summary["steps"] == 4
    assert summary["idle_fraction"] == pytest.approx(5.0 / (125 + 126 + 124 + 130))
    ratios = [125 / 50, 126 / 63, 124 / 31, 130 / 65]  # 2.5, 2, 4, 2: median 2.25
    assert summary["step_us"] == pytest.approx(125.5)
    assert summary["step_bound_us"] == pytest.approx(125.5 / statistics.median(ratios))
    report = AuditReport(path="p", chip=None, ops=[], steps=steps)
    assert report.step_speedup == pytest.approx(2.25)  # not 125.5 / 56.5 = 2.22
    # A slow step amid steady ones is a straggler, not warm-up: it stays.
    assert _steady([steps[1], steps[0], steps[2]]) == [steps[1], steps[0], steps[2]]
    # One step alone is kept, however long.
    assert _steady(steps[:1]) == steps[:1]


def _steady(steps: list[StepRow]) -> list[StepRow]:
    return steps[StepSummary.of_steps(steps).warmup_steps :]


def test_a_small_utilisation_is_not_printed_as_zero() -> None:
    from hlogap.render.text import fmt_util

    assert fmt_util(0.00002) == "<0.1%"  # the v6e offload profile's HFU read "0.0%"
    assert fmt_util(0.004) == "0.4%" and fmt_util(0.14) == "14%" and fmt_util(0.0) == "0.0%"


def test_the_steps_overview_is_in_the_summary_frame() -> None:
    """`--steps` (and the HTML's Steps section) reads the steady steps, as the header does: the
    warm-up step named apart, not the slowest step and a -90% drift."""
    from hlogap.render.text import steps_overview

    walls = [2480.0, 125.0, 126.0, 124.0, 130.0]
    steps = [step_row(n, wall, wall / 2, 1.0) for n, wall in enumerate(walls)]
    first, second = steps_overview(AuditReport(path="p", chip=None, ops=[], steps=steps))[:2]
    assert "step 0, 2.48 ms, left out as warm-up" in first
    assert "wall time of the 4 steady: median 125.5 us" in first
    assert second.startswith("slowest: step 4, 130.0 us")
    assert "first steady step 125.0 us -> last 130.0 us (+4.0%)" in second


def test_hfu_names_the_peak_it_is_over(cpu_chip_file: Path) -> None:
    """A chip without the work's own type runs it at another's peak (a TPU's f32 dots at its
    bf16 peak): HFU names that peak (it read 'of f32' beside a chip line with no f32)."""
    from hlogap.chips import load_chip
    from hlogap.render.text import step_lines

    report = audit(FIXTURES / "mlp", AuditOptions(chip=str(cpu_chip_file)))
    assert "HFU" in "\n".join(step_lines(report))
    assert any(line.endswith("of the f32 peak") for line in step_lines(report))
    report.chip = load_chip("tpu-v6e")
    line = next(x for x in step_lines(report) if "HFU" in x)
    assert "of the bf16 peak (f32 work)" in line
    assert report.hfu == pytest.approx(report.flops_per_s / 918e12)  # type: ignore[operator]


def test_a_chip_too_slow_for_the_profile_claims_no_speedup(tmp_path: Path) -> None:
    """Figures set too low (the ops beat their bounds in all): no op-time or step speedup
    below 1x is claimed ('step speedup 0.95x' read slower than measured while every step's own
    bound was below its wall), and a warning says why."""
    chip = tmp_path / "slow.toml"
    chip.write_text(
        'name = "slow"\n[peak_flops]\nf32 = 2e10\nbf16 = 2e10\n[memory]\nhbm_bw = 2e9\n'
    )
    report = audit(FIXTURES / "flaws", AuditOptions(chip=str(chip)))
    assert report.bound_us > report.measured_us and report.beats_bounds
    assert report.speedup is None and report.step_speedup is None
    assert any("its figures are too low for this profile" in w for w in report.warnings)
    summary = report.summary_dict()
    assert summary["speedup"] is None and summary["step_speedup"] is None
