"""The steps' summary (hlogap.report.summary): its figures worked by hand on four steps, the
same figures in the report's JSON, and made once for each list of steps a report holds."""

from __future__ import annotations

import pytest

from hlogap.report.codec import encode
from hlogap.report.model import AuditReport
from hlogap.report.summary import StepSummary
from tests.conftest import step_row

# Walls 100 (warm-up: over 1.5x the median 11.5), 10, 11, 12 us; each at a quarter of its wall
# with every op at its bound; idle 0, 1, 2, 3 us; busy in ops at twice their bound.
STEPS = [
    step_row(n, wall, wall / 4, idle)
    for n, (wall, idle) in enumerate([(100.0, 0.0), (10.0, 1.0), (11.0, 2.0), (12.0, 3.0)])
]


def test_the_summary_by_hand() -> None:
    summary = StepSummary.of_steps(STEPS)
    assert (summary.warmup_steps, summary.steps) == (1, 3)
    assert summary.step_us == 11.0  # the median steady wall
    assert summary.bound_ratio == 4.0 and summary.step_bound_us == 11.0 / 4
    assert summary.device_wall_us == 33.0 and summary.device_span_fraction == 1.0
    assert summary.idle_us == 6.0 and summary.idle_fraction == pytest.approx(6.0 / 33.0)
    assert summary.busy_us == 27.0  # 9 us each
    # No device parts: the time lost in ops is the busy time beyond the ops' bound (half).
    assert summary.lost_in_ops_us == 13.5 and summary.at_bound_us == 13.5
    assert summary.before_first_op_us is None and summary.after_last_op_us is None
    assert summary.device_seconds == pytest.approx(33e-6) and summary.flops == 3e9


def test_the_report_makes_it_once_per_list_of_steps() -> None:
    report = AuditReport(path="p", chip=None, ops=[], steps=STEPS)
    first = report.step_summary
    assert report.step_summary is first
    assert report.steady_steps == STEPS[1:]
    assert (
        report.summary_dict()["step_us"] == 11.0 == encode(StepSummary.of_steps(STEPS))["step_us"]
    )
    assert report.flops_per_s == pytest.approx(3e9 / 33e-6)
    report.steps = STEPS[2:]  # walls 11 and 12: no warm-up (neither is over 1.5x 11.5)
    assert report.step_summary is not first
    assert (report.step_summary.warmup_steps, report.step_summary.steps) == (0, 2)
    assert report.step_summary.step_us == 11.5
