"""Audits of TPU-layout traces (tests/tpu_trace.py) built from real TPU HLO and times.

The v5p trace carries the 352 real ops of xprof's op_profile for a TPU v5 training run, with
their real occurrences and measured times. xprof's own roofline reports 96 of its 714 rows
above 100% efficiency there (async copy-starts charged their whole transfer, Pallas kernels
charged their authors' estimates); no hlogap row may exceed 100%.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hlogap import audit
from hlogap.options import AuditOptions
from tests import tpu_trace as tt
from tests.conftest import SHARED

OP_PROFILE = SHARED / "tpu-v5p-xprof" / "op_profile.json.gz"


@pytest.fixture(scope="module")
def v5p(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tt.Written]:
    if not OP_PROFILE.is_file():
        pytest.skip(f"{OP_PROFILE} absent (../shared not beside the project)")
    path = tmp_path_factory.mktemp("tpu") / "host.xplane.pb"
    return path, tt.write_tpu_trace(path, tt.v5p_spec(tt.read_op_profile(OP_PROFILE)))


def test_v5p_chip_ops_and_times(v5p: tuple[Path, tt.Written]) -> None:
    path, written = v5p
    report = audit(path, AuditOptions(all_steps=True))  # every event written
    assert report.chip.name == "tpu-v5p" and report.chip_source == "detected"
    got = {(r.program_id, r.name): r for r in report.ops}
    assert set(got) == set(written.ops)
    for key, totals in written.ops.items():
        assert got[key].measured_us == pytest.approx(totals.self_ps / 1e6)
        assert got[key].occurrences == totals.occurrences


def test_v5p_no_op_beats_the_roof(v5p: tuple[Path, tt.Written]) -> None:
    report = audit(v5p[0])
    over = [(r.name, r.efficiency) for r in report.ops if (r.efficiency or 0) > 1.0]
    assert over == []
    copy_starts = [r for r in report.ops if r.opcode == "copy-start"]
    assert copy_starts and all(r.bound_us == 0 and r.bytes > 0 for r in copy_starts)
    assert all(r.hints[0].startswith("async transfer needs >=") for r in copy_starts)
    assert report.modeled_fraction is not None and report.modeled_fraction > 0.8


def test_small_trace_audits_without_shared_data(tmp_path: Path) -> None:
    path = tmp_path / "small.xplane.pb"
    written = tt.write_tpu_trace(path, tt.small_spec())
    report = audit(path, AuditOptions(chip="tpu-v6e", all_steps=True))  # every event written
    assert {(r.program_id, r.name) for r in report.ops} == set(written.ops)
    assert report.measured_us == pytest.approx(sum(t.self_ps for t in written.ops.values()) / 1e6)


V6E_OFFLOAD = SHARED / "tpu-v6e-offload" / "tpu_inference_2.xplane.pb"


@pytest.fixture(scope="module")
def offload() -> object:
    if not V6E_OFFLOAD.is_file():
        pytest.skip(f"{V6E_OFFLOAD} absent (../shared not beside the project)")
    return audit(V6E_OFFLOAD)


def _async_copy_spans_ps(path: Path) -> dict[str, list[int]]:
    """The trace's own `Async XLA Ops` events: one per copy, from its start to its completion."""
    from hlogap.proto import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    spans: dict[str, list[int]] = {}
    for plane in space.planes:
        if not plane.name.startswith("/device:TPU:"):
            continue
        for line in plane.lines:
            if line.name != "Async XLA Ops":
                continue
            for event in line.events:
                text = plane.event_metadata[event.metadata_id].name  # the HLO: "%copy-start = ..."
                name = text.split(" = ")[0].lstrip("%")
                spans.setdefault(name, []).append(event.duration_ps)
    return spans


def test_v6e_offload_waits_are_bounded_by_the_host_link(offload: object) -> None:
    from hlogap.chips import load_chip
    from hlogap.report.model import AuditReport

    assert isinstance(offload, AuditReport)
    host_bw = load_chip("tpu-v6e").host_bw
    assert host_bw
    over = [(r.name, r.efficiency) for r in offload.ops if (r.efficiency or 0) > 1.0]
    assert over == []
    dones = [r for r in offload.ops if r.opcode == "copy-done"]
    starts = [r for r in offload.ops if r.opcode == "copy-start"]
    assert len(dones) == len(starts) == 6
    moved = 5 * 1024 * 1024 * 256 * 4  # f32[5,1024,1024,256] per copy
    for start in starts:
        assert start.bound_by == "host" and start.bound_us == 0
        assert start.hints[0].startswith("async transfer needs >= 85.22 ms on the host link")
    for done in dones:
        assert done.bound_by == "host"
        assert 0 <= done.bound_us <= done.measured_us
        assert done.hints[0].startswith("waits for a 5.37 GB transfer over the host link")
    # The copy that has the link to itself: the rate the first hint gives is the trace's own,
    # from its Async XLA Ops events (the DMA from issue to completion), and its wait is bounded
    # by the whole transfer at the link's peak.
    spans = _async_copy_spans_ps(V6E_OFFLOAD)
    alone = next(r for r in dones if r.name == "copy-done")
    rate = moved * len(spans["copy-start"]) / (sum(spans["copy-start"]) * 1e-12)
    achieved = float(alone.hints[0].split("moves ")[1].split(" GB/s")[0]) * 1e9
    assert achieved == pytest.approx(rate, rel=0.02)
    assert alone.bound_us == pytest.approx(alone.occurrences * moved / host_bw * 1e6, rel=0.01)
    # Each transfer has its own bound, its bytes over the link, never more than its waits; a
    # transfer that shares the link says with how many and what they carried together.
    for name in ("copy-done.2", "copy-done.4"):
        shared = next(r for r in dones if r.name == name)
        assert shared.bound_us == pytest.approx(
            shared.occurrences * moved / host_bw * 1e6, rel=0.01
        )
        assert shared.efficiency is not None and 0.3 <= shared.efficiency <= 1.0
        assert re.search(
            r"shares the link with (another transfer|\d+ other transfers)", shared.hints[0]
        )
    assert "the link figure is assumed" in shared.hints[0]


def test_a_chip_without_a_host_link_cannot_bound_a_host_transfer() -> None:
    from hlogap.bounds.roofline import bound_op
    from hlogap.chips import load_chip
    from hlogap.cost import cost_instruction
    from hlogap.hlo.text import parse_instruction

    start = parse_instruction(
        "%copy-start = (f32[1024]{0}, f32[1024]{0:S(5)}, u32[]{:S(2)}) copy-start("
        "f32[1024]{0:S(5)} %param)"
    )
    cost = cost_instruction(start)
    v6e = bound_op(cost, load_chip("tpu-v6e"), "start")
    assert v6e.bound_by == "host" and v6e.t_host_s == pytest.approx(4096 / 6.3e10)
    assert v6e.lower_s == 0  # a start overlaps: the wait shows on its done
    v5p = bound_op(cost, load_chip("tpu-v5p"), "start")
    assert v5p.bound_by == "unmodeled" and v5p.unmodeled and "[host] bw" in v5p.unmodeled
