"""The columnar event decoder against upb, event by event: real traces and generated events."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hlogap.proto import xplane_pb2
from hlogap.trace import columnar
from hlogap.trace.columnar import ABSENT, decode_events
from tests.conftest import AMD_FILES, FIXTURES

WANTED = [3, 5, 7, 9]


def upb_values(raw: bytes, wanted: list[int]) -> tuple[int, int, list[int]]:
    """What upb reads: offset, duration and each wanted stat's integer value (ABSENT: absent)."""
    event = xplane_pb2.XEvent.FromString(raw)
    values = [ABSENT] * len(wanted)
    for stat in event.stats:
        if stat.metadata_id in wanted:
            kind = stat.WhichOneof("value")
            value = getattr(stat, kind) if kind else 0
            values[wanted.index(stat.metadata_id)] = value
    return event.offset_ps, event.duration_ps, values


def check(events: list[bytes], wanted: list[int]) -> int:
    cols = decode_events(events, wanted)
    regular = 0
    for i, raw in enumerate(events):
        if cols.irregular[i]:
            continue  # read by upb instead, by the caller
        regular += 1
        offset, duration, values = upb_values(raw, wanted)
        assert (cols.offset_ps[i], cols.duration_ps[i]) == (offset, duration)
        assert [int(c[i]) for c in cols.stats] == values
    return regular


def _trace_files() -> list[Path]:
    files = [p for p in AMD_FILES.values() if p.is_file()]
    return files + sorted(FIXTURES.rglob("*.xplane.pb"))[:4]


@pytest.mark.parametrize("block", [columnar.BLOCK, 7], ids=["block", "tiny-blocks"])
@pytest.mark.parametrize("path", _trace_files(), ids=lambda p: p.parent.name + "/" + p.name)
def test_real_events_decode_as_upb_reads_them(
    path: Path, block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Lines are decoded in blocks of `BLOCK` events: blocks of 7 cut every line many times.
    monkeypatch.setattr(columnar, "BLOCK", block)
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    total = 0
    for plane in space.planes:
        by_name = {v.name: k for k, v in plane.stat_metadata.items()}
        wanted = [by_name.get(w, -1) for w in ("hlo_op", "hlo_module", "program_id")]
        for line in plane.lines:
            events = [e.SerializeToString() for e in line.events]
            if events:
                total += check(events, wanted)
    assert total > 0


stat_value = st.one_of(
    st.builds(lambda v: {"ref_value": v}, st.integers(0, 2**40)),
    st.builds(lambda v: {"int64_value": v}, st.integers(-(2**63), 2**63 - 1)),
    st.builds(lambda v: {"uint64_value": v}, st.integers(0, 2**64 - 1)),
    st.builds(lambda v: {"str_value": v}, st.text(max_size=8)),
    st.builds(lambda v: {"double_value": v}, st.floats(allow_nan=False)),
)
event = st.builds(
    lambda mid, off, dur, stats: xplane_pb2.XEvent(
        metadata_id=mid,
        offset_ps=off,
        duration_ps=dur,
        stats=[xplane_pb2.XStat(metadata_id=m, **v) for m, v in stats],
    ).SerializeToString(),
    st.integers(0, 2**20),
    st.integers(0, 2**62),
    st.integers(0, 2**62),
    st.lists(st.tuples(st.sampled_from([1, 3, 5, 7, 9, 300]), stat_value), max_size=10),
)


@settings(max_examples=300, deadline=None)
@given(events=st.lists(event, min_size=1, max_size=20))
def test_generated_events_decode_as_upb_reads_them(events: list[bytes]) -> None:
    check(events, WANTED)
