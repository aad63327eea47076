"""Drift and wording (issue 32, item 5): what the docs and the outputs say agrees with what
hlogap does."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hlogap import audit
from hlogap.options import AuditOptions
from hlogap.render.base import RenderOptions, render
from hlogap.report.compare import compare
from hlogap.report.model import AuditReport, OpRow
from tests.conftest import FIXTURES, ROOT
from tests.test_errors import run_cli

TRAIN = FIXTURES / "mlp_train"


def test_readme_names_the_schema_audit_writes(
    cpu_chip_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(
        ["audit", str(TRAIN), "--chip", str(cpu_chip_file), "-f", "json"], capsys
    )
    assert code == 0, err
    schema = json.loads(out)["schema"]
    named = set(re.findall(r"hlogap\.audit/\d+", (ROOT / "README.md").read_text()))
    assert named == {schema}


def test_calibrate_help_says_where_the_chip_file_goes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["calibrate", "--help"], capsys)
    assert code == 0
    assert "cpu.toml" in out and "instead of stdout" not in out


def _report(ops: list[OpRow]) -> AuditReport:
    return AuditReport(path="p", chip=None, ops=ops)


def _op(us: float, n: int, median: float) -> OpRow:
    return OpRow(
        module="m",
        name="fusion.1",
        opcode="fusion",
        occurrences=n,
        events=n,
        measured_us=us,
        bound_us=us / 4,
        median_us=median,
        fingerprint="f",
    )


def test_diff_calls_an_op_slower_per_run_but_lighter_in_total_mixed() -> None:
    # Each run is slower (median 12 vs 10 us) but it runs half as often: its total falls.
    other = OpRow(
        module="m",
        name="dot.1",
        opcode="dot",
        occurrences=10,
        measured_us=100.0,
        bound_us=50.0,
        median_us=10.0,
        fingerprint="g",
    )
    base = _report([_op(100.0, 10, 10.0), other])
    new = _report([_op(60.0, 5, 12.0), other])
    diff = compare(base, new)
    row = next(r for r in diff.rows if r.op.name == "fusion.1")
    assert row.measured_per_occ_delta_us > 0 and row.measured_delta_us < 0
    assert row.status == "mixed"
    text = render(diff, "table", RenderOptions(top=0))
    assert "ratio = NEW's occurrences / BASE's" in text and "mixed:" in text


def test_html_says_what_efficiency_is_and_heads_numbers_right(cpu_chip_file: Path) -> None:
    page = render(audit(TRAIN, AuditOptions(chip=str(cpu_chip_file))), "html", RenderOptions(top=0))
    assert "of its bound)" not in page and "its bound over its time" in page
    # Ops without an op_name are grouped as hlogap's groups name them ("(unknown)"), by the
    # report's own group rows (tests/test_row_cells.py), never "(no op_name)".
    assert "(no op_name)" not in page
    # The steps tables' headers sit over their numbers: both right-aligned.
    assert "th.num { text-align: right; }" in page
    assert 'el("th", {class: "num"}, h)' in page


def test_header_says_the_devices_span_not_their_busy_time(cpu_chip_file: Path) -> None:
    # device_span_fraction is each device's first op to last op over the step's wall; the
    # header read "devices run ops over 65% of it", which is busy time's wording (busy/wall
    # is less: the ops leave gaps inside the span).
    from hlogap.render.text import step_lines

    report = audit(TRAIN, AuditOptions(chip=str(cpu_chip_file)))
    summary = report.step_summary
    span, busy = summary.device_span_fraction, summary.busy_us
    assert span is not None
    window = sum(s.wall_us * s.devices for s in report.steady_steps)
    assert busy / window < span < 0.995
    first = step_lines(report)[0]
    assert f"each device's first op to last op spans {span:.0%} of it" in first
    assert "run ops over" not in first


def test_offload_action_says_whether_the_offloaded_tensors_fit() -> None:
    # The v6e offload profile keeps 16.1 GB in host memory with 12.1 GB free on the device:
    # the action said "keep the offloaded tensors on the device (12.1 GB free)".
    from hlogap.units import fmt_si
    from tests.conftest import SHARED

    offload = SHARED / "tpu-v6e-offload"
    if not offload.is_dir():
        pytest.skip(f"{offload} absent (../shared not beside the project)")
    report = audit(offload)
    assert report.memory is not None and report.memory.peak is not None
    host, room = report.memory.peak.host_bytes, report.memory.headroom_bytes
    assert room is not None and 0 < room < host
    (action,) = [a for a in report.actions or [] if a.cause == "host offload wait"]
    assert (
        f"keeping the offloaded tensors on the device does not fit: they hold "
        f"{fmt_si(host, 'B')} in host memory, {fmt_si(room, 'B')} is free" in action.change
    )
