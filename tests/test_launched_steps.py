"""JAX's documented step pattern: the annotation wraps only the dispatch, the device work runs after
it. Steps run from the annotation's start to the end of the work it launched, and the op rows count
the steady steps (the warm-up step, which compiles inside the trace, set apart).

Oracles: the fixtures' `trace_steps`, read by scripts/make_fixtures.py from the profiler's own
trace.json.gz (each step's annotation and the first start / last end of the XLA thunk events of the
run ids it dispatched), and the trace's own events."""

from __future__ import annotations

import json
import statistics
import warnings
from pathlib import Path

import pytest

from hlogap import audit, load_report
from hlogap.options import AuditOptions
from hlogap.render.base import RenderOptions, render
from tests.conftest import FIXTURES, oracle
from tests.test_timing import _events_by_op

DOCUMENTED = ["documented_step", "documented_sharded", "documented_two_fns"]


@pytest.fixture(scope="module")
def chip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A CPU whose bf16 matmuls run 4x its f32 ones (AMX): the f32 dots have a cause to act on.
    path = tmp_path_factory.mktemp("chip") / "amx.toml"
    path.write_text(
        'name = "testcpu-amx"\n[peak_flops]\nf32 = 1.0e11\nbf16 = 4.0e11\n'
        "[memory]\nhbm_bw = 2.0e10\n"
    )
    return path


@pytest.mark.parametrize("program", DOCUMENTED)
def test_steps_end_with_the_device_work_they_launched(program: str, chip: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy warning here once reached users' stderr
        report = audit(FIXTURES / program, AuditOptions(chip=str(chip)))
    expected = list(oracle(FIXTURES / program)["trace_steps"])
    assert [s.step for s in report.steps] == [s["step_num"] for s in expected]
    origin = expected[0]["annotation_start_us"]
    warmup = report.step_summary.warmup_steps
    launched = [s["device_end_us"] - s["annotation_start_us"] for s in expected]
    for k, (step, want) in enumerate(zip(report.steps, expected, strict=True)):
        assert step.start_us == pytest.approx(want["annotation_start_us"] - origin, abs=1.0)
        # The step holds all the work it launched, and none of the next step's: it ends at or
        # after its last thunk event (an async op lasts until its `end:` marker), before the
        # next step's work ends.
        assert step.wall_us >= launched[k] - 1.0
        if k + 1 < len(expected):
            assert step.start_us + step.wall_us < expected[k + 1]["device_end_us"] - origin
        if k >= warmup:
            # A steady step's annotation is its dispatch: a part of the step.
            assert step.source == "annotation+device"
            assert want["annotation_us"] < step.wall_us
    # The median steady step is the median of the work the steps launched.
    steady = [s.wall_us for s in report.steps[warmup:]]
    # (Within 8%: the oracle ends each op with its thunk event; hlogap, as XLA:CPU marks an
    # async op done, at its `end:` marker, up to 4 ms later with 8 devices on 2 cores.)
    assert statistics.median(steady) == pytest.approx(
        statistics.median(launched[warmup:]), rel=0.08
    )
    # The documented capture compiles in step 0: warm-up, left out of the summary's median.
    assert warmup >= 1
    assert report.steps_cover_fraction is not None and report.steps_cover_fraction >= 0.9
    assert report.actions, "the documented pattern gets actions"


@pytest.mark.parametrize("program", DOCUMENTED)
def test_op_rows_count_the_steady_steps(program: str, chip: Path) -> None:
    report = audit(FIXTURES / program, AuditOptions(chip=str(chip)))
    assert report.ops_frame == "steady steps"
    warmup = report.step_summary.warmup_steps
    steady, early = report.steps[warmup:], report.steps[:warmup]
    # Over the steady steps the op rows' measured time is the steps' own (self time of the
    # events starting in them), and what was left out is the warm-up steps'.
    assert report.measured_us == pytest.approx(sum(s.measured_us for s in steady), rel=1e-9)
    outside = report.outside_steps
    assert outside is not None
    assert outside.warmup_us == pytest.approx(sum(s.measured_us for s in early), rel=1e-9)
    assert outside.autotuning_us == 0
    # Every op occurrence is counted once per steady step.
    runs = len(steady)
    devices = oracle(FIXTURES / program)["devices"]
    assert {r.occurrences // devices for r in report.ops if r.opcode != "while"} == {runs}
    # --all-steps: every event of the trace, as it holds them.
    everything = audit(FIXTURES / program, AuditOptions(chip=str(chip), all_steps=True))
    assert everything.ops_frame == "all"
    files = sorted((FIXTURES / program).rglob("*.xplane.pb"))
    events = _events_by_op(files[-1], "/host:CPU")
    total = sum(map(sum, events.values())) / 1e6
    # The reader cuts an async op's run-on to its `end:` marker at the next execution of its
    # module (hlogap.trace.backends.stat_events._clip_to_execution): the steps run back to
    # back here, so a few ops end there; nothing else differs.
    assert 0.95 * total <= sum(r.total_us for r in everything.ops) <= total + 1e-6
    assert everything.measured_us == pytest.approx(report.measured_us + outside.total_us)


def test_the_header_says_the_frame(chip: Path) -> None:
    report = audit(FIXTURES / "documented_step", AuditOptions(chip=str(chip)))
    text = render(report, "table", RenderOptions(top=5))
    assert "annotation+device" in text
    assert "ops: the steady steps only; left out, device time: warm-up steps" in text
    assert "ops, device-time over the steady steps: measured" in text
    doc = json.loads(render(report, "json", RenderOptions()))
    summary = doc["summary"]
    assert summary["ops_frame"] == "steady steps"
    assert set(summary["outside_steps"]) == {"warmup_us", "autotuning_us", "compile_us", "other_us"}
    assert summary["outside_steps"]["warmup_us"] > 0
    assert 0.9 <= summary["steps_cover_fraction"] <= 1.0


def test_the_frame_survives_a_saved_report(chip: Path, tmp_path: Path) -> None:
    report = audit(FIXTURES / "documented_two_fns", AuditOptions(chip=str(chip)))
    saved = tmp_path / "r.json"
    saved.write_text(render(report, "json", RenderOptions()))
    loaded = load_report(saved)
    assert loaded.ops_frame == report.ops_frame
    assert loaded.outside_steps == report.outside_steps
    assert loaded.steps_cover_fraction == report.steps_cover_fraction


def test_a_profile_blocked_inside_its_annotations_keeps_them(chip: Path) -> None:
    # make_fixtures' older programs block inside the annotation: their steps stay as annotated,
    # and with the warm-up outside the trace nothing is left out of the op rows.
    report = audit(FIXTURES / "mlp", AuditOptions(chip=str(chip)))
    assert {s.source for s in report.steps} == {"annotation"}
    assert report.ops_frame == "all" or report.outside_steps is not None


def test_a_pod_with_a_warm_up_step_counts_the_steady_steps(chip: Path, tmp_path: Path) -> None:
    # Four hosts of the documented sharded step (8 devices each, its step 0 compiling inside
    # the trace), each host's clock ahead of the last: the op rows are the steady steps'.
    from hlogap.proto import xplane_pb2

    source = next((FIXTURES / "documented_sharded").rglob("*.xplane.pb")).read_bytes()
    run = tmp_path / "tb" / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    for host in range(4):
        space = xplane_pb2.XSpace.FromString(source)
        for plane in space.planes:
            for line in plane.lines:
                line.timestamp_ns += host * 13_001  # ns: each host's clock ahead of the last
        (run / f"host{host}.xplane.pb").write_bytes(space.SerializeToString())
    report = audit(tmp_path / "tb", AuditOptions(chip=str(chip)))
    assert report.devices == 32 and len(report.hosts) == 4
    warmup = report.step_summary.warmup_steps
    assert warmup >= 1
    steady = report.steps[warmup:]
    assert report.measured_us == pytest.approx(sum(s.measured_us for s in steady), rel=1e-9)
    outside = report.outside_steps
    assert outside is not None
    assert outside.warmup_us == pytest.approx(
        sum(s.measured_us for s in report.steps[:warmup]), rel=1e-9
    )
    # Each host holds a quarter of every op's steady time: identical hosts, none the slowest.
    single = audit(FIXTURES / "documented_sharded", AuditOptions(chip=str(chip)))
    assert report.measured_us == pytest.approx(4 * single.measured_us, rel=1e-9)
    by_name = {(r.module, r.name): r for r in single.ops}
    for row in report.ops:
        assert row.measured_us == pytest.approx(4 * by_name[(row.module, row.name)].measured_us)


def test_steps_that_cover_little_of_the_work_say_so(chip: Path, tmp_path: Path) -> None:
    from hlogap.render.text import frame_lines

    doc = json.loads(
        render(
            audit(FIXTURES / "documented_step", AuditOptions(chip=str(chip))),
            "json",
            RenderOptions(),
        )
    )
    doc["summary"]["steps_cover_fraction"] = 0.42
    doc["summary"]["outside_steps"]["other_us"] = 1e6
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps(doc))
    lines = frame_lines(load_report(saved))
    assert any("left out, device time: warm-up steps" in line for line in lines)
    assert any(
        line.startswith("the steps hold only 42% of the devices' op time")
        and "no step covers" in line
        for line in lines
    )
    doc["summary"]["outside_steps"]["autotuning_us"] = 2e6
    saved.write_text(json.dumps(doc))
    assert any("compile-time autotuning" in line for line in frame_lines(load_report(saved)))


def test_a_gpu_profile_annotated_around_its_dispatch_only(tmp_path: Path) -> None:
    # The real MI355X profile (5 executions of its step's module) with step annotations added
    # on the host as JAX's documented pattern leaves them: each covers the 100 us before its
    # execution's first kernel and 20 us into it. Each step then runs from its annotation to
    # the end of that execution's kernels (the device events' own times).
    from hlogap.proto import xplane_pb2
    from tests.conftest import AMD_FILES

    path = AMD_FILES["mi355x"]
    if not path.is_file():
        pytest.skip(f"{path} absent (../shared not beside the project)")
    unannotated = audit(path)
    executions = [(s.start_us, s.start_us + s.wall_us) for s in unannotated.steps]
    assert len(executions) == 5 and {s.source for s in unannotated.steps} == {"module"}
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    (host,) = [p for p in space.planes if p.name == "/host:CPU"]
    first_ps = min(
        line.timestamp_ns * 1000 + event.offset_ps
        for plane in space.planes
        if plane.name.startswith("/device:GPU:")
        for line in plane.lines
        for event in line.events
    )
    host.event_metadata[990001].id = 990001
    host.event_metadata[990001].name = "train"
    host.stat_metadata[990002].id = 990002
    host.stat_metadata[990002].name = "step_num"
    line = host.lines.add(id=990003, name="python", timestamp_ns=0)
    for k, (start_us, _) in enumerate(executions):
        at_ps = first_ps + int((start_us - 100.0) * 1e6)
        event = line.events.add(metadata_id=990001, offset_ps=at_ps, duration_ps=120_000_000)
        event.stats.add(metadata_id=990002, int64_value=k)
    annotated = tmp_path / "annotated.xplane.pb"
    annotated.write_bytes(space.SerializeToString())
    report = audit(annotated)
    assert [s.source for s in report.steps] == ["annotation+device"] * 5
    # Times from the first annotation's start (100 us before the first kernel).
    shift = report.steps[0].start_us - (executions[0][0] - 100.0)
    for step, (start_us, end_us) in zip(report.steps, executions, strict=True):
        assert step.start_us - shift == pytest.approx(start_us - 100.0, abs=1e-3)
        assert step.start_us + step.wall_us - shift == pytest.approx(end_us, abs=1e-3)
