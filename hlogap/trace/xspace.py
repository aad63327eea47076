"""XSpace files: reading them (local or fsspec URL) and parsing planes lazily with upb.

`read_planes` walks a file plane by plane (a local file mapped, a remote one read) and parses
each plane's metadata with protobuf's upb runtime; each `Plane`'s lines stay serialized until
they are iterated, and its bytes leave memory once its reader releases it, so a file needs
about its own size in memory.
"""

from __future__ import annotations

import math
import mmap
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import BinaryIO, Protocol, TypeVar

import numpy as np
from google.protobuf.message import DecodeError

from hlogap.errors import InputError
from hlogap.files import available_memory
from hlogap.proto import xplane_pb2
from hlogap.source import Remote, is_url, regular_file
from hlogap.trace.columnar import IdSet, LineColumns, RawLine, exit_on_sigbus, plane_lines
from hlogap.trace.exports import tool_export
from hlogap.trace.model import MAX_TIME_PS, AllocatorEvents, Step, TraceBuilder
from hlogap.units import printable

LineT = TypeVar("LineT", xplane_pb2.XLine, RawLine)
DEVICE_PLANE = re.compile(r"^/device:(TPU|GPU):(\d+)$")
_MODULE_META = re.compile(r"^(?P<name>.*)\((?P<program_id>\d+)\)$")
# Reading keeps the planes' heads (about the file's size) plus one plane's bytes and one line's
# events at a time, and the columns: the parent's peak RSS measured at 2.0x the file's size for
# a 173 MB profile (docs/performance.md); 3x must be free before we start.
MEMORY_PER_FILE_BYTE = 3


def device_ordinal(plane: Plane, kind: str) -> int | None:
    """N of a `/device:<kind>:N` plane (kind "GPU" or "TPU"); None for any other plane."""
    m = DEVICE_PLANE.match(plane.name)
    return int(m.group(2)) if m and m.group(1) == kind else None


def read_bytes(path: str | Path) -> bytes:
    """A local file, or a URL through fsspec; memory is checked before anything is read."""
    if is_url(path):
        remote = Remote(str(path))
        _check_size(path, int(remote.call("size", remote.path)))
        data: bytes = remote.call("cat_file", remote.path, timed=False)
        return data
    local = regular_file(Path(path), "profile file")
    try:
        _check_size(path, local.stat().st_size)
        return local.read_bytes()
    except PermissionError as exc:
        raise InputError(f"permission denied: {path}") from exc
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from exc


def _check_size(path: str | Path, size: int) -> None:
    if size == 0:
        raise InputError(f"empty profile file: {path}")
    free = available_memory()
    if free is not None and size * MEMORY_PER_FILE_BYTE > free:
        raise InputError(
            f"profile too large for this machine's memory: {path} is {size >> 20} MiB, "
            f"reading it needs about {size * MEMORY_PER_FILE_BYTE >> 20} MiB, "
            f"{free >> 20} MiB available (audit one host at a time with --host)"
        )


class Plane:
    """A plane whose lines are parsed one at a time, as they are iterated.

    Readers see the XPlane interface (`name`, `stats`, `stat_metadata`, `event_metadata`,
    `lines`); only one line's messages exist at a time, so a file needs about its own size in
    memory rather than its whole message tree.
    """

    def __init__(
        self,
        raw: bytes | memoryview,
        path: str | Path,
        forget: Callable[[int, int], None] | None = None,
    ) -> None:
        self._path = path
        # Drops the pages of `raw[start:start + size]` (a mapped file): a line's once its events
        # are decoded, the whole plane's once it is released.
        self._forget = forget
        self._size = len(raw)
        self._spans: list[tuple[int, int]] = []  # each line's (start, end) in `raw`
        # With the C decoder, the lines are views of `raw` and upb parses only the rest (the
        # metadata); else upb parses the plane and hands out a copy of a line each time.
        split = plane_lines(raw)
        try:
            if split is None:
                head = xplane_pb2.XPlaneShallow.FromString(bytes(raw))
                self._keep(head, head.lines)
            else:
                view = memoryview(raw)
                lines = [view[start:end] for start, end in split[1]]
                self._spans = list(split[1])
                self._keep(xplane_pb2.XPlaneShallow.FromString(split[0]), lines)
        except DecodeError as exc:
            raise InputError(f"corrupt or truncated profile (bad plane): {path}") from exc
        self.id = self._head.id
        self.name = self._head.name

    def _keep(self, head: xplane_pb2.XPlaneShallow, lines: Sequence[bytes | memoryview]) -> None:
        """The plane's metadata and lines, as readers see them."""
        self._head = head
        self._lines = lines
        self.stats = head.stats
        self.stat_metadata = head.stat_metadata
        self.event_metadata = head.event_metadata

    @property
    def lines(self) -> Iterator[xplane_pb2.XLine]:
        return self._parse_lines(lambda raw: xplane_pb2.XLine.FromString(bytes(raw)))

    @property
    def raw_lines(self) -> Iterator[RawLine]:
        """The lines with their events left serialized (for the columnar reader); a line's
        pages leave the process as its events are decoded (a plane of one 3 M-event line
        held the file's 178 MB beside its columns)."""
        forget = self._forget
        if forget is None or len(self._spans) != len(self._lines):
            return self._parse_lines(RawLine)
        starts = iter(start for start, _ in self._spans)

        def line(raw: bytes | memoryview) -> RawLine:
            return RawLine(raw, partial(_shifted, forget, next(starts)))

        return self._parse_lines(line)

    def _parse_lines(self, parse: Callable[[bytes | memoryview], LineT]) -> Iterator[LineT]:
        for raw in self._lines:
            try:
                yield parse(raw)
            except DecodeError as exc:
                raise InputError(
                    f"corrupt or truncated profile (bad line on {self.name}): {self._path}"
                ) from exc

    @property
    def has_lines(self) -> bool:
        """Whether anything was recorded on it (a device that ran nothing has no lines)."""
        return bool(self._lines)

    def release(self) -> None:
        """Free its lines and metadata: its reader is done with it. Otherwise the lines of the
        planes already read sit beside their events until the file's last plane is read (the
        peak at 3 M GPU events: 380 MB with them). It is then an empty plane of that name."""
        self._keep(xplane_pb2.XPlaneShallow(id=self.id, name=self.name), [])
        self._spans = []
        if self._forget is not None:
            self._forget(0, self._size)
            self._forget = None

    @property
    def size(self) -> int:
        """Serialized bytes of its lines: what reading them costs."""
        return sum(len(raw) for raw in self._lines)


def _shifted(forget: Callable[[int, int], None], at: int, start: int, size: int) -> None:
    """`forget` of a span given from `at` (a plane's spans from the plane's start, a line's
    from the line's)."""
    forget(at + start, size)


def read_planes(path: str | Path) -> tuple[list[Plane], list[str]]:
    """The file's planes (lines still serialized) and the XSpace's warnings.

    The file is walked one plane at a time (`_space_fields`): upb parses each plane's metadata
    only, not the whole file into its arena beside the file's bytes (361 MB for a 173 MB
    file); a plane's lines are views of the file's bytes until its reader releases it.
    """
    with _open_profile(path) as f:
        planes, warnings = _space_fields(f, path)
    if not planes:
        raise InputError(f"not an xprof profile (no planes): {path}")
    return planes, warnings


class _Source(Protocol):
    """What the XSpace walk reads from: a file object, or a mapped local file."""

    def read(self, size: int, /) -> bytes | memoryview: ...
    def tell(self) -> int: ...
    def seek(self, offset: int, whence: int = 0, /) -> int: ...


class _MappedFile:
    """A local profile mapped read-only: `read` hands out views of the file's pages, not copies
    (3 M GPU events, 173 MB: ~0.1 s less than reading into memory the kernel must zero and
    copy into). A plane's pages leave the process once its reader is done (`forget`): they stay
    in the page cache. As with any mapped file, one truncated while it is read ends the
    process (SIGBUS); profiles are written once, under a new run directory per capture."""

    def __init__(self, file: BinaryIO) -> None:
        self._map = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        self._view = memoryview(self._map)
        self._pos = 0

    def read(self, size: int, /) -> memoryview:
        data = self._view[self._pos : self._pos + size]
        self._pos += len(data)
        return data

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0, /) -> int:
        self._pos = offset if whence == 0 else len(self._view) + offset
        return self._pos

    def forget(self, start: int, size: int) -> None:
        """Drop the pages of bytes start..start+size from this process (a page they share with
        a neighbour is read again from the page cache if it is used)."""
        if hasattr(self._map, "madvise"):  # not on Windows
            first = start - start % mmap.PAGESIZE
            self._map.madvise(mmap.MADV_DONTNEED, first, start + size - first)


@contextmanager
def _open_profile(path: str | Path) -> Iterator[_Source]:
    """A local file (mapped), or a URL through fsspec, open for reading; memory is checked
    first."""
    mapped = not is_url(path)
    if not mapped:
        remote = Remote(str(path))
        _check_size(path, int(remote.call("size", remote.path)))
        f = remote.call("open", remote.path, "rb", timed=False)
    else:
        local = regular_file(Path(path), "profile file")
        try:
            _check_size(path, local.stat().st_size)
            f = local.open("rb")
        except PermissionError as exc:
            raise InputError(f"permission denied: {path}") from exc
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc.strerror}") from exc
    # A mapped file truncated while it is read faults (SIGBUS) on its missing pages: mapped
    # only where that fault can end the process with one line and exit 3, else read.
    truncated = f"hlogap: error: {printable(str(path))} was truncated while it was read\n"
    with f:
        try:
            if mapped and exit_on_sigbus(truncated.encode()):
                yield _MappedFile(f)  # the mapping outlives the descriptor
            else:
                yield f
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc}") from exc


# XSpace: planes = 1, errors = 2, warnings = 3, hostnames = 4, all length-delimited.
_SPACE_PLANES, _SPACE_WARNINGS = 1, 3
_WIRE_VARINT, _WIRE_FIXED64, _WIRE_LEN, _WIRE_FIXED32 = 0, 1, 2, 5


def _space_fields(f: _Source, path: str | Path) -> tuple[list[Plane], list[str]]:
    """Walk the XSpace's top-level fields: planes parsed one at a time, warnings kept, other
    fields skipped (as upb does, a known field of another wire type too); what upb refuses is
    a corrupt profile."""

    def corrupt() -> InputError:
        export = tool_export(path)  # JSON an xprof tool wrote is not corrupt, only not a profile
        return InputError(export or f"corrupt or truncated profile (not an XSpace): {path}")

    end = f.seek(0, 2)
    f.seek(0)

    def exactly(n: int) -> bytes | memoryview:
        if n > end - f.tell():  # a length past the file's end: never allocated
            raise corrupt()
        data = f.read(n)
        if len(data) != n:
            raise corrupt()
        return data

    def varint(first: bytes | memoryview | None = None) -> int:
        value = shift = 0
        for _ in range(10):
            byte = first if first is not None else exactly(1)
            first = None
            value |= (byte[0] & 0x7F) << shift
            if byte[0] < 0x80:
                return value
            shift += 7
        raise corrupt()

    forget = f.forget if isinstance(f, _MappedFile) else None
    planes: list[Plane] = []
    warnings: list[str] = []
    while head := f.read(1):
        tag = varint(head)
        field, wire = tag >> 3, tag & 7
        if field == 0:
            raise corrupt()
        if wire == _WIRE_LEN:
            size = varint()
            at = f.tell()
            payload = exactly(size)
            if field == _SPACE_PLANES:
                span_forget = partial(_shifted, forget, at) if forget else None
                planes.append(Plane(payload, path, span_forget))
            elif field == _SPACE_WARNINGS:
                warnings.append(bytes(payload).decode("utf-8", errors="replace"))
        elif wire == _WIRE_VARINT:
            varint()
        elif wire in (_WIRE_FIXED64, _WIRE_FIXED32):
            exactly(8 if wire == _WIRE_FIXED64 else 4)
        else:
            raise corrupt()
    return planes, warnings


def stat_value(stat: xplane_pb2.XStat, names: dict[int, str]) -> object:
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    if kind == "ref_value":
        return names.get(stat.ref_value, "")
    return getattr(stat, kind)


def plane_stats(plane: Plane) -> dict[str, object]:
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    return {
        names.get(s.metadata_id, str(s.metadata_id)): stat_value(s, names)
        for s in plane.stats
        if s.WhichOneof("value") != "bytes_value"
    }


def read_metadata_plane(plane: Plane, builder: TraceBuilder) -> None:
    """Modules by program id, with their `Hlo Proto` when the trace carries it.

    The plane also holds other entries (`SYMBOL_MAP:...`, `ThreadpoolListener::Region` on TPU);
    only those named `<module>(<program_id>)`, or carrying a program id or an HLO proto, are
    modules.
    """
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    for md in plane.event_metadata.values():
        proto = None
        program_id = None
        for s in md.stats:
            stat_name = names.get(s.metadata_id)
            if stat_name == "Hlo Proto":
                proto = s.bytes_value
            elif stat_name == "program_id":
                program_id = str(stat_value(s, names))
        m = _MODULE_META.match(md.name)
        if m is None and program_id is None and proto is None:
            continue
        module = m.group("name") if m else md.name
        if program_id is None and m:
            program_id = m.group("program_id")
        program_id = program_id or ""
        builder.module_names[program_id] = module
        if proto:
            builder.modules[(module, program_id)] = proto


HOST_PLANE = "/host:CPU"


def read_step_annotations(planes: Sequence[Plane]) -> list[Step]:
    """Steps the program annotated (JAX `StepTraceAnnotation`, TensorFlow step markers): host
    events with a `step_num` stat. Several events of one step (nested annotations, several
    threads) are one step, from the first start to the last end."""
    spans: dict[int, tuple[int, int]] = {}
    for plane in planes:
        if plane.name != HOST_PLANE:
            continue
        step_id = next((k for k, v in plane.stat_metadata.items() if v.name == "step_num"), None)
        if step_id is None:
            continue
        for line in plane.raw_lines:
            if not line.event_count:
                continue
            cols = decode_int_stats(line, [step_id], plane.name)
            has = np.flatnonzero(cols.stats[0] >= 0)
            base = line.timestamp_ns * 1000
            for k in has.tolist():
                number = int(cols.stats[0][k])
                start = base + int(cols.offset_ps[k])
                end = start + int(cols.duration_ps[k])
                first, last = spans.get(number, (start, end))
                spans[number] = (min(first, start), max(last, end))
    return [Step(n, "annotation", a, b) for n, (a, b) in sorted(spans.items(), key=lambda x: x[1])]


MEMORY_EVENTS = ("MemoryAllocation", "MemoryDeallocation")
# `bytes_allocated` etc. of each event, in the order of AllocatorEvents' columns.
_ALLOCATOR_STATS = ("bytes_allocated", "bytes_reserved", "bytes_available", "peak_bytes_in_use")
# Every stat of an allocator event that is read (of the ~11 it has).
_ALLOCATOR_READS = frozenset(
    ("allocator_name", "index_on_host", "fragmentation", *_ALLOCATOR_STATS)
)
# No byte count of a real allocator reaches 2**61 (2 EB): sums of two stay inside int64.
_MAX_BYTES = 1 << 61


def read_allocator_events(planes: Sequence[Plane]) -> AllocatorEvents | None:
    """The host plane's allocator events (what xprof's memory profile reads), or None. They
    are a few hundred among the host's events: each line's event ids are decoded in columns
    and only the allocator events are parsed whole."""
    host = next((p for p in planes if p.name == HOST_PLANE), None)
    if host is None:
        return None
    wanted = IdSet([k for k, md in host.event_metadata.items() if md.name in MEMORY_EVENTS])
    if not wanted:
        return None
    names = {k: v.name for k, v in host.stat_metadata.items()}
    read = {k for k, name in names.items() if name in _ALLOCATOR_READS}
    allocators: dict[str, int] = {}
    rows: list[tuple[int, int, int, int, int, int, float]] = []
    for line in host.raw_lines:
        if not line.event_count:
            continue
        found = np.flatnonzero(wanted.has(line.columns([]).metadata_id))
        if not len(found):
            continue
        events = line.events
        for k in found.tolist():
            try:
                event = xplane_pb2.XEvent.FromString(events[k])
            except DecodeError as exc:
                raise InputError(f"corrupt event on {host.name}") from exc
            stats = {
                names[s.metadata_id]: stat_value(s, names)
                for s in event.stats
                if s.metadata_id in read
            }
            allocator = stats.get("allocator_name", stats.get("index_on_host"))
            counts = [stats.get(name) for name in _ALLOCATOR_STATS]
            heap, stack, free, mark = (c if isinstance(c, int) else -1 for c in counts)
            time = line.timestamp_ns * 1000 + event.offset_ps
            if (
                allocator is None
                or min(heap, stack, free, mark) < 0
                or max(heap, stack, free, mark) >= _MAX_BYTES
                or not 0 <= time <= MAX_TIME_PS
            ):
                continue  # not an allocator's state (or a corrupt one): nothing to read from it
            fragmentation = stats.get("fragmentation")
            code = allocators.setdefault(str(allocator), len(allocators))
            rows.append((code, time, heap, stack, free, mark, _fraction(fragmentation)))
    if not rows:
        return None
    rows.sort(key=lambda r: (r[0], r[1]))  # stable: events of one time keep the line's order
    code_col, time_col, heap_col, stack_col, free_col, mark_col, frag = zip(*rows, strict=True)
    return AllocatorEvents(
        names=list(allocators),
        allocator=np.array(code_col, dtype=np.int32),
        time_ps=np.array(time_col, dtype=np.int64),
        heap_bytes=np.array(heap_col, dtype=np.int64),
        stack_bytes=np.array(stack_col, dtype=np.int64),
        available_bytes=np.array(free_col, dtype=np.int64),
        lifetime_peak_bytes=np.array(mark_col, dtype=np.int64),
        fragmentation=np.array(frag, dtype=np.float64),
    )


def _fraction(value: object) -> float:
    """A stat read as a fraction; NaN where it is absent or not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def decode_int_stats(line: RawLine, stat_ids: list[int], plane: str) -> LineColumns:
    """A line's events in columns with integer stats (-1 where absent; a negative id is a stat
    the plane lacks); the events the columnar decoder leaves to upb are read by upb."""
    cols = line.columns(stat_ids)
    for i, raw in cols.irregular.items():
        for k, stat_id in enumerate(stat_ids):
            if stat_id >= 0:
                cols.stats[k][i] = _int_stat(raw, stat_id, plane)
    return cols


def _int_stat(raw: bytes, stat_id: int, plane: str) -> int:
    """The integer value of one stat of an event the columnar decoder left to upb (-1: none)."""
    try:
        event = xplane_pb2.XEvent.FromString(raw)
    except DecodeError as exc:
        raise InputError(f"corrupt event on {plane}") from exc
    for stat in event.stats:
        if stat.metadata_id == stat_id:
            kind = stat.WhichOneof("value")
            if kind in ("int64_value", "uint64_value"):
                value = int(getattr(stat, kind))
                return value if value < 1 << 63 else -1
    return -1
