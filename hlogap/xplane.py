"""XSpace files and the columnar op events every backend reader produces.

`read_planes` parses a file with protobuf's upb runtime; a backend reader (hlogap.backends) walks
only the lines that hold op events and feeds a `TraceBuilder`, which keeps per-event fields in
numpy columns. `TraceData` is what the rest of the pipeline reads.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
from google.protobuf.message import DecodeError

from hlogap.errors import InputError
from hlogap.proto import xplane_pb2

DEVICE_PLANE = re.compile(r"^/device:(TPU|GPU):(\d+)$")
_MODULE_META = re.compile(r"^(?P<name>.*)\((?P<program_id>\d+)\)$")
# Reading keeps the file's bytes plus one line's messages at a time: peak RSS measured at 2.6x
# the file's size for a 173 MB profile (docs/performance.md); 3x must be free before we start.
MEMORY_PER_FILE_BYTE = 3


def available_memory() -> int | None:
    """Bytes the kernel says can be allocated without swapping (Linux), else None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


@dataclass(frozen=True)
class OpKey:
    """An op is identified by its HLO module (name + program id) and instruction name."""

    module: str
    program_id: str
    name: str


@dataclass
class OpInfo:
    key: OpKey
    # From TPU event metadata, when the trace carries them.
    hlo_text: str | None = None
    category: str | None = None
    xla_flops: float | None = None
    xla_bytes: float | None = None


@dataclass(frozen=True)
class Device:
    host: str
    plane: str
    ordinal: int
    stats: dict[str, object]


@dataclass
class TraceData:
    """Op events of one or more files, one row per event, plus what describes ops and modules."""

    backend: str  # "tpu", "gpu", "cpu" or "none" when no op events were found
    devices: list[Device]
    ops: list[OpInfo]
    # Serialized xla.HloProto per (module name, program id), from `/host:metadata`.
    modules: dict[tuple[str, str], bytes]
    op_index: np.ndarray  # int32, into `ops`
    device_index: np.ndarray  # int32, into `devices`
    duration_ps: np.ndarray  # int64
    self_ps: np.ndarray  # int64: duration minus nested op events on the same line
    # True where an event starts a new execution of its op (GPU ops launch several kernels).
    occurrence_start: np.ndarray
    warnings: list[str] = field(default_factory=list)

    @property
    def num_events(self) -> int:
        return len(self.op_index)


def read_bytes(path: str | Path) -> bytes:
    """A local file, or a URL through fsspec; memory is checked before anything is read."""
    if "://" in str(path):
        try:
            import fsspec

            fs, remote = fsspec.core.url_to_fs(str(path))
            _check_size(path, int(fs.size(remote)))
            return fs.cat_file(remote)
        except InputError:
            raise
        except Exception as exc:  # any backend's error (auth, network, missing object)
            raise InputError(f"cannot read {path}: {exc}") from exc
    local = Path(path)
    try:
        _check_size(path, local.stat().st_size)
        return local.read_bytes()
    except PermissionError as exc:
        raise InputError(f"permission denied: {path}") from exc
    except IsADirectoryError as exc:
        raise InputError(f"not a file: {path}") from exc
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


LineT = TypeVar("LineT", xplane_pb2.XLine, xplane_pb2.XLineRaw)


class Plane:
    """A plane whose lines are parsed one at a time, as they are iterated.

    Readers see the XPlane interface (`name`, `stats`, `stat_metadata`, `event_metadata`,
    `lines`); only one line's messages exist at a time, so a file needs about its own size in
    memory rather than its whole message tree.
    """

    def __init__(self, raw: bytes, path: str | Path) -> None:
        self._path = path
        try:
            self._head = xplane_pb2.XPlaneShallow.FromString(raw)
        except DecodeError as exc:
            raise InputError(f"corrupt or truncated profile (bad plane): {path}") from exc
        self.id = self._head.id
        self.name = self._head.name
        self.stats = self._head.stats
        self.stat_metadata = self._head.stat_metadata
        self.event_metadata = self._head.event_metadata

    @property
    def lines(self) -> Iterator[xplane_pb2.XLine]:
        return self._parse_lines(xplane_pb2.XLine)

    @property
    def raw_lines(self) -> Iterator[xplane_pb2.XLineRaw]:
        """The lines with their events left serialized (for the columnar reader)."""
        return self._parse_lines(xplane_pb2.XLineRaw)

    def _parse_lines(self, message: type[LineT]) -> Iterator[LineT]:
        for raw in self._head.lines:
            try:
                yield message.FromString(raw)
            except DecodeError as exc:
                raise InputError(
                    f"corrupt or truncated profile (bad line on {self.name}): {self._path}"
                ) from exc

    @property
    def size(self) -> int:
        """Serialized bytes of its lines: what reading them costs."""
        return sum(len(raw) for raw in self._head.lines)


def read_planes(path: str | Path) -> tuple[list[Plane], list[str]]:
    """The file's planes (lines still serialized) and the XSpace's warnings."""
    data = read_bytes(path)
    try:
        space = xplane_pb2.XSpaceShallow.FromString(data)
    except DecodeError as exc:
        raise InputError(f"corrupt or truncated profile (not an XSpace): {path}") from exc
    del data  # the planes hold their own copies
    planes = [Plane(raw, path) for raw in space.planes]
    if not planes:
        raise InputError(f"not an xprof profile (no planes): {path}")
    return planes, list(space.warnings)


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


def detect_backend(planes: Iterable[Plane]) -> str:
    kinds = {m.group(1) for p in planes if (m := DEVICE_PLANE.match(p.name))}
    if "TPU" in kinds:
        return "tpu"
    if "GPU" in kinds:
        return "gpu"
    return "cpu"


class TraceBuilder:
    """Accumulates events of one file; ops and devices are interned."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.devices: list[Device] = []
        self.ops: list[OpInfo] = []
        self.op_ids: dict[OpKey, int] = {}
        self.modules: dict[tuple[str, str], bytes] = {}
        self.module_names: dict[str, str] = {}  # program id -> module name
        self.columns: list[Columns] = []

    def new_device(self, plane: Plane, ordinal: int) -> int:
        self.devices.append(Device(self.host, plane.name, ordinal, plane_stats(plane)))
        return len(self.devices) - 1

    def op(self, key: OpKey) -> int:
        idx = self.op_ids.get(key)
        if idx is None:
            idx = self.op_ids[key] = len(self.ops)
            self.ops.append(OpInfo(key))
        return idx

    def add_line(
        self,
        device: int,
        op: Sequence[int] | np.ndarray,
        start: Sequence[int] | np.ndarray,
        dur: Sequence[int] | np.ndarray,
        gpu: bool,
    ) -> None:
        """One line's events of one device. GPU kernels never nest (overlaps on a stream are
        clock jitter, and xprof charges each kernel its whole duration); CPU thunks and TPU ops
        nest inside while/call/conditional events, which then get self time."""
        if len(op) == 0:
            return
        op_arr = np.asarray(op, dtype=np.int32)
        start_arr = np.asarray(start, dtype=np.int64)
        dur_arr = np.asarray(dur, dtype=np.int64)
        order = np.argsort(start_arr, kind="stable")
        op_arr, start_arr, dur_arr = op_arr[order], start_arr[order], dur_arr[order]
        self_arr = dur_arr.copy() if gpu else self_times(start_arr, dur_arr)
        if gpu:
            # Kernels of one op execution are launched back to back on a stream.
            occ = np.ones(len(op_arr), dtype=bool)
            occ[1:] = op_arr[1:] != op_arr[:-1]
        else:
            occ = np.ones(len(op_arr), dtype=bool)
        dev_arr = np.full(len(op_arr), device, dtype=np.int32)
        self.columns.append((op_arr, dev_arr, dur_arr, self_arr, occ))

    def finish(self, backend: str, warnings: list[str]) -> TraceData:
        return _trace(backend, self.devices, self.ops, self.modules, self.columns, warnings)


Columns = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _trace(
    backend: str,
    devices: list[Device],
    ops: list[OpInfo],
    modules: dict[tuple[str, str], bytes],
    columns: list[Columns],
    warnings: list[str],
) -> TraceData:
    """TraceData from per-line (op, device, duration, self, occurrence start) column blocks;
    backend "none" when there are none."""
    if columns:
        op_index, device_index, dur, self_ps, occ = (np.concatenate(c) for c in zip(*columns))
    else:
        backend = "none"
        op_index = device_index = np.zeros(0, dtype=np.int32)
        dur = self_ps = np.zeros(0, dtype=np.int64)
        occ = np.zeros(0, dtype=bool)
    return TraceData(
        backend=backend,
        devices=devices,
        ops=ops,
        modules=modules,
        op_index=op_index,
        device_index=device_index,
        duration_ps=dur,
        self_ps=self_ps,
        occurrence_start=occ,
        warnings=warnings,
    )


def self_times(start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Duration minus the durations of directly nested events (events sorted by start).

    An event is nested when it lies wholly inside another; partial overlaps are not nesting.

    Nesting (while bodies inside a while, TPU call/conditional bodies) is rare, so the common
    case is one vectorised check; only lines that do nest walk a stack.
    """
    end = start + dur
    if len(start) < 2 or bool(np.all(start[1:] >= np.maximum.accumulate(end)[:-1])):
        return dur.copy()
    self_ps = dur.copy()
    stack: list[int] = []
    ends = end.tolist()
    starts = start.tolist()
    for i in range(len(starts)):
        while stack and starts[i] >= ends[stack[-1]]:
            stack.pop()
        if stack and ends[i] <= ends[stack[-1]]:
            self_ps[stack[-1]] -= dur[i]
            stack.append(i)
        elif not stack:
            stack.append(i)
    return self_ps


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


def merge_traces(traces: list[TraceData]) -> TraceData:
    """Concatenate several hosts' events; ops with the same key are one op."""
    if len(traces) == 1:
        return traces[0]
    ops: list[OpInfo] = []
    op_ids: dict[OpKey, int] = {}
    devices: list[Device] = []
    modules: dict[tuple[str, str], bytes] = {}
    parts: list[Columns] = []
    backends = {t.backend for t in traces} - {"none"}
    if len(backends) > 1:
        raise InputError(f"hosts of one run mix backends: {', '.join(sorted(backends))}")
    for t in traces:
        remap = np.empty(len(t.ops), dtype=np.int32)
        for i, info in enumerate(t.ops):
            j = op_ids.get(info.key)
            if j is None:
                j = op_ids[info.key] = len(ops)
                ops.append(info)
            remap[i] = j
        parts.append(
            (
                remap[t.op_index],
                t.device_index + len(devices),
                t.duration_ps,
                t.self_ps,
                t.occurrence_start,
            )
        )
        devices.extend(t.devices)
        modules.update(t.modules)
    warnings = [w for t in traces for w in t.warnings]
    return _trace(backends.pop() if backends else "none", devices, ops, modules, parts, warnings)
