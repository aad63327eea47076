"""Op timings against the trace's own events and against xprof's converter output."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from hlogap import audit
from hlogap.errors import InputError
from hlogap.options import AuditOptions
from hlogap.proto import xplane_pb2
from hlogap.trace.columnar import ABSENT
from hlogap.trace.model import (
    _nested_self_times,
    _stack_self_times,
    distinct_rows,
    occurrence_ids,
    self_times,
)
from hlogap.trace.reading import read_trace
from hlogap.trace.summary import time_ops
from tests.conftest import FIXTURES, cpu_fixtures, oracle


def _events_by_op(path: Path, plane_prefix: str) -> dict[tuple[str, str], list[int]]:
    """Oracle: a plain walk over every event of the matching planes with an `hlo_op` stat, each
    lasting until its `end: <op>` marker when that ends later (an async XLA:CPU op; the marker
    carries the op's context id `_p` as `_c`, on any line of the plane)."""
    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    found: dict[tuple[str, str], list[int]] = defaultdict(list)
    for plane in space.planes:
        if not plane.name.startswith(plane_prefix):
            continue
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        markers: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for line in plane.lines:
            for ev in line.events:
                if plane.event_metadata[ev.metadata_id].name.startswith("end: "):
                    for s in ev.stats:
                        if names[s.metadata_id] == "_c":
                            start = line.timestamp_ns * 1000 + ev.offset_ps
                            markers[s.int64_value or s.uint64_value].append(
                                (start, start + ev.duration_ps)
                            )
        for line in plane.lines:
            for ev in line.events:
                stats = {names[s.metadata_id]: s for s in ev.stats}
                if "hlo_op" in stats:
                    op = names[stats["hlo_op"].ref_value]
                    module = names[stats["hlo_module"].ref_value]
                    start = line.timestamp_ns * 1000 + ev.offset_ps
                    end = start + ev.duration_ps
                    if "_p" in stats:
                        context = stats["_p"].int64_value or stats["_p"].uint64_value
                        after = sorted(m for m in markers.get(context, []) if m[0] >= start)
                        if after:
                            end = max(end, after[0][1])
                    found[(module, op)].append(end - start)
    return found


def test_gpu_ops_are_device_events_and_times_are_their_sums(amd_file: Path) -> None:
    trace = read_trace(amd_file, "host")
    times = time_ops(trace)
    expected = _events_by_op(amd_file, "/device:GPU:")
    got = {(o.key.module, o.key.name): i for i, o in enumerate(trace.ops)}
    assert set(got) == set(expected)
    for key, durations in expected.items():
        i = got[key]
        assert times.measured_ps[i] == sum(durations), key
        assert times.events[i] == len(durations)
    # Launch events on the host plane carry hlo_op too; they must not have been counted.
    host = _events_by_op(amd_file, "/host:CPU")
    assert host, "the fixture's host launch events carry hlo_op"
    assert times.measured_ps.sum() == sum(sum(d) for d in expected.values())


def test_gpu_times_equal_xprof_total_self_time(amd_file: Path) -> None:
    stats_file = amd_file.with_name(amd_file.name.replace(".xplane.pb", ".xprof_hlo_stats.json"))
    xprof = {row["hlo_op_name"]: row for row in json.loads(stats_file.read_text())}
    trace = read_trace(amd_file, "host")
    times = time_ops(trace)
    ours = {o.key.name: times.measured_ps[i] / 1e6 for i, o in enumerate(trace.ops)}
    assert set(ours) == set(xprof)
    for name, row in xprof.items():
        assert ours[name] == pytest.approx(row["total_self_time"], abs=1e-3), name


def test_gpu_occurrences_group_kernels_of_one_execution() -> None:
    from tests.conftest import AMD_FILES

    path = AMD_FILES["mi300x"]
    if not path.is_file():
        pytest.skip("AMD fixture absent")
    trace = read_trace(path, "host")
    times = time_ops(trace)
    by_name = {o.key.name: i for i, o in enumerate(trace.ops)}
    conv = by_name["cudnn-conv.1"]
    # Im3d2Col + gemm per execution: 79 kernels (xprof's "occurrences") in 40 executions,
    # the same 40 (8 devices x 5 steps) as the single-kernel transpose fusion.
    assert times.events[conv] == 79
    assert times.occurrences[conv] == times.occurrences[by_name["loop_transpose_fusion"]] == 40
    assert times.devices == 8


def test_self_time_subtracts_nested_events_only() -> None:
    start = np.array([0, 10, 30, 100, 150], dtype=np.int64)
    dur = np.array([80, 15, 20, 60, 20], dtype=np.int64)  # [0,80) holds two; [100,160) overlaps
    got = self_times(start, dur)
    assert got.tolist() == [45, 15, 20, 60, 20]


def _nesting_lines(seed: int) -> list[tuple[np.ndarray, np.ndarray, bool]]:
    """Lines of events sorted by start, with whether they nest cleanly: random ones (partial
    overlaps, equal starts, empty events) and trees of nested events (call/while bodies; some
    empty, some sharing a start or an end with their parent), a few to 40 events each."""
    rng = np.random.default_rng(seed)
    lines = []
    for trial in range(3000):
        if trial % 2:
            n = int(rng.integers(2, 12))
            start, dur = np.sort(rng.integers(0, 20, n)), rng.integers(0, 8, n)
            tree = False
        else:
            events: list[tuple[int, int]] = []

            def fill(events: list[tuple[int, int]], a: int, b: int, depth: int) -> None:
                t = a
                while t < b and len(events) < 40:
                    s = t + int(rng.integers(0, 3))
                    if s >= b:
                        return
                    e = min(b, s + int(rng.integers(0, 10)))
                    events.append((s, e - s))
                    if depth < 3 and e - s > 1 and rng.random() < 0.6:
                        fill(events, s, e, depth + 1)
                    t = e  # the next sibling starts after this one: a clean tree

            fill(events, 0, 40, 0)
            if len(events) < 2:
                continue
            both = np.array(sorted(events, key=lambda ev: ev[0]), dtype=np.int64)
            start, dur = both[:, 0], both[:, 1]
            tree = True
        lines.append((start.astype(np.int64), dur.astype(np.int64), tree))
    return lines


def test_nesting_in_numpy_equals_the_stack_walk() -> None:
    # The stack walk is the definition; numpy must give the same self times wherever it
    # answers, and answer for every line whose events nest cleanly.
    answered = trees = 0
    for start, dur, tree in _nesting_lines(seed=7):
        walked = _stack_self_times(start, dur)
        vectorized = _nested_self_times(start, dur)
        assert vectorized is not None or not tree, (start.tolist(), dur.tolist())
        if vectorized is not None:
            answered += 1
            assert vectorized.tolist() == walked.tolist(), (start.tolist(), dur.tolist())
        assert self_times(start, dur).tolist() == walked.tolist()
        trees += tree
    assert trees > 1000 and answered > trees


def test_nesting_with_a_partial_overlap_is_left_to_the_stack_walk() -> None:
    start = np.array([0, 2, 3], dtype=np.int64)
    dur = np.array([10, 3, 9], dtype=np.int64)  # [3,12) leaves [0,10) before it ends
    assert _nested_self_times(start, dur) is None
    assert self_times(start, dur).tolist() == [7, 3, 9]


# The documented pattern's fixtures run their steps back to back: a few async ops' `end:`
# markers land in the next execution, where the reader cuts them (stat_events
# ._clip_to_execution); tests/test_launched_steps.py checks those fixtures.
@pytest.mark.parametrize("program", [p.name for p in cpu_fixtures() if "pattern" not in oracle(p)])
def test_cpu_thunks_sum_to_trace_events(program: str) -> None:
    from tests.conftest import FIXTURES

    files = sorted((FIXTURES / program).rglob("*.xplane.pb"))
    assert files
    trace = read_trace(files[0], "host")
    times = time_ops(trace)
    expected = _events_by_op(files[0], "/host:CPU")
    got = {(o.key.module, o.key.name): i for i, o in enumerate(trace.ops)}
    assert set(got) == set(expected)
    total_events = sum(sum(d) for d in expected.values())
    # Nested thunks (while bodies) are charged to the innermost op: self times add up to the
    # union of op time, and each op's self time never exceeds the sum of its events.
    assert times.duration_ps.sum() == total_events
    for key, durations in expected.items():
        i = got[key]
        assert times.duration_ps[i] == sum(durations)
        assert 0 <= times.measured_ps[i] <= sum(durations)


def test_median_per_occurrence_from_the_trace(amd_file: Path) -> None:
    """Oracle: walk each stream in time order, sum consecutive kernels of one op into one
    execution, take each op's median execution time."""
    import statistics

    space = xplane_pb2.XSpace()
    space.ParseFromString(amd_file.read_bytes())
    runs: dict[str, list[int]] = defaultdict(list)
    for plane in space.planes:
        if not plane.name.startswith("/device:GPU:"):
            continue
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            previous = None
            for ev in sorted(line.events, key=lambda e: e.offset_ps):
                stats = {names[s.metadata_id]: s for s in ev.stats}
                op = names[stats["hlo_op"].ref_value] if "hlo_op" in stats else None
                if op is not None and op == previous:
                    runs[op][-1] += ev.duration_ps
                elif op is not None:
                    runs[op].append(ev.duration_ps)
                previous = op
    trace = read_trace(amd_file, "host")
    times = time_ops(trace)
    for i, info in enumerate(trace.ops):
        assert times.median_ps[i] == pytest.approx(statistics.median(runs[info.key.name]))


def test_op_names_given_as_string_stats_read_like_refs(amd_file: Path, tmp_path: Path) -> None:
    """Some writers put `hlo_op`/`hlo_module` as str values, not refs: same ops, same times."""
    space = xplane_pb2.XSpace.FromString(amd_file.read_bytes())
    for plane in space.planes:
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        wanted = {k for k, v in names.items() if v in ("hlo_op", "hlo_module")}
        for line in plane.lines:
            for ev in line.events:
                for stat in ev.stats:
                    if stat.metadata_id in wanted:
                        stat.str_value = names[stat.ref_value]
    path = tmp_path / "strings.xplane.pb"
    path.write_bytes(space.SerializeToString())

    def totals(trace_path: Path) -> dict[tuple[str, str], float]:
        trace = read_trace(trace_path, "host")
        t = time_ops(trace)
        return {(o.key.module, o.key.name): t.measured_ps[i] for i, o in enumerate(trace.ops)}

    assert totals(path) == totals(amd_file)


def test_module_filter_counts_only_that_modules_events(cpu_chip_file: Path) -> None:
    # The header's event and device counts cover the selected module, not the whole trace.
    path = next((FIXTURES / "sharded_train").rglob("*.xplane.pb"))
    by_op = _events_by_op(path, "/host:CPU")
    ring = sum(len(v) for (module, _), v in by_op.items() if module == "jit_ring_exchange")
    assert 0 < ring < sum(len(v) for v in by_op.values())
    report = audit(path, AuditOptions(chip=str(cpu_chip_file), module="^jit_ring_exchange$"))
    assert {r.module for r in report.ops} == {"jit_ring_exchange"}
    assert report.events == ring == sum(r.events for r in report.ops)
    with pytest.raises(InputError, match="no op matches --module"):  # a typo, not an empty run
        audit(path, AuditOptions(chip=str(cpu_chip_file), module="^no_such_module$"))


def _runs_by_op(path: Path) -> dict[tuple[str, str], set[tuple[int, int]]]:
    """Oracle: the (device_ordinal, run_id) pairs each op's thunk events carry."""
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    runs: dict[tuple[str, str], set[tuple[int, int]]] = defaultdict(set)
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            for ev in line.events:
                stats = {names[s.metadata_id]: s for s in ev.stats}
                if "hlo_op" in stats:
                    key = (names[stats["hlo_module"].ref_value], names[stats["hlo_op"].ref_value])
                    runs[key].add(
                        (stats["device_ordinal"].int64_value, stats["run_id"].int64_value)
                    )
    return runs


@pytest.mark.parametrize("program", [p.name for p in cpu_fixtures()])
def test_cpu_occurrences_are_module_executions(program: str) -> None:
    # One occurrence per execution of the module on a device (a run_id), however many thunk
    # events the op emits in it (a sort's three, a loop body's one per trip).
    from tests.conftest import FIXTURES, oracle

    path = next((FIXTURES / program).rglob("*.xplane.pb"))
    trace = read_trace(path, "host")
    times = time_ops(trace)
    runs = _runs_by_op(path)
    truth = oracle(FIXTURES / program)
    executions = {m["module"]: m["executions"] for m in truth["modules"]}
    for i, info in enumerate(trace.ops):
        key = (info.key.module, info.key.name)
        assert times.occurrences[i] == len(runs[key]), key
        devices = len({device for device, _ in runs[key]})
        # Every op of these programs runs in every execution of its module, on every device.
        assert times.occurrences[i] == executions[info.key.module] * devices, key


def test_gpu_kernels_belong_to_the_host_module_executions(amd_file: Path) -> None:
    # Oracle: the host plane's `<module>:XLA GPU module` events, one per execution per device.
    space = xplane_pb2.XSpace.FromString(amd_file.read_bytes())
    (host,) = [p for p in space.planes if p.name == "/host:CPU"]
    executions = sum(
        1
        for line in host.lines
        for ev in line.events
        if host.event_metadata[ev.metadata_id].name.endswith(":XLA GPU module")
    )
    trace = read_trace(amd_file, "host")
    assert (trace.execution >= 0).all()  # every kernel found its execution
    assert len(np.unique(trace.execution)) == executions
    times = time_ops(trace)
    # No op runs more often than its module; kernels of one execution are one occurrence.
    assert times.occurrences.max() <= executions
    assert (times.occurrences <= times.events).all()


def test_negative_run_ids_are_executions_like_any_other() -> None:
    # XLA:CPU's run_id is a signed stat and about half of all runs are negative (the fixtures'
    # solve and sort_multi): a sort's three events in one run are one occurrence, not three.
    from hlogap.trace.model import UNKNOWN_EXECUTION, OpKey, TraceBuilder

    builder = TraceBuilder("host")
    device = builder.new_device("/host:CPU", 0, {})
    op = builder.op(OpKey("jit_f", "0", "sort.1"))
    run = np.array([-1375944643, -1375944643, -1375944643, -1, -1, UNKNOWN_EXECUTION])
    builder.add_line(
        device, [op] * 6, [0, 10, 20, 100, 110, 200], [5] * 6, gpu=False, execution=run
    )
    times = time_ops(builder.finish("cpu", []))
    assert times.events[op] == 6
    # Run -1375944643 and run -1 are one occurrence each; the unknown event is one of its own.
    assert times.occurrences[op] == 3


def test_distinct_rows_equal_numpys_row_unique() -> None:
    # numpy's own `unique(axis=0)` is the oracle: rows sorted, each row's index among them.
    # Columns as a trace has them: small refs, a stat absent in some events (int64's minimum),
    # huge program ids at both ends of int64, values over every range in between, and a stat
    # no event has (one value: it adds nothing to a row's code).
    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(1, 2000))
        ends = np.array([ABSENT, np.iinfo(np.int64).max, 12345678901234567, -3], dtype=np.int64)
        columns = [
            rng.integers(0, int(rng.integers(1, 50)), n).astype(np.int64),
            np.where(rng.random(n) < 0.3, ABSENT, rng.integers(-5, 5, n)).astype(np.int64),
            rng.choice(ends, n),
            rng.integers(0, 1 << 40, n).astype(np.int64) // (1 << int(rng.integers(0, 41))),
            np.full(n, ABSENT, dtype=np.int64),
        ]
        # Some columns of one value each: one varying column (a GPU stream's ops), or none.
        varies = rng.random(len(columns)) < 0.6
        columns = [c if v else np.full(n, c[0]) for c, v in zip(columns, varies, strict=True)]
        rows, index = distinct_rows(columns)
        expected, expected_index = np.unique(np.stack(columns, 1), axis=0, return_inverse=True)
        assert np.array_equal(rows, expected)
        assert np.array_equal(index, expected_index.ravel())


@pytest.mark.parametrize("dense", [True, False], ids=["table", "sort"])
def test_occurrence_ids_equal_numpys_row_unique(dense: bool) -> None:
    # Dense keys (executions known, few ops) take the table; sparse ones (unknown executions
    # numbered down from -1, many ops) the sort. Both must give numpy's row order and first rows.
    rng = np.random.default_rng(11)
    tables = 0
    for _ in range(300):
        n = int(rng.integers(1, 3000))
        devices = int(rng.integers(1, 9))
        op = rng.integers(0, 3 if dense else 500, n).astype(np.int32)
        device = rng.integers(0, devices, n).astype(np.int32)
        execution = rng.integers(0 if dense else -n, 40 if dense else n, n).astype(np.int64)
        span = int(execution.max()) - int(execution.min()) + 1
        tables += (int(op.max()) + 1) * devices * span <= 2 * n
        ids, first = occurrence_ids(op, device, execution, devices)
        rows = np.stack([op.astype(np.int64), device.astype(np.int64), execution], 1)
        _, expected_first, expected_ids = np.unique(
            rows, axis=0, return_index=True, return_inverse=True
        )
        assert np.array_equal(ids, expected_ids.ravel())
        assert np.array_equal(first, expected_first)
    assert (tables > 100) if dense else (tables == 0)


def test_sums_by_are_exact_past_float64s_integers() -> None:
    # An op's total over a long run passes 2**53 ps (~2.5 h), where float64 sums (bincount's)
    # round: Python's integers are the oracle, over several blocks, selected rows and codes.
    from hlogap.trace import timing

    rng = np.random.default_rng(2)
    n = timing.BLOCK_ROWS + 1000
    key = rng.integers(0, 5, n).astype(np.int32)
    selected = rng.random(n) < 0.9
    code = np.array([1, 0, 1, 2, 0])
    counts = timing.sums_by(key, selected, 3, code=code)
    # Long events (sums past 2**53: split in 32-bit halves) and short ones (one float pass).
    for low, high in ((-(1 << 40), 1 << 45), (-(1 << 12), 1 << 12)):
        weights = rng.integers(low, high, n).astype(np.int64)
        found = timing.sums_by(key, selected, 3, weights, code)
        for c in range(3):
            rows = selected & (code[key] == c)
            assert int(found[c]) == sum(int(w) for w in weights[rows])
            assert int(counts[c]) == int(rows.sum())
        assert (max(int(v) for v in found) > 1 << 53) == (high > 1 << 40)


def _same(a: object, b: object) -> bool:
    """Equal reports, floats to 1e-12: float sums (bounds in us) change in their last bits
    with the order they are added in."""
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-12, abs=1e-9)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@pytest.mark.parametrize("program", ["mlp_train", "scan", "sharded_train"])
def test_passes_a_block_at_a_time_equal_one_pass(
    program: str, cpu_chip_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Summaries, module spans and step totals go over the events a block at a time: blocks of
    # 7 events give the report one block gives (times exactly: int64 ps).
    from hlogap.trace import timing

    path = FIXTURES / program
    whole = audit(path, AuditOptions(chip=str(cpu_chip_file), jobs=1)).to_dict()
    monkeypatch.setattr(timing, "BLOCK_ROWS", 7)
    blocked = audit(path, AuditOptions(chip=str(cpu_chip_file), jobs=1)).to_dict()
    assert blocked["steps"] and _same(blocked, whole)
    assert [s["measured_us"] for s in blocked["steps"]] == [
        s["measured_us"] for s in whole["steps"]
    ]
    assert [o["measured_us"] for o in blocked["ops"]] == [o["measured_us"] for o in whole["ops"]]


@pytest.mark.parametrize("counted", [False, True])
def test_distinct_counts_equal_a_counter(counted: bool) -> None:
    # A Counter of (op, value) rows is the oracle, sorted. Values over small and huge ranges
    # (past what an (op, value) int64 key holds: the values are ranked first) and negative.
    from collections import Counter

    from hlogap.trace.summary import distinct_counts

    rng = np.random.default_rng(8)
    for _ in range(200):
        n = int(rng.integers(1, 500))
        op = rng.integers(0, int(rng.integers(1, 30)), n).astype(np.int64)
        high = int(rng.choice([5, 1 << 20, 1 << 62]))
        value = rng.integers(-high, high, n).astype(np.int64)
        count = rng.integers(1, 4, n).astype(np.int64) if counted else None
        expected: Counter[tuple[int, int]] = Counter()
        for i, (o, v) in enumerate(zip(op.tolist(), value.tolist(), strict=True)):
            expected[o, v] += 1 if count is None else int(count[i])
        ops, values, counts = distinct_counts(op, value, count)
        rows = sorted(expected.items())
        assert ops.tolist() == [o for (o, _), _ in rows]
        assert values.tolist() == [v for (_, v), _ in rows]
        assert counts.tolist() == [c for _, c in rows]


def test_execution_ids_are_numbered_across_lines_in_order_seen() -> None:
    # The oracle: a dict numbering each line's distinct ids, ascending, in the order lines come;
    # an id seen on an earlier line keeps its number, unknown ones stay negative.
    from hlogap.trace.model import UNKNOWN_EXECUTION, TraceBuilder

    rng = np.random.default_rng(4)
    builder = TraceBuilder("host")
    numbers: dict[int, int] = {}
    for _ in range(40):
        n = int(rng.integers(1, 300))
        ids = rng.integers(-(1 << 40), 1 << 40, 50)[rng.integers(0, 50, n)]
        ids[rng.random(n) < 0.1] = UNKNOWN_EXECUTION
        for v in sorted(set(ids.tolist()) - {UNKNOWN_EXECUTION}):
            numbers.setdefault(v, len(numbers))
        expected = [numbers.get(v, -1) for v in ids.tolist()]
        assert builder._dense(ids).tolist() == expected


def test_self_time_is_the_duration_column_itself_where_nothing_nests() -> None:
    # GPU kernels never nest: their self time is their duration, kept once (8 bytes an event).
    # A file with one nesting line gets a column of its own, with the nested time taken off.
    from hlogap.trace.model import OpKey, TraceBuilder

    def trace(nested: bool) -> tuple[np.ndarray, np.ndarray]:
        builder = TraceBuilder("host")
        device = builder.new_device("/device:GPU:0", 0, {})
        op = builder.op(OpKey("jit_f", "0", "fusion"))
        builder.add_line(device, [op, op], [0, 10], [5, 5], gpu=True)
        builder.add_line(device, [op, op], [0, 2], [9, 3] if nested else [1, 3], gpu=False)
        data = builder.finish("gpu", [])
        return data.self_ps, data.duration_ps

    self_ps, duration_ps = trace(nested=False)
    assert self_ps is duration_ps and self_ps.tolist() == [5, 5, 1, 3]
    self_ps, duration_ps = trace(nested=True)
    assert self_ps is not duration_ps
    assert self_ps.tolist() == [5, 5, 6, 3] and duration_ps.tolist() == [5, 5, 9, 3]
