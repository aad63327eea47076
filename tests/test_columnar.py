"""The columnar event decoders against upb, event by event: real traces, generated lines and
damaged ones. Both decoders are checked: the C extension (`_xline`) and numpy's, through
`RawLine` (the readers' interface) and `decode_events`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hlogap.errors import InputError
from hlogap.proto import xplane_pb2
from hlogap.trace import columnar
from hlogap.trace.columnar import ABSENT, ID_TABLE_MAX, IdSet, LineColumns, RawLine, decode_events
from hlogap.trace.model import MAX_TIME_PS
from tests.conftest import AMD_FILES, FIXTURES, SHARED

WANTED = [3, 5, 7, 9]


def upb_values(raw: bytes, wanted: list[int]) -> tuple[int, int, list[int]]:
    """What upb reads: offset, duration and each wanted stat's integer value (ABSENT: absent)."""
    event = xplane_pb2.XEvent.FromString(raw)
    values = [ABSENT] * len(wanted)
    for stat in event.stats:
        if stat.metadata_id in wanted:
            kind = stat.WhichOneof("value")
            value = getattr(stat, kind) if kind else 0
            for k, wanted_id in enumerate(wanted):  # an id asked for twice fills both
                if wanted_id == stat.metadata_id:
                    values[k] = value
    return event.offset_ps, event.duration_ps, values


def check(events: list[bytes], wanted: list[int], cols: LineColumns | None = None) -> int:
    """Every event the decoder answers for reads as upb reads it; the ones it leaves to upb are
    returned with their own bytes. Returns how many it answered for."""
    cols = cols if cols is not None else decode_events(events, wanted)
    assert len(cols.metadata_id) == len(events)
    regular = 0
    for i, raw in enumerate(events):
        if i in cols.irregular:
            assert cols.irregular[i] == raw  # read by upb instead, by the caller
            continue
        regular += 1
        offset, duration, values = upb_values(raw, wanted)
        metadata_id = xplane_pb2.XEvent.FromString(raw).metadata_id
        assert (cols.metadata_id[i], cols.offset_ps[i], cols.duration_ps[i]) == (
            metadata_id,
            offset,
            duration,
        )
        assert [int(c[i]) for c in cols.stats] == values
    return regular


def check_line(raw: bytes, wanted: list[int]) -> int:
    """A serialized XLine through `RawLine`: its head and events as upb reads them."""
    line = RawLine(raw)
    upb = xplane_pb2.XLineRaw.FromString(raw)
    head = ("id", "display_id", "name", "display_name", "timestamp_ns", "duration_ps")
    assert [getattr(line, f) for f in head] == [getattr(upb, f) for f in head]
    assert line.event_count == len(upb.events)
    assert line.events == list(upb.events)
    return check(list(upb.events), wanted, line.columns(wanted))


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


def _line_files() -> list[Path]:
    tpu = sorted((SHARED / "tpu-v6e-offload").glob("*.xplane.pb"))
    return _trace_files() + tpu


@pytest.mark.parametrize("path", _line_files(), ids=lambda p: p.parent.name + "/" + p.name)
def test_real_lines_read_as_upb_reads_them(path: Path, decoder: str) -> None:
    """Every line of real traces, with the stats the readers ask for (GPU/CPU and TPU)."""
    space = xplane_pb2.XSpaceShallow.FromString(path.read_bytes())
    total = 0
    for raw_plane in space.planes:
        plane = xplane_pb2.XPlaneShallow.FromString(raw_plane)
        by_name = {v.name: k for k, v in plane.stat_metadata.items()}
        names = ("hlo_op", "hlo_module", "program_id", "correlation_id", "device_offset_ps")
        wanted = [by_name.get(w, -1) for w in names]
        for raw in plane.lines:
            total += check_line(raw, wanted)
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
    st.integers(0, 2**61),  # past 2**61 ps a time is refused (tests/test_trust3.py)
    st.integers(0, 2**61),
    st.lists(st.tuples(st.sampled_from([1, 3, 5, 7, 9, 300]), stat_value), max_size=10),
)


@settings(max_examples=300, deadline=None)
@given(events=st.lists(event, min_size=1, max_size=20))
def test_generated_events_decode_as_upb_reads_them(events: list[bytes]) -> None:
    check(events, WANTED)


def _line(events: list[bytes], name: str = "XLA Ops", timestamp_ns: int = 0) -> bytes:
    line = xplane_pb2.XLineRaw(id=3, display_id=4, name=name, timestamp_ns=timestamp_ns)
    line.display_name = name.upper()
    line.duration_ps = 10**12
    line.events.extend(events)
    return line.SerializeToString()


# Events the C decoder must leave to upb, or read past: an aggregated event, unknown fields
# (varint, fixed64, fixed32, length-delimited), a wanted id asked for twice.
odd_event = st.one_of(
    event,
    st.builds(
        lambda mid, n: xplane_pb2.XEvent(metadata_id=mid, num_occurrences=n).SerializeToString(),
        st.integers(0, 2**20),
        st.integers(1, 2**40),
    ),
    st.builds(
        lambda raw, extra: raw + extra,
        event,
        st.sampled_from([b"\x48\x05", b"\x51" + bytes(8), b"\x5d" + bytes(4), b"\x7a\x02ab"]),
    ),
)


# `decoder` holds for every generated input alike: not resetting it between inputs is intended.
ONE_DECODER = [HealthCheck.function_scoped_fixture]


@settings(max_examples=300, deadline=None, suppress_health_check=ONE_DECODER)
@given(
    events=st.lists(odd_event, min_size=1, max_size=20),
    timestamp_ns=st.integers(-(2**61 // 1000), 2**61 // 1000),
    wanted=st.sampled_from([WANTED, [], [9, 9, 3], [5, 2**40]]),
)
def test_generated_lines_read_as_upb_reads_them(
    events: list[bytes], timestamp_ns: int, wanted: list[int], decoder: str
) -> None:
    check_line(_line(events, timestamp_ns=timestamp_ns), wanted)


@settings(max_examples=500, deadline=None, suppress_health_check=ONE_DECODER)
@given(
    events=st.lists(event, min_size=1, max_size=8),
    cuts=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
    truncate=st.integers(0, 10**6),
)
def test_damaged_lines_are_refused_or_read_as_upb_reads_them(
    events: list[bytes], cuts: list[tuple[int, int]], truncate: int, decoder: str
) -> None:
    """Bytes overwritten and the line cut short: `RawLine` raises upb's DecodeError where upb
    refuses the line, and otherwise reads what upb reads; never a crash or a read past the end."""
    data = bytearray(_line(events))
    for at, byte in cuts:
        data[at % len(data)] = byte
    raw = bytes(data[: len(data) - truncate % 8])
    try:
        upb = xplane_pb2.XLineRaw.FromString(raw)
    except DecodeError:
        with pytest.raises(DecodeError):
            RawLine(raw)
        return
    line = RawLine(raw)
    assert (line.name, line.timestamp_ns, line.event_count) == (
        upb.name,
        upb.timestamp_ns,
        len(upb.events),
    )
    try:
        cols = line.columns(WANTED)
    except InputError:
        # Refused as corrupt: some event upb reads whole has a time past 2**61 ps.
        assert any(
            max(abs(e.offset_ps), abs(e.duration_ps)) > MAX_TIME_PS
            for e in (_event_or_none(raw_event) for raw_event in upb.events)
            if e is not None
        )
        return
    for i, raw_event in enumerate(upb.events):
        if i in cols.irregular:
            assert cols.irregular[i] == raw_event
            continue
        try:
            values = upb_values(raw_event, WANTED)
        except DecodeError:
            continue  # an event upb refuses only in a string's UTF-8: neither decoder checks it
        assert (
            int(cols.offset_ps[i]),
            int(cols.duration_ps[i]),
            [int(c[i]) for c in cols.stats],
        ) == (
            values[0],
            values[1],
            values[2],
        )


def _event_or_none(raw: bytes) -> xplane_pb2.XEvent | None:
    """An event as upb reads it; None where upb refuses it."""
    try:
        return xplane_pb2.XEvent.FromString(raw)
    except DecodeError:
        return None


@settings(max_examples=200, deadline=None, suppress_health_check=ONE_DECODER)
@given(
    events=st.lists(odd_event, max_size=20),
    size=st.integers(1, 6),
    wanted=st.sampled_from([WANTED, [], [9, 9, 3], [5, 2**40, -1]]),
)
def test_a_line_in_blocks_is_the_line_whole(
    events: list[bytes], size: int, wanted: list[int], decoder: str
) -> None:
    """`RawLine.blocks`, `size` events at a time, are the line's columns cut: the same values,
    the events left to upb numbered from their block's first event (one empty block for a line
    without events)."""
    line = RawLine(_line(events))
    whole = line.columns(wanted)
    rows: list[list[int]] = []
    irregular: dict[int, bytes] = {}
    blocks = 0
    for cols in line.blocks(wanted, size):  # each block's columns are the next one's buffer
        blocks += 1
        assert len(cols.metadata_id) == (min(size, len(events) - len(rows)) if events else 0)
        irregular.update({len(rows) + i: raw for i, raw in cols.irregular.items()})
        columns = (cols.metadata_id, cols.offset_ps, cols.duration_ps, *cols.stats)
        rows.extend(list(row) for row in zip(*(c.tolist() for c in columns)))
    assert blocks == max(-(-len(events) // size), 1)
    columns = (whole.metadata_id, whole.offset_ps, whole.duration_ps, *whole.stats)
    assert rows == [list(row) for row in zip(*(c.tolist() for c in columns))]
    assert irregular == whole.irregular


def test_a_long_lines_head_walk_hands_back_its_bytes(decoder: str) -> None:
    """Walking a line's head (`RawLine`) forgets every 16 MB walked, from the line's start, the
    tail left for the events' decoding; a short line's head walk forgets nothing."""
    event = xplane_pb2.XEvent(metadata_id=3, offset_ps=10, duration_ps=5).SerializeToString()
    field = bytes([0x22, len(event)]) + event
    head = xplane_pb2.XLineRaw(id=1, name="Stream #1").SerializeToString()
    data = head + field * ((20 << 20) // len(field))
    forgotten: list[tuple[int, int]] = []
    line = RawLine(data, lambda at, size: forgotten.append((at, size)))
    assert line.event_count == (20 << 20) // len(field)
    if decoder == "without-c":
        assert not forgotten  # upb's copy: nothing mapped to forget
        return
    ((at, size),) = forgotten
    assert at == 0 and 16 << 20 <= size < (16 << 20) + len(field)
    forgotten.clear()
    RawLine(head + field * 1000, lambda at, size: forgotten.append((at, size)))
    assert not forgotten


@pytest.mark.parametrize("largest", [40, ID_TABLE_MAX + 5])
def test_an_id_set_finds_what_isin_finds(largest: int) -> None:
    """`IdSet.has` (a table's gather, or np.isin past ID_TABLE_MAX) against np.isin, with ids
    outside the table: negative, past its end, the largest int64."""
    rng = np.random.default_rng(3)
    wanted = [*rng.integers(0, 40, 5).tolist(), largest]
    ids = np.concatenate(
        [
            rng.integers(-3, largest + 3, 500),
            np.array([-1, 0, largest, largest + 1, np.iinfo(np.int64).max], dtype=np.int64),
        ]
    )
    found = IdSet(wanted).has(ids)
    assert found.dtype == bool
    assert found.tolist() == np.isin(ids, wanted).tolist()
    assert not IdSet([]) and IdSet([7])
