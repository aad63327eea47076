"""Read one `.xplane.pb` (a serialized XSpace) into columnar op events.

Which events are XLA op executions depends on the backend (see docs/formats.md):
- TPU: events on the `XLA Ops` line of `/device:TPU:N` planes; op name, HLO text and XLA's costs
  sit on the event metadata.
- GPU: kernel events on `/device:GPU:N` planes carrying an `hlo_op` stat. The host plane's launch
  events carry `hlo_op` too and are not device time, so host planes are never read for GPU.
- CPU: thunk events on `/host:CPU` worker-thread lines carrying an `hlo_op` stat (one per executed
  HLO instruction, `device_ordinal` naming the device).
Only those lines are touched; everything else in the file is skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from google.protobuf.message import DecodeError

from hlogap.errors import InputError
from hlogap.proto import xplane_pb2

# Lines that xprof derives on device planes; on TPU the op line is `XLA Ops`.
TPU_OP_LINE = "XLA Ops"
DERIVED_LINES = frozenset(
    {"XLA Modules", "XLA Ops", "Async XLA Ops", "Steps", "XLA TraceMe", "Framework Ops",
     "Framework Name Scope", "Source code", "Launch Stats"}
)
_DEVICE_PLANE = re.compile(r"^/device:(TPU|GPU):(\d+)$")
_MODULE_META = re.compile(r"^(?P<name>.*)\((?P<program_id>\d+)\)$")
# Largest file we parse in memory: upb needs the bytes plus roughly the same again.
MAX_FILE_BYTES = 4 << 30


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


def read_xspace(path: Path) -> xplane_pb2.XSpace:
    try:
        size = path.stat().st_size
        if size == 0:
            raise InputError(f"empty profile file: {path}")
        if size > MAX_FILE_BYTES:
            raise InputError(f"profile file too large to read ({size >> 20} MiB): {path}")
        data = path.read_bytes()
    except PermissionError as exc:
        raise InputError(f"permission denied: {path}") from exc
    except IsADirectoryError as exc:
        raise InputError(f"not a file: {path}") from exc
    space = xplane_pb2.XSpace()
    try:
        space.ParseFromString(data)
    except DecodeError as exc:
        raise InputError(f"corrupt or truncated profile (not an XSpace): {path}") from exc
    if not space.planes:
        raise InputError(f"not an xprof profile (no planes): {path}")
    return space


def _stat_value(stat: xplane_pb2.XStat, names: dict[int, str]) -> object:
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    if kind == "ref_value":
        return names.get(stat.ref_value, "")
    return getattr(stat, kind)


def plane_stats(plane: xplane_pb2.XPlane) -> dict[str, object]:
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    return {
        names.get(s.metadata_id, str(s.metadata_id)): _stat_value(s, names)
        for s in plane.stats
        if s.WhichOneof("value") != "bytes_value"
    }


def detect_backend(space: xplane_pb2.XSpace) -> str:
    kinds = {m.group(1) for p in space.planes if (m := _DEVICE_PLANE.match(p.name))}
    if "TPU" in kinds:
        return "tpu"
    if "GPU" in kinds:
        return "gpu"
    return "cpu"


class _Builder:
    """Accumulates events of one file; ops and devices are interned."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.devices: list[Device] = []
        self.ops: list[OpInfo] = []
        self.op_ids: dict[OpKey, int] = {}
        self.modules: dict[tuple[str, str], bytes] = {}
        self.module_names: dict[str, str] = {}  # program id -> module name
        self.columns: list[tuple[np.ndarray, ...]] = []

    def op(self, key: OpKey) -> int:
        idx = self.op_ids.get(key)
        if idx is None:
            idx = self.op_ids[key] = len(self.ops)
            self.ops.append(OpInfo(key))
        return idx

    def add_line(
        self, device: int, op: list[int], start: list[int], dur: list[int], gpu: bool
    ) -> None:
        """One line's events of one device. GPU kernels never nest (overlaps on a stream are
        clock jitter, and xprof charges each kernel its whole duration); CPU thunks and TPU ops
        nest inside while/call/conditional events, which then get self time."""
        if not op:
            return
        op_arr = np.asarray(op, dtype=np.int32)
        start_arr = np.asarray(start, dtype=np.int64)
        dur_arr = np.asarray(dur, dtype=np.int64)
        order = np.argsort(start_arr, kind="stable")
        op_arr, start_arr, dur_arr = op_arr[order], start_arr[order], dur_arr[order]
        self_arr = dur_arr.copy() if gpu else _self_times(start_arr, dur_arr)
        if gpu:
            # Kernels of one op execution are launched back to back on a stream.
            occ = np.ones(len(op_arr), dtype=bool)
            occ[1:] = op_arr[1:] != op_arr[:-1]
        else:
            occ = np.ones(len(op_arr), dtype=bool)
        dev_arr = np.full(len(op_arr), device, dtype=np.int32)
        self.columns.append((op_arr, dev_arr, dur_arr, self_arr, occ))


def _self_times(start: np.ndarray, dur: np.ndarray) -> np.ndarray:
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


def _read_metadata_plane(plane: xplane_pb2.XPlane, builder: _Builder) -> None:
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    for md in plane.event_metadata.values():
        proto = None
        program_id = None
        for s in md.stats:
            stat_name = names.get(s.metadata_id)
            if stat_name == "Hlo Proto":
                proto = s.bytes_value
            elif stat_name == "program_id":
                program_id = str(_stat_value(s, names))
        m = _MODULE_META.match(md.name)
        module = m.group("name") if m else md.name
        if program_id is None and m:
            program_id = m.group("program_id")
        program_id = program_id or ""
        builder.module_names[program_id] = module
        if proto:
            builder.modules[(module, program_id)] = proto


def _stat_ids(plane: xplane_pb2.XPlane, wanted: tuple[str, ...]) -> dict[str, int]:
    by_name = {v.name: k for k, v in plane.stat_metadata.items()}
    return {w: by_name.get(w, -1) for w in wanted}


def _read_stat_events(
    plane: xplane_pb2.XPlane,
    builder: _Builder,
    lines: list[xplane_pb2.XLine],
    device_of: dict[int, int] | int,
    gpu: bool,
) -> None:
    """GPU kernels and CPU thunks: the op is named by per-event `hlo_op`/`hlo_module` ref stats."""
    ids = _stat_ids(plane, ("hlo_op", "hlo_module", "program_id", "device_ordinal"))
    hlo_op, hlo_module, program_stat, ordinal_stat = (
        ids["hlo_op"], ids["hlo_module"], ids["program_id"], ids["device_ordinal"]
    )
    if hlo_op < 0:
        return
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    # (hlo_op ref, hlo_module ref, program id) -> op index; the refs are ints, so this is cheap.
    interned: dict[tuple[int, int, int], int] = {}
    for line in lines:
        per_device: dict[int, tuple[list[int], list[int], list[int]]] = {}
        for ev in line.events:
            op_ref = mod_ref = prog = -1
            ordinal = 0
            for s in ev.stats:
                mid = s.metadata_id
                if mid == hlo_op:
                    op_ref = s.ref_value if s.HasField("ref_value") else -2
                    if op_ref == -2:
                        op_ref = -hash(s.str_value) - 3  # a str stat: keep it distinct
                        names.setdefault(op_ref, s.str_value)
                elif mid == hlo_module:
                    mod_ref = s.ref_value if s.HasField("ref_value") else -1
                    if mod_ref == -1 and s.str_value:
                        mod_ref = -hash(s.str_value) - 3
                        names.setdefault(mod_ref, s.str_value)
                elif mid == program_stat:
                    prog = s.uint64_value or s.int64_value
                elif mid == ordinal_stat:
                    ordinal = s.int64_value or s.uint64_value
            if op_ref == -1:
                continue
            key = (op_ref, mod_ref, prog)
            idx = interned.get(key)
            if idx is None:
                program_id = str(prog) if prog >= 0 else ""
                module = names.get(mod_ref, "") or builder.module_names.get(program_id, "")
                idx = interned[key] = builder.op(OpKey(module, program_id, names.get(op_ref, "")))
            if isinstance(device_of, int):
                dev = device_of
            else:
                dev = device_of.get(ordinal, -1)
                if dev < 0:
                    dev = device_of[ordinal] = _new_device(builder, plane, ordinal)
            cols = per_device.get(dev)
            if cols is None:
                cols = per_device[dev] = ([], [], [])
            cols[0].append(idx)
            cols[1].append(ev.offset_ps)
            cols[2].append(ev.duration_ps)
        for dev, (op, start, dur) in per_device.items():
            builder.add_line(dev, op, start, dur, gpu)


def _new_device(builder: _Builder, plane: xplane_pb2.XPlane, ordinal: int) -> int:
    builder.devices.append(Device(builder.host, plane.name, ordinal, plane_stats(plane)))
    return len(builder.devices) - 1


_TPU_META_STATS = ("program_id", "hlo_category", "flops", "bytes_accessed", "hlo_module")


def _read_tpu_plane(plane: xplane_pb2.XPlane, builder: _Builder, device: int) -> None:
    """TPU: op identity, HLO text and XLA's costs live on the event metadata, not the event."""
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    meta_to_op: dict[int, int] = {}
    for line in plane.lines:
        if line.name != TPU_OP_LINE:
            continue
        op: list[int] = []
        start: list[int] = []
        dur: list[int] = []
        for ev in line.events:
            idx = meta_to_op.get(ev.metadata_id)
            if idx is None:
                idx = meta_to_op[ev.metadata_id] = _tpu_op(plane, ev.metadata_id, names, builder)
            # Newer traces put device-clock times in stats; offset/duration are host-clock.
            op.append(idx)
            start.append(ev.offset_ps)
            dur.append(ev.duration_ps)
        builder.add_line(device, op, start, dur, gpu=False)


def _tpu_op(
    plane: xplane_pb2.XPlane, metadata_id: int, names: dict[int, str], builder: _Builder
) -> int:
    md = plane.event_metadata[metadata_id]
    stats = {names.get(s.metadata_id, ""): _stat_value(s, names) for s in md.stats}
    program_id = str(stats.get("program_id", "") or "")
    module = str(stats.get("hlo_module", "") or builder.module_names.get(program_id, ""))
    name = md.name
    hlo_text = None
    # The op's HLO text is the metadata's display name or its `hlo_op`/long-name stat.
    for candidate in (md.display_name, stats.get("long_name"), stats.get("hlo_text")):
        if isinstance(candidate, str) and "=" in candidate:
            hlo_text = candidate
            break
    idx = builder.op(OpKey(module, program_id, name))
    info = builder.ops[idx]
    info.hlo_text = info.hlo_text or hlo_text
    info.category = info.category or (str(stats["hlo_category"]) if "hlo_category" in stats else None)
    if isinstance(stats.get("flops"), (int, float)):
        info.xla_flops = float(stats["flops"])  # type: ignore[arg-type]
    if isinstance(stats.get("bytes_accessed"), (int, float)):
        info.xla_bytes = float(stats["bytes_accessed"])  # type: ignore[arg-type]
    return idx


def read_trace(path: Path, host: str) -> TraceData:
    space = read_xspace(path)
    backend = detect_backend(space)
    builder = _Builder(host)
    for plane in space.planes:
        if plane.name == "/host:metadata":
            _read_metadata_plane(plane, builder)
    for plane in space.planes:
        m = _DEVICE_PLANE.match(plane.name)
        if backend == "tpu" and m and m.group(1) == "TPU":
            _read_tpu_plane(plane, builder, _new_device(builder, plane, int(m.group(2))))
        elif backend == "gpu" and m and m.group(1) == "GPU":
            lines = [ln for ln in plane.lines if ln.name not in DERIVED_LINES]
            dev = _new_device(builder, plane, int(m.group(2)))
            _read_stat_events(plane, builder, lines, dev, gpu=True)
        elif backend == "cpu" and plane.name == "/host:CPU":
            _read_stat_events(plane, builder, list(plane.lines), {}, gpu=False)
    return _finish(builder, backend, list(space.warnings))


def _finish(builder: _Builder, backend: str, warnings: list[str]) -> TraceData:
    cols = builder.columns
    if cols:
        op_index, device_index, dur, self_ps, occ = (np.concatenate(c) for c in zip(*cols))
    else:
        backend = "none"
        op_index = device_index = np.zeros(0, dtype=np.int32)
        dur = self_ps = np.zeros(0, dtype=np.int64)
        occ = np.zeros(0, dtype=bool)
    return TraceData(
        backend=backend,
        devices=builder.devices,
        ops=builder.ops,
        modules=builder.modules,
        op_index=op_index,
        device_index=device_index,
        duration_ps=dur,
        self_ps=self_ps,
        occurrence_start=occ,
        warnings=warnings,
    )


def merge_traces(traces: list[TraceData]) -> TraceData:
    """Concatenate several hosts' events; ops with the same key are one op."""
    if len(traces) == 1:
        return traces[0]
    ops: list[OpInfo] = []
    op_ids: dict[OpKey, int] = {}
    devices: list[Device] = []
    modules: dict[tuple[str, str], bytes] = {}
    parts = []
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
        parts.append((remap[t.op_index], t.device_index + len(devices), t.duration_ps,
                      t.self_ps, t.occurrence_start))
        devices.extend(t.devices)
        modules.update(t.modules)
    op_index, device_index, dur, self_ps, occ = (np.concatenate(c) for c in zip(*parts))
    return TraceData(
        backend=backends.pop() if backends else "none",
        devices=devices,
        ops=ops,
        modules=modules,
        op_index=op_index,
        device_index=device_index,
        duration_ps=dur,
        self_ps=self_ps,
        occurrence_start=occ,
        warnings=[w for t in traces for w in t.warnings],
    )
