"""What the devices waited for: each idle gap inside a device's part of a step goes to the op
that ends it (`idle_before_us`), checked against plain walks over the events."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hlogap import audit, load_report
from hlogap.advice.causes.idle import IDLE_SHARE, MAX_OPS
from hlogap.options import AuditOptions
from hlogap.render.base import RenderOptions, render
from hlogap.report.model import AuditReport, sort_rows
from hlogap.trace.model import TraceData
from hlogap.trace.steps import FIRST_NONE, StepTotals
from hlogap.units import fmt_us
from tests.conftest import FIXTURES, SHARED
from tests.test_steps import _annotations, cpu_op_events

# An event: (start, end, op); ops are (module, name) for the profile walk, op keys for columns.
Event = tuple[int, int, Any]


def _waits(events: list[Event], first: int, last: int) -> dict[Any, int]:
    """Oracle: one device's part [first, last) of a step, walked event by event in start order
    (the longest first where several start together): where an event starts after everything
    before it ended, the gap between goes to it when it lies in the part."""
    found: dict[Any, int] = defaultdict(int)
    reach: int | None = None
    for start, end, op in sorted(events, key=lambda e: (e[0], -e[1])):
        if reach is not None and start > reach and reach >= first and start <= last:
            found[op] += start - reach
        reach = end if reach is None else max(reach, end)
    return found


def _part(events: Iterable[Event], lo: int, hi: int) -> tuple[int, int] | None:
    """Oracle: a device's part of the step [lo, hi): its first op start to its last op end
    (cut at the step's end), over the events that start in the step."""
    inside = [(s, e) for s, e, _ in events if lo <= s < hi]
    if not inside:
        return None
    return min(s for s, _ in inside), min(max(e for _, e in inside), hi)


def _idle_by_op(report: AuditReport) -> dict[tuple[str, str], float]:
    found: dict[tuple[str, str], float] = defaultdict(float)
    for r in report.ops:
        found[(r.module, r.name)] += r.idle_before_us or 0.0
    return found


@pytest.mark.parametrize("program", ["sharded_train", "flaws", "mlp_train", "scan"])
def test_cpu_idle_is_the_gaps_each_op_ended(program: str, cpu_chip_file: Path) -> None:
    # sharded_train: 8 devices whose ops overlap on the thread pool, ppermutes waiting on peers;
    # scan: a while loop around its body's ops.
    path = next((FIXTURES / program).rglob("*.xplane.pb"))
    report = audit(path, AuditOptions(chip=str(cpu_chip_file)))
    expected: dict[tuple[str, str], int] = defaultdict(int)
    for events in cpu_op_events(path).values():
        for lo, hi in _annotations(path).values():
            part = _part(events, lo, hi)
            if part is not None:
                for op, ps in _waits(events, *part).items():
                    expected[op] += ps
    found = _idle_by_op(report)
    assert expected and {k for k, v in found.items() if v} == set(expected)
    for op, ps in expected.items():
        assert found[op] == pytest.approx(ps / 1e6, rel=1e-12, abs=1e-9), op
    _check_totals(report)


def _check_totals(report: AuditReport) -> None:
    """The ops' idle is the steady steps' idle (the summary's: warm-up left out); with the time
    before each device's first op and after its last, and the busy time, it fills their wall
    on every device."""
    idle_before = sum(r.idle_before_us or 0.0 for r in report.ops)
    summary = report.summary_dict()
    assert idle_before == pytest.approx(summary["idle_us"], rel=1e-12, abs=1e-6)
    assert all(r.idle_gaps > 0 for r in report.ops if r.idle_before_us)
    summed = report.steps[len(report.steps) - int(summary["steps"]) :]  # warm-up steps left out
    window = sum(s.wall_us * s.devices for s in summed)
    before, after = summary["before_first_op_us"], summary["after_last_op_us"]
    assert min(before, after) >= -1e-6
    assert before + after + summary["idle_us"] + summary["busy_us"] == pytest.approx(window)


REAL = [
    SHARED / "amd-gpu" / "mi300x_conv3d.xplane.pb",
    SHARED / "amd-gpu" / "mi355x_te_attention.xplane.pb",
    SHARED / "tpu-v6e-offload",
]


@pytest.mark.parametrize("path", REAL, ids=[p.name for p in REAL])
def test_real_idle_is_the_gaps_each_op_ended(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the real profiles (one host: the step pass runs here), each device's events as the
    reader gave them, walked in plain Python over the parts of the steps the pass found."""
    if not path.exists():
        pytest.skip(f"{path} absent (../shared not beside the project)")
    import hlogap.pipeline
    from hlogap.trace.steps import step_totals

    passes: list[tuple[TraceData, StepTotals, int]] = []

    def recorded(trace: TraceData, *args: Any) -> StepTotals:
        totals = step_totals(trace, *args)
        passes.append((trace, totals, args[-1]))  # the first step whose idle counts
        return totals

    monkeypatch.setattr(hlogap.pipeline, "step_totals", recorded)
    report = audit(path)
    ((trace, totals, waits_from),) = passes
    keys = [o.key for o in trace.ops]
    expected: dict[Any, int] = defaultdict(int)
    for d in range(len(trace.devices)):
        mine = np.flatnonzero(trace.device_index == d)
        events = [
            (s, s + n, keys[op])
            for s, n, op in zip(
                trace.start_ps[mine].tolist(),
                trace.duration_ps[mine].tolist(),
                trace.op_index[mine].tolist(),
                strict=True,
            )
        ]
        parts = zip(totals.first_ps[d].tolist(), totals.last_ps[d].tolist(), strict=True)
        for first, last in list(parts)[waits_from:]:
            if first != FIRST_NONE:
                for op, ps in _waits(events, first, last).items():
                    expected[op] += ps
    assert expected and totals.waits.idle_before_ps == dict(expected)
    _check_totals(report)


def test_sort_by_idle_and_saved_reports(cpu_chip_file: Path, tmp_path: Path) -> None:
    report = audit(FIXTURES / "sharded_train", AuditOptions(chip=str(cpu_chip_file), sort="idle"))
    idle = [r.idle_before_us or 0.0 for r in report.ops]
    assert idle == sorted(idle, reverse=True) and idle[0] > 0
    saved = tmp_path / "report.json"
    saved.write_text(json.dumps(report.to_dict(0)))
    loaded = load_report(saved)
    assert [(r.name, r.idle_before_us, r.idle_gaps) for r in loaded.ops] == [
        (r.name, r.idle_before_us, r.idle_gaps) for r in report.ops
    ]
    assert sort_rows(loaded.ops, "idle")[0].name == report.ops[0].name


def test_ops_waited_for_longest_are_device_idle_actions(cpu_chip_file: Path) -> None:
    # flaws: the devices sit 3.4 ms a step before copy.6, 7% of their own step time.
    report = audit(FIXTURES / "flaws", AuditOptions(chip=str(cpu_chip_file)))
    device_wall = sum(s.device_wall_us for s in report.steps)
    waited = sorted(
        (r for r in report.ops if (r.idle_before_us or 0.0) >= IDLE_SHARE * device_wall),
        key=lambda r: -(r.idle_before_us or 0.0),
    )
    assert report.actions is not None and waited
    idle = [a for a in report.actions if a.cause == "device idle"]
    assert [a.ops[0].name for a in idle] == [r.name for r in waited[:MAX_OPS]]
    for action, row in zip(idle, waited, strict=False):
        # One device: the gaps are the step's own, claimed (issue 41); where they sit said.
        assert action.op_saving_us == 0.0
        assert action.saving_us == pytest.approx(row.idle_before_us or 0.0)
        assert action.where == "between programs"
        assert f"and {row.name}: {fmt_us(row.idle_before_us or 0.0)}" in action.evidence
        assert f"in {row.idle_gaps:,} gaps" in action.evidence
    text = render(report, "table", RenderOptions(top=0))
    assert f"device idle (between programs): {waited[0].name}" in text
