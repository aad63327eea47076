"""XLA:CPU async ops whose `end:` marker comes after the next execution of their module began:
the op's completion is cut at that start, and the profile's warnings say so."""

from __future__ import annotations

from pathlib import Path

import pytest

from hlogap import audit
from hlogap.options import AuditOptions
from hlogap.proto import xplane_pb2

US = 1_000_000  # ps


def _write(path: Path, marker_at_us: int) -> None:
    """Two executions (run_id 1, 2) of module `jit_step` on one device: execution 1 runs an
    async `dot.1` (0-1 us, context 7) whose `end: dot.1` marker sits at `marker_at_us`;
    execution 2 runs `add.1` at 10-12 us and `dot.1` (20-21 us, context 8, marker at 22 us)."""
    space = xplane_pb2.XSpace()
    space.hostnames.append("vm")
    plane = space.planes.add()
    plane.id, plane.name = 1, "/host:CPU"
    stat_ids: dict[str, int] = {}

    def stat_id(name: str) -> int:
        if name not in stat_ids:
            stat_ids[name] = len(stat_ids) + 1
            plane.stat_metadata[stat_ids[name]].id = stat_ids[name]
            plane.stat_metadata[stat_ids[name]].name = name
        return stat_ids[name]

    md_ids: dict[str, int] = {}

    def md(name: str) -> int:
        if name not in md_ids:
            md_ids[name] = len(md_ids) + 1
            plane.event_metadata[md_ids[name]].id = md_ids[name]
            plane.event_metadata[md_ids[name]].name = name
        return md_ids[name]

    line = plane.lines.add()
    line.id, line.name = 1, "tf_XLAEigen/1"

    def event(name: str, at_us: float, dur_us: float, **stats: int | str) -> None:
        ev = line.events.add()
        ev.metadata_id = md(name)
        ev.offset_ps, ev.duration_ps = int(at_us * US), int(dur_us * US)
        for key, value in stats.items():
            st = ev.stats.add()
            st.metadata_id = stat_id(key)
            if isinstance(value, str):
                st.ref_value = stat_id(value)
            else:
                st.int64_value = value

    def op(name: str, at_us: float, dur_us: float, run_id: int, **more: int) -> None:
        event(
            name,
            at_us,
            dur_us,
            hlo_op=name,
            hlo_module="jit_step",
            program_id=5,
            run_id=run_id,
            device_ordinal=0,
            **more,
        )

    op("dot.1", 0, 1, 1, _p=7)
    event("end: dot.1", marker_at_us, 0.5, _c=7)
    op("add.1", 10, 2, 2)
    op("dot.1", 20, 1, 2, _p=8)
    event("end: dot.1", 22, 0.5, _c=8)
    path.write_bytes(space.SerializeToString())


def test_a_late_completion_is_cut_at_the_next_execution(
    tmp_path: Path, cpu_chip_file: Path
) -> None:
    path = tmp_path / "vm.xplane.pb"
    _write(path, marker_at_us=50)
    report = audit(path, AuditOptions(chip=str(cpu_chip_file)))
    (dot,) = (r for r in report.ops if r.name == "dot.1")
    # Execution 1's dot runs until execution 2 starts (10 us), not to its marker (50.5 us);
    # execution 2's dot until its own marker (22.5 us): 10 + 2.5 us.
    assert dot.measured_us == pytest.approx(12.5)
    assert any("cut at that start" in w for w in report.warnings)
    starts = [s.start_us for s in report.steps]
    assert all(s.start_us + s.wall_us <= later + 1e-6 for s, later in zip(report.steps, starts[1:]))
    assert sum(s.wall_us for s in report.steps) <= 22.5 + 1e-6


def test_a_completion_inside_its_execution_is_kept(tmp_path: Path, cpu_chip_file: Path) -> None:
    path = tmp_path / "vm.xplane.pb"
    _write(path, marker_at_us=5)
    report = audit(path, AuditOptions(chip=str(cpu_chip_file)))
    (dot,) = (r for r in report.ops if r.name == "dot.1")
    assert dot.measured_us == pytest.approx(5.5 + 2.5)
    assert not any("cut at that start" in w for w in report.warnings)
