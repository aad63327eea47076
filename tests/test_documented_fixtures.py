"""The documented_* fixtures are what scripts/make_fixtures.py says they are: JAX's documented
profiling pattern (the step annotation around the dispatch only, ``block_until_ready`` after it,
no warm-up before the trace), with an oracle read from the trace itself that agrees with itself
and with the xplane. Nothing here runs hlogap's own reading or step finding."""

from __future__ import annotations

import functools
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from hlogap.proto import xplane_pb2  # the generated message classes only
from tests.conftest import FIXTURES

# program -> (jitted functions dispatched per step, devices)
SHAPES = {
    "documented_step": (["jit_documented_step"], 1),
    "documented_sharded": (["jit_documented_sharded"], 8),
    "documented_two_fns": (["jit_documented_grads", "jit_documented_update"], 1),
}
PROGRAMS = sorted(SHAPES)
STEPS = 6
NS = 1e-3  # us: trace.json prints times to the nanosecond


@functools.cache
def oracle(program: str) -> dict[str, Any]:
    return json.loads((FIXTURES / program / "oracle.json").read_text())


@functools.cache
def host_events(program: str) -> list[tuple[str, int, int, dict[str, Any]]]:
    """(name, start ps, end ps, stats) of every event of the xplane's /host:CPU plane."""
    path = FIXTURES / program / oracle(program)["xplane"]
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    (plane,) = [p for p in space.planes if p.name == "/host:CPU"]
    stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
    event_names = {k: v.name for k, v in plane.event_metadata.items()}
    out = []
    for line in plane.lines:
        for ev in line.events:
            stats: dict[str, Any] = {}
            for s in ev.stats:
                kind = s.WhichOneof("value")
                value = getattr(s, kind) if kind else None
                stats[stat_names[s.metadata_id]] = (
                    stat_names.get(value, "") if kind == "ref_value" else value
                )
            start = line.timestamp_ns * 1000 + ev.offset_ps
            out.append((event_names[ev.metadata_id], start, start + ev.duration_ps, stats))
    return out


def steps(program: str) -> list[dict[str, Any]]:
    return list(oracle(program)["trace_steps"])


def runs(program: str) -> dict[int, dict[str, Any]]:
    return {r["run_id"]: r for r in oracle(program)["trace_runs"]}


@pytest.mark.parametrize("program", PROGRAMS)
def test_layout_size_and_schema(program: str) -> None:
    base = FIXTURES / program
    files = [p for p in base.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 1024 * 1024
    (xplane,) = base.glob("plugins/profile/*/*.xplane.pb")
    assert xplane.stat().st_size < 512 * 1024
    assert not list(base.rglob("*.trace.json.gz"))  # read into the oracle, then deleted
    o = oracle(program)
    modules, devices = SHAPES[program]
    assert o["program"] == program
    assert o["iterations"] == o["steps"] == STEPS == len(o["trace_steps"])
    assert [s["step_num"] for s in o["trace_steps"]] == list(range(STEPS))
    assert o["devices"] == devices
    assert o["time_unit"] == "us"
    assert o["python_tracer_level"] == 0
    assert [m["module"] for m in o["modules"]] == modules
    assert all(m["executions"] == STEPS for m in o["modules"])
    for m in o["modules"]:
        header = (base / m["hlo_text"]).read_text().splitlines()[0]
        assert header.startswith(f"HloModule {m['module']}, ")
    if devices > 1:
        assert f"--xla_force_host_platform_device_count={devices}" in o["xla_flags"]


@pytest.mark.parametrize("program", PROGRAMS)
def test_annotation_wraps_the_dispatch_only(program: str) -> None:
    # The documented pattern: each steady step's device work ends after its annotation (the
    # block is outside it), and nothing of a step runs before its annotation starts or after the
    # next one starts (the loop blocks on the state between steps). Step 0 is exempt from the
    # first: its host work after the last dispatch (the first call's) may outlast the device's.
    all_steps = steps(program)
    for step, following in zip(all_steps, [*all_steps[1:], None]):
        assert step["annotation_start_us"] < step["annotation_end_us"]
        assert step["device_start_us"] >= step["annotation_start_us"]
        if step["step_num"] > 0:
            assert step["device_end_us"] > step["annotation_end_us"], step
        # An async op's `end:` marker comes at or after its thunk event's end; it is not bounded
        # by the next step's start (a marker can be recorded after block_until_ready returned).
        assert step["device_end_marker_us"] >= step["device_end_us"]
        if following is not None:
            assert step["device_end_us"] <= following["annotation_start_us"]
    # Steady steps: the annotation (host dispatch) is shorter than the device work after its start.
    for step in all_steps[1:]:
        assert step["annotation_us"] < step["device_end_us"] - step["annotation_start_us"]


@pytest.mark.parametrize("program", PROGRAMS)
def test_step0_compiles_inside_the_trace_and_is_the_slowest(program: str) -> None:
    all_steps = steps(program)
    walls = [s["device_end_us"] - s["annotation_start_us"] for s in all_steps]
    annotations = [s["annotation_us"] for s in all_steps]
    assert walls[0] == max(walls) and annotations[0] == max(annotations)
    assert walls[0] > 5 * statistics.median(walls[1:])
    # Every module is compiled once, inside step 0's annotation (no warm-up before the trace).
    step0 = all_steps[0]
    compiles = [
        (start / 1e6, end / 1e6)
        for name, start, end, _ in host_events(program)
        if name == "backend_compile_and_load"
    ]
    assert len(compiles) == len(SHAPES[program][0])
    for start, end in compiles:
        assert step0["annotation_start_us"] - NS <= start and end <= step0["annotation_end_us"] + NS


@pytest.mark.parametrize("program", PROGRAMS)
def test_runs_belong_to_the_step_that_dispatched_them(program: str) -> None:
    modules, devices = SHAPES[program]
    by_run = runs(program)
    seen: list[int] = []
    for step in steps(program):
        n = step["step_num"]
        mine = [by_run[r] for r in step["run_ids"]]
        seen += step["run_ids"]
        # One run of each jitted function per step, on every device.
        assert sorted(m for r in mine for m in r["modules"]) == sorted(modules)
        assert all(r["devices"] == list(range(devices)) for r in mine)
        for r in mine:
            assert r["step"] == n
            assert r["step_by_first_thunk"] == n
            if r["dispatch_us"] is not None:
                assert r["step_by_dispatch"] == n
                assert step["annotation_start_us"] <= r["dispatch_us"] <= step["annotation_end_us"]
                assert r["dispatch_us"] <= r["first_thunk_us"]
        assert step["device_start_us"] == min(r["first_thunk_us"] for r in mine)
        assert step["device_end_us"] == max(r["last_end_us"] for r in mine)
        assert step["device_end_marker_us"] == max(r["last_end_marker_us"] for r in mine)
    assert sorted(seen) == sorted(by_run)  # every run in exactly one step
    assert len(by_run) == STEPS * len(modules)


def test_how_run_ids_tie_to_dispatches() -> None:
    # 8 devices: the Python thread's launch event names the run id (trace.json keeps it).
    for r in runs("documented_sharded").values():
        assert r["dispatch_tie"] == "trace.json run_id arg"
        assert r["dispatch_event"] == "CommonPjRtLoadedExecutable::Execute (jit_documented_sharded)"
    # 1 device: only the xplane's flow ids tie the Python thread's Record to the worker region
    # where the run's thunks start.
    for r in runs("documented_step").values():
        assert r["dispatch_tie"] == "xplane flow" and r["flow_hops"] == 1
        assert r["dispatch_event"] == "ThreadpoolListener::Record"
    # Two functions: the update, dispatched before the gradients it takes are ready, is started
    # by the worker that finishes them: its walk ends at the gradients' dispatch, 2 hops.
    two = steps("documented_two_fns")
    by_run = runs("documented_two_fns")
    for step in two:
        grads, update = (by_run[r] for r in step["run_ids"])
        assert grads["modules"] == ["jit_documented_grads"]
        assert update["modules"] == ["jit_documented_update"]
        assert grads["dispatch_tie"] == "xplane flow" and grads["flow_hops"] == 1
        assert grads["last_end_us"] <= update["first_thunk_us"]
        if step["step_num"] > 0:
            assert update["dispatch_us"] is None and update["flow_hops"] == 2
            assert update["flow_origin_us"] == grads["dispatch_us"]


@pytest.mark.parametrize("program", PROGRAMS)
def test_device_sums(program: str) -> None:
    o = oracle(program)
    all_steps = steps(program)
    for step in all_steps:
        span = step["device_end_us"] - step["device_start_us"]
        assert 0 < step["device_busy_us"] <= span + NS
        assert step["device_busy_us"] <= step["thunk_us"] + NS
    assert sum(s["thunk_us"] for s in all_steps) == pytest.approx(o["thunk_us_total"], abs=0.1)
    assert o["thunk_us_top_level"] == o["thunk_us_total"]  # no loops: no nested thunk events
    assert o["thunk_us_total_to_markers"] >= o["thunk_us_total"] - NS


@pytest.mark.parametrize("program", PROGRAMS)
def test_oracle_matches_the_xplane(program: str) -> None:
    # trace.json (read into the oracle) and the xplane are on one clock: the same events, the
    # same microseconds.
    o = oracle(program)
    assert o["clock_check"]["max_abs_diff_us"] <= NS
    events = host_events(program)
    annotations = {st["step_num"]: (a, b) for _, a, b, st in events if "step_num" in st}
    assert sorted(annotations) == list(range(STEPS))
    for step in steps(program):
        a, b = annotations[step["step_num"]]
        assert step["annotation_start_us"] == pytest.approx(a / 1e6, abs=NS)
        assert step["annotation_end_us"] == pytest.approx(b / 1e6, abs=NS)
    spans: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for _, a, b, st in events:
        if "hlo_op" in st and "run_id" in st:
            spans[int(st["run_id"])].append((a, b))
    assert sum(len(v) for v in spans.values()) == o["thunk_events"]
    by_run = runs(program)
    assert set(spans) == set(by_run)
    for run, intervals in spans.items():
        assert by_run[run]["first_thunk_us"] == pytest.approx(min(intervals)[0] / 1e6, abs=NS)
        last_end = max(b for _, b in intervals) / 1e6
        assert by_run[run]["last_end_us"] == pytest.approx(last_end, abs=NS)
    # Async ops last until their `end: <op>` marker (its `_c` is the thunk's `_p`).
    mask = (1 << 64) - 1
    markers: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for name, a, b, st in events:
        if name.startswith("end: "):
            markers[int(st["_c"]) & mask].append((a, b))
    last: dict[int, int] = {}
    for _, a, b, st in events:
        if "hlo_op" in st and "run_id" in st:
            after = sorted(m for m in markers[int(st["_p"]) & mask] if m[0] >= a)
            end = max(b, after[0][1]) if after else b
            last[int(st["run_id"])] = max(last.get(int(st["run_id"]), end), end)
    for run, end in last.items():
        assert by_run[run]["last_end_marker_us"] == pytest.approx(end / 1e6, abs=NS)
    # The Python tracer was off: no `$module function` events.
    assert not [name for name, *_ in events if name.startswith("$")]


@pytest.mark.parametrize("program", PROGRAMS)
def test_metadata_plane_names_the_oracle_modules(program: str) -> None:
    path: Path = FIXTURES / program / oracle(program)["xplane"]
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    (meta,) = [p for p in space.planes if p.name == "/host:metadata"]
    names = {md.name for md in meta.event_metadata.values()}
    assert names == {f"{m['module']}({m['program_id']})" for m in oracle(program)["modules"]}
