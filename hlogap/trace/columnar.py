"""Columnar decoding of a line's events: every event at once, into numpy columns.

A large GPU or CPU trace is millions of events, and building a protobuf message per event and
per stat costs microseconds each in Python. A `RawLine` keeps its line serialized and decodes
the few fields hlogap needs for all its events together: metadata id, offset, duration, and the
value of chosen stats (`hlo_op`, ...). Two decoders give the same columns:

- the C extension `_xline` (hlogap/trace/_xline.c, built at install where a C compiler is
  found) walks the line's bytes in place: 3 M GPU events in ~0.35 s on one core, a block of
  events at a time where a reader asks for blocks (`RawLine.blocks`);
- without it, upb splits the line into one bytes string per event (`XLineRaw`), the bytes are
  joined into one array and decoded with numpy (`decode_events`): ~1.5 s.

Both read protobuf's wire format; an event either leaves to upb (a stat that is not an integer,
anything malformed: `LineColumns.irregular`) is read by upb instead, so an odd file is slower,
never wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
from msgspec import Struct

from hlogap.proto import xplane_pb2
from hlogap.trace.model import check_time, check_times

try:
    from hlogap.trace import _xline
except ImportError:  # installed without its C extension: numpy decodes
    _xline = None  # type: ignore[assignment]

# Wire tags: (field number << 3) | wire type. XEvent: metadata_id=1, offset_ps=2, duration_ps=3
# (varints), stats=4 (length-delimited). XStat: metadata_id=1, uint64=3, int64=4, str=5, ref=7.
TAG_EVENT_FIELDS = (0x08, 0x10, 0x18)
TAG_STAT = 0x22
TAG_STAT_ID = 0x08
TAG_UINT64, TAG_INT64, TAG_STR, TAG_REF = 0x18, 0x20, 0x2A, 0x38
MAX_STATS = 32  # events with more stats are read by upb
_PAD = 16
BLOCK = 1 << 15  # events decoded together (`decode_events`)
# Events a reader takes from a line at a time (`RawLine.blocks`): their columns (~3.5 MB for a
# GPU reader's 4 stats) stay in the CPU's caches while the reader takes its ops from them.
READ_BLOCK = 1 << 16
# The value of a stat an event lacks. Not -1: stats such as XLA:CPU's `run_id` are signed and
# often negative.
ABSENT = np.iinfo(np.int64).min


class LineColumns(Struct):
    """Per event of one line. `stats[k]` is the value of the k-th wanted stat (`ABSENT`)."""

    metadata_id: np.ndarray  # int64
    offset_ps: np.ndarray  # int64
    duration_ps: np.ndarray  # int64
    stats: list[np.ndarray]  # int64 each: a ref, int64 or uint64 value
    irregular: dict[int, bytes]  # row -> the event's bytes: read these with upb instead

    def reset_row(self, i: int, event: xplane_pb2.XEvent, wanted: list[int]) -> None:
        """Row `i` from an event upb read: its id, offset and duration, and every wanted stat
        ABSENT until the caller fills it in. A stat the plane lacks (negative id) is ABSENT
        already, in a read-only column (`RawLine.columns`)."""
        check_time(event.offset_ps, "an event's offset", "a line")
        check_time(event.duration_ps, "an event's duration", "a line")
        self.metadata_id[i] = event.metadata_id
        self.offset_ps[i] = event.offset_ps
        self.duration_ps[i] = event.duration_ps
        for k, stat_id in enumerate(wanted):
            if stat_id >= 0:
                self.stats[k][i] = ABSENT


class IdSet:
    """A few metadata ids, and which of a line's events have one (`has`): by a table of the ids
    where they are small (as a profile's metadata ids are: numbered from 1), one gather a line
    where `np.isin` sorts (~20 us a line; a host plane has hundreds of lines, read several
    times over); by `np.isin` where an id is too large for a table."""

    __slots__ = ("_ids", "_table")

    def __init__(self, ids: list[int]) -> None:
        self._ids = np.array(sorted(set(ids)), dtype=np.int64)
        self._table: np.ndarray | None = None
        if len(self._ids) and self._ids[0] >= 0 and self._ids[-1] < ID_TABLE_MAX:
            # One False slot on each side: `has` clips every id outside the table onto one.
            self._table = np.zeros(int(self._ids[-1]) + 3, dtype=bool)
            self._table[self._ids + 1] = True

    def __bool__(self) -> bool:
        return bool(len(self._ids))

    def has(self, ids: np.ndarray) -> np.ndarray:
        """Bool per id of `ids`: in the set or not."""
        if self._table is None:
            return np.isin(ids, self._ids)
        return np.take(self._table, ids + 1, mode="clip")


ID_TABLE_MAX = 1 << 20  # ids below this are looked up in a table (1 MB at most)


def exit_on_sigbus(message: bytes) -> bool:
    """Make a SIGBUS (a mapped file truncated under its reader) write `message` and exit with
    3; False where it cannot (no C extension, no SIGBUS): the caller then reads, not maps."""
    return _xline is not None and _xline.exit_on_sigbus(message)


def plane_lines(raw: bytes | memoryview) -> tuple[bytes, list[tuple[int, int]]] | None:
    """A serialized XPlane without its lines, and each line's span in `raw` (C decoder); None
    without the C decoder, or for a plane it does not read (upb decides)."""
    if _xline is None:
        return None
    try:
        return _xline.plane_lines(raw)
    except ValueError:
        return None


class RawLine:
    """A serialized XLine: its head's fields, and its events in columns on demand (`columns`,
    or a block at a time: `blocks`).

    The C decoder reads the head and the events in place; without it, or for a line it does not
    read (malformed, or a form upb accepts and it does not), upb splits the line and numpy
    decodes its events. A line upb refuses raises upb's `DecodeError`.
    """

    __slots__ = (
        "_data",
        "_forget",
        "_split",
        "display_id",
        "display_name",
        "duration_ps",
        "event_count",
        "id",
        "name",
        "timestamp_ns",
    )

    def __init__(
        self, data: bytes | memoryview, forget: Callable[[int, int], None] | None = None
    ) -> None:
        self._data = data
        # forget(at, size) drops pages of the line's bytes from the process (a mapped file;
        # read again from the page cache should they be walked again): as the head is walked
        # (past 16 MB) and as events are decoded, so that a line of 178 MB is never all mapped.
        self._forget = forget
        self._split: list[bytes] | None = None
        head = None
        if _xline is not None:
            try:
                head = _xline.line_head(data, forget)
            except ValueError:  # upb decides: a DecodeError, or a line only upb reads
                head = None
        if head is None:
            line = xplane_pb2.XLineRaw.FromString(bytes(data))
            self._split = list(line.events)
            head = (
                line.id,
                line.display_id,
                line.name,
                line.display_name,
                line.timestamp_ns,
                line.duration_ps,
                len(self._split),
            )
        (
            self.id,
            self.display_id,
            self.name,
            self.display_name,
            self.timestamp_ns,
            self.duration_ps,
            self.event_count,
        ) = head
        # In picoseconds it is added to every event's offset: refused before it can wrap.
        check_time(self.timestamp_ns * 1000, "the timestamp", f"line {self.name!r}")

    @property
    def events(self) -> list[bytes]:
        """Each event's bytes (upb splits the line): for lines whose events are read whole."""
        if self._split is None:
            self._split = list(xplane_pb2.XLineRaw.FromString(bytes(self._data)).events)
        return self._split

    def columns(self, wanted: list[int]) -> LineColumns:
        """The events in columns, all at once; `wanted` are stat metadata ids whose values are
        returned (as in `blocks`)."""
        return next(self.blocks(wanted, max(self.event_count, 1)))

    def blocks(self, wanted: list[int], size: int | None = None) -> Iterator[LineColumns]:
        """The events in columns, `size` at a time (`READ_BLOCK` unless given; one empty block
        for a line without events): a reader keeps what it takes from each block, not the
        line's columns (a 3 M-event line's are ~160 MB). `wanted` are stat metadata ids whose
        values are returned.

        The C decoder writes every block into the same columns, a block's overwritten by the
        next's, and drops the line's pages as their events are decoded. A negative id (a stat
        the plane does not have) gets a read-only column of `ABSENT` that takes no memory: half
        the stats the GPU reader asks for are CPU-only, and a fresh column is a page fault per
        512 events."""
        n = self.event_count
        size = READ_BLOCK if size is None else size
        if _xline is None or self._split is not None:
            events = self.events
            for first in range(0, max(n, 1), size):
                yield self._checked(decode_events(events[first : first + size], wanted))
            return
        present = [k for k, stat_id in enumerate(wanted) if stat_id >= 0]
        ids = [wanted[k] for k in present]
        buffer = np.empty((3 + len(present)) * min(size, n), dtype=np.int64)
        at = 0  # the byte where the block's events begin
        for first in range(0, max(n, 1), size):
            rows = min(size, n - first)
            out = buffer[: (3 + len(present)) * rows].reshape(3 + len(present), rows)
            end, irregular = _xline.line_columns(self._data, ids, out, at)
            if self._forget is not None:  # the last block's span runs to the line's end
                self._forget(at, (end if first + rows < n else len(self._data)) - at)
            at = end
            stats = [np.broadcast_to(np.int64(ABSENT), (rows,))] * len(wanted)
            for row, k in enumerate(present, start=3):
                stats[k] = out[row]
            yield self._checked(LineColumns(out[0], out[1], out[2], stats, dict(irregular)))

    def _checked(self, cols: LineColumns) -> LineColumns:
        """`cols`, once no offset or duration is past `MAX_TIME_PS`: readers add them up."""
        offsets, durations = cols.offset_ps, cols.duration_ps
        if cols.irregular:  # rows upb reads again (`reset_row` checks those)
            regular = np.ones(len(offsets), dtype=bool)
            regular[list(cols.irregular)] = False
            offsets, durations = offsets[regular], durations[regular]
        where = f"line {self.name!r}"
        check_times(offsets, "event offsets", where)
        check_times(durations, "event durations", where)
        return cols


def _varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varint starting at each position: (value, bytes used; 0 where malformed).

    The first byte is read for all; later bytes only for the varints still going. Most are
    one or two bytes long, so this is about two passes over the positions, not ten.
    """
    byte = buf[pos]
    value = (byte & 0x7F).astype(np.uint64)
    done = byte < 0x80
    used = done.astype(np.int64)
    going = np.flatnonzero(~done)
    for j in range(1, 10):
        if not len(going):
            break
        byte = buf[pos[going] + j]
        value[going] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * j)
        done = byte < 0x80
        used[going[done]] = j + 1
        going = going[~done]
    return value, used


def decode_events(events: list[bytes], wanted: list[int]) -> LineColumns:
    """Decode serialized XEvents; `wanted` are stat metadata ids whose values are returned.

    Blocks of `BLOCK` events at a time: a block's temporaries stay in the CPU's caches and the
    memory a line needs is its columns, not a few dozen temporaries of its length (the bench's
    GPU lines of 0.1-0.4 M events: 623 ns/event whole, 490 in blocks of 32 k; 8 k: 662)."""
    if len(events) <= BLOCK:
        return _decode_block(events, wanted)
    starts = range(0, len(events), BLOCK)
    blocks = [_decode_block(events[at : at + BLOCK], wanted) for at in starts]
    return LineColumns(
        np.concatenate([b.metadata_id for b in blocks]),
        np.concatenate([b.offset_ps for b in blocks]),
        np.concatenate([b.duration_ps for b in blocks]),
        [np.concatenate([b.stats[k] for b in blocks]) for k in range(len(wanted))],
        {at + i: raw for at, b in zip(starts, blocks) for i, raw in b.irregular.items()},
    )


def _decode_block(events: list[bytes], wanted: list[int]) -> LineColumns:
    n = len(events)
    lengths = np.fromiter(map(len, events), dtype=np.int64, count=n)
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    ends = starts + lengths
    buf = np.frombuffer(b"".join(events) + bytes(_PAD), dtype=np.uint8)
    limit = len(buf) - _PAD
    irregular = np.zeros(n, dtype=bool)

    def tag_at(pos: np.ndarray, tag: int, within: np.ndarray) -> np.ndarray:
        found: np.ndarray = (pos < within) & (buf[np.minimum(pos, limit)] == tag)
        return found

    def varint_after(pos: np.ndarray, has: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The varint following a one-byte tag at `pos` where `has`; marks malformed ones."""
        values, used = _varints(buf, np.where(has, np.minimum(pos + 1, limit), 0))
        bad = has & (used == 0)
        irregular[bad] = True
        return values.astype(np.int64), np.where(has & ~bad, 1 + used, 0)

    pos = starts.copy()
    fields = []
    for tag in TAG_EVENT_FIELDS:  # zero values are omitted on the wire: absent means 0
        has = tag_at(pos, tag, ends)
        values, used = varint_after(pos, has)
        fields.append(np.where(has, values, 0))
        pos += used
    stat_values = [np.full(n, ABSENT, dtype=np.int64) for _ in wanted]
    for _ in range(MAX_STATS):
        has = tag_at(pos, TAG_STAT, ends)
        if not has.any():
            break
        size, used = varint_after(pos, has)
        body = pos + used
        stat_end = body + np.where(has, size, 0)
        irregular[has & (stat_end > ends)] = True
        _read_stat(buf, limit, body, stat_end, has, wanted, stat_values, irregular)
        pos = np.where(has, stat_end, pos)
    irregular |= pos != ends  # fields after the stats, or more stats than MAX_STATS
    left = {i: events[i] for i in np.flatnonzero(irregular).tolist()}
    return LineColumns(fields[0], fields[1], fields[2], stat_values, left)


def _read_stat(
    buf: np.ndarray,
    limit: int,
    body: np.ndarray,
    end: np.ndarray,
    has: np.ndarray,
    wanted: list[int],
    out: list[np.ndarray],
    irregular: np.ndarray,
) -> None:
    """One stat of each event: if its metadata id is wanted, store its integer value."""
    rows = np.flatnonzero(has & (body < end) & (buf[np.minimum(body, limit)] == TAG_STAT_ID))
    stat_id, used = _varints(buf, np.minimum(body[rows] + 1, limit))
    stat_id = np.where(used > 0, stat_id.astype(np.int64), -1)
    hit = np.isin(stat_id, [w for w in wanted if w >= 0])
    rows, stat_id = rows[hit], stat_id[hit]
    value_at = body[rows] + 1 + used[hit]
    stat_end = end[rows]
    zero = value_at == stat_end  # a value of 0 is omitted on the wire
    value_tag = buf[np.minimum(value_at, limit)]
    value, value_used = _varints(buf, np.minimum(value_at + 1, limit))
    numeric = (value_tag == TAG_REF) | (value_tag == TAG_INT64) | (value_tag == TAG_UINT64)
    good = zero | (numeric & (value_used > 0) & (value_at + 1 + value_used == stat_end))
    # uint64 values past int64's range stay exact only as Python ints: upb reads those events.
    good &= ~((value_tag == TAG_UINT64) & (value >= np.uint64(1 << 63)) & ~zero)
    value = np.where(zero, np.uint64(0), value).astype(np.int64)
    irregular[rows[~good]] = True  # a string-valued or odd stat: upb reads the event
    for k, wanted_id in enumerate(wanted):
        mine = good & (stat_id == wanted_id)
        out[k][rows[mine]] = value[mine]
