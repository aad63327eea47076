"""`audit -o trace.json.gz` / `--format perfetto`: the timeline as Chrome trace-event JSON.

The file is loaded back as a trace viewer reads it (gzip, then the trace-event format's rules:
complete events with `ts`/`dur` in microseconds, metadata events naming processes and threads,
no two events of one thread overlapping unless nested) and checked against the audit itself:
every device's op events add up to the report's device time, the steps are the report's steps,
the idle track is the report's idle time, and an op's args are its row's figures. Where
Perfetto's trace processor can run here, it loads the file too.
"""

from __future__ import annotations

import gzip
import itertools
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hlogap.render.trace_events import colour_of
from hlogap.rows.tracks import lanes
from tests.conftest import FIXTURES, SHARED
from tests.test_errors import run_cli

TRAIN = FIXTURES / "mlp_train"  # XLA:CPU, annotated training steps
SHARDED = FIXTURES / "sharded_train"  # 8 devices, collectives
OFFLOAD = SHARED / "tpu-v6e-offload" / "tpu_inference_2.xplane.pb"  # host-offload waits


def _export(
    logdir: Path, chip: Path, out: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    code, _, err = run_cli(
        ["audit", str(logdir), "--chip", str(chip), "-o", str(out), *extra], capsys
    )
    assert code == 0, err
    code, report, err = run_cli(
        ["audit", str(logdir), "--chip", str(chip), "-f", "json", "-n", "0", *extra], capsys
    )
    assert code == 0, err
    opener = gzip.open if out.name.endswith(".gz") else open
    with opener(out, "rt") as f:
        trace = json.load(f)
    return trace["traceEvents"], json.loads(report)


def _check_format(events: list[dict[str, Any]]) -> None:
    """The trace-event format's rules a viewer relies on."""
    named: set[tuple[int, int]] = set()
    processes: set[int] = set()
    sorted_processes: set[int] = set()
    by_thread: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        assert e["ph"] in ("X", "M"), e
        assert isinstance(e["pid"], int)
        if e["ph"] == "M":
            assert e["name"] in (
                "process_name",
                "process_sort_index",
                "thread_name",
                "thread_sort_index",
            )
            if e["name"] == "process_sort_index":  # the steps, then the run's device order
                assert e["args"]["sort_index"] == e["pid"]
                sorted_processes.add(e["pid"])
                continue
            assert isinstance(e["tid"], int)
            if e["name"] == "thread_sort_index":
                assert e["args"]["sort_index"] == e["tid"]
                continue
            assert e["args"]["name"]
            if e["name"] == "process_name":
                processes.add(e["pid"])
            else:
                named.add((e["pid"], e["tid"]))
            continue
        assert e["dur"] >= 0 and e["ts"] >= 0, e
        by_thread[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    assert sorted_processes == processes
    for (pid, tid), spans in by_thread.items():
        assert pid in processes
        assert pid == 0 or (pid, tid) in named
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end - 1e-6, (pid, tid)  # lanes never overlap


def test_trace_export_matches_the_audit(
    cpu_chip_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events, report = _export(TRAIN, cpu_chip_file, tmp_path / "trace.json.gz", capsys)
    _check_format(events)
    ops = [e for e in events if e["ph"] == "X" and e["cat"].startswith("op,")]
    # Every op event of the profile, its self time adding up to the report's device time.
    assert len(ops) == sum(o["events"] for o in report["ops"])
    assert sum(e["args"]["self_us"] for e in ops) == pytest.approx(
        report["summary"]["measured_us"], rel=1e-9
    )
    # One process per device (plus the steps'), named after its host and plane.
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names[0] == "steps"
    assert len(names) == report["summary"]["devices"] + 1
    assert all(n.startswith("vm /host:CPU") for p, n in names.items() if p)
    # The steps: the report's, where it puts them.
    steps = [e for e in events if e.get("cat") == "step"]
    assert [(s["ts"], s["dur"]) for s in steps] == [
        pytest.approx((s["start_us"], s["wall_us"])) for s in report["steps"]
    ]
    # Idle gaps inside each device's own step: the report's idle time.
    idle = sum(e["dur"] for e in events if e.get("cat") == "idle")
    assert idle == pytest.approx(sum(s["idle_us"] for s in report["steps"]), rel=1e-6, abs=1e-3)
    # An op's args are its row's figures; the colour follows the event's efficiency.
    rows = {(o["module"], o["name"]): o for o in report["ops"]}
    for e in ops:
        row = rows[(e["args"]["module"], e["name"])]
        assert e["args"]["bound_by"] == row["bound_by"]
        assert e["args"]["op_gap_us"] == pytest.approx(row["gap_us"])
        assert e["args"]["hint"] == (row["hints"][0] if row["hints"] else "")
        assert e["args"]["bound_us"] == pytest.approx(row["bound_us"] / row["occurrences"])
        assert e["cat"] == "op," + row["bound_by"]
        assert e["cname"] == e["args"]["band"]
        assert e["cname"] == colour_of(e["args"]["efficiency"], e["args"]["bound_us"])
        if row["events"] == row["occurrences"] and e["args"]["efficiency"] is not None:
            at_measured = row["bound_by"] == "host" and row["efficiency"] == pytest.approx(1.0)
            expected = max(e["args"]["self_us"] - e["args"]["bound_us"], 0.0)
            assert e["args"]["gap_us"] == pytest.approx(0.0 if at_measured else expected)


def _check_exposed_tracks(events: list[dict[str, Any]], report: dict[str, Any]) -> None:
    """Per step and device, the `exposed communication` and `exposed host transfers` tracks
    add up to the device's `exposed_comm_us` and `exposed_host_us` (the report's split), and
    the step events carry both."""
    tracks: dict[str, dict[int, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for e in events:
        if e["ph"] == "X" and e["cat"] in ("exposed communication", "exposed host transfers"):
            tracks[e["cat"]][e["pid"]].append((e["ts"], e["ts"] + e["dur"]))
    steps = {e["name"]: e["args"] for e in events if e.get("cat") == "step"}
    for step in report["steps"]:
        args = steps[f"step {step['step']}"]
        assert args["exposed_comm_us"] == step["exposed_comm_us"]
        assert args["exposed_host_us"] == step["exposed_host_us"]
        for part in step["per_device"]:
            lo, hi = part["start_us"], part["start_us"] + part["wall_us"]
            for track, key in (
                ("exposed communication", "exposed_comm_us"),
                ("exposed host transfers", "exposed_host_us"),
            ):
                spans = tracks[track][part["device"] + 1]  # pid 0 is the steps'
                inside = sum(e - s for s, e in spans if s >= lo - 1e-3 and e <= hi + 1e-3)
                assert inside == pytest.approx(part[key], rel=1e-6, abs=1e-3), (step, track)
    for track, key in (
        ("exposed communication", "exposed_comm_us"),
        ("exposed host transfers", "exposed_host_us"),
    ):  # nothing outside the steps
        total = sum(e - s for spans in tracks[track].values() for s, e in spans)
        assert total == pytest.approx(sum(s[key] for s in report["steps"]), rel=1e-6, abs=1e-3)


def test_collectives_show_as_exposed_communication(
    cpu_chip_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events, report = _export(
        SHARDED, cpu_chip_file, tmp_path / "sharded.trace.json", capsys, "--device", "3"
    )
    _check_format(events)
    exposed = sum(e["dur"] for e in events if e.get("cat") == "exposed communication")
    assert exposed > 0
    _check_exposed_tracks(events, report)
    devices = {e["pid"] for e in events if "self_us" in e.get("args", {})}
    assert len(devices) == 1  # --device keeps one device's events


def test_host_transfers_have_a_track_of_their_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The v6e offload profile's host-offload waits (exposed_host_us 304 s, exposed_comm_us 0)
    are on the `exposed host transfers` track, none on the communication one."""
    if not OFFLOAD.is_file():
        pytest.skip(f"{OFFLOAD} absent (../shared not beside the project)")
    out = tmp_path / "t.json.gz"
    assert run_cli(["audit", str(OFFLOAD), "-o", str(out)], capsys)[0] == 0
    text = run_cli(["audit", str(OFFLOAD), "-f", "json", "-n", "0"], capsys)[1]
    report = json.loads(text)
    with gzip.open(out, "rt") as f:
        events = json.load(f)["traceEvents"]
    assert report["summary"]["exposed_comm_us"] == 0 < report["summary"]["exposed_host_us"]
    assert not any(e.get("cat") == "exposed communication" for e in events)
    _check_exposed_tracks(events, report)
    # An event's bound is at most its own time: copy-done.1/.3's waits (each its own bound,
    # their row 100%) read 100% and gap 0, never above; copy-start (bound 0, its wait shows
    # on its done) is grey like its row, not `terrible`.
    rows = {o["name"]: o for o in report["ops"]}
    ops = [e for e in events if e["ph"] == "X" and e["cat"].startswith("op,")]
    for e in ops:
        args = e["args"]
        if args["efficiency"] is not None:
            assert args["efficiency"] <= 1.0 and (args["gap_us"] or 0.0) >= 0.0
    hidden = [e for e in ops if e["name"] in ("copy-done.1", "copy-done.3")]
    assert len(hidden) == rows["copy-done.1"]["events"] + rows["copy-done.3"]["events"]
    assert all(e["args"]["efficiency"] == pytest.approx(1.0) for e in hidden)
    starts = [e for e in ops if e["name"].startswith("copy-start")]
    assert starts and {e["cname"] for e in starts} == {"grey"}


def test_a_saved_report_has_no_timeline(
    cpu_chip_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "report.json"
    code, out, _ = run_cli(
        ["audit", str(TRAIN), "--chip", str(cpu_chip_file), "-f", "json"], capsys
    )
    saved.write_text(out)
    code, out, err = run_cli(["diff", str(saved), str(saved), "-f", "perfetto"], capsys)
    assert code == 2 and "unknown format 'perfetto'" in err


def test_lanes_keep_overlapping_ops_apart() -> None:
    start = np.array([0, 1, 2, 10, 11])
    end = np.array([5, 3, 12, 11, 12])
    lane = lanes(start, end)
    assert lane.tolist() == [0, 1, 2, 1, 0]  # each takes the lane that ended first
    assert lanes(np.array([0, 5]), np.array([5, 9])).tolist() == [0, 0]


def test_perfetto_trace_processor_loads_it(
    cpu_chip_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    processor = pytest.importorskip("perfetto.trace_processor")
    out = tmp_path / "trace.json.gz"
    _, report = _export(TRAIN, cpu_chip_file, out, capsys)
    try:
        tp = processor.TraceProcessor(trace=str(out))
    except Exception as exc:  # its binary is downloaded on first use: no network here
        pytest.skip(f"Perfetto's trace processor cannot start here: {exc}")
    slices = list(tp.query("select count(*) as n from slice where category like 'op,%'"))
    assert slices[0].n == sum(o["events"] for o in report["ops"])
    tp.close()


def test_warmup_steps_say_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The H100 archive's step 0 is its warm-up (9.4 s of a 124 ms median): the summary and the
    # actions leave it out, and the timeline's step event says so.
    archive = SHARED / "nvidia-h100-nsys-jax" / "maxtext_fsdp4_test_data.zip"
    if not archive.is_file():
        pytest.skip(f"{archive} absent (../shared not beside the project)")
    events, report = _export(archive, Path("h100-sxm"), tmp_path / "t.json.gz", capsys)
    warmup = report["summary"]["warmup_steps"]
    assert warmup == 1
    steps = {e["name"]: e["args"]["warmup"] for e in events if e.get("cat") == "step"}
    assert steps == {f"step {s['step']}": k < warmup for k, s in enumerate(report["steps"])}
