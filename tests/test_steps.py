"""Steps: counted from the trace's own annotations, and where each step's device time goes."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from hlogap import audit, load_report
from hlogap.options import AuditOptions
from hlogap.proto import xplane_pb2
from hlogap.trace.steps import _covered
from hlogap.trace.timing import merged_intervals
from tests.conftest import FIXTURES, SHARED, cpu_fixtures, oracle
from tests.test_timing import _events_by_op

# The programs that block inside their step annotations (the documented pattern's fixtures,
# whose annotations cover only the dispatch, have their own tests: test_launched_steps.py).
# The documented pattern's fixtures (documented_*, gate_*: their oracle names the pattern) are
# tests/test_launched_steps.py's.
PROGRAMS = [p.name for p in cpu_fixtures() if "pattern" not in oracle(p)]


def _annotations(path: Path) -> dict[int, tuple[int, int]]:
    """Oracle: step_num -> (start, end) of the host events carrying a `step_num` stat."""
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    spans: dict[int, tuple[int, int]] = {}
    for plane in space.planes:
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            for ev in line.events:
                for stat in ev.stats:
                    if names.get(stat.metadata_id) == "step_num":
                        start = line.timestamp_ns * 1000 + ev.offset_ps
                        spans[stat.int64_value] = (start, start + ev.duration_ps)
    return spans


def _union_in(intervals: list[tuple[int, int]], lo: int, hi: int) -> int:
    """Oracle: the length of [lo, hi) that the intervals cover, by a plain sweep."""
    covered, reach = 0, lo
    for a, b in sorted(intervals):
        a, b = max(a, reach), min(b, hi)
        if b > a:
            covered += b - a
            reach = b
    return covered


@pytest.mark.parametrize("program", PROGRAMS)
def test_annotated_steps_are_the_annotations(program: str, cpu_chip_file: Path) -> None:
    report = audit(FIXTURES / program, AuditOptions(chip=str(cpu_chip_file)))
    path = next((FIXTURES / program).rglob("*.xplane.pb"))
    spans = _annotations(path)
    assert len(report.steps) == len(spans) == oracle(FIXTURES / program)["steps"]
    for step in report.steps:
        start, end = spans[step.step]
        assert step.source == "annotation"
        assert step.wall_us == pytest.approx((end - start) / 1e6, rel=1e-3)
        # Per device, busy + idle = wall, exactly, and both are never negative.
        assert step.busy_us + step.idle_us == pytest.approx(step.device_wall_us)
        assert 0 <= step.busy_us <= step.wall_us * step.devices + 1e-9
    # Every op event of these programs ran inside a step: the op rows count the steady ones.
    steady = report.steady_steps
    assert sum(s.measured_us for s in steady) == pytest.approx(report.measured_us)
    outside = report.outside_steps
    assert outside is not None and outside.other_us == outside.autotuning_us == 0
    assert report.steps_cover_fraction == 1.0


def cpu_op_events(path: Path) -> dict[int, list[tuple[int, int, tuple[str, str]]]]:
    """Oracle: every XLA:CPU op event per device ordinal, (start, end, (module, op)) in ps,
    lasting until its `end:` marker."""
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    (cpu,) = [p for p in space.planes if p.name == "/host:CPU"]
    names = {k: v.name for k, v in cpu.stat_metadata.items()}
    durations = _events_by_op(path, "/host:CPU")
    seen: dict[tuple[str, str], int] = defaultdict(int)
    by_device: dict[int, list[tuple[int, int, tuple[str, str]]]] = defaultdict(list)
    for line in cpu.lines:
        for ev in line.events:
            stats = {names[s.metadata_id]: s for s in ev.stats}
            if "hlo_op" in stats:
                key = (names[stats["hlo_module"].ref_value], names[stats["hlo_op"].ref_value])
                start = line.timestamp_ns * 1000 + ev.offset_ps
                duration = durations[key][seen[key]]
                seen[key] += 1
                by_device[stats["device_ordinal"].int64_value].append(
                    (start, start + duration, key)
                )
    return by_device


def test_busy_time_is_the_union_of_op_events(cpu_chip_file: Path) -> None:
    # sharded_train: 8 devices whose ops overlap on XLA:CPU's thread pool.
    path = next((FIXTURES / "sharded_train").rglob("*.xplane.pb"))
    report = audit(path, AuditOptions(chip=str(cpu_chip_file)))
    by_device = {
        device: [(start, end) for start, end, _ in events]
        for device, events in cpu_op_events(path).items()
    }
    spans = _annotations(path)
    for step in report.steps:
        lo, hi = spans[step.step]
        busy = sum(_union_in(v, lo, hi) for v in by_device.values())
        assert step.devices == len(by_device) == 8
        assert step.busy_us == pytest.approx(busy / 1e6, rel=1e-9)
    # Collectives ran on the devices with no compute beside them for part of each step.
    assert all(0 < s.exposed_comm_us <= s.busy_us for s in report.steps)


def test_steps_survive_a_saved_report(cpu_chip_file: Path, tmp_path: Path) -> None:
    report = audit(FIXTURES / "mlp", AuditOptions(chip=str(cpu_chip_file)))
    saved = tmp_path / "mlp.json"
    saved.write_text(json.dumps(report.to_dict(0)))
    loaded = load_report(saved)
    assert loaded.steps == report.steps
    assert loaded.outside_steps == report.outside_steps
    flat = [
        {k: v for k, v in r.summary_dict().items() if k != "outside_steps"}
        for r in (loaded, report)
    ]
    assert flat[0] == pytest.approx(flat[1])


def test_without_annotations_a_step_is_an_execution_of_the_main_module(amd_file: Path) -> None:
    report = audit(amd_file)
    assert report.steps and {s.source for s in report.steps} == {"module"}
    # The dominant module ran on every device once per step: its ops' occurrences per device.
    top = max(report.ops, key=lambda r: r.measured_us)
    per_device = top.occurrences / report.devices
    assert len(report.steady_steps) == per_device  # the steady frame
    for step in report.steps:
        assert step.busy_us + step.idle_us == pytest.approx(step.device_wall_us)


def test_a_modules_executions_are_found_once_per_trace(amd_file: Path) -> None:
    """The step search and the step pass ask for the same executions: the second is the
    first's (`TraceData.spans`), and both are what a fresh search finds."""
    from hlogap.trace.reading import read_trace
    from hlogap.trace.steps import _module_spans, module_spans
    from hlogap.trace.summary import Selection

    trace = read_trace(amd_file, "host")
    module = max({o.key.module for o in trace.ops})
    first = module_spans(trace, Selection(), module)
    assert first and module_spans(trace, Selection(), module) is first
    fresh = _module_spans(trace, Selection(), module)
    assert {d: [a.tolist() for a in s] for d, s in first.items()} == {
        d: [a.tolist() for a in s] for d, s in fresh.items()
    }
    assert module_spans(trace, Selection(device=0), module) is not first


def test_union_and_window_cover() -> None:
    start = np.array([0, 5, 20, 22, 40], dtype=np.int64)
    end = np.array([10, 8, 25, 30, 50], dtype=np.int64)
    s, e = merged_intervals(start, end)
    assert (s.tolist(), e.tolist()) == ([0, 20, 40], [10, 30, 50])
    a = np.array([0, 5, 25, 31, 0, 45], dtype=np.int64)
    b = np.array([50, 21, 45, 39, 1, 46], dtype=np.int64)
    assert _covered(s, e, a, b).tolist() == [30, 6, 10, 0, 1, 1]


def test_group_by_scope_rolls_ops_up_by_layer(cpu_chip_file: Path) -> None:
    from hlogap.rows.groups import scope_parts

    path = FIXTURES / "sharded_train"
    report = audit(path, AuditOptions(chip=str(cpu_chip_file), group_by="scope", depth=2))
    assert report.group_by == "scope"
    # Every op falls in the group of its op path's first two components; totals are kept.
    members: dict[str, list[str]] = defaultdict(list)
    for op in report.ops:
        members["/".join(scope_parts(op.op_name)[:2]) or "(unknown)"].append(op.name)
    assert {g.name: g.ops for g in report.groups} == {k: len(v) for k, v in members.items()}
    assert {"jit(train_step)/jvp()", "jit(ring_exchange)/shard_map"} <= set(members)
    assert sum(g.measured_us for g in report.groups) == pytest.approx(report.measured_us)
    assert [g.gap_us for g in report.groups] == sorted(
        (g.gap_us for g in report.groups), reverse=True
    )
    by_module = audit(path, AuditOptions(chip=str(cpu_chip_file), group_by="module"))
    assert {g.name for g in by_module.groups} == {"jit_train_step", "jit_ring_exchange"}
    doc = by_module.to_dict()
    assert doc["group_by"] == "module" and len(doc["groups"]) == 2


def test_scope_parts_keep_parentheses_whole() -> None:
    from hlogap.rows.groups import scope_parts

    assert scope_parts("jit(f)/transpose(jvp(g/h))/dot") == ["jit(f)", "transpose(jvp(g/h))", "dot"]
    assert scope_parts("") == []


def test_real_v6e_offload_steps_are_exposed_transfers() -> None:
    # The v6e host-offload profile: its steps are executions of jit_f on 4 chips, and the
    # copy-done waits plus the all-reduce (xprof: 96.9% of the op time) run with no compute
    # beside them: exposed collectives and host transfers. Oracle: xprof's hlo_stats for the
    # same file.
    root = SHARED / "tpu-v6e-offload"
    path = root / "tpu_inference_2.xplane.pb"
    if not path.is_file():
        pytest.skip("../shared/fixtures/tpu-v6e-offload absent")
    xprof = json.loads((root / "tpu_inference_2.xprof_hlo_stats.json").read_text())
    total = sum(r["total_self_time"] for r in xprof)
    transfers = sum(
        r["total_self_time"]
        for r in xprof
        if r["hlo_op_name"].startswith(("copy-start", "copy-done", "all-reduce"))
    )
    report = audit(path)
    assert {s.source for s in report.steps} == {"module"} and len(report.steps) == 100
    assert {s.devices for s in report.steps} == {4}
    exposed = sum(s.exposed_comm_us + s.exposed_host_us for s in report.steps)
    busy = sum(s.busy_us for s in report.steps)
    assert exposed / busy == pytest.approx(transfers / total, abs=0.02)
    # The copy-done waits are host transfers: nearly all of that is exposed host time.
    assert sum(s.exposed_host_us for s in report.steps) > 0.9 * exposed
