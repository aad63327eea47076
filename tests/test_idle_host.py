"""Idle located, host side (issue 41): the step pass keeps each waited-for op's longest gaps
with their place (`OpWaits.largest`), `host_activity` names the host plane's events in them
(checked against the profile's own protobuf), and the device idle advice says what the host's
threads were doing; the shared MI300X profile's idle says where its gaps sit."""

from __future__ import annotations

import tempfile
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from hlogap import audit
from hlogap.options import AuditOptions
from hlogap.proto import xplane_pb2
from hlogap.report.model import AuditReport
from hlogap.rows.steps import op_step_costs
from hlogap.trace.host_activity import host_activity
from hlogap.trace.reading import read_trace
from hlogap.trace.steps import LARGEST_GAPS, OpStepCosts, step_totals
from hlogap.trace.summary import Selection
from hlogap.trace.xspace import HOST_PLANE
from tests.conftest import FIXTURES, write_cpu_chip

MI300X = Path("/work/shared/fixtures/amd-gpu/mi300x_conv3d.xplane.pb")


@cache
def _flaws() -> AuditReport:
    chip = write_cpu_chip(Path(tempfile.mkdtemp(prefix="hlogap-idle-host-")))
    return audit(FIXTURES / "flaws", AuditOptions(chip=str(chip)))


def _xplane(program: str) -> Path:
    (path,) = (FIXTURES / program).glob("plugins/profile/*/*.xplane.pb")
    return path


def _host_events(path: Path) -> list[tuple[str, str, int, int]]:
    """(line, name, start ps, end ps) of the host plane's events that `host_activity` counts
    (no op events, no `end:` markers, no step annotations), read with protobuf alone."""
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    (plane,) = [p for p in space.planes if p.name == HOST_PLANE]
    stat = {m.name: k for k, m in plane.stat_metadata.items()}
    skip = {stat.get("hlo_op"), stat.get("step_num")} - {None}
    out = []
    for line in plane.lines:
        for e in line.events:
            name = plane.event_metadata[e.metadata_id].name
            if name.startswith("end: ") or any(s.metadata_id in skip for s in e.stats):
                continue
            start = line.timestamp_ns * 1000 + e.offset_ps
            out.append((line.display_name or line.name, name, start, start + e.duration_ps))
    return out


def _union(spans: list[tuple[int, int]]) -> int:
    total, reach = 0, None
    for a, b in sorted(spans):
        if reach is None or a >= reach:
            total += b - a
            reach = b
        elif b > reach:
            total += b - reach
            reach = b
    return total


def test_largest_gaps_are_the_ops_idle() -> None:
    """flaws: the step pass's longest gaps of each op lie inside the steady steps and are its
    idle where it has no more gaps than are kept."""
    trace = read_trace(_xplane("flaws"), "flaws")
    report = _flaws()
    windows = [(s.start_ps, s.end_ps) for s in trace.steps]
    totals = step_totals(trace, Selection(), windows, _no_costs(), waits_from=1)
    waits = totals.waits
    assert waits.largest
    for key, spans in waits.largest.items():
        assert 0 < len(spans) <= LARGEST_GAPS
        lengths = [b - a for a, b in spans]
        assert lengths == sorted(lengths, reverse=True) and min(lengths) > 0
        assert all(any(lo <= a and b <= hi for lo, hi in windows) for a, b in spans)
        if waits.gaps[key] <= LARGEST_GAPS:
            assert sum(lengths) == waits.idle_before_ps[key]
        else:
            assert sum(lengths) < waits.idle_before_ps[key]
    assert report.steps


def _no_costs() -> OpStepCosts:
    return op_step_costs([])


def test_host_activity_matches_the_protobuf() -> None:
    """Over windows around the python line's events: what each window's events cover, per
    thread, summed over threads (each event's own part: nested ones taken out) is the union of
    the counted events' overlaps per thread, computed from the protobuf."""
    path = _xplane("flaws")
    trace = read_trace(path, "flaws")
    events = _host_events(path)
    python = sorted((a, b) for line, _, a, b in events if line == "python")
    assert len(python) > 20
    gaps = [(python[k][0] + 1000, python[k + 5][1] - 1000) for k in range(0, 20, 5)]
    found = host_activity(trace, gaps, most=10_000)
    assert [(g.start_ps, g.end_ps) for g in found] == gaps
    for gap in found:
        a, b = gap.start_ps, gap.end_ps
        per_line: dict[str, list[tuple[int, int]]] = {}
        for line, _, s, e in events:
            if min(e, b) > max(s, a):
                per_line.setdefault(line, []).append((max(s, a), min(e, b)))
        assert gap.read and gap.events
        assert sum(ps for _, _, ps in gap.events) == sum(_union(v) for v in per_line.values())
        every = [span for spans in per_line.values() for span in spans]
        assert gap.covered_ps == _union(every)
        assert {line for line, _, _ in gap.events} == set(per_line)


def test_flaws_idle_names_the_hosts_wait() -> None:
    """flaws (one device, a host sleep and block_until_ready between its programs): the device
    idle action names what the python thread did in its longest gaps and says the host waited
    for a result before launching."""
    idle = [a for a in _flaws().actions or [] if a.cause == "device idle"]
    assert idle
    action = idle[0]
    assert "longest gap(s) (" in action.evidence and "the host's threads ran: " in action.evidence
    assert "block_until_ready" in action.evidence and " on python (" in action.evidence
    assert "waiting for a result before it launched the next work" in action.change


def test_no_host_plane_read_without_a_file() -> None:
    trace = read_trace(_xplane("flaws"), "flaws")
    trace.path = ""
    (gap,) = host_activity(trace, [(0, 10)])
    assert not gap.read and gap.events == () and host_activity(trace, []) == []


@pytest.mark.skipif(not MI300X.is_file(), reason="the shared MI300X profile is not here")
def test_mi300x_idle_says_where() -> None:
    """The MI300X conv (8 devices, 31% of their step time idle before the conv's kernel): the
    idle sits inside an execution, between the transposes that feed the convolution and it;
    named with the host's threads; on 8 devices no step time is claimed, so it is a hint on
    the conv (an action must save something), and its advice is no dispatch advice."""
    report = audit(MI300X, AuditOptions())
    assert not any(a.cause == "device idle" for a in report.actions or [])
    (conv,) = [o for o in report.ops if o.name == "cudnn-conv.1"]
    (hint,) = [h for h in conv.hints if "device idle" in h]
    assert "device idle inside an execution, between input_transpose_fusion.1" in hint
    assert "and cudnn-conv.1" in hint
    assert "the host's threads ran: " in hint and "PjitFunction(forward_3d_conv)" in hint
    assert np.isclose(conv.idle_before_us or 0.0, 11367.451, rtol=1e-3)
