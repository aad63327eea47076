"""`read_planes` walks the XSpace's top-level fields itself, one plane at a time; upb's parse of
the whole file (`XSpaceShallow`) is the oracle for what it finds and what it refuses. A plane's
lines are split from its metadata by the C decoder (`plane_lines`: views, not copies), or by upb
without it; upb's `XPlaneShallow` is the oracle for both."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hlogap.errors import InputError
from hlogap.proto import xplane_pb2
from hlogap.trace.xspace import Plane, _MappedFile, read_planes
from tests.conftest import AMD_FILES, FIXTURES


def _files() -> list[Path]:
    return [p for p in AMD_FILES.values() if p.is_file()] + sorted(FIXTURES.rglob("*.xplane.pb"))[
        :6
    ]


@pytest.mark.parametrize("path", _files(), ids=lambda p: p.parent.name + "/" + p.name)
def test_planes_and_warnings_are_upbs(path: Path) -> None:
    space = xplane_pb2.XSpaceShallow.FromString(path.read_bytes())
    planes, warnings = read_planes(path)
    assert [p.name for p in planes] == [
        xplane_pb2.XPlaneShallow.FromString(raw).name for raw in space.planes
    ]
    assert [p.size for p in planes] == [
        sum(len(ln) for ln in xplane_pb2.XPlaneShallow.FromString(raw).lines)
        for raw in space.planes
    ]
    assert warnings == list(space.warnings)


@pytest.mark.parametrize("path", _files()[:3], ids=lambda p: p.parent.name + "/" + p.name)
def test_a_released_plane_forgets_its_own_bytes(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A local file is mapped; releasing a plane drops the pages of exactly its span of the
    # file: the bytes there parse to the plane upb finds at that place in the XSpace.
    forgotten: list[tuple[int, int]] = []
    monkeypatch.setattr(_MappedFile, "forget", lambda self, at, size: forgotten.append((at, size)))
    planes, _ = read_planes(path)
    for plane in planes:
        plane.release()
        assert not plane.has_lines
    data = path.read_bytes()
    space = xplane_pb2.XSpace.FromString(data)
    assert len(forgotten) == len(space.planes)
    for (at, size), expected in zip(forgotten, space.planes, strict=True):
        assert xplane_pb2.XPlane.FromString(data[at : at + size]) == expected


@pytest.fixture
def forgotten(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Each span (at, size) of a mapped file that a line hands back, as it is handed back."""
    from hlogap.trace import columnar

    if columnar._xline is None:
        pytest.skip("no C decoder: lines are upb's copies")
    spans: list[tuple[int, int]] = []
    monkeypatch.setattr(_MappedFile, "forget", lambda self, at, size: spans.append((at, size)))
    return spans


@pytest.mark.parametrize("path", _files()[:3], ids=lambda p: p.parent.name + "/" + p.name)
def test_a_decoded_line_forgets_its_own_bytes(path: Path, forgotten: list[tuple[int, int]]) -> None:
    # A line's pages leave the process once its events are decoded in place: exactly its span
    # of the file, whose bytes upb parses to that line (its id, name and events' offsets).
    data = path.read_bytes()
    for plane in read_planes(path)[0]:
        for line in plane.raw_lines:
            before = len(forgotten)
            columns = line.columns([])
            assert len(forgotten) == before + 1
            at, size = forgotten[-1]
            found = xplane_pb2.XLine.FromString(data[at : at + size])
            assert (found.id, found.name, len(found.events)) == (
                line.id,
                line.name,
                len(columns.offset_ps),
            )
            assert [e.offset_ps for e in found.events] == columns.offset_ps.tolist()


@pytest.mark.parametrize("path", _files()[:3], ids=lambda p: p.parent.name + "/" + p.name)
def test_a_line_decoded_in_blocks_forgets_each_blocks_bytes(
    path: Path, forgotten: list[tuple[int, int]]
) -> None:
    # Decoded a block of events at a time, a line's pages leave block by block: the spans
    # follow each other over exactly the line's bytes, and each holds its block's events.
    data = path.read_bytes()
    for plane in read_planes(path)[0]:
        for line in plane.raw_lines:
            before = len(forgotten)
            sizes = [len(cols.offset_ps) for cols in line.blocks([], 5)]
            spans = forgotten[before:]
            assert len(spans) == len(sizes)
            assert all(at + size == after for (at, size), (after, _) in pairwise(spans))
            start, end = spans[0][0], spans[-1][0] + spans[-1][1]
            whole = xplane_pb2.XLine.FromString(data[start:end])
            assert (whole.id, whole.name, len(whole.events)) == (line.id, line.name, sum(sizes))
            for (at, size), events in zip(spans, sizes, strict=True):
                assert len(xplane_pb2.XLine.FromString(data[at : at + size]).events) == events


def test_other_fields_are_skipped_and_warnings_kept(tmp_path: Path) -> None:
    source = next(FIXTURES.rglob("*.xplane.pb")).read_bytes()
    space = xplane_pb2.XSpaceShallow.FromString(source)
    space.warnings.append("clock skew")
    space.errors.append("lost events")
    space.hostnames.append("vm")
    data = space.SerializeToString() + b"\x28\x07" + b"\x31" + bytes(8)  # unknown varint, fixed64
    path = tmp_path / "x.xplane.pb"
    path.write_bytes(data)
    planes, warnings = read_planes(path)
    assert len(planes) == len(space.planes) and warnings == ["clock skew"]


def _refused(tmp_path: Path, data: bytes, message: str) -> None:
    """upb refuses `data` as an XSpace; `read_planes` refuses it as a file, with `message`."""
    with pytest.raises(DecodeError):
        xplane_pb2.XSpaceShallow.FromString(data)
    path = tmp_path / "x.xplane.pb"
    path.write_bytes(data)
    with pytest.raises(InputError, match=message):
        read_planes(path)


@pytest.mark.parametrize(
    "cut", [1, 2, 100, -1], ids=["tag only", "length cut", "plane cut", "last byte"]
)
def test_what_upb_refuses_is_a_corrupt_profile(tmp_path: Path, cut: int) -> None:
    source = next(FIXTURES.rglob("*.xplane.pb")).read_bytes()
    _refused(tmp_path, source[:cut], "corrupt or truncated profile")


def test_a_known_field_of_another_wire_type_is_skipped_as_upb_does(tmp_path: Path) -> None:
    data = b"\x0d\x00\x00\x00\x00"  # field 1 (planes) as a fixed32
    assert len(xplane_pb2.XSpaceShallow.FromString(data).planes) == 0
    path = tmp_path / "x.xplane.pb"
    path.write_bytes(data)
    with pytest.raises(InputError, match="no planes"):
        read_planes(path)


@pytest.mark.parametrize("data", [b"\x00\x01", b"\x0f", b"\x0a\xff\xff"])
def test_what_upb_refuses_is_refused(tmp_path: Path, data: bytes) -> None:
    # Field number 0, wire type 7, a length cut short: upb refuses each.
    _refused(tmp_path, data, "not an XSpace")


def _same_as_upb(plane: Plane, raw: bytes) -> None:
    upb = xplane_pb2.XPlaneShallow.FromString(raw)
    assert (plane.id, plane.name) == (upb.id, upb.name)
    assert [bytes(line) for line in plane._lines] == list(upb.lines)
    assert list(plane.stats) == list(upb.stats)
    assert dict(plane.stat_metadata) == dict(upb.stat_metadata)
    assert dict(plane.event_metadata) == dict(upb.event_metadata)


@pytest.mark.parametrize("path", _files(), ids=lambda p: p.parent.name + "/" + p.name)
def test_a_planes_lines_and_metadata_are_upbs(path: Path, decoder: str) -> None:
    for raw in xplane_pb2.XSpaceShallow.FromString(path.read_bytes()).planes:
        _same_as_upb(Plane(raw, path), raw)


def _a_plane() -> bytes:
    source = next(FIXTURES.rglob("*.xplane.pb")).read_bytes()
    planes = xplane_pb2.XSpaceShallow.FromString(source).planes
    return min((raw for raw in planes if xplane_pb2.XPlaneShallow.FromString(raw).lines), key=len)


PLANE = _a_plane()


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    cuts=st.lists(st.tuples(st.integers(0, 10**7), st.integers(0, 255)), max_size=3),
    truncate=st.integers(0, 10**7),
)
def test_a_damaged_plane_is_refused_or_read_as_upb_reads_it(
    cuts: list[tuple[int, int]], truncate: int, decoder: str
) -> None:
    """Bytes of a real plane overwritten, the plane cut short: refused where upb refuses it,
    else the same lines and metadata as upb's."""
    data = bytearray(PLANE)
    for at, byte in cuts:
        data[at % len(data)] = byte
    raw = bytes(data[: len(data) - truncate % 16])
    try:
        xplane_pb2.XPlaneShallow.FromString(raw)
    except DecodeError:
        with pytest.raises(InputError, match="bad plane"):
            Plane(raw, "x.xplane.pb")
        return
    _same_as_upb(Plane(raw, "x.xplane.pb"), raw)
